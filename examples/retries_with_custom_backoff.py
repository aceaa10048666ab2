"""Retries with your own backoff policy, a permanent failure, and the dead-letter queue.

The ``charge`` handler below calls a payment gateway that sometimes times out. It does
not let the queue pick the retry delay: it computes its own, exponential with full
jitter (``uniform(0, min(cap, base * 2 ** (attempt - 1)))``, from ``job.attempts``), and
raises ``Retry(delay_s=..., error=...)``. A payload that can never succeed raises
``Fail``: dead-lettered at once, its remaining attempts unused. A job that keeps timing
out is dead-lettered by its last ``Retry`` (``max_attempts``), with the gateway's error
as ``last_error``. Then the dead-letter queue is read back with ``list_jobs("dead")``,
the gateway is "fixed", and the timed-out job is redriven with ``requeue_dead``.

No real waiting: the store runs on a ``ManualClock``, and a small driver moves it
straight to the next retry's ``run_at`` whenever the worker has nothing to do, so the
backoff's seconds of store time take no real time. The jitter is seeded, so
each job's delays are the same on every run; the asserts make the script fail loudly if the
behaviour changes.

Run it with ``python examples/retries_with_custom_backoff.py``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import timedelta

import trio

from alkstore_trio import (
    Fail,
    Job,
    Queue,
    QueueOpts,
    Retry,
    Store,
    Worker,
    WorkerEvent,
    open_store,
)
from alkstore_trio.testing import ManualClock

MAX_ATTEMPTS = 4


class GatewayTimeout(Exception):
    """The payment gateway did not answer in time (worth retrying)."""


@dataclass(frozen=True)
class FullJitterBackoff:
    """Exponential backoff with full jitter: after attempt ``n`` fails, wait a uniform
    random time in ``[0, min(cap_s, base_s * 2 ** (n - 1))]``, rounded to milliseconds.

    The random draw is seeded by ``(seed, job id, attempt)``, so a job's delays are the
    same on every run, whatever order the worker runs the handlers in.
    """

    base_s: float
    cap_s: float
    seed: int

    def ceiling_s(self, attempt: int) -> float:
        return min(self.cap_s, self.base_s * 2.0 ** (attempt - 1))

    def delay_s(self, job: Job) -> float:
        rng = random.Random(f"{self.seed}/{job.id}/{job.attempts}")
        return round(rng.uniform(0, self.ceiling_s(job.attempts)), 3)


@dataclass
class Gateway:
    """Stands for the payment provider: times out ``failures[order]`` times per order."""

    failures: dict[str, int]
    charged: list[str] = field(default_factory=list)

    async def charge(self, order: str, cents: int) -> None:
        await trio.lowlevel.checkpoint()
        if self.failures.get(order, 0) > 0:
            self.failures[order] -= 1
            raise GatewayTimeout(f"no answer for order {order} within 10s")
        self.charged.append(order)


class Charger:
    """The handler: ``async def __call__(job)``, with its gateway and backoff policy."""

    def __init__(self, gateway: Gateway, backoff: FullJitterBackoff) -> None:
        self.gateway = gateway
        self.backoff = backoff
        self.delays: dict[tuple[int, int], float] = {}  # (job id, attempt) -> delay

    async def __call__(self, job: Job) -> None:
        try:
            request = json.loads(job.payload)
            order, cents = str(request["order"]), int(request["cents"])
        except (ValueError, KeyError, TypeError):
            # Retrying cannot fix this payload: dead-letter it now.
            raise Fail("payload is not JSON with 'order' and 'cents'") from None
        if cents <= 0:
            raise Fail(f"refusing to charge {cents} cents for order {order}")
        try:
            await self.gateway.charge(order, cents)
        except GatewayTimeout as exc:
            delay = self.backoff.delay_s(job)
            self.delays[job.id, job.attempts] = delay
            # On the job's last attempt this dead-letters it, with this error.
            raise Retry(delay_s=delay, error=f"GatewayTimeout: {exc}") from None


async def drive_clock(
    clock: ManualClock,
    store: Store,
    queue: Queue,
    worker: Worker,
    charger: Charger,
    jobs: int,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Follow the worker's events. Whenever the worker is idle (every event read, no
    handler running, no job ready), jump the clock to the next job's ``run_at``. Stop the
    worker once ``jobs`` jobs are acked or dead."""
    settled = 0
    with worker.events(buffer=None) as events:
        task_status.started()
        async for event in events:
            if event.kind == "retry":
                await check_retry(clock, queue, charger, event)
            elif event.kind in ("ack", "dead"):
                settled += 1
                if settled == jobs:
                    worker.stop()
            if events.statistics().current_buffer_used or worker.statistics().in_flight:
                continue
            stats = (await store.stats(queue)).queue(queue.name)
            if stats is not None and stats.pending_ready == 0 and stats.pending_delayed:
                pending = await queue.list_jobs("pending")
                clock.set(min(job.run_at for job in pending))  # instead of sleeping


