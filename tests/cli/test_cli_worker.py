"""R7 under the CLI: ``alkstore-trio worker``, its options, its handler specs, its
signals, its exit codes and its output.

In-process tests cover parsing, handler loading and the signal escalation (signals come
from a memory channel, time from trio's ``MockClock``). Subprocess tests run the command
as a user would, on PostgreSQL in a throwaway schema (an in-memory store cannot be
shared with a producer), and wait on conditions polled in the database, with deadlines.
"""

from __future__ import annotations

import io
import re
import secrets
import signal
import sys
import textwrap
import threading
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
import trio.testing
from _worker_process import DEADLINE_S, ROOT, worker_env

from alkstore_trio import EngineError, StoreClosed, SupervisorEscalated, open_store
from alkstore_trio._cli import build_parser, main
from alkstore_trio._cli._handlers import (
    QUEUE_SPEC_SHAPE,
    HandlerImportFailed,
    QueueSpec,
    QueueSpecError,
    load_handlers,
    make_cwd_importable,
    parse_queue_spec,
)
from alkstore_trio._cli._serve import format_status, format_summary, serve_worker
from alkstore_trio._runtime import WorkerStatistics

# --- handler modules -----------------------------------------------------------------

HANDLERS = """
import trio

async def quick(job):
    await trio.sleep(0)

async def slow(job):
    # Seconds to take, from the payload: long enough to be running when the test signals.
    await trio.sleep(float(job.payload.decode()))

async def forever(job):
    await trio.sleep_forever()

async def stubborn(job):
    # Ignores cancellation: only the third signal gets rid of it.
    with trio.CancelScope(shield=True):
        await trio.sleep_forever()

class Mailer:
    @staticmethod
    async def send(job):
        await trio.sleep(0)

class Callable:
    async def __call__(self, job):
        await trio.sleep(0)

callable_instance = Callable()

def sync_function(job):
    pass

not_a_function = 42
"""


