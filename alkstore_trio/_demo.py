"""The ``alkstore-trio demo``: a few hundred jobs through a real, supervised
:class:`~alkstore_trio.Worker` on the embedded in-memory engine, with a live display.

What it shows, in a few seconds. Jobs are enqueued with mixed priorities and small
delays, and one :class:`Worker` runs them (its listener, re-poll timer and sweeper under
its supervisor, a job actor per claim, a heartbeat actor beside each long handler).
Most handlers succeed; some raise :class:`Retry` once or twice (a *flaky* job), some
always raise (a *poison* job: dead-lettered when its attempts run out), some raise
:class:`Fail` at once (a *malformed* job). Two jobs are there to show the runtime's
safety nets: a *slow* job whose first attempt runs past ``job_timeout_s`` (the worker
cancels the handler and retries the job), and a *stuck* job whose handler hangs until
the demo, acting as an operator, cancels it with ``queue.cancel()``; the cancel's
announcement reaches the worker at once, which cancels the handler and records the job
cancelled (R15).

The display follows :meth:`Worker.events`: each retry, dead-letter, timeout, cancel,
stopped handler, lease loss or release is one line, printed above a progress bar redrawn
in place (when the output is a terminal; otherwise a plain ``progress:`` line every half
second). It uses nothing but ANSI escapes: no colours when ``NO_COLOR`` is set (no-
color.org), and plain lines when ``TERM=dumb`` or the output is not a terminal.

Why the engine runs on trio's clock. The store is opened with a clock that reads
:func:`trio.current_time` (offset to the wall clock at the start), so the enqueue delays,
retry delays and leases follow the same clock as the worker's timers. With the real
clock nothing changes; under :class:`trio.testing.MockClock` the whole demo runs in
virtual time, which is how the tests run it in milliseconds.

Which job does what is drawn from ``random.Random(seed)``, and every outcome depends only
on the job's kind and attempt, so every count in the summary is the same for the same
``jobs`` and ``seed`` whatever the concurrency (only the wall time and the throughput
vary). The two timed outcomes have wide margins: the slow job's 10 s of work against a
1 s ``job_timeout_s``, and the stuck job cancelled at its first heartbeat (0.25 s) and
stopped at once, long before its own timeout.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final, TextIO

import trio

from ._core import QueueOpts
from ._errors import InvalidArgument
from ._open import open_store
from ._runtime import Fail, Retry, Worker

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from ._core import Job
    from ._runtime import WorkerEvent
    from ._store import Queue

#: The queue the demo uses.
QUEUE_NAME: Final = "demo"
#: Attempts each job gets; a poison job is dead-lettered after this many.
MAX_ATTEMPTS: Final = 3
#: The worker's re-poll interval: delayed jobs and retries become due without a wake.
POLL_INTERVAL_S: Final = 0.05
#: The delay a flaky job asks for when it retries.
RETRY_DELAY_S: Final = 0.1
#: The queue's backoff base: 0, so the retries nobody chose a delay for (poison jobs and
#: the timed-out attempt) run again at once (the curve draws whole seconds, Q5).
BACKOFF_BASE_S: Final = 0.0
#: Enqueue delays are drawn from ``[0, MAX_DELAY_S]``.
MAX_DELAY_S: Final = 0.5
#: What a handler "does": most jobs take this long.
WORK_S: Final = 0.001
#: The worker's ``job_timeout_s``; the slow job's first attempt runs past it.
JOB_TIMEOUT_S: Final = 1.0
#: How long the slow job's first attempt would take if nothing stopped it.
SLOW_WORK_S: Final = 10 * JOB_TIMEOUT_S
#: The worker's ``heartbeat_interval_s``. Heartbeats start once a handler has run this
#: long; the demo cancels the stuck job at its first one, the next is refused.
HEARTBEAT_INTERVAL_S: Final = 0.25
#: The queue's ``visibility_timeout_s`` (the heartbeats renew it).
VISIBILITY_TIMEOUT_S: Final = 5.0

#: The demo gives up (``trio.TooSlowError``) if its jobs have not settled by then
#: (:data:`TIMEOUT_S`, plus :data:`TIMEOUT_PER_JOB_S` per job for big runs).
TIMEOUT_S: Final = 60.0
TIMEOUT_PER_JOB_S: Final = 0.002

#: ``last_error`` of a poison job (its handler always raises; it dies at its last attempt).
POISON_ERROR: Final = "RuntimeError: poison job: handler always raises"
#: ``last_error`` of a job whose handler gives up at once with ``Fail``.
MALFORMED_ERROR: Final = "malformed payload: Fail() without retrying"

#: Notable lines of one kind printed before the rest are only counted (big runs).
MAX_LINES_PER_KIND: Final = 30
#: Seconds between redraws of the progress bar on a terminal.
LIVE_REFRESH_S: Final = 0.1
#: Seconds between ``progress:`` lines when the output is not a terminal.
PLAIN_PROGRESS_S: Final = 0.5
#: Cells of the progress bar.
BAR_CELLS: Final = 20

#: The label of each kind of notable line, and its ANSI colour (SGR parameters).
_STYLES: Final = {
    "retry": "33",
    "dead": "31",
    "timeout": "35",
    "cancel": "36",
    "stopped": "36",
    "lease lost": "36",
    "release": "34",
    "error": "1;31",
    "progress": "2",
}
#: Worker events shown as an "error" line (the demo expects none).
_ERROR_KINDS: Final = frozenset({"engine_error", "sweep_failed", "finalize_incomplete"})


@dataclass
class DemoSummary:
    """What the demo did. Every count is deterministic for ``jobs`` and ``seed``.

    Attributes:
        jobs: Jobs enqueued.
        seed: The seed the job mix was drawn from.
        concurrency: The most handlers the worker ran at once (``--workers``).
        claims: Jobs claimed (each claim ends in exactly one ack, retry, dead-letter,
            cancel or lost lease, so ``claims == acked + retried + len(dead) +
            len(cancelled) + lease_lost``).
        acked: Jobs finished successfully.
        retried: Claims that ended in a retry back to pending (timeouts included).
        timed_out: Handlers cancelled by ``job_timeout_s`` (each then retried).
        dead: Dead-lettered jobs, as ``(job id, last_error)`` in id order.
        cancelled: Jobs the demo cancelled while their handler ran, in id order.
        lease_lost: Claims the worker found lost (a refused heartbeat).
        live: Jobs still pending or processing after the worker stopped (0 unless
            something is wrong: every job must be acked, dead-lettered or cancelled).
        wall_s: Seconds from the first enqueue to the last job settled.
    """

    jobs: int
    seed: int
    concurrency: int
    claims: int = 0
    acked: int = 0
    retried: int = 0
    timed_out: int = 0
    dead: list[tuple[int, str]] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    lease_lost: int = 0
    live: int = 0
    wall_s: float = 0.0

    @property
    def settled(self) -> int:
        """Jobs that reached an end: acked, dead-lettered or cancelled."""
        return self.acked + len(self.dead) + len(self.cancelled)


class _TrioClock:
    """The in-memory engine's clock, reading trio's: the wall clock at creation, moved
    on by :func:`trio.current_time` (see the module docstring for why)."""

    def __init__(self) -> None:
        self._origin = datetime.now(UTC) - timedelta(seconds=trio.current_time())

    def now(self) -> datetime:
        return self._origin + timedelta(seconds=trio.current_time())


def _job_mix(jobs: int, rng: random.Random) -> list[str]:
    """The kind of each job: mostly ``ok``; some ``flaky1``/``flaky2`` (retry once or
    twice), a few ``poison`` (always raise) and ``malformed`` (``Fail`` at once); and one
    ``stuck`` and one ``slow`` job, plus at least one poison and one flaky job, placed at
    random (as many of those four as there are jobs)."""
    kinds = []
    for _ in range(jobs):
        roll = rng.random()
        if roll < 0.01:
            kind = "poison"
        elif roll < 0.02:
            kind = "malformed"
        elif roll < 0.06:
            kind = f"flaky{rng.randint(1, MAX_ATTEMPTS - 1)}"
        else:
            kind = "ok"
        kinds.append(kind)
    showcase = ("stuck", "slow", "poison", "flaky1")
    positions = rng.sample(range(jobs), min(jobs, len(showcase)))
    for position, kind in zip(positions, showcase, strict=False):
        kinds[position] = kind
    return kinds


async def _handler(job: Job) -> None:
    """The demo's handler: what it does depends on the job's kind (its payload is
    ``b"kind:number"``) and attempt."""
    kind = job.payload.decode().partition(":")[0]
    attempt = job.attempts
    if kind == "stuck":
        # A call that hangs; only the cancel of a lost lease ends it.
        await trio.sleep_forever()
    if kind == "slow" and attempt == 1:
        await trio.sleep(SLOW_WORK_S)  # job_timeout_s cancels it first
    await trio.sleep(WORK_S)
    if kind.startswith("flaky") and attempt <= int(kind.removeprefix("flaky")):
        raise Retry(delay_s=RETRY_DELAY_S, error=f"flaky job: failed attempt {attempt}")
    if kind == "poison":
        raise RuntimeError(POISON_ERROR.removeprefix("RuntimeError: "))
    if kind == "malformed":
        raise Fail(MALFORMED_ERROR)


def _display_modes(out: TextIO, environ: Mapping[str, str]) -> tuple[bool, bool]:
    """``(live, color)``: redraw a bar in place only on a terminal that is not
    ``TERM=dumb``; colour only then, and only if ``NO_COLOR`` is unset or empty."""
    isatty = getattr(out, "isatty", None)
    live = bool(isatty and isatty()) and environ.get("TERM", "") != "dumb"
    return live, live and not environ.get("NO_COLOR", "")


@dataclass(frozen=True)
class _Progress:
    settled: int
    acked: int
    retried: int
    dead: int
    in_flight: int
    elapsed_s: float


class _Display:
    """Writes the notable lines and the progress, live (a bar redrawn in place with
    ANSI escapes) or plain (lines only). Never blocks: it only writes to ``out``."""

    def __init__(self, out: TextIO, *, jobs: int, live: bool, color: bool) -> None:
        self._out = out
        self._jobs = jobs
        self._live = live
        self._color = color
        self._shown: Counter[str] = Counter()
        encoding = (getattr(out, "encoding", None) or "").lower().replace("-", "")
        self._cells = ("█", "░") if live and encoding.startswith("utf") else ("#", "-")

    def _paint(self, text: str, label: str) -> str:
        return f"\x1b[{_STYLES[label]}m{text}\x1b[0m" if self._color else text

    def start(self, header: str) -> None:
        self._out.write(header + "\n")
        if self._live:
            self._out.write("\x1b[?25l")  # hide the cursor while the bar is redrawn
        self._out.flush()

    def line(self, label: str, text: str, progress: _Progress) -> None:
        """One notable line (above the bar); after :data:`MAX_LINES_PER_KIND` of a kind
        one line says the rest are only counted."""
        self._shown[label] += 1
        count = self._shown[label]
        if count > MAX_LINES_PER_KIND + 1:
            return
        if count > MAX_LINES_PER_KIND:
            text = f"(more {label} lines are counted in the progress and the summary)"
        head = self._paint(f"{label + ':':<11}", label)
        if self._live:
            self._out.write("\r\x1b[2K")
        self._out.write(f"{head} {text}\n")
        if self._live:
            self._write_bar(progress)
        self._out.flush()

    def tick(self, progress: _Progress) -> None:
        """A periodic refresh: redraw the bar, or print a ``progress:`` line."""
        if self._live:
            self._out.write("\r\x1b[2K")
            self._write_bar(progress)
        else:
            head = self._paint(f"{'progress:':<11}", "progress")
            self._out.write(f"{head} {self._counts(progress)}\n")
        self._out.flush()

    def close(self, progress: _Progress) -> None:
        """The last progress, kept on screen; the cursor back."""
        self.tick(progress)
        if self._live:
            self._out.write("\n\x1b[?25h")
        self._out.flush()

    def abort(self) -> None:
        """Leave the terminal usable after an error or Ctrl-C."""
        if self._live:
            self._out.write("\n\x1b[?25h")
            self._out.flush()

    def _counts(self, p: _Progress) -> str:
        rate = p.settled / p.elapsed_s if p.elapsed_s > 0 else 0.0
        return (
            f"{p.settled}/{self._jobs} settled, {p.acked} acked, {p.retried} retried, "
            f"{p.dead} dead, {p.in_flight} in flight, {rate:.0f} jobs/s"
        )

    def _write_bar(self, p: _Progress) -> None:
        filled = BAR_CELLS * p.settled // self._jobs
        done, todo = self._cells
        rate = p.settled / p.elapsed_s if p.elapsed_s > 0 else 0.0
        parts = [
            f"{p.settled}/{self._jobs} done",
            f"{p.retried} retried",
            f"{p.dead} dead",
            f"{p.in_flight} in flight",
            f"{rate:.0f} jobs/s",
        ]
        # A bar line that wraps cannot be redrawn in place: keep the counts that fit.
        room = shutil.get_terminal_size().columns - 1 - (BAR_CELLS + 3)
        while parts and len(", ".join(parts)) > room:
            parts.pop()
        bar = f"\x1b[32m{done * filled}\x1b[0m" if self._color else done * filled
        self._out.write(f"[{bar}{todo * (BAR_CELLS - filled)}] {', '.join(parts)}")


def _attempt(job: Job) -> str:
    return f"job {job.id} attempt {job.attempts}/{job.max_attempts}"


class _Run:
    """One run of the demo: follows the worker's events, plays the operator (cancels
    the stuck job once its first heartbeat shows it has been running a while), stops
    the worker once every job is settled, and feeds the display."""

    def __init__(
        self, jobs: int, queue: Queue, worker: Worker, display: _Display, clock: _TrioClock
    ) -> None:
        self.jobs = jobs
        self.queue = queue
        self.worker = worker
        self.display = display
        self.clock = clock
        #: The stuck jobs' ids (registered by the producer once enqueued).
        self.stuck: set[int] = set()
        #: Jobs the operator cancelled, and those of them whose lease loss was seen.
        self.cancelled: set[int] = set()
        self.cancel_seen: set[int] = set()
        #: ``(job id, attempt)`` of timeouts: their retry line is folded into the timeout's.
        self.timeouts: set[tuple[int, int]] = set()
        self.started_at = 0.0
        #: Set once every job is settled (and the worker asked to stop).
        self.settled = False
        self.wall_s = 0.0

    def progress(self) -> _Progress:
        stats = self.worker.statistics()
        return _Progress(
            settled=stats.acked + stats.dead_lettered + len(self.cancel_seen),
            acked=stats.acked,
            retried=stats.retried,
            dead=stats.dead_lettered,
            in_flight=stats.in_flight,
            elapsed_s=self.wall_s if self.settled else trio.current_time() - self.started_at,
        )

    async def follow(
        self, events: trio.MemoryReceiveChannel[WorkerEvent], refresher: trio.CancelScope
    ) -> None:
        """Handle every event until the stream ends (after ``worker_stop``)."""
        async for event in events:
            await self._on_event(event)
            if not self.settled and self.progress().settled >= self.jobs:
                self.settled = True
                self.wall_s = trio.current_time() - self.started_at
                self.worker.stop()
        refresher.cancel()

    async def refresh(self, interval_s: float, scope: trio.CancelScope) -> None:
        """Redraw the progress every ``interval_s`` until ``scope`` is cancelled."""
        with scope:
            while True:
                await trio.sleep(interval_s)
                self.display.tick(self.progress())

    async def _on_event(self, event: WorkerEvent) -> None:
        job = event.job
        if job is None:
            if event.kind in _ERROR_KINDS:
                self.display.line("error", event.message, self.progress())
            return
        kind, key = event.kind, (job.id, job.attempts)
        if kind == "heartbeat" and job.id in self.stuck and job.id not in self.cancelled:
            await self._cancel_stuck(job)
        elif kind == "timeout":
            self.timeouts.add(key)
            # At the last attempt the retry is a dead-letter, which gets its own line.
            then = "job retried" if job.attempts < job.max_attempts else "job dead-lettered"
            text = f"{_attempt(job)}: {event.error}; handler cancelled, {then}"
            self.display.line("timeout", text, self.progress())
        elif kind == "retry" and key in self.timeouts:
            self.timeouts.discard(key)
        elif kind == "retry":
            # No delay of its own: the queue's backoff, which is 0 here.
            when = "at once" if event.delay_s is None else f"in {event.delay_s:g} s"
            text = f"{_attempt(job)} failed: {event.error}; it runs again {when}"
            self.display.line("retry", text, self.progress())
        elif kind == "dead":
            text = f"{_attempt(job)} dead-lettered: {event.error}"
            self.display.line("dead", text, self.progress())
        elif kind == "cancelled":  # R15: the handler stopped; the job is recorded cancelled
            self.cancel_seen.add(job.id)
            after = "" if event.latency_s is None else f" {event.latency_s:.2f} s"
            text = f"{_attempt(job)}: handler stopped{after} after the cancel; job cancelled"
            self.display.line("stopped", text, self.progress())
        elif kind == "lease_lost":
            self.display.line("lease lost", f"{_attempt(job)}: {event.message}", self.progress())
        elif kind == "release":
            text = f"{_attempt(job)} released: {event.error}"
            self.display.line("release", text, self.progress())
        elif kind in _ERROR_KINDS:
            self.display.line("error", f"{_attempt(job)}: {event.message}", self.progress())

    async def _cancel_stuck(self, job: Job) -> None:
        """The operator's move: the stuck job, still running at its first heartbeat, is
        cancelled (Q19.5); the worker stops its handler at once (R15)."""
        assert job.claimed_at is not None
        running_s = (self.clock.now() - job.claimed_at).total_seconds()
        if not await self.queue.cancel(job.id):
            return
        self.cancelled.add(job.id)
        text = (
            f"job {job.id} has hung for {running_s:.2f} s: the operator cancels it (queue.cancel)"
        )
        self.display.line("cancel", text, self.progress())


async def run_demo(
    *,
    jobs: int = 300,
    seed: int = 0,
    workers: int = 4,
    out: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> DemoSummary:
    """Run the demo on a fresh in-memory store, showing it on ``out``, and return its
    summary (the caller prints :func:`format_summary`).

    Args:
        jobs: How many jobs to enqueue (>= 1).
        seed: Seeds the job mix, priorities and delays.
        workers: The most handlers the worker runs at once, its ``concurrency`` (>= 1).
        out: Where the header, the notable lines and the progress go (default
            ``sys.stdout``); a live bar only if it is a terminal.
        environ: Where ``NO_COLOR`` and ``TERM`` are read (default ``os.environ``).

    Raises:
        InvalidArgument: ``jobs`` or ``workers`` is below 1 (a ``ValueError``).
        trio.TooSlowError: the jobs did not settle within :data:`TIMEOUT_S` (plus
            :data:`TIMEOUT_PER_JOB_S` per job): a bug.
    """
    if jobs < 1 or workers < 1:
        raise InvalidArgument(f"jobs and workers must be >= 1; got jobs={jobs}, workers={workers}")
    out = sys.stdout if out is None else out
    live, color = _display_modes(out, os.environ if environ is None else environ)
    display = _Display(out, jobs=jobs, live=live, color=color)
    rng = random.Random(seed)
    kinds = _job_mix(jobs, rng)
    opts = QueueOpts(
        visibility_timeout_s=VISIBILITY_TIMEOUT_S,
        max_attempts=MAX_ATTEMPTS,
        backoff_base_s=BACKOFF_BASE_S,
    )
    summary = DemoSummary(jobs=jobs, seed=seed, concurrency=workers)
    clock = _TrioClock()
    display.start(
        f"alkstore-trio demo: in-memory engine, seed {seed}, {jobs} jobs, "
        f"1 supervised Worker, concurrency {workers}"
    )
    completed = False
    try:
        with _worker_logs_muted():
            async with open_store("memory://", clock=clock, rng=random.Random(seed)) as store:
                queue = store.queue(QUEUE_NAME, opts)
                worker = Worker(
                    store,
                    {queue: _handler},
                    concurrency=workers,
                    worker_id="demo",
                    poll_interval_s=POLL_INTERVAL_S,
                    heartbeat_interval_s=HEARTBEAT_INTERVAL_S,
                    job_timeout_s=JOB_TIMEOUT_S,
                    shutdown_grace_s=JOB_TIMEOUT_S,
                )
                run = _Run(jobs, queue, worker, display, clock)
                ids: list[int] = []
                # A guard, not a timing: the default run settles in about 1.5 s.
                with (
                    trio.fail_after(TIMEOUT_S + TIMEOUT_PER_JOB_S * jobs),
                    worker.events(buffer=None) as events,
                ):
                    async with trio.open_nursery() as nursery:
                        await nursery.start(worker.run)
                        refresher = trio.CancelScope()
                        run.started_at = trio.current_time()
                        nursery.start_soon(run.follow, events, refresher)
                        interval_s = LIVE_REFRESH_S if live else PLAIN_PROGRESS_S
                        nursery.start_soon(run.refresh, interval_s, refresher)
                        ids = await _enqueue_mix(queue, kinds, rng, run.stuck)
                display.close(run.progress())
                completed = True
                await _summarize(summary, worker, run, queue, ids)
    except BaseExceptionGroup as group:
        # Ctrl-C lands in one of the nursery's tasks; re-raise it bare, as the command
        # expects (it prints "interrupted" and exits with 130).
        if group.subgroup(KeyboardInterrupt) is not None:
            raise KeyboardInterrupt from group
        raise
    finally:
        if not completed:
            display.abort()
    return summary


async def _enqueue_mix(
    queue: Queue, kinds: list[str], rng: random.Random, stuck: set[int]
) -> list[int]:
    """Enqueue one job per kind, with a random priority and delay; the ids, in order
    (the stuck ones also go into ``stuck``)."""
    ids: list[int] = []
    for number, kind in enumerate(kinds):
        job_id = await queue.enqueue(
            f"{kind}:{number}".encode(),
            priority=rng.randint(0, 9),
            delay_s=round(rng.uniform(0, MAX_DELAY_S), 3),
        )
        ids.append(job_id)
        if kind == "stuck":
            stuck.add(job_id)
    return ids


async def _summarize(
    summary: DemoSummary, worker: Worker, run: _Run, queue: Queue, ids: list[int]
) -> None:
    """Fill the summary from the worker's statistics and the rows left behind."""
    stats = worker.statistics()
    summary.claims = stats.claimed
    summary.acked = stats.acked
    summary.retried = stats.retried
    summary.timed_out = stats.timed_out
    summary.lease_lost = stats.lease_lost
    summary.cancelled = sorted(run.cancelled)
    summary.wall_s = run.wall_s
    for job_id in ids:
        row = await queue.get_job(job_id)
        if row is None:
            continue
        if row.state == "dead":
            summary.dead.append((row.id, row.last_error or ""))
        else:
            summary.live += 1


