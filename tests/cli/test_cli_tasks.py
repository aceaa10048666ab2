"""T5 on the command line: ``alkstore-trio worker --tasks MODULE:ATTR`` loads a task
registry before anything is opened (bad values are usage errors), serves its queues
beside ``--queue`` ones, and a real worker process runs deferred tasks."""

from __future__ import annotations

import importlib
import secrets
import signal
import sys
import textwrap

import pytest
import trio
from _worker_process import worker_env

from alkstore_trio import open_store
from alkstore_trio._cli import EXIT_USAGE, main
from alkstore_trio._cli.main import build_parser
from alkstore_trio._cli.worker import setup

pytest.importorskip("msgspec", reason="the typed tasks need the tasks extra (msgspec)")

MODULE = """
from alkstore_trio import Tasks

tasks = Tasks()
other = Tasks()
empty = Tasks()
NOT_TASKS = [1]


@tasks.task(name="shout", queue="words", every_s=3600)
async def shout(word: str = "tick") -> str:
    return word.upper()


@tasks.task(name="record", queue="words")
async def record(word: str, path: str) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(word + "\\n")


@other.task(name="clash", queue="words")
async def clash() -> None: ...


async def raw(job):
    pass
"""


@pytest.fixture
def tasks_module(tmp_path, monkeypatch):
    name = f"alk_tasks_{secrets.token_hex(4)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_t5_worker_tasks_loads_the_registry_before_opening_anything(tasks_module):
    args = build_parser({}).parse_args(
        [
            "worker",
            "--dsn=memory://",
            f"--tasks={tasks_module}:tasks",
            f"--queue=raw={tasks_module}:raw",
            "--queue-concurrency=words=2",
        ]
    )
    setup(args)
    assert sorted(args.handlers) == ["raw", "words"]
    assert [p.name for p in args.periodic] == ["shout"]
    assert args.queue_concurrency == {"words": 2}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--tasks={m}:NOT_TASKS"], "is an object of type list, not a Tasks registry"),
        (["--tasks={m}:missing"], "has no attribute 'missing'"),
        (["--tasks={m}:empty"], "the registry declares no task"),
        (["--tasks={m}:tasks", "--tasks={m}:other"], "queue 'words' already has a handler"),
        (["--queue=words={m}:raw", "--tasks={m}:tasks"], "queue 'words' already has a handler"),
        (["--tasks=no-colon"], "--tasks 'no-colon' must be MODULE:ATTR naming a Tasks registry"),
        (["--tasks={m}:tasks", "--queue-concurrency=nope=1"], "queue 'nope' has no --queue"),
    ],
)
def test_t5_worker_tasks_mistakes_are_usage_errors(tasks_module, capsys, values, message):
    with pytest.raises(SystemExit) as exited:
        main(["worker", "--dsn=memory://", *(v.format(m=tasks_module) for v in values)])
    assert exited.value.code == EXIT_USAGE
    assert message in capsys.readouterr().err


async def test_t5_a_cli_worker_process_runs_deferred_tasks(pg_dsn, schema, start_worker, tmp_path):
    name = f"alk_tasks_{secrets.token_hex(4)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE), encoding="utf-8")
    out = tmp_path / "words.txt"
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
    async with open_store(pg_dsn, schema=schema, migrate="apply", listen=False) as store:
        await module.record.defer_many(
            store, [module.record.call(word=w, path=str(out)) for w in ("one", "two", "three")]
        )
        worker = await start_worker(
            f"--tasks={name}:tasks",
            "--status-interval-s=0",
            cwd=tmp_path,
            env=worker_env(ALKSTORE_DSN=pg_dsn, ALKSTORE_SCHEMA=schema),
        )
        words = store.queue("words")

        def written() -> list[str]:
            return sorted(out.read_text().split()) if out.exists() else []

        async def scheduled() -> list[str]:
            return [row.name for row in await store.list_periodic()]

        # The periodic actor records its schedule beside the dispatcher, not before it: a
        # loaded machine may run all three jobs before that row exists, so wait for both.
        with trio.move_on_after(30):
            while len(written()) < 3 or not await scheduled():
                assert worker.process.poll() is None, worker.stderr
                await trio.sleep(0.05)
        assert written() == ["one", "three", "two"], worker.stderr
        assert await scheduled() == ["shout"]
        worker.signal(signal.SIGINT)
        assert await worker.wait() == 0, worker.stderr
        assert await words.list_jobs("dead") == []
