"""``alkstore-trio demo``: a real supervised Worker on the in-memory engine, with a live
display. The installed command runs in a subprocess (its output is a pipe, so the display
prints plain lines); the rest runs the demo in-process under trio's ``MockClock``, where
the engine follows trio's clock too, so a run takes milliseconds and no test sleeps."""

from __future__ import annotations

import functools
import io
import logging
import re
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

from alkstore_trio import InvalidArgument
from alkstore_trio._demo import BAR_CELLS, DemoSummary, format_summary, run_demo

ROOT = Path(__file__).resolve().parents[2]

SUMMARY_LINE = re.compile(r"^  (?P<key>[a-z -]+):\s+(?P<value>\d+(?:\.\d+)?)", re.MULTILINE)
DEAD_GROUP = re.compile(r"^    (?P<count>\d+) x '(?P<error>[^']*)' \(job ids (?P<ids>[\d, ]+)\)$")
POISON = "RuntimeError: poison job: handler always raises"
MALFORMED = "malformed payload: Fail() without retrying"

#: One readable line per notable event (the job id is the first group).
NOTABLE = {
    "retry": re.compile(
        r"^retry: +job (\d+) attempt 1/3 failed: flaky job: failed attempt 1; "
        r"it runs again in 0\.1 s$"
    ),
    "dead": re.compile(rf"^dead: +job (\d+) attempt 3/3 dead-lettered: {re.escape(POISON)}$"),
    "timeout": re.compile(
        r"^timeout: +job (\d+) attempt 1/3: job timed out after 1s \(job_timeout_s\); "
        r"handler cancelled, job retried$"
    ),
    "cancel": re.compile(
        r"^cancel: +job (\d+) has hung for \d+\.\d\d s: the operator cancels it "
        r"\(queue\.cancel\)$"
    ),
    "stopped": re.compile(  # R15: the cancel reaches the handler at once
        r"^stopped: +job (\d+) attempt 1/3: handler stopped \d+\.\d\d s after the cancel; "
        r"job cancelled$"
    ),
}
#: Any SGR (colour) escape; and any escape at all.
SGR = re.compile(r"\x1b\[[\d;]*m")
ESCAPE = "\x1b"


def summary_of(output: str) -> dict[str, float]:
    """The ``key: number`` lines of the summary."""
    return {m["key"]: float(m["value"]) for m in SUMMARY_LINE.finditer(output)}


def counts_of(output: str) -> dict[str, float]:
    """The summary without its timing lines (the part that is deterministic)."""
    summary = summary_of(output)
    return {key: value for key, value in summary.items() if key not in {"wall time", "throughput"}}


def notable_lines(output: str, kind: str) -> list[re.Match[str]]:
    return [m for line in output.splitlines() if (m := NOTABLE[kind].match(line))]


def assert_summary_adds_up(output: str, *, jobs: int) -> dict[str, float]:
    summary = summary_of(output)
    assert set(summary) == {
        "enqueued",
        "claims",
        "acked",
        "retried",
        "timed out",
        "dead-lettered",
        "cancelled",
        "lease lost",
        "wall time",
        "throughput",
    }, output
    assert summary["enqueued"] == jobs
    # Every job settled, none lost: acked, dead-lettered, or cancelled by the operator.
    assert summary["acked"] + summary["dead-lettered"] + summary["cancelled"] == jobs
    # Every claim ended exactly once: ack, retry, dead-letter, cancel or a lost lease.
    assert summary["claims"] == (
        summary["acked"]
        + summary["retried"]
        + summary["dead-lettered"]
        + summary["cancelled"]
        + summary["lease lost"]
    )
    assert summary["timed out"] <= summary["retried"]
    groups = [m for line in output.splitlines() if (m := DEAD_GROUP.match(line))]
    assert sum(int(g["count"]) for g in groups) == summary["dead-lettered"]
    for group in groups:
        assert len(group["ids"].split(", ")) == int(group["count"])
    assert "; none lost" in output.splitlines()[-1]
    return summary