def write_module(directory: Path, source: str = HANDLERS, name: str | None = None) -> str:
    """Write ``source`` as a module with a fresh name in ``directory``; return the name."""
    name = name or f"alk_handlers_{secrets.token_hex(4)}"
    (directory / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return name


@pytest.fixture
def handlers_module(tmp_path, monkeypatch):
    """A handler module importable in-process (``tmp_path`` on ``sys.path``)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return write_module(tmp_path)


# --- parsing -------------------------------------------------------------------------


def parse(*argv: str, environ=None):
    return build_parser(environ or {}).parse_args(["worker", *argv])


def test_cli_worker_parses_every_option():
    args = parse(
        "--dsn=postgresql://app@db/jobs",
        "--schema=jobs",
        "--queue=emails=myapp.tasks:send_email",
        "--queue=thumbs=myapp.images:Thumbnailer.make",
        "--concurrency=7",
        "--poll-interval-s=2.5",
        "--heartbeat-interval-s=4",
        "--job-timeout-s=60",
        "--shutdown-grace-s=0",
        "--claim-batch-max=20",
        "--sweep-interval-s=120",
        "--worker-id=box-1",
        "--status-interval-s=0",
        "--log-level=info",
    )
    assert args.dsn == "postgresql://app@db/jobs"
    assert args.schema == "jobs"
    assert args.queues == [
        QueueSpec("emails", "myapp.tasks", "send_email"),
        QueueSpec("thumbs", "myapp.images", "Thumbnailer.make"),
    ]
    assert (args.concurrency, args.claim_batch_max, args.worker_id) == (7, 20, "box-1")
    assert (args.poll_interval_s, args.heartbeat_interval_s, args.job_timeout_s) == (2.5, 4, 60)
    assert (args.shutdown_grace_s, args.sweep_interval_s, args.status_interval_s) == (0, 120, 0)
    assert args.log_level == "INFO"


def test_cli_worker_defaults_match_the_worker_and_the_environment():
    args = parse(
        "--queue=a=m:f",
        environ={"ALKSTORE_DSN": "postgresql://env@db/jobs", "ALKSTORE_SCHEMA": "from_env"},
    )
    assert (args.dsn, args.schema) == ("postgresql://env@db/jobs", "from_env")
    assert (args.concurrency, args.poll_interval_s, args.heartbeat_interval_s) == (10, 5.0, None)
    assert (args.job_timeout_s, args.shutdown_grace_s, args.claim_batch_max) == (None, 30.0, 100)
    assert (args.sweep_interval_s, args.worker_id, args.status_interval_s) == (60.0, None, 10.0)
    assert args.log_level == "WARNING"
    assert args.listen is True
    assert parse("--queue=a=m:f", "--no-listen").listen is False  # poll-only mode
    # The command line wins over the environment.
    args = parse(
        "--queue=a=m:f", "--dsn=memory://", "--schema=cli", environ={"ALKSTORE_SCHEMA": "env"}
    )
    assert (args.dsn, args.schema) == ("memory://", "cli")


def test_cli_worker_help_names_the_environment_variables_and_the_signals(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse("--help")
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for needle in ("ALKSTORE_DSN", "ALKSTORE_SCHEMA", "--queue NAME=MODULE:FUNCTION", "SIGTERM"):
        assert needle in text
    assert "130 stopped by a second or third signal" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency=0"], "--concurrency: expected 1..100000, got 0"),
        (["--poll-interval-s=0"], "--poll-interval-s: expected a number of seconds > 0"),
        (["--shutdown-grace-s=-1"], "--shutdown-grace-s: expected a number of seconds >= 0"),
        (["--status-interval-s=soon"], "--status-interval-s: expected a number of seconds"),
        (["--job-timeout-s=nan"], "--job-timeout-s: expected a number of seconds > 0"),
        (["--sweep-interval-s=1e20"], "at most 100 years"),
        (["--claim-batch-max=0"], "--claim-batch-max: expected 1..10000, got 0"),
        (["--worker-id="], "--worker-id: must be a non-empty str"),
        (["--log-level=loud"], "--log-level: invalid choice: 'LOUD'"),
        (["--schema=pg_x"], "--schema"),
        (["--queue=emails"], f"'emails' is not {QUEUE_SPEC_SHAPE}"),
    ],
)
def test_cli_worker_rejects_bad_values_with_status_2(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        parse("--dsn=memory://", "--queue=a=m:f", *argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_worker_never_echoes_a_malformed_dsn(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse("--dsn=postgresql://app:hunter2@db:notaport/x x=", "--queue=a=m:f")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "hunter2" not in err
    assert "or memory://" in err


def test_cli_worker_needs_a_dsn_and_a_queue(capsys, monkeypatch):
    monkeypatch.delenv("ALKSTORE_DSN", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the command adds the cwd
    with pytest.raises(SystemExit) as exit_info:
        main(["worker", "--queue=a=m:f"])
    assert exit_info.value.code == 2
    assert "--dsn is required (or set ALKSTORE_DSN)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["worker", "--dsn=memory://"])
    assert exit_info.value.code == 2
    assert f"name at least one queue: --queue {QUEUE_SPEC_SHAPE}" in capsys.readouterr().err


# --- handler specs -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("emails", f"'emails' is not {QUEUE_SPEC_SHAPE}"),
        ("emails=tasks", f"'emails=tasks' is not {QUEUE_SPEC_SHAPE}"),
        ("=tasks:send", f"'=tasks:send' is not {QUEUE_SPEC_SHAPE}"),
        (
            "emails=tasks.py:send",
            "'tasks.py' looks like a file name; name the module instead: emails=tasks:send",
        ),
        ("emails=app/tasks.py:send", "instead: emails=app.tasks:send"),
        ("emails=./tasks:send", "'./tasks' is not an importable module name"),
        ("emails=tasks:", "'' is not an attribute name"),
        ("emails=tasks:send()", "'send()' is not an attribute name"),
        ("e mails=tasks:send", "queue name must be 1-63 characters"),
        ("alk_x=tasks:send", "reserved for the library"),
    ],
)
def test_cli_worker_queue_spec_syntax_errors_name_the_value_and_the_shape(text, message):
    with pytest.raises(QueueSpecError, match=re.escape(message)):
        parse_queue_spec(text)


def test_cli_worker_queue_spec_allows_dotted_modules_and_attributes():
    assert parse_queue_spec("q.v1:x=pkg.sub.mod:Class.method") == QueueSpec(
        "q.v1:x", "pkg.sub.mod", "Class.method"
    )


def test_cli_worker_loads_async_functions_methods_and_callables(handlers_module):
    specs = [
        parse_queue_spec(f"{queue}={handlers_module}:{attr}")
        for queue, attr in [("a", "quick"), ("b", "Mailer.send"), ("c", "callable_instance")]
    ]
    handlers = load_handlers(specs)
    module = sys.modules[handlers_module]
    assert handlers == {
        "a": module.quick,
        "b": module.Mailer.send,
        "c": module.callable_instance,
    }


async def test_t7_cli_worker_runs_a_plain_function_handler_in_a_thread(handlers_module):
    (spec,) = [parse_queue_spec(f"emails={handlers_module}:sync_function")]
    handler = load_handlers([spec])["emails"]
    module = sys.modules[handlers_module]
    assert handler is not module.sync_function
    assert handler.__name__ == "sync_function"
    seen = []
    module.sync_function = lambda job: seen.append(threading.get_ident())
    rebound = load_handlers([spec])["emails"]
    await rebound(None)
    assert seen
    assert seen[0] != threading.get_ident()


@pytest.mark.parametrize(
    ("attr", "message"),
    [
        ("quik", "has no attribute 'quik'; did you mean 'quick'?"),
        ("Mailer.sned", "'{m}:Mailer' has no attribute 'sned'; did you mean 'send'?"),
        ("zzz", "has no attribute 'zzz'; check the name"),
        ("Mailer", "{m}:Mailer is a class (Mailer), not a function"),
        ("not_a_function", "{m}:not_a_function is an object of type int, not a function"),
    ],
)
def test_cli_worker_handler_errors_name_the_spec_and_the_fix(handlers_module, attr, message):
    spec = parse_queue_spec(f"emails={handlers_module}:{attr}")
    with pytest.raises(QueueSpecError) as error:
        load_handlers([spec])
    assert str(error.value).startswith(f"--queue 'emails={handlers_module}:{attr}': ")
    assert message.format(m=handlers_module) in str(error.value)


def test_cli_worker_reports_a_missing_module_with_where_it_looked():
    name = f"alk_missing_{secrets.token_hex(4)}"
    for module in (name, f"{name}.sub"):
        with pytest.raises(QueueSpecError, match=f"no module named '{name}' \\(searched"):
            load_handlers([parse_queue_spec(f"emails={module}:send")])


def test_cli_worker_reports_a_queue_named_twice_before_importing_anything():
    specs = [parse_queue_spec("emails=alk_missing_1:send"), parse_queue_spec("emails=m2:send")]
    with pytest.raises(QueueSpecError) as error:
        load_handlers(specs)
    assert str(error.value) == (
        "queue 'emails' is named twice (--queue 'emails=alk_missing_1:send' and --queue "
        "'emails=m2:send'); give each queue one handler"
    )


def test_cli_worker_a_module_that_fails_to_import_is_not_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    broken = write_module(tmp_path, "raise RuntimeError('no config\\nfound')\n")
    needy = write_module(tmp_path, f"import alk_missing_dep_{secrets.token_hex(4)}\n")
    with pytest.raises(HandlerImportFailed) as error:
        load_handlers([parse_queue_spec(f"emails={broken}:send")])
    assert f"importing '{broken}' failed: RuntimeError: no config found; fix the module" in str(
        error.value
    )
    with pytest.raises(HandlerImportFailed, match=r"importing .* failed: No module named"):
        load_handlers([parse_queue_spec(f"emails={needy}:send")])


def test_cli_worker_makes_the_current_directory_importable_like_python_dash_m(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["/somewhere/bin", "/lib"])
    make_cwd_importable()
    make_cwd_importable()
    assert sys.path == [str(tmp_path), "/somewhere/bin", "/lib"]
    # Already there (python -m puts it first): left alone.
    monkeypatch.setattr(sys, "path", ["/lib", str(tmp_path)])
    make_cwd_importable()
    assert sys.path == ["/lib", str(tmp_path)]


# --- status lines --------------------------------------------------------------------


def stats(**counts) -> WorkerStatistics:
    fields = dict.fromkeys(WorkerStatistics.__dataclass_fields__, 0)
    fields.update(worker_id="w1", claim_to_start_mean_s=0.0, run_time_mean_s=0.0)
    return WorkerStatistics(**{**fields, **counts})


def test_cli_worker_status_line_counts_and_rate_over_the_interval():
    before = stats(claimed=10, acked=8, retried=1, dead_lettered=0)
    after = stats(claimed=40, acked=33, retried=2, dead_lettered=1, in_flight=4)
    assert format_status(after, before, 10.0) == (
        "alkstore-trio worker: claimed 40, acked 33, retried 2, dead 1, in flight 4; "
        "2.7 jobs/s over the last 10s"
    )


def test_cli_worker_summary_has_totals_wall_time_and_means():
    summary = format_summary(
        stats(
            claimed=12,
            acked=9,
            retried=2,
            dead_lettered=1,
            released=1,
            claim_to_start_mean_s=0.0015,
            run_time_mean_s=0.25,
        ),
        wall_time_s=4.0,
    )
    assert summary_of(summary) == {
        "claimed": "12",
        "acked": "9",
        "retried": "2",
        "dead-lettered": "1",
        "released": "1",
        "lease lost": "0",
        "handler errors": "0",
        "timed out": "0",
        "wall time": "4.00 s",
        "mean jobs/s": "3.0",
        "mean claim-to-start": "1.50 ms",
        "mean run time": "250.00 ms",
    }


SUMMARY_LINE = re.compile(r"^  (?P<key>[a-z/ -]+):\s+(?P<value>\S.*)$", re.MULTILINE)


def summary_of(text: str) -> dict[str, str]:
    summary = text.split("alkstore-trio worker: stopped worker ", 1)[1]
    return {m["key"]: m["value"] for m in SUMMARY_LINE.finditer(summary)}


# --- signals, in-process -------------------------------------------------------------

T0 = datetime(2000, 1, 1, tzinfo=UTC)


class TrioClock:
    """The store's clock, following trio's (mock) clock."""

    def now(self) -> datetime:
        return T0 + timedelta(seconds=trio.current_time())


class Exited(Exception):
    """Raised by the tests' ``force_exit`` instead of ending the process."""


def fake_exit():
    raise Exited


@asynccontextmanager
async def already_open(store):
    yield store


@asynccontextmanager
async def frozen_nursery(clock):
    """A nursery for tests on a frozen ``MockClock``: if the body fails, time starts to
    jump, so the worker's shielded finalization (bounded in trio time) ends and the
    failure is reported instead of hanging the test."""
    async with trio.open_nursery() as nursery:
        try:
            yield nursery
        except BaseException:
            clock.autojump_threshold = 0
            raise


async def serve_in(nursery, store, handlers, *, signals, out, environ=None, **options):
    """Start ``serve_worker`` in ``nursery``; its exit status lands in the returned list.
    ``environ`` is the command's environment (default: empty, so never under systemd)."""
    result: list[int] = []
    status_interval_s = options.pop("status_interval_s", 0)

    async def serve():
        result.append(
            await serve_worker(
                lambda: already_open(store),
                handlers,
                {"poll_interval_s": 1000.0, "sweep_interval_s": 1000.0, **options},
                where="memory://",
                status_interval_s=status_interval_s,
                signals=signals,
                out=out,
                force_exit=fake_exit,
                environ={} if environ is None else environ,
            )
        )

    nursery.start_soon(serve)
    await trio.testing.wait_all_tasks_blocked()
    return result


async def test_r7_cli_first_signal_drains_second_cancels_and_releases(mock_clock):
    # Time stands still (MockClock without autojump): the grace period can only be cut
    # short by the second signal.
    started = trio.Event()

    async def forever(job):
        started.set()
        await trio.sleep_forever()

    send, signals = trio.open_memory_channel[int](10)
    out = io.StringIO()
    async with open_store("memory://", clock=TrioClock()) as store, frozen_nursery(mock_clock) as n:
        queue = store.queue("emails")
        job_id = await queue.enqueue(b"x")
        result = await serve_in(n, store, {"emails": forever}, signals=signals, out=out)
        await started.wait()
        assert "worker " in out.getvalue()
        assert (
            "serving emails on memory://; Ctrl-C or SIGTERM stops it gracefully" in out.getvalue()
        )

        send.send_nowait(signal.SIGINT)
        await trio.testing.wait_all_tasks_blocked()
        assert (
            "alkstore-trio worker: SIGINT: stopping: no new claims; 1 running handler(s) get "
            "up to 30s to finish, then are cancelled and their jobs released. Press Ctrl-C "
            "(or send SIGTERM) again to cancel them now"
        ) in out.getvalue()
        assert result == []  # still draining
        assert (await queue.get_job(job_id)).state == "processing"

        send.send_nowait(signal.SIGTERM)
        await trio.testing.wait_all_tasks_blocked()
        assert result == [130]
        assert (
            "alkstore-trio worker: SIGTERM again: cancelling 1 running handler(s) now and "
            "releasing their jobs. A third signal exits at once (their leases then lapse)"
        ) in out.getvalue()
        job = await queue.get_job(job_id)
        assert (job.state, job.attempts, job.last_error) == ("pending", 0, "worker stopped")
        assert summary_of(out.getvalue())["released"] == "1"


async def test_r7_cli_first_signal_lets_running_handlers_finish_and_exits_0(mock_clock):
    async def slow(job):
        await trio.sleep(5)

    send, signals = trio.open_memory_channel[int](10)
    out = io.StringIO()
    async with open_store("memory://", clock=TrioClock()) as store, frozen_nursery(mock_clock) as n:
        queue = store.queue("emails")
        job_ids = await queue.enqueue_many([b"1", b"2"])
        result = await serve_in(n, store, {"emails": slow}, signals=signals, out=out)
        send.send_nowait(signal.SIGTERM)
        await trio.testing.wait_all_tasks_blocked()
        assert result == []
        assert {(await queue.get_job(i)).state for i in job_ids} == {"processing"}
        mock_clock.jump(5)
        await trio.testing.wait_all_tasks_blocked()
        assert result == [0]
        assert [await queue.get_job(i) for i in job_ids] == [None, None]  # acked
    summary = summary_of(out.getvalue())
    assert (summary["acked"], summary["released"], summary["wall time"]) == ("2", "0", "5.00 s")


async def test_r7_cli_third_signal_exits_without_waiting_for_the_release(mock_clock):
    running = trio.Event()
    let_go = trio.Event()

    async def stubborn(job):
        running.set()
        with trio.CancelScope(shield=True):
            await let_go.wait()

    send, signals = trio.open_memory_channel[int](10)
    out = io.StringIO()
    with pytest.RaisesGroup(Exited, flatten_subgroups=True):
        async with (
            open_store("memory://", clock=TrioClock()) as store,
            frozen_nursery(mock_clock) as n,
        ):
            await store.queue("emails").enqueue(b"x")
            result = await serve_in(n, store, {"emails": stubborn}, signals=signals, out=out)
            await running.wait()
            try:
                for signum in (signal.SIGINT, signal.SIGINT, signal.SIGINT):
                    send.send_nowait(signum)
                await trio.testing.wait_all_tasks_blocked()
                assert (
                    "alkstore-trio worker: SIGINT a third time: exiting now; 1 claimed job(s) "
                    "will be reclaimed by other workers when their leases lapse"
                ) in out.getvalue()
                assert result == []
            finally:
                let_go.set()  # lets the test end: a real process is gone by now


async def test_r7_cli_signal_before_the_worker_starts_stops_the_startup(mock_clock):
    opening = trio.Event()

    @asynccontextmanager
    async def slow_open():
        opening.set()
        await trio.sleep_forever()
        yield  # pragma: no cover

    send, signals = trio.open_memory_channel[int](10)
    out = io.StringIO()
    result = []
    async with trio.open_nursery() as nursery:

        async def serve():
            result.append(
                await serve_worker(
                    slow_open,
                    {"emails": fake_handler},
                    {},
                    where="memory://",
                    status_interval_s=10,
                    signals=signals,
                    out=out,
                    force_exit=fake_exit,
                )
            )

        nursery.start_soon(serve)
        await opening.wait()
        send.send_nowait(signal.SIGTERM)
    assert result == [0]
    assert out.getvalue() == (
        "alkstore-trio worker: SIGTERM: stopping before the worker started (nothing was claimed)\n"
    )


async def fake_handler(job):
    await trio.lowlevel.checkpoint()


async def test_r7_cli_status_line_every_interval(mock_clock):
    send, signals = trio.open_memory_channel[int](10)
    out = io.StringIO()
    async with open_store("memory://", clock=TrioClock()) as store, frozen_nursery(mock_clock) as n:
        await store.queue("emails").enqueue_many([b"1", b"2", b"3"])
        await serve_in(
            n, store, {"emails": fake_handler}, signals=signals, out=out, status_interval_s=10
        )
        assert "jobs/s" not in out.getvalue()
        mock_clock.jump(10)
        await trio.testing.wait_all_tasks_blocked()
        lines = [line for line in out.getvalue().splitlines() if "jobs/s" in line]
        assert lines == [
            "alkstore-trio worker: claimed 3, acked 3, retried 0, dead 0, in flight 0; "
            "0.3 jobs/s over the last 10s"
        ]
        send.send_nowait(signal.SIGINT)


async def test_r7_cli_a_failing_worker_prints_the_summary_then_raises_unwrapped(
    autojump_clock, monkeypatch
):
    out = io.StringIO()
    _, signals = trio.open_memory_channel[int](10)
    async with open_store("memory://", clock=TrioClock()) as store:

        class BrokenListener:
            async def wait(self):
                await trio.lowlevel.checkpoint()
                raise OSError("listener socket reset")

        @asynccontextmanager
        async def broken_listener(queues):
            yield BrokenListener()

        # The listener actor crashes after every (re)start: the supervisor gives up (R1).
        monkeypatch.setattr(store, "open_wake_listener", broken_listener)
        with pytest.raises(SupervisorEscalated) as error:
            await serve_worker(
                lambda: already_open(store),
                {"emails": fake_handler},
                {"max_restarts": 1, "poll_interval_s": 1.0},
                where="memory://",
                status_interval_s=0,
                signals=signals,
                out=out,
                force_exit=fake_exit,
            )
    assert isinstance(error.value.__cause__, OSError)
    lines = out.getvalue().splitlines()
    assert "serving emails on memory://" in lines[0]
    assert lines[1].startswith("alkstore-trio worker: stopped worker ")


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            SupervisorEscalated("supervisor 'w' gave up", supervisor="w", child="listener"),
            "the worker failed and released its claimed jobs: supervisor 'w' gave up",
        ),
        (
            EngineError("cannot open the store on postgresql://app@db/x: OperationalError"),
            "cannot open the store on postgresql://app@db/x: OperationalError; check --dsn "
            "(or ALKSTORE_DSN) and that the server is running",
        ),
        (StoreClosed("the store is closed"), "StoreClosed: the store is closed"),
    ],
)
def test_cli_worker_failures_are_one_line_with_status_1(
    monkeypatch, capsys, handlers_module, error, line
):
    async def failing_serve(*args, **kwargs):
        await trio.lowlevel.checkpoint()
        raise error

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr("alkstore_trio._cli.worker.serve_worker", failing_serve)
    monkeypatch.setattr("logging.basicConfig", lambda **kwargs: None)
    status = main(["worker", "--dsn=memory://", f"--queue=emails={handlers_module}:quick"])
    assert status == 1
    assert capsys.readouterr().err == f"alkstore-trio worker: {line}\n"


