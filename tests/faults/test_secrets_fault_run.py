"""Secrets over a whole fault run (issue 5, item 11): a DSN password and job payloads
never appear in logs, exception messages or reprs, whatever happens during the run.

The run: worker processes (``_worker_proc.py``) and an ``alkstore-trio worker`` process
connect with a DSN holding a sentinel password (the server trusts 127.0.0.1, so it is
never checked, but it is in every DSN the library handles), and every job's payload holds
a sentinel. Faults and outcomes on the way: a worker killed with SIGKILL mid-job (its
jobs reclaimed by the others after the visibility timeout), every database session of
another worker terminated with ``pg_terminate_backend`` three times while it works,
handlers that raise an exception (whose text is not the payload) until their jobs are
dead, handlers that ask for a retry and handlers that fail their job; then the operator
commands ``stats``, ``jobs show``, ``jobs list`` and ``dead list``, with and without
``--json``, one that finds no job and one that cannot connect.

Captured, and searched for both sentinels (their text, and their hex and base64 forms):
every worker process's stderr with the root logger at DEBUG (every attribute of every
record, tracebacks included), the ``repr`` of every worker event and, at the end, of the
store, the worker and its statistics; the workers' history records; the CLI worker's
stdout and stderr at ``--log-level DEBUG``; each operator command's stdout, stderr and
log records at DEBUG; this process's log records at DEBUG, the ``repr`` of its store,
queue, job, handle and an unstarted worker, and an engine error raised by a terminated
session (message, repr and formatted chain). The server's own log is out of scope.

What "payloads never in logs" means for operator output. The library's own output is
logs, exception messages, reprs, worker events, history records, every stderr, and the
summary commands (``stats``, and the text tables of ``jobs list`` and ``dead list``): no
payload there, ever. Showing a job's payload to the operator who asked for it is what
some commands are for: ``jobs show`` prints a preview of it (its ``preview`` line, and
nowhere else in its output), and the ``--json`` forms of ``jobs show``, ``jobs list``
and ``dead list`` export it in their ``payload_base64`` field (the payload exactly, and
nowhere else in the object). Those are checked to be the only places, on stdout only. The
DSN password appears nowhere at all, operator output included.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from _figures import history_figures

from alkstore_trio import EngineError, QueueOpts, Worker

conninfo = pytest.importorskip("psycopg.conninfo", reason="the fault tests need psycopg 3")

OPERATOR_CLI = Path(__file__).with_name("_operator_cli.py")
ROOT = Path(__file__).parents[2]

SENTINEL_PASSWORD = "S3ntinel-pw-" + os.urandom(8).hex()
SENTINEL_PAYLOAD = b"PAYLOAD-SENTINEL-" + os.urandom(8).hex().encode()

VT_S = 2.0
POLL_S = 0.5
TERMINATE_ROUNDS = 3
TERMINATE_EVERY_S = 0.3

#: The CLI worker's handler module (written to the test's folder, imported by the
#: ``alkstore-trio worker`` process from its working directory).
CLI_HANDLERS = """
async def handle(job):
    if job.payload.startswith(b"raise|"):
        raise ValueError("the handler failed on purpose")
"""


def forms(secret: bytes) -> list[str]:
    """The ways a secret could be written out: as text, as hex (plain and spaced), and
    as base64 at each of the three byte alignments (the part not touched by its
    neighbours)."""
    found = [secret.decode(), secret.hex(), secret.hex(" ")]
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + secret + b"\0\0\0").decode()
        found.append(encoded[4:-8])
    return found


PASSWORD_FORMS = forms(SENTINEL_PASSWORD.encode())
PAYLOAD_FORMS = forms(SENTINEL_PAYLOAD)


def leaks(text: str, where: str, *, payload: bool = True) -> list[str]:
    """Where (and which form of) a sentinel shows in ``text``: the password always,
    the payload if ``payload``."""
    found = []
    for name, secret_forms in (("password", PASSWORD_FORMS), ("payload", PAYLOAD_FORMS)):
        if name == "payload" and not payload:
            continue
        for form in secret_forms:
            index = text.find(form)
            if index >= 0:
                context = text[max(0, index - 120) : index + len(form) + 40]
                found.append(f"{where}: the {name} ({form[:12]}…) in …{context!r}")
    return found


def everything_said(exc: BaseException) -> str:
    """An exception as a user or a log could ever see it: message, repr, arguments and
    the whole formatted chain (causes and contexts)."""
    return "\n".join(
        [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
        + [repr(arg) for arg in exc.args]
    )


async def ignore(job: object) -> None:
    """A handler that does nothing (for a worker that is never run)."""


def payload(command: bytes) -> bytes:
    """A payload telling ``_worker_proc.py``'s handler what to do, with the sentinel."""
    return command + b"|" + SENTINEL_PAYLOAD