def run_in_virtual_time(
    *, out: io.StringIO | None = None, environ: dict[str, str] | None = None, **options: int
) -> tuple[DemoSummary, str]:
    """Run the demo in-process under ``MockClock``; its display output plus the summary
    the command prints after it."""
    out = io.StringIO() if out is None else out
    summary = trio.run(
        functools.partial(run_demo, out=out, environ={} if environ is None else environ, **options),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
    return summary, out.getvalue() + format_summary(summary) + "\n"


def without_timing(summary: DemoSummary) -> DemoSummary:
    summary.wall_s = 0.0
    return summary


class FakeTerminal(io.StringIO):
    """An output that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_demo_command_shows_each_notable_event_in_one_line_and_a_summary_that_adds_up(
    run_command, console_script
):
    result = run_command([console_script, "demo"])
    assert result.returncode == 0, result.stderr
    # The worker's log records stay off the screen: the display shows the events.
    assert result.stderr == ""
    output = result.stdout
    assert output.startswith(
        "alkstore-trio demo: in-memory engine, seed 0, 300 jobs, 1 supervised Worker, "
        "concurrency 4\n"
    )
    # Not a terminal: plain lines only, never an escape sequence.
    assert ESCAPE not in output
    for kind in NOTABLE:
        assert notable_lines(output, kind), f"no {kind} line in:\n{output}"
    # The operator's cancel stops that job's handler (R15), in that order.
    (cancel,) = notable_lines(output, "cancel")
    (stopped,) = notable_lines(output, "stopped")
    assert cancel[1] == stopped[1]
    assert output.index(cancel[0]) < output.index(stopped[0])
    assert re.search(r"^progress: +300/300 settled, ", output, re.MULTILINE)
    summary = assert_summary_adds_up(output, jobs=300)
    assert summary["timed out"] == summary["cancelled"] == 1
    assert summary["lease lost"] == 0
    assert summary["wall time"] < 5.0, "the demo must finish in a few seconds"
    # The sample output in the CLI reference is what the defaults really print.
    reference = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    sample = reference.split("```text\nalkstore-trio demo: ", 1)[1].split("```", 1)[0]
    assert counts_of(sample) == counts_of(output)


def test_demo_python_dash_m_exits_0_with_a_summary_that_adds_up(run_command):
    # One job: the stuck one, so this run lasts half a second (two heartbeat intervals).
    args = [sys.executable, "-m", "alkstore_trio", "demo", "--jobs", "1", "--workers", "2"]
    result = run_command(args)
    assert result.returncode == 0, result.stderr
    assert notable_lines(result.stdout, "stopped")
    assert_summary_adds_up(result.stdout, jobs=1)


def test_demo_in_virtual_time_shows_every_notable_event_and_settles_every_job():
    summary, output = run_in_virtual_time()
    assert_summary_adds_up(output, jobs=300)
    assert summary.live == 0
    assert summary.settled == summary.jobs == 300
    assert summary.timed_out == len(summary.cancelled) == 1
    assert summary.lease_lost == 0
    assert {error for _, error in summary.dead} == {POISON, MALFORMED}
    for kind in NOTABLE:
        assert notable_lines(output, kind), f"no {kind} line in:\n{output}"
    # In virtual time the operator cancels at the first heartbeat, exactly one interval in.
    (cancel,) = notable_lines(output, "cancel")
    assert "has hung for 0.25 s" in cancel[0]
    assert [int(cancel[1])] == summary.cancelled
    # One dead line per dead-lettered job, the same jobs the summary lists.
    dead_ids = {
        int(m[1])
        for line in output.splitlines()
        if (m := re.match(r"^dead: +job (\d+) attempt \d/3 dead-lettered: ", line))
    }
    assert dead_ids == {job_id for job_id, _ in summary.dead}


def test_demo_counts_are_deterministic_for_a_seed_whatever_the_concurrency():
    one, one_output = run_in_virtual_time(jobs=120, seed=7, workers=1)
    three, three_output = run_in_virtual_time(jobs=120, seed=7, workers=3)
    again, _ = run_in_virtual_time(jobs=120, seed=7, workers=3)
    assert one.concurrency == 1
    one.concurrency = 3
    assert without_timing(one) == without_timing(three) == without_timing(again)
    assert counts_of(one_output) == counts_of(three_output)


def test_demo_seeds_change_the_job_mix():
    a, _ = run_in_virtual_time(jobs=120, seed=1)
    b, _ = run_in_virtual_time(jobs=120, seed=2)
    assert (a.claims, a.acked, a.dead) != (b.claims, b.acked, b.dead)


@pytest.mark.parametrize("jobs", [1, 2, 3, 4, 5])
def test_demo_settles_every_job_of_tiny_runs(jobs):
    # The showcase jobs come first: one stuck (cancelled), one slow (timed out), one
    # poison (dead-lettered), one flaky (retried), as many as there are jobs.
    summary, output = run_in_virtual_time(jobs=jobs, workers=2)
    assert_summary_adds_up(output, jobs=jobs)
    assert summary.live == 0
    assert len(summary.cancelled) == 1
    assert summary.lease_lost == 0  # R15: the cancel reached the handler
    assert summary.timed_out == (jobs >= 2)
    assert len(summary.dead) == (jobs >= 3)


def test_demo_on_a_terminal_redraws_a_coloured_bar_in_place(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    summary, output = run_in_virtual_time(jobs=60, out=FakeTerminal(), environ={"TERM": "xterm"})
    assert output.count("\x1b[?25l") == output.count("\x1b[?25h") == 1  # cursor hidden, back
    assert "\r\x1b[2K" in output  # the bar line is cleared and redrawn
    assert SGR.search(output)
    plain = SGR.sub("", output)
    # The last bar stays on screen, full; notable lines are printed above the bar.
    last = f"60/60 done, {summary.retried} retried, {len(summary.dead)} dead, 0 in flight, "
    assert f"[{'#' * BAR_CELLS}] {last}" in plain
    assert re.search(r"\r\x1b\[2Kcancel: +job \d+ has hung", plain)
    for kind in NOTABLE:
        assert any(NOTABLE[kind].match(line.rpartition("\x1b[2K")[2]) for line in plain.split("\n"))


def test_demo_with_no_color_keeps_the_live_bar_without_colour(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    environ = {"TERM": "xterm", "NO_COLOR": "1"}
    _, output = run_in_virtual_time(jobs=60, out=FakeTerminal(), environ=environ)
    assert "\r\x1b[2K" in output
    assert not SGR.search(output)


@pytest.mark.parametrize(
    ("terminal", "environ"),
    [
        pytest.param(True, {"TERM": "dumb"}, id="dumb-terminal"),
        pytest.param(False, {"TERM": "xterm"}, id="pipe"),
    ],
)
def test_demo_prints_plain_progress_lines_on_a_dumb_terminal_or_a_pipe(terminal, environ):
    out = FakeTerminal() if terminal else io.StringIO()
    _, output = run_in_virtual_time(jobs=60, out=out, environ=environ)
    assert ESCAPE not in output
    assert re.search(r"^progress: +60/60 settled, 5\d acked, ", output, re.MULTILINE)


def test_demo_prints_at_most_so_many_lines_of_a_kind_then_says_so(monkeypatch):
    monkeypatch.setattr("alkstore_trio._demo.MAX_LINES_PER_KIND", 3)
    summary, output = run_in_virtual_time(jobs=120)
    retry_lines = [line for line in output.splitlines() if line.startswith("retry:")]
    assert summary.retried > 4
    assert len(retry_lines) == 4
    assert retry_lines[-1].endswith(
        "(more retry lines are counted in the progress and the summary)"
    )


def test_demo_leaves_logging_as_it_found_it(capsys):
    package = logging.getLogger("alkstore_trio")
    handlers, propagate = list(package.handlers), package.propagate
    run_in_virtual_time(jobs=30)
    assert (package.handlers, package.propagate) == (handlers, propagate)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("options", [{"jobs": 0}, {"workers": 0}], ids=["jobs", "workers"])
def test_demo_rejects_counts_below_1(options):
    with pytest.raises(InvalidArgument, match="must be >= 1"):
        run_in_virtual_time(**options)


def test_demo_interrupted_raises_a_bare_keyboard_interrupt_and_gives_the_cursor_back(
    monkeypatch,
):
    # Ctrl-C lands in one of the demo's tasks; the command catches a bare
    # KeyboardInterrupt (not a group of one) to print "interrupted" and exit 130.
    async def interrupted(job):
        raise KeyboardInterrupt

    monkeypatch.setattr("alkstore_trio._demo._handler", interrupted)
    out = FakeTerminal()
    with pytest.raises(KeyboardInterrupt):
        run_in_virtual_time(jobs=5, out=out, environ={"TERM": "xterm"})
    assert out.getvalue().endswith("\n\x1b[?25h")