# --- the command in a subprocess -----------------------------------------------------


@pytest.fixture
async def pg_store(pg_dsn, schema):
    """A store on a fresh, migrated schema (dropped after the test)."""
    async with open_store(pg_dsn, schema=schema, migrate="apply", pool_size=2) as store:
        yield store


async def fetch_rows(store, schema, sql, *params):
    async with store.transaction() as tx:
        return await tx.fetch(sql.replace("@schema@", f'"{schema}"'), list(params))


async def wait_for_rows(store, schema, sql, *params, expect, worker):
    """Poll ``sql`` until it returns ``expect`` (failing after the deadline)."""
    rows = None
    with trio.move_on_after(DEADLINE_S):
        while (rows := await fetch_rows(store, schema, sql, *params)) != expect:
            if worker.process.poll() is not None:
                break
            await trio.sleep(0.05)
        else:
            return
    pytest.fail(f"expected {expect}, the database says {rows}; worker stderr:\n{worker.stderr}")


def count_by_state(queue: str):
    return (
        "SELECT state, count(*) FROM @schema@.jobs WHERE queue = %s GROUP BY state",
        queue,
    )


async def test_r7_cli_worker_acks_the_jobs_and_exits_0_on_sigint(
    pg_dsn, schema, pg_store, start_worker, tmp_path
):
    module = write_module(tmp_path)
    await pg_store.queue("emails").enqueue_many([b"%d" % i for i in range(20)])
    # --dsn and --schema from the environment, as a deployment would set them.
    worker = await start_worker(
        f"--queue=emails={module}:quick",
        "--status-interval-s=0.1",
        cwd=tmp_path,
        env=worker_env(ALKSTORE_DSN=pg_dsn, ALKSTORE_SCHEMA=schema),
    )
    await wait_for_rows(pg_store, schema, *count_by_state("emails"), expect=[], worker=worker)
    await worker.wait_for_output("acked 20, retried 0, dead 0, in flight 0")
    worker.signal(signal.SIGINT)
    assert await worker.wait() == 0, worker.stderr
    summary = summary_of(worker.stderr)
    assert (summary["claimed"], summary["acked"], summary["released"]) == ("20", "20", "0")
    assert float(summary["mean jobs/s"]) > 0
    assert "SIGINT: stopping: no new claims" in worker.stderr
    assert "serving emails on postgresql://" in worker.stderr
    assert f"schema '{schema}'; Ctrl-C or SIGTERM stops it gracefully" in worker.stderr
    assert worker.stdout == ""