@contextlib.contextmanager
def _worker_logs_muted() -> Iterator[None]:
    """Keep the library's log records off the screen while the demo runs: the display
    already shows every event, and without a handler Python's last resort would print the
    warnings (the poison jobs' tracebacks) on stderr as well."""
    logger = logging.getLogger("alkstore_trio")
    handler = logging.NullHandler()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def format_summary(summary: DemoSummary) -> str:
    """The summary as a few readable lines (the acceptance tests read them)."""
    rate = summary.settled / summary.wall_s if summary.wall_s > 0 else math.inf
    lines = [
        f"alkstore-trio demo: done in {summary.wall_s:.2f} s",
        f"  enqueued:      {summary.jobs}",
        f"  claims:        {summary.claims}",
        f"  acked:         {summary.acked}",
        f"  retried:       {summary.retried}",
        f"  timed out:     {summary.timed_out}",
        f"  dead-lettered: {len(summary.dead)}",
    ]
    by_error = Counter(error for _, error in summary.dead)
    for error, count in sorted(by_error.items()):
        ids = ", ".join(str(job_id) for job_id, e in summary.dead if e == error)
        lines.append(f"    {count} x {error!r} (job ids {ids})")
    lines += [
        f"  cancelled:     {len(summary.cancelled)}",
        f"  lease lost:    {summary.lease_lost}",
        f"  wall time:     {summary.wall_s:.2f} s",
        f"  throughput:    {rate:.0f} jobs/s",
    ]
    if summary.live == 0 and summary.settled == summary.jobs:
        lines.append(
            f"every job settled: {summary.acked} acked + {len(summary.dead)} dead-lettered "
            f"+ {len(summary.cancelled)} cancelled = {summary.jobs} enqueued; none lost"
        )
    else:
        lines.append(
            f"NOT SETTLED: {summary.live} job(s) still pending or processing, "
            f"{summary.settled} of {summary.jobs} settled (a bug: please report it)"
        )
    return "\n".join(lines)
