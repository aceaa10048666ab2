"""Delay jobs, reschedule one, run another now: a Worker starts each when it is due.

A job enqueued with ``delay_s`` (or ``run_at``) waits in its queue until then; a
``Worker`` starts it at that moment (R11), however long its re-poll interval (30 s
here): the wake of the enqueue said when the job is due. ``queue.reschedule`` moves a
pending job to a new time or priority, and ``delay_s=0`` runs it now (the CLI's
``alkstore-trio jobs reschedule ID --now``). The delays are fractions of a second so
that the example is quick; hours and days work the same way.

Run it with ``python examples/delay_and_reschedule.py``.
"""

from datetime import UTC, datetime

import trio

import alkstore_trio
from alkstore_trio import Job, Worker


async def main() -> None:
    async with alkstore_trio.open_store("memory://") as store:
        reminders = store.queue("reminders")
        late_ms: dict[str, float] = {}
        three_started = trio.Event()

        async def remind(job: Job) -> None:
            late_ms[job.payload.decode()] = (datetime.now(UTC) - job.run_at).total_seconds() * 1e3
            if len(late_ms) == 3:
                three_started.set()

        worker = Worker(store, {reminders: remind}, poll_interval_s=30)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await reminders.enqueue(b"stand-up", delay_s=0.4)
            moved = await reminders.enqueue(b"call the bank", delay_s=5)
            assert await reminders.reschedule(moved, delay_s=0.2)  # sooner
            urgent = await reminders.enqueue(b"rotate the leaked key", delay_s=3600)
            assert await reminders.reschedule(urgent, delay_s=0)  # run it now
            tomorrow = await reminders.enqueue(b"renew the certificate", delay_s=86400)
            assert await reminders.reschedule(tomorrow, priority=10)  # same time
            await three_started.wait()
            worker.stop()
        job = await reminders.get_job(tomorrow)
        assert job is not None
        print(f"still waiting: job {job.id}, due {job.run_at:%Y-%m-%d %H:%M}, priority 10")
    for text, ms in late_ms.items():
        print(f"started {ms:5.1f} ms after it was due: {text}")
    assert list(late_ms) == ["rotate the leaked key", "call the bank", "stand-up"]
    assert all(ms < 1000 for ms in late_ms.values())


if __name__ == "__main__":
    trio.run(main)