async def test_r7_cli_worker_sigterm_drains_running_handlers_within_the_grace(
    pg_dsn, schema, pg_store, start_worker, tmp_path
):
    module = write_module(tmp_path)
    job_ids = await pg_store.queue("emails").enqueue_many([b"1.0", b"1.0"])
    worker = await start_worker(
        f"--dsn={pg_dsn}",
        f"--schema={schema}",
        f"--queue=emails={module}:slow",
        "--shutdown-grace-s=20",
        cwd=tmp_path,
    )
    await wait_for_rows(
        pg_store, schema, *count_by_state("emails"), expect=[("processing", 2)], worker=worker
    )
    start = trio.current_time()
    worker.signal(signal.SIGTERM)
    assert await worker.wait() == 0, worker.stderr
    assert trio.current_time() - start < 15, "drained within the grace, not at its end"
    assert await fetch_rows(pg_store, schema, "SELECT id FROM @schema@.jobs") == []
    assert await fetch_rows(pg_store, schema, "SELECT id FROM @schema@.dead_jobs") == []
    summary = summary_of(worker.stderr)
    assert (summary["acked"], summary["released"]) == ("2", "0")
    assert len(job_ids) == 2


async def test_r7_cli_worker_sigterm_releases_what_outlives_the_grace(
    pg_dsn, schema, pg_store, start_worker, tmp_path
):
    module = write_module(tmp_path)
    (job_id,) = await pg_store.queue("emails").enqueue_many([b"x"])
    worker = await start_worker(
        f"--dsn={pg_dsn}",
        f"--schema={schema}",
        f"--queue=emails={module}:forever",
        "--shutdown-grace-s=0.2",
        cwd=tmp_path,
    )
    await wait_for_rows(
        pg_store, schema, *count_by_state("emails"), expect=[("processing", 1)], worker=worker
    )
    worker.signal(signal.SIGTERM)
    assert await worker.wait() == 0, worker.stderr
    rows = await fetch_rows(
        pg_store,
        schema,
        "SELECT state, attempts, last_error, claimed_by FROM @schema@.jobs WHERE id = %s",
        job_id,
    )
    assert rows == [("pending", 0, "worker stopped", None)]
    assert summary_of(worker.stderr)["released"] == "1"


