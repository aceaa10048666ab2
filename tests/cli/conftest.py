"""Fixtures for the CLI's tests.

``cli(*args) -> (status, stdout, stderr)`` runs the command in-process through
``main([...])`` with ALKSTORE_DSN / ALKSTORE_SCHEMA set to the test server and a migrated
throwaway schema; ``on_store(fn)`` runs ``await fn(store)`` on that schema (to seed rows
and check them through the library).

``pg_dsn`` comes from ``tests/conftest.py``; ``make_schema`` and ``schema`` (a throwaway
schema, dropped after the test) are those of ``tests/postgres/conftest.py``, loaded from
its file (the test folders are not packages). ``start_worker`` runs the command in a
subprocess, as a user would, with its stdout and stderr going to files (no pipe can
fill up and block it) and kills whatever is still running when the test ends.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from _postgres_fixtures import postgres_fixtures
from _worker_process import WorkerProcess, worker_env

from alkstore_trio import Store, open_store
from alkstore_trio._cli import EXIT_OK, main

_postgres = postgres_fixtures()
make_schema = _postgres.make_schema
schema = _postgres.schema


@pytest.fixture
def cli(pg_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch, capsys):
    """``cli(*args) -> (status, stdout, stderr)`` on a migrated throwaway schema."""
    monkeypatch.setenv("ALKSTORE_DSN", pg_dsn)
    monkeypatch.setenv("ALKSTORE_SCHEMA", schema)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            status = main(list(args))
        except SystemExit as exc:  # argparse's usage errors
            status = int(exc.code or 0)
        out, err = capsys.readouterr()
        return status, out, err

    assert run("migrate")[0] == EXIT_OK
    return run


@pytest.fixture
def on_store(pg_dsn: str, schema: str):
    """``on_store(fn)``: run ``await fn(store)`` on the test schema; its result."""

    def run(fn: Callable[[Store], Awaitable[Any]]) -> Any:
        async def main_() -> Any:
            async with open_store(pg_dsn, schema=schema, listen=False) as store:
                return await fn(store)

        return trio.run(main_)

    return run


@pytest.fixture
async def start_worker(tmp_path):
    """``await start_worker(*args, cwd=..., env=..., command=None)``: start
    ``python -m alkstore_trio worker *args`` (or ``command + args``) and return a
    :class:`WorkerProcess`; killed at the end of the test if still running."""
    started: list[WorkerProcess] = []

    async def start(*args: str, cwd: Path, env: dict[str, str] | None = None, command=None):
        n = len(started)
        out, err = tmp_path / f"worker{n}.out", tmp_path / f"worker{n}.err"
        argv = [*(command or [sys.executable, "-m", "alkstore_trio", "worker"]), *args]
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = await trio.lowlevel.open_process(
                argv, cwd=cwd, env=env or worker_env(), stdout=stdout, stderr=stderr
            )
        worker = WorkerProcess(process, out, err)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.process.returncode is None:
            worker.process.kill()
            with trio.CancelScope(shield=True):
                await worker.process.wait()