def check_operator_output(result: dict, jobs: dict[int, bytes]) -> list[str]:
    """The leaks in one operator command's output (see the module docstring)."""
    argv = result["argv"]
    where = "alkstore-trio " + " ".join(argv)
    found = leaks(result["stderr"], f"{where} (stderr)")
    found += leaks(result["log"], f"{where} (log records)")
    stdout = result["stdout"]
    if argv[:2] == ["jobs", "show"] and "--json" not in argv:
        # The payload's preview is the one line allowed to show it.
        lines = [line for line in stdout.splitlines() if not line.startswith("preview ")]
        found += leaks("\n".join(lines), f"{where} (stdout, besides the preview)")
        found += leaks(stdout, f"{where} (stdout)", payload=False)
    elif "--json" in argv and argv[0] in ("jobs", "dead"):
        for line in stdout.splitlines():
            job = json.loads(line)
            exported = base64.b64decode(job.pop("payload_base64"))
            assert exported == jobs[job["id"]], (where, job["id"])
            found += leaks(json.dumps(job), f"{where} (stdout, besides payload_base64)")
        found += leaks(stdout, f"{where} (stdout)", payload=False)
    else:
        found += leaks(stdout, f"{where} (stdout)")
    return found


@contextlib.asynccontextmanager
async def reaped(process: trio.Process) -> AsyncIterator[trio.Process]:
    """Kill and reap ``process`` on the way out if it still runs."""
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


async def run_operator_commands(commands: list[list[str]], env: dict[str, str]) -> list[dict]:
    result = await trio.run_process(
        [sys.executable, str(OPERATOR_CLI)],
        stdin=json.dumps(commands).encode(),
        capture_stdout=True,
        capture_stderr=True,
        cwd=ROOT,
        env=env,
    )
    assert result.stderr == b"", result.stderr.decode(errors="replace")
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