async def test_r7_cli_worker_second_sigint_cancels_the_handler_and_releases_its_job(
    pg_dsn, schema, pg_store, start_worker, tmp_path
):
    module = write_module(tmp_path)
    (job_id,) = await pg_store.queue("emails").enqueue_many([b"x"])
    worker = await start_worker(
        f"--dsn={pg_dsn}",
        f"--schema={schema}",
        f"--queue=emails={module}:forever",
        "--shutdown-grace-s=600",
        cwd=tmp_path,
    )
    await wait_for_rows(
        pg_store, schema, *count_by_state("emails"), expect=[("processing", 1)], worker=worker
    )
    worker.signal(signal.SIGINT)
    await worker.wait_for_output("SIGINT: stopping")
    worker.signal(signal.SIGINT)
    assert await worker.wait(within_s=10) == 130, worker.stderr
    rows = await fetch_rows(
        pg_store,
        schema,
        "SELECT state, attempts, last_error FROM @schema@.jobs WHERE id = %s",
        job_id,
    )
    assert rows == [("pending", 0, "worker stopped")]
    assert "SIGINT again: cancelling 1 running handler(s) now" in worker.stderr
    assert summary_of(worker.stderr)["released"] == "1"


async def test_r7_cli_worker_third_signal_exits_at_once_leaving_the_lease_to_lapse(
    pg_dsn, schema, pg_store, start_worker, tmp_path
):
    module = write_module(tmp_path)
    (job_id,) = await pg_store.queue("emails").enqueue_many([b"x"])
    worker = await start_worker(
        f"--dsn={pg_dsn}",
        f"--schema={schema}",
        f"--queue=emails={module}:stubborn",
        cwd=tmp_path,
    )
    await wait_for_rows(
        pg_store, schema, *count_by_state("emails"), expect=[("processing", 1)], worker=worker
    )
    worker.signal(signal.SIGTERM)
    await worker.wait_for_output("SIGTERM: stopping")
    worker.signal(signal.SIGINT)
    await worker.wait_for_output("SIGINT again")
    worker.signal(signal.SIGINT)
    assert await worker.wait(within_s=10) == 130, worker.stderr
    assert "SIGINT a third time: exiting now" in worker.stderr
    rows = await fetch_rows(
        pg_store, schema, "SELECT state FROM @schema@.jobs WHERE id = %s", job_id
    )
    assert rows == [("processing",)]  # reclaimed once its lease lapses