async def check_retry(
    clock: ManualClock, queue: Queue, charger: Charger, event: WorkerEvent
) -> None:
    """The job is pending again exactly ``delay`` seconds from now, within the policy."""
    assert event.job is not None
    delay = charger.delays[event.job.id, event.job.attempts]
    ceiling = charger.backoff.ceiling_s(event.job.attempts)
    assert 0 <= delay <= ceiling
    assert event.delay_s == delay
    job = await queue.get_job(event.job.id)
    assert job is not None
    assert job.state == "pending"
    assert job.run_at == clock.now() + timedelta(seconds=delay)
    print(
        f"  job {job.id} attempt {event.job.attempts}: {event.error}; "
        f"retry in {delay:.3f}s (ceiling {ceiling:g}s)"
    )


async def run_worker(
    clock: ManualClock, store: Store, queue: Queue, charger: Charger, jobs: int
) -> Worker:
    """Run a worker until ``jobs`` jobs are acked or dead."""
    # poll_interval_s is real time: how soon the worker finds a job made due by a jump.
    worker = Worker(store, {queue: charger}, worker_id="payments-1", poll_interval_s=0.01)
    async with trio.open_nursery() as nursery:
        await nursery.start(drive_clock, clock, store, queue, worker, charger, jobs)
        await nursery.start(worker.run)
    return worker


async def main() -> None:
    clock = ManualClock()
    start = clock.now()
    async with open_store("memory://", clock=clock) as store:
        payments = store.queue("payments", QueueOpts(max_attempts=MAX_ATTEMPTS))
        gateway = Gateway(failures={"A-1": 2, "A-2": 1_000})
        charger = Charger(gateway, FullJitterBackoff(base_s=2, cap_s=60, seed=7))
        ok, flaky, bad = await payments.enqueue_many(
            [
                b'{"order": "A-1", "cents": 1250}',  # two timeouts, then charged
                b'{"order": "A-2", "cents": 990}',  # times out on every attempt
                b'{"order": "A-3", "cents": -5}',  # can never succeed
            ]
        )

        print("running the worker:")
        worker = await run_worker(clock, store, payments, charger, jobs=3)
        stats = worker.statistics()
        elapsed = (clock.now() - start).total_seconds()
        print(
            f"acked {stats.acked}, retried {stats.retried}, dead-lettered "
            f"{stats.dead_lettered} in {elapsed:.3f}s of store time"
        )
        assert (stats.acked, stats.retried, stats.dead_lettered) == (1, 2 + 3, 2)
        assert gateway.charged == ["A-1"]
        assert await payments.get_job(ok) is None  # acked rows are deleted

        print("the dead-letter queue:")
        dead = await payments.list_jobs("dead")
        for job in dead:
            print(f"  job {job.id} after {job.attempts} attempt(s): {job.last_error}")
        assert [(job.id, job.attempts) for job in dead] == [(flaky, MAX_ATTEMPTS), (bad, 1)]
        assert dead[0].last_error == "GatewayTimeout: no answer for order A-2 within 10s"
        assert dead[1].last_error == "refusing to charge -5 cents for order A-3"

        print("the gateway is fixed: redriving the timed-out job")
        gateway.failures.clear()
        assert await payments.requeue_dead([flaky]) == 1
        worker = await run_worker(clock, store, payments, charger, jobs=1)
        assert worker.statistics().acked == 1
        assert gateway.charged == ["A-1", "A-2"]
        remaining = await payments.list_jobs("dead")
        assert [job.id for job in remaining] == [bad]
        print(f"charged {gateway.charged}; still dead: job {bad} ({remaining[0].last_error})")


if __name__ == "__main__":
    trio.run(main)
