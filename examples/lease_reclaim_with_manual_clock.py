"""A lease lapsing and being reclaimed, driven by a manual clock (no sleeping).

Worker A claims a job, heartbeats once, then goes silent (as if its process died). When
its lease lapses, worker B reclaims the job (a reclaim consumes an attempt); A's late ack
is refused. B goes silent too; with its attempts spent, the job is dead-lettered by the
next claim's pre-claim sweep.

Run it with ``python examples/lease_reclaim_with_manual_clock.py``.
"""

import trio

import alkstore_trio
from alkstore_trio.testing import ManualClock


async def main() -> None:
    clock = ManualClock()  # starts at 2000-01-01T00:00:00Z
    async with alkstore_trio.open_store("memory://", clock=clock) as store:
        opts = alkstore_trio.QueueOpts(visibility_timeout_s=30, max_attempts=2)
        reports = store.queue("reports", opts)
        job_id = await reports.enqueue(b"monthly report")

        a = await reports.claim_one("worker-a")
        assert a is not None
        assert a.job.attempts == 1
        print("A claimed job", a.id, "lease until", a.job.claim_expires_at)

        clock.advance(20)
        assert await a.heartbeat()  # deadline is now t=20 + 30 = t=50
        clock.advance(30)  # t=50: exactly at the deadline, the claim is still valid
        assert await reports.claim_one("worker-b") is None

        clock.advance(1)  # t=51: the lease lapsed
        b = await reports.claim_one("worker-b")
        assert b is not None
        assert b.id == job_id
        assert b.job.attempts == 2
        print("B reclaimed job", b.id, "attempt", b.job.attempts)

        assert await a.ack() is False  # A's claim token (attempts=1) is stale
        print("A's late ack was refused")

        clock.advance(31)  # B's lease lapses too; no attempts are left
        assert await reports.claim_one("worker-c") is None  # the pre-claim sweep ran
        job = await reports.get_job(job_id)
        assert job is not None
        assert job.state == "dead"
        assert job.last_error == "max attempts exceeded"
        print(f"job {job.id} is {job.state}: {job.last_error!r}, last held by {job.claimed_by}")


if __name__ == "__main__":
    trio.run(main)