async def test_cli_worker_bad_handler_spec_exits_2_with_the_message(start_worker, tmp_path):
    module = write_module(tmp_path)
    worker = await start_worker("--dsn=memory://", f"--queue=emails={module}:Mailer", cwd=tmp_path)
    assert await worker.wait() == 2
    assert (
        f"alkstore-trio worker: error: --queue 'emails={module}:Mailer': "
        f"{module}:Mailer is a class (Mailer), not a function"
    ) in worker.stderr


async def test_cli_worker_a_module_that_raises_on_import_exits_1(start_worker, tmp_path):
    module = write_module(tmp_path, "raise RuntimeError('no config')\n")
    worker = await start_worker("--dsn=memory://", f"--queue=emails={module}:f", cwd=tmp_path)
    assert await worker.wait() == 1
    assert worker.stderr == (
        f"alkstore-trio worker: --queue 'emails={module}:f': importing '{module}' failed: "
        f"RuntimeError: no config; fix the module (run python -c 'import {module}' to see "
        "the traceback)\n"
    )


async def test_cli_worker_console_script_imports_handlers_from_the_current_directory(
    start_worker, tmp_path
):
    module = write_module(tmp_path)
    script = Path(sys.executable).parent / "alkstore-trio"
    if not script.exists():
        pytest.fail("the alkstore-trio command is not installed: pip install -e '.[dev]'")
    worker = await start_worker(
        "worker",
        "--dsn=memory://",
        f"--queue=emails={module}:quick",
        cwd=tmp_path,
        command=[str(script)],
    )
    await worker.wait_for_output("serving emails on memory://")
    worker.signal(signal.SIGTERM)
    assert await worker.wait() == 0, worker.stderr
    assert summary_of(worker.stderr)["claimed"] == "0"