async def test_security_no_password_or_payload_in_logs_errors_or_reprs_over_a_fault_run(
    pg_dsn, schema, open_fleet, tmp_path, caplog, figures
):
    caplog.set_level("DEBUG")
    dsn = conninfo.make_conninfo(pg_dsn, password=SENTINEL_PASSWORD)
    assert SENTINEL_PASSWORD in dsn
    said: dict[str, str] = {}  # what this process saw, by where
    jobs: dict[int, bytes] = {}  # every job enqueued, and its payload
    started = time.monotonic()

    async with open_fleet(dsn, schema) as fleet, contextlib.AsyncExitStack() as cleanup:
        opts = QueueOpts(visibility_timeout_s=VT_S, max_attempts=3, backoff_base_s=1)
        queue = fleet.store.queue("secrets", opts)

        async def enqueue(commands: list[bytes], **options) -> list[int]:
            payloads = [payload(command) for command in commands]
            ids = await queue.enqueue_many(payloads, **options)
            jobs.update(zip(ids, payloads, strict=True))
            return ids

        # The CLI worker, on a queue of its own, at DEBUG.
        (tmp_path / "secret_handlers.py").write_text(CLI_HANDLERS)
        env = {**os.environ, "ALKSTORE_DSN": dsn, "ALKSTORE_SCHEMA": schema}
        env.update(PYTHONUNBUFFERED="1")
        env.pop("PYTHONSAFEPATH", None)
        cli_out, cli_err = tmp_path / "cli-worker.stdout", tmp_path / "cli-worker.stderr"
        cli_queue = fleet.store.queue("cli", QueueOpts(max_attempts=1))
        with cli_out.open("wb") as out, cli_err.open("wb") as err:
            cli_worker = await trio.lowlevel.open_process(
                [
                    *(sys.executable, "-m", "alkstore_trio", "worker"),
                    *("--queue", "cli=secret_handlers:handle", "--log-level", "DEBUG"),
                    *("--poll-interval-s", str(POLL_S), "--status-interval-s", "0.2"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=tmp_path,
                env=env,
            )
        await cleanup.enter_async_context(reaped(cli_worker))

        # The victim claims two jobs and sleeps on them; the others are held meanwhile.
        options = {"dsn": dsn, "debug_log": True, "poll_interval_s": POLL_S}
        survivors = [
            await fleet.spawn(
                "secrets", concurrency=4, sleep_s=0.1, hold=True, wait_ready=False, **options
            )
            for _ in range(2)
        ]
        victim = await fleet.spawn("secrets", concurrency=2, sleep_s=3600, **options)
        for proc in survivors:
            await proc.wait_held()
        held = await enqueue([b"hold"] * 2)
        await fleet.wait_until(
            lambda: len(victim.in_flight()) == 2, timeout_s=30, what="the victim's handlers"
        )
        for proc in survivors:
            proc.release()
        for proc in survivors:
            await proc.wait_ready()

        work = await enqueue([b"work"] * 30)
        work += await enqueue([b"\xff\xfe binary"] * 2)
        work += await enqueue([b"retry=0.5"] * 2)
        raised = await enqueue([b"raise"] * 2, max_attempts=2)
        failed = await enqueue([b"fail"])
        (pending,) = await enqueue([b"later"], delay_s=3600)
        cli_ids = await cli_queue.enqueue_many([payload(b"ok")] * 3 + [payload(b"raise")])
        jobs.update(zip(cli_ids, [payload(b"ok")] * 3 + [payload(b"raise")], strict=True))

        # Faults: the victim killed mid-job; every session of a survivor terminated,
        # again and again, while it works.
        await victim.pause()
        assert victim.in_flight()
        victim.kill()
        assert await victim.wait_exit() == -9
        target = survivors[0]
        terminated = []
        for _ in range(TERMINATE_ROUNDS):
            rows = await fleet.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = ANY(%s)",
                [[target.app, target.app + ":listen"]],
            )
            terminated.append(sum(1 for (done,) in rows if done))
            await trio.sleep(TERMINATE_EVERY_S)  # the fault's cadence, not a wait

        async def settled() -> bool:
            live = await fleet.count("jobs")
            dead = await fleet.count("dead_jobs")
            return live == 1 and dead == len(raised) + len(failed) + 1  # + the CLI's

        await fleet.wait_until(settled, timeout_s=60, step_s=0.1, what="every job settled")
        for proc in survivors:
            assert proc.process.poll() is None, proc.stderr()
            proc.terminate()
        for proc in survivors:
            assert await proc.wait_exit() == 0, proc.stderr()
        cli_worker.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await cli_worker.wait() == 0, cli_err.read_text()
        report = await fleet.check_history(held + work + raised + failed + [pending])

        # The operator commands, with the DSN from the environment.
        dead_id = raised[0]
        commands = [
            ["stats"],
            ["stats", "--json"],
            ["jobs", "show", str(dead_id)],
            ["jobs", "show", str(dead_id), "--json"],
            ["jobs", "show", str(pending)],
            ["jobs", "list", "--queue", "secrets", "--state", "pending"],
            ["jobs", "list", "--queue", "secrets", "--state", "pending", "--json"],
            ["jobs", "list", "--queue", "secrets", "--state", "dead"],
            ["jobs", "list", "--queue", "secrets", "--state", "dead", "--json"],
            ["dead", "list"],
            ["dead", "list", "--json"],
            ["jobs", "show", "999999999"],
            ["stats", "--dsn", conninfo.make_conninfo(dsn, port=1), "--connect-timeout", "2"],
        ]
        results = await run_operator_commands(commands, env)

        # This process: reprs, and an engine error of a terminated session.
        handle_job = await fleet.store.get_job(pending)
        assert handle_job is not None
        said["repr(store)"] = repr(fleet.store)
        said["repr(queue)"] = repr(queue)
        said["repr(job)"] = repr(handle_job)
        said["repr(worker)"] = repr(Worker(fleet.store, {queue: ignore}))

        async def terminate_own_session() -> None:
            async with fleet.store.transaction() as tx:
                await tx.fetch("SELECT pg_terminate_backend(pg_backend_pid())")

        with pytest.raises(EngineError) as caught:
            await terminate_own_session()
        said["engine error"] = everything_said(caught.value)
        claim_queue = fleet.store.queue("reprs")
        jobs[await claim_queue.enqueue(payload(b"repr"))] = payload(b"repr")
        (handle,) = await claim_queue.claim_batch("w", 1)
        said["repr(handle)"] = repr(handle)
        said["repr(claimed job)"] = repr(handle.job)

    wall_s = time.monotonic() - started
    # The run did what it says.
    assert report.reclaims >= len(held)
    assert all(n >= 1 for n in terminated), terminated
    target_log = target.log_path.read_text()
    assert "terminating connection due to administrator command" in target_log
    assert "Traceback" in "".join(proc.log_path.read_text() for proc in survivors)
    assert [r["status"] for r in results] == [0] * 11 + [1, 1], results
    assert SENTINEL_PAYLOAD.decode() in results[2]["stdout"]  # the preview does show it
    assert "cannot connect to" in results[-1]["stderr"]

    found: list[str] = []
    for proc in fleet.procs:
        text = proc.log_path.read_text(errors="replace")
        # The capture works: log records at DEBUG, and reprs of events holding jobs.
        assert "DEBUG alkstore_trio.worker" in text, proc.app
        assert "event WorkerEvent(kind='claim'" in text, proc.app
        assert "job=Job(id=" in text, proc.app
        if proc is not victim:
            assert "repr worker <Worker" in text, proc.app
        found += leaks(text, f"{proc.app} stderr")
        found += leaks(proc.records_path.read_text(), f"{proc.app} records")
    cli_text = cli_out.read_text() + cli_err.read_text()
    assert "DEBUG" in cli_text
    found += leaks(cli_text, "alkstore-trio worker")
    for result in results:
        found += check_operator_output(result, jobs)
    for where, text in said.items():
        found += leaks(text, where)
    found += leaks(caplog.text, "this process's log")
    for record in caplog.records:
        found += leaks(repr(vars(record)), f"log record {record.name}")
    assert found == []

    scanned = sum(len(proc.log_path.read_text(errors="replace")) for proc in fleet.procs)
    scanned += len(cli_text) + sum(len(r["stdout"] + r["stderr"] + r["log"]) for r in results)
    debug_lines = sum(
        proc.log_path.read_text(errors="replace").count("DEBUG ") for proc in fleet.procs
    )
    figures.record(
        faults_injected=1 + sum(terminated),
        sessions_terminated=sum(terminated),
        operator_commands=len(commands),
        jobs_with_sentinel=len(jobs),
        debug_log_lines=debug_lines,
        bytes_scanned=scanned,
        leaks=len(found),
        wall_s=wall_s,
        **history_figures(report),
    )
    print(
        f"\nsecrets over a fault run: {len(jobs)} jobs with a sentinel payload, a SIGKILL, "
        f"{sum(terminated)} sessions terminated in {TERMINATE_ROUNDS} rounds, "
        f"{len(commands)} operator commands; {scanned} bytes of output scanned "
        f"({debug_lines} DEBUG log lines of the worker processes), no sentinel found; "
        f"{wall_s:.1f}s; history: {report.summary()}"
    )


def test_security_the_sentinel_scan_finds_every_form():
    """The scan is not vacuous: each way a sentinel could be written out is found, the
    payload's base64 at any offset in a larger buffer included, and only where allowed."""
    for secret, name in ((SENTINEL_PASSWORD.encode(), "password"), (SENTINEL_PAYLOAD, "payload")):
        written = [
            secret.decode(),
            repr(secret),
            secret.hex(),
            secret.hex(" "),
            *(
                base64.b64encode(b"x" * k + secret + b"y" * j).decode()
                for k in range(4)
                for j in range(3)
            ),
        ]
        for text in written:
            found = leaks(f"before {text} after", "probe")
            assert found, (name, text)
            assert all(f"the {name}" in line for line in found)
    assert leaks(f"a {SENTINEL_PAYLOAD.decode()} b", "probe", payload=False) == []
    assert leaks("nothing secret here", "probe") == []
