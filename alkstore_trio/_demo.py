"""The ``alkstore-trio demo``: a few hundred jobs through the embedded in-memory engine.

It shows the whole job lifecycle in a few seconds: jobs enqueued with mixed priorities
and small delays; a handful of claimer tasks in one nursery that claim in batches and
block on a wake listener instead of spinning (with a short poll timeout as the safety
net for delayed jobs and retries, which send no wake); handlers that succeed, fail once
or twice and retry, always fail (a poison job, dead-lettered when its attempts run out),
or give up at once with ``fail()``.

The claim loop here is deliberately small; the worker runtime replaces it later. Which
job does what is drawn from ``random.Random(seed)``, so every count in the summary is the
same for the same seed (only the wall time and the throughput vary).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from ._core import QueueOpts
from ._open import open_store

if TYPE_CHECKING:
    from ._store import JobHandle, Queue, Store

#: The queue the demo uses.
QUEUE_NAME = "demo"
#: Attempts each job gets; a poison job is dead-lettered after this many.
MAX_ATTEMPTS = 3
#: Jobs claimed per ``claim_batch`` call.
BATCH_SIZE = 10
#: How long a claimer waits for a wake before it polls anyway (delayed jobs and retries
#: become due without a wake; this timeout picks them up).
POLL_TIMEOUT_S = 0.05
#: The delay of a retried job, so that the demo finishes in a few seconds.
RETRY_DELAY_S = 0.1
#: Enqueue delays are drawn from ``[0, MAX_DELAY_S]``.
MAX_DELAY_S = 0.5

#: The demo gives up (``trio.TooSlowError``) if its jobs have not settled by then.
TIMEOUT_S = 60.0

#: ``last_error`` of a poison job (it always fails, so it dies at its last attempt).
POISON_ERROR = "poison job: handler always raises"
#: ``last_error`` of a job whose handler gives up at once with ``fail()``.
MALFORMED_ERROR = "malformed payload: fail() without retrying"


@dataclass
class DemoSummary:
    """What the demo did. Every count is deterministic for a seed.

    Attributes:
        jobs: Jobs enqueued.
        seed: The seed the job mix was drawn from.
        workers: Claimer tasks that ran.
        claims: Job handles handed out (every claim ends in exactly one ack, retry or
            dead-letter, so ``claims == acked + retried + dead``).
        acked: Jobs finished successfully.
        retried: Claims that ended in a retry back to pending.
        dead: Dead-lettered jobs, as ``(job id, last_error)`` in id order.
        wall_s: Seconds from the first enqueue to the last job settled.
    """

    jobs: int
    seed: int
    workers: int
    claims: int = 0
    acked: int = 0
    retried: int = 0
    dead: list[tuple[int, str]] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def settled(self) -> int:
        """Jobs that reached an end: acked or dead-lettered."""
        return self.acked + len(self.dead)


def _job_mix(jobs: int, rng: random.Random) -> list[bytes]:
    """The payloads: mostly fine jobs, some flaky (fail 1-2 times first), a few poison
    (always fail) and a few malformed (``fail()`` at once)."""
    payloads = []
    for number in range(jobs):
        roll = rng.random()
        if roll < 0.03:
            kind = "poison"
        elif roll < 0.05:
            kind = "malformed"
        elif roll < 0.20:
            kind = f"flaky{rng.randint(1, MAX_ATTEMPTS - 1)}"
        else:
            kind = "ok"
        payloads.append(f"{kind}:{number}".encode())
    return payloads


async def _handle(handle: JobHandle) -> str:
    """Run one claimed job, report its outcome to the store and return it: ``"acked"``,
    ``"retried"``, ``"dead"``, or ``"refused"`` (the claim was no longer valid)."""
    kind = handle.job.payload.decode().partition(":")[0]
    attempt = handle.job.attempts
    await trio.sleep(0.001)  # the "work"
    if kind == "ok" or (kind.startswith("flaky") and attempt > int(kind.removeprefix("flaky"))):
        return "acked" if await handle.ack() else "refused"
    if kind == "malformed":
        return "dead" if await handle.fail(MALFORMED_ERROR) else "refused"
    error = POISON_ERROR if kind == "poison" else f"flaky job: failed attempt {attempt}"
    # At the job's last attempt, retry() dead-letters it with this error instead.
    if not await handle.retry(error, delay_s=RETRY_DELAY_S):
        return "refused"
    return "dead" if attempt >= handle.job.max_attempts else "retried"


async def _claimer(
    store: Store,
    queue: Queue,
    worker_id: str,
    summary: DemoSummary,
    tally: Counter[str],
    done: trio.CancelScope,
) -> None:
    """Claim until nothing is ready, then block on the wake listener (or the poll
    timeout); the claimer that settles the last job stops them all."""
    async with store.open_wake_listener([queue]) as listener:
        while True:
            handles = await queue.claim_batch(worker_id, BATCH_SIZE)
            summary.claims += len(handles)
            for handle in handles:
                tally[await _handle(handle)] += 1
            if tally["acked"] + tally["dead"] >= summary.jobs:
                done.cancel()
            if not handles:
                await listener.wait(POLL_TIMEOUT_S)


async def run_demo(*, jobs: int = 300, seed: int = 0, workers: int = 4) -> DemoSummary:
    """Run the demo on a fresh in-memory store and return its summary.

    Args:
        jobs: How many jobs to enqueue (>= 1).
        seed: Seeds the job mix, priorities and delays.
        workers: How many claimer tasks run concurrently (>= 1).

    Raises:
        ValueError: ``jobs`` or ``workers`` is below 1.
        trio.TooSlowError: the jobs did not settle within :data:`TIMEOUT_S` (a bug).
    """
    if jobs < 1 or workers < 1:
        raise ValueError(f"jobs and workers must be >= 1; got jobs={jobs}, workers={workers}")
    rng = random.Random(seed)
    summary = DemoSummary(jobs=jobs, seed=seed, workers=workers)
    payloads = _job_mix(jobs, rng)
    opts = QueueOpts(visibility_timeout_s=30, max_attempts=MAX_ATTEMPTS, backoff_base_s=0)
    tally: Counter[str] = Counter()
    started = time.perf_counter()
    async with open_store("memory://", rng=random.Random(seed)) as store:
        queue = store.queue(QUEUE_NAME, opts)
        # A guard, not a timing: the demo settles in about a second.
        with trio.fail_after(TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                for number in range(workers):
                    nursery.start_soon(
                        _claimer,
                        store,
                        queue,
                        f"demo-{number}",
                        summary,
                        tally,
                        nursery.cancel_scope,
                    )
                ids = [
                    await queue.enqueue(
                        payload,
                        priority=rng.randint(0, 9),
                        delay_s=round(rng.uniform(0, MAX_DELAY_S), 3),
                    )
                    for payload in payloads
                ]
        summary.wall_s = time.perf_counter() - started
        summary.acked = tally["acked"]
        summary.retried = tally["retried"]
        for job_id in ids:
            job = await queue.get_job(job_id)
            if job is not None and job.state == "dead":
                summary.dead.append((job.id, job.last_error or ""))
    return summary


def format_summary(summary: DemoSummary) -> str:
    """The summary as a few readable lines (the acceptance tests read them)."""
    rate = summary.settled / summary.wall_s if summary.wall_s > 0 else float("inf")
    lines = [
        f"alkstore-trio demo: in-memory engine, seed {summary.seed}, "
        f"{summary.workers} claimer task(s)",
        f"  enqueued:      {summary.jobs}",
        f"  claims:        {summary.claims}",
        f"  acked:         {summary.acked}",
        f"  retried:       {summary.retried}",
        f"  dead-lettered: {len(summary.dead)}",
    ]
    by_error = Counter(error for _, error in summary.dead)
    for error, count in sorted(by_error.items()):
        ids = ", ".join(str(job_id) for job_id, e in summary.dead if e == error)
        lines.append(f"    {count} x {error!r} (job ids {ids})")
    lines += [
        f"  wall time:     {summary.wall_s:.2f} s",
        f"  throughput:    {rate:.0f} jobs/s",
    ]
    return "\n".join(lines)