async def test_cli_worker_never_echoes_the_password(start_worker, tmp_path):
    module = write_module(tmp_path)
    worker = await start_worker(
        "--dsn=postgresql://postgres:s3cr3t-pw@127.0.0.1:1/test",
        "--connect-timeout=0.5",
        f"--queue=emails={module}:quick",
        cwd=tmp_path,
    )
    assert await worker.wait() == 1
    assert "s3cr3t-pw" not in worker.stderr
    assert worker.stderr.startswith("alkstore-trio worker: cannot connect to ")
    assert "postgresql://postgres@127.0.0.1:1/test" in worker.stderr


async def test_cli_worker_missing_schema_exits_1_naming_the_migrate_command(
    pg_dsn, schema, start_worker, tmp_path
):
    module = write_module(tmp_path)
    worker = await start_worker(
        f"--dsn={pg_dsn}", f"--schema={schema}", f"--queue=emails={module}:quick", cwd=tmp_path
    )
    assert await worker.wait() == 1
    assert "alkstore-trio migrate" in worker.stderr
    assert len(worker.stderr.splitlines()) == 1


# --- the example ---------------------------------------------------------------------


async def test_cli_worker_runs_the_example_handler_module(pg_dsn, schema, pg_store, start_worker):
    payloads = [b'{"to": "ada@example.com"}', b'{"to": "bob@example.com"}', b"not json"]
    job_ids = await pg_store.queue("emails").enqueue_many(payloads, max_attempts=1)
    worker = await start_worker(
        f"--dsn={pg_dsn}",
        f"--schema={schema}",
        "--queue=emails=worker_cli_handlers:send_email",
        "--log-level=info",
        cwd=ROOT / "examples",
    )
    await wait_for_rows(pg_store, schema, *count_by_state("emails"), expect=[], worker=worker)
    dead = await fetch_rows(pg_store, schema, "SELECT id, last_error FROM @schema@.dead_jobs")
    assert [row[0] for row in dead] == [job_ids[2]]
    assert "payload is not JSON" in dead[0][1]
    worker.signal(signal.SIGINT)
    assert await worker.wait() == 0, worker.stderr
    summary = summary_of(worker.stderr)
    assert (summary["acked"], summary["dead-lettered"]) == ("2", "1")
    assert "sent email to ada@example.com" in worker.stderr
    assert worker.stdout == ""
