"""Delay jobs, reschedule one, run another now: a Worker starts each when it is due.

A job enqueued with ``delay_s`` (or ``run_at``) waits in its queue until then; a
``Worker`` starts it at that moment (R11), however long its re-poll interval: the wake
of the enqueue said when the job is due. ``queue.reschedule`` moves a pending job to a
new time or priority, and ``delay_s=0`` runs it now (the CLI's ``alkstore-trio jobs
reschedule ID --now``).

To run a day of reminders in a blink, the store's clock and trio's clock are one mock
clock here (``TrioClock`` under ``trio.testing.MockClock``): time jumps ahead whenever
every task waits. With a real store, leave the clock alone and the same code waits for
real. Run it with ``python examples/delay_and_reschedule.py``.
"""

import trio
import trio.testing

import alkstore_trio
from alkstore_trio import Job, Worker
from alkstore_trio.testing import TrioClock

HOUR = 3600.0


async def main() -> None:
    async with alkstore_trio.open_store("memory://", clock=TrioClock()) as store:
        reminders = store.queue("reminders")
        t0 = trio.current_time()
        started: dict[str, float] = {}
        all_started = trio.Event()

        async def remind(job: Job) -> None:
            started[job.payload.decode()] = (trio.current_time() - t0) / HOUR
            if len(started) == 4:
                all_started.set()

        worker = Worker(store, {reminders: remind}, poll_interval_s=30)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await reminders.enqueue(b"stand-up in 10 minutes", delay_s=600)
            tomorrow = await reminders.enqueue(b"renew the certificate", delay_s=24 * HOUR)
            moved = await reminders.enqueue(b"call the bank", delay_s=5 * HOUR)
            assert await reminders.reschedule(moved, delay_s=2 * HOUR)  # sooner
            urgent = await reminders.enqueue(b"rotate the leaked key", delay_s=7 * 24 * HOUR)
            assert await reminders.reschedule(urgent, delay_s=0)  # run it now
            assert await reminders.reschedule(tomorrow, priority=10)  # same time
            await all_started.wait()
            worker.stop()
    for text, hours in sorted(started.items(), key=lambda item: item[1]):
        print(f"after {hours:6.2f} h: {text}")
    assert round(started["rotate the leaked key"], 3) == 0
    assert round(started["stand-up in 10 minutes"], 3) == round(600 / HOUR, 3)
    assert round(started["call the bank"], 3) == 2
    assert round(started["renew the certificate"], 3) == 24


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
