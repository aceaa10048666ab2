"""Fixtures of the fault tests: worker processes, their records, throwaway schemas.

Each test gets a fresh schema (dropped afterwards) and starts real worker processes
(``_worker_proc.py``) with a unique ``application_name`` each, so the test can find and
terminate exactly its own sessions on the shared server. Every process a test started
is killed and reaped after it, whatever happened.

Waiting is always on a condition with a deadline (:func:`wait_until`), never a sleep.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

psycopg = pytest.importorskip("psycopg", reason="the fault tests need psycopg 3")

from _cluster import own_cluster  # noqa: E402, F401 - a throwaway cluster (restart tests)
from psycopg import sql as pgsql  # noqa: E402 - after importorskip

from alkstore_trio import open_store  # noqa: E402
from alkstore_trio.testing import (  # noqa: E402
    FinalState,
    HistoryReport,
    check_history,
    load_history,
)

WORKER_PROC = Path(__file__).with_name("_worker_proc.py")
ROOT = Path(__file__).parents[2]
#: The application_name of the tests' own sessions (not the workers').
TEST_APP = "alkstore-trio-tests:faults"
#: How much later than the store's answer a worker process may log an event on a loaded
#: 2-core machine (the history checker's ``slack_s``, on wall time across processes).
HISTORY_SLACK_S = 1.0


async def wait_until(predicate, *, timeout_s, step_s=0.05, what="condition"):
    """Poll the (sync or async) ``predicate`` until it is truthy; fail after
    ``timeout_s`` seconds. Returns its value."""
    deadline = trio.current_time() + timeout_s
    while True:
        value = predicate()
        if hasattr(value, "__await__"):
            value = await value
        if value:
            return value
        if trio.current_time() > deadline:
            pytest.fail(f"timed out after {timeout_s:g}s waiting for {what}")
        await trio.sleep(step_s)


class WorkerProc:
    """One worker process and its records file (read incrementally)."""

    def __init__(self, process: trio.Process, records: Path, app: str, log: Path) -> None:
        self.process = process
        self.records_path = records
        self.app = app
        self.log_path = log
        self._records: list[dict] = []
        self._offset = 0
        self._partial = b""

    @property
    def pid(self) -> int:
        return self.process.pid

    def records(self) -> list[dict]:
        """Every record written so far (a torn last line is kept for the next read)."""
        if self.records_path.exists():
            with self.records_path.open("rb") as stream:
                stream.seek(self._offset)
                chunk = stream.read()
            self._offset += len(chunk)
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            self._records.extend(json.loads(line) for line in lines if line)
        return self._records

    def events(self, ev: str) -> list[dict]:
        return [r for r in self.records() if r["ev"] == ev]

    def in_flight(self) -> set[tuple[int, int]]:
        """(id, attempt) of handlers started and not ended (the handler's own records,
        written synchronously: exact in the file of a stopped process)."""
        started = {(r["id"], r["attempt"]) for r in self.events("handler_start")}
        return started - {(r["id"], r["attempt"]) for r in self.events("handler_end")}

    def rss_kib(self) -> int | None:
        """The process's resident set size (KiB), or ``None`` once it is gone."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return None

    def stderr(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    async def wait_ready(self, timeout_s: float = 30.0) -> dict:
        def ready():
            if self.process.poll() is not None:
                pytest.fail(f"worker {self.app} exited early:\n{self.stderr()}")
            return next(iter(self.events("ready")), None)

        return await wait_until(ready, timeout_s=timeout_s, what=f"worker {self.app} ready")

    async def pause(self) -> None:
        """SIGSTOP the process and return once it is stopped: its records file then
        holds everything it will ever have written before a kill."""
        self.process.send_signal(signal.SIGSTOP)
        stat = Path(f"/proc/{self.pid}/stat")
        await wait_until(
            lambda: stat.read_text().rpartition(")")[2].split()[0] in "Tt",
            timeout_s=10,
            step_s=0.001,
            what=f"worker {self.app} to stop",
        )

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    async def wait_held(self, timeout_s: float = 30.0) -> dict:
        """Wait until a ``hold=True`` worker has opened its store and waits for
        :meth:`release`."""

        def held():
            if self.process.poll() is not None:
                pytest.fail(f"worker {self.app} exited early:\n{self.stderr()}")
            return next(iter(self.events("held")), None)

        return await wait_until(held, timeout_s=timeout_s, what=f"worker {self.app} held")

    def release(self) -> None:
        """Let a held worker (``hold=True``) run."""
        self.process.send_signal(signal.SIGUSR1)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    async def wait_exit(self, timeout_s: float = 30.0) -> int:
        with trio.fail_after(timeout_s):
            return await self.process.wait()


class Fleet:
    """Worker processes on one DSN + schema, and the test's own store there (made with
    ``migrate="apply"``). Leaving the ``async with`` kills and reaps every process."""

    def __init__(self, tmp: Path, dsn: str, schema: str) -> None:
        self.tmp = tmp
        self.dsn = dsn
        self.schema = schema
        self.tag = secrets.token_hex(4)
        self.procs: list[WorkerProc] = []
        self._spawned = 0  # names are taken before the await: spawns may run concurrently
        self.store = None
        self._exit = None

    wait_until = staticmethod(wait_until)

    async def __aenter__(self) -> Fleet:
        self._exit = open_store(
            self.dsn,
            schema=self.schema,
            migrate="apply",
            pool_size=2,
            application_name=TEST_APP,
        )
        self.store = await self._exit.__aenter__()
        return self

    async def __aexit__(self, *exc_info) -> None:
        try:
            for proc in self.procs:
                if proc.process.returncode is None:
                    proc.kill()
            with trio.CancelScope(shield=True):
                for proc in self.procs:
                    await proc.process.wait()
        finally:
            await self._exit.__aexit__(*exc_info)

    async def spawn(
        self,
        queue: str,
        *,
        dsn: str | None = None,
        env: dict[str, str] | None = None,
        wait_ready: bool = True,
        **options,
    ) -> WorkerProc:
        """Start a worker on ``queue`` (on ``dsn``, default the fleet's); ``options`` are
        ``_worker_proc.py``'s (``concurrency=20`` → ``--concurrency 20``); ``env`` is added
        to the process's environment. Returns once it is ready (at once if not
        ``wait_ready``: with ``hold=True``, wait for its ``held`` record, send SIGUSR1,
        then :meth:`WorkerProc.wait_ready`)."""
        app = f"alkf-{self.tag}-w{self._spawned}"
        self._spawned += 1
        records = self.tmp / f"{app}.jsonl"
        log = self.tmp / f"{app}.stderr"
        argv = [sys.executable, str(WORKER_PROC), dsn or self.dsn, self.schema, queue, str(records)]
        argv += ["--app", app]
        for name, value in options.items():
            flag = name.replace("_", "-")
            if isinstance(value, bool):  # --listen / --no-listen
                argv.append(f"--{flag}" if value else f"--no-{flag}")
            else:
                argv += ["--" + flag, str(value)]
        with log.open("wb") as output:
            process = await trio.lowlevel.open_process(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            )
        proc = WorkerProc(process, records, app, log)
        self.procs.append(proc)
        if wait_ready:
            await proc.wait_ready()
        return proc

    async def count(self, table: str, where: str = "TRUE") -> int:
        """``SELECT count(*)`` of a table of the schema (``where`` is trusted test SQL)."""
        query = pgsql.SQL("SELECT count(*) FROM {}.{} WHERE " + where).format(
            pgsql.Identifier(self.schema), pgsql.Identifier(table)
        )
        async with self.store.transaction() as tx:
            ((n,),) = await tx.fetch(query.as_string(), None)
        return int(n)

    async def fetch(self, query: str, params=None) -> list[tuple]:
        """Run a read-only query; ``{schema}`` in it is the quoted schema name."""
        text = query.replace("{schema}", pgsql.Identifier(self.schema).as_string())
        async with self.store.transaction() as tx:
            return await tx.fetch(text, params)

    async def final_state(self) -> FinalState:
        """The ids live and dead in the schema now (one query per table)."""
        live = await self.fetch("SELECT id FROM {schema}.jobs")
        dead = await self.fetch("SELECT id FROM {schema}.dead_jobs")
        return FinalState.of(live=[i for (i,) in live], dead=[i for (i,) in dead])

    async def check_history(
        self,
        enqueued,
        *,
        slack_s: float = HISTORY_SLACK_S,
        removed=(),
        procs: list[WorkerProc] | None = None,
    ) -> HistoryReport:
        """Check the merged records of ``procs`` (default: every process of the fleet)
        against the schema's final state; raises with every violation, else returns the
        report (print ``report.summary()``)."""
        procs = self.procs if procs is None else procs
        events = load_history([proc.records_path for proc in procs], time_base="wall")
        report = check_history(
            events,
            enqueued=enqueued,
            final=await self.final_state(),
            removed=removed,
            slack_s=slack_s,
        )
        report.assert_ok()
        return report


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    """A fresh schema name on the test server; dropped after the test."""
    name = "t_faults_" + secrets.token_hex(5)
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(pgsql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(pgsql.Identifier(name)))


@pytest.fixture
def open_fleet(tmp_path: Path) -> Callable[[str, str], Fleet]:
    """``async with open_fleet(dsn, schema) as fleet``: see :class:`Fleet`."""
    return lambda dsn, schema: Fleet(tmp_path, dsn, schema)
