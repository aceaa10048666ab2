"""R12-R14 under the CLI: ``worker --queue-concurrency NAME=N``,
``--queue-job-timeout-s NAME=S`` and ``worker --periodic M:A`` without ``--queue``.

Parsing and the checks of ``setup`` run in-process; the scheduler-only worker runs
in-process too, with signals from a memory channel and time from trio's ``MockClock``.
"""

from __future__ import annotations

import io
import signal

import pytest
import trio
import trio.testing
from test_cli_worker import TrioClock, frozen_nursery, serve_in, write_module

from alkstore_trio import Periodic, open_store
from alkstore_trio._cli import build_parser


def parse(*argv: str):
    return build_parser({}).parse_args(["worker", "--dsn=memory://", *argv])


def set_up(*argv: str):
    """Parse and run the command's ``setup`` (the checks made before anything opens)."""
    args = parse(*argv)
    args.setup(args)
    return args


@pytest.fixture
def module(tmp_path, monkeypatch):
    """A module with two handlers and a schedule, importable in-process."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return write_module(
        tmp_path,
        """
        from alkstore_trio import Periodic

        async def send(job):
            pass

        SCHEDULES = [Periodic("digest", "reports", every_s=60)]
        """,
    )


def test_r12_r13_cli_worker_takes_per_queue_limits_and_timeouts(module):
    args = set_up(
        f"--queue=emails={module}:send",
        f"--queue=reports={module}:send",
        "--concurrency=22",
        "--queue-concurrency=reports=2",
        "--queue-concurrency=emails=20",
        "--queue-job-timeout-s=reports=600",
        "--queue-job-timeout-s=emails=none",
    )
    assert args.queue_concurrency == {"reports": 2, "emails": 20}
    assert args.queue_job_timeout_s == {"reports": 600.0, "emails": None}
    plain = set_up(f"--queue=emails={module}:send")
    assert (plain.queue_concurrency, plain.queue_job_timeout_s) == (None, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--queue-concurrency=emails"], "'emails' is not NAME=N"),
        (["--queue-concurrency=emails=0"], "--queue-concurrency: expected 1..100000, got 0"),
        (["--queue-concurrency=alk_x=1"], "'alk_x=1': queue name"),
        (["--queue-job-timeout-s=emails=0"], "expected a number of seconds > 0"),
        (["--queue-job-timeout-s==5"], "'=5' is not NAME=S"),
    ],
)
def test_r12_r13_cli_bad_per_queue_values_are_usage_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        parse("--queue=emails=m:f", *argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--queue-concurrency=other=1"], "queue 'other' has no --queue (the queues: emails)"),
        (
            ["--queue-concurrency=emails=1", "--queue-concurrency=emails=2"],
            "--queue-concurrency: queue 'emails' is named twice",
        ),
        (["--queue-concurrency=emails=11"], "emails=11 is above --concurrency 10"),
        (["--queue-job-timeout-s=other=5"], "--queue-job-timeout-s other=...: queue 'other'"),
    ],
)
def test_r12_r13_cli_per_queue_options_name_served_queues(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        set_up("--queue=emails=not_imported_yet:f", *argv)  # checked before any import
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_r14_cli_worker_with_only_periodic_has_no_handlers(module, capsys):
    args = set_up(f"--periodic={module}:SCHEDULES")
    assert args.handlers == {}
    assert [p.name for p in args.periodic] == ["digest"]
    with pytest.raises(SystemExit) as exit_info:
        set_up(f"--periodic={module}:SCHEDULES", "--queue-concurrency=reports=1")
    assert exit_info.value.code == 2
    assert "(the queues: none: only --periodic was given)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        set_up()
    assert exit_info.value.code == 2
    assert "or give only --periodic MODULE:ATTR" in capsys.readouterr().err


async def test_r14_cli_a_scheduler_only_worker_fires_and_stops_on_a_signal(autojump_clock):
    send, signals = trio.open_memory_channel[int](10)
    out = io.StringIO()
    every = Periodic("digest", "reports", every_s=60)
    async with open_store("memory://", clock=TrioClock()) as store:
        async with frozen_nursery(autojump_clock) as nursery:
            result = await serve_in(nursery, store, {}, signals=signals, out=out, periodic=[every])
            await trio.sleep(125)
            send.send_nowait(signal.SIGINT)
        fired = (await store.stats("reports")).queues[0].pending_ready
    assert result == [0]
    assert fired == 2  # at 60 and 120 s; nothing claimed them
    text = out.getvalue()
    assert "firing periodic schedules only (no queue) on memory://" in text
    assert "claimed:             0" in text
