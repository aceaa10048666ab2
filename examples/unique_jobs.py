"""Unique jobs (Q15): at most one live job per (queue, unique key), and a throttle window.

A signup handler may run twice (a retried HTTP request, a double click); the welcome mail
must be sent once. The key ``welcome:<user id>`` makes the second enqueue find the first
job instead of making another. A nightly report uses ``unique_for_s`` so that it is
enqueued at most once a day, even after the job finished.

Run it with ``python examples/unique_jobs.py`` (in-memory, with a manual clock, so the
day passes at once).
"""

import trio

import alkstore_trio
from alkstore_trio.engine import MemoryEngine
from alkstore_trio.testing import ManualClock

DAY_S = 24 * 3600


async def on_signup(store: alkstore_trio.Store, user_id: int) -> alkstore_trio.Enqueued:
    """Enqueue the welcome mail of ``user_id``, once while it is pending or running."""
    mails = store.queue("mails")
    return await mails.enqueue(f"welcome {user_id}".encode(), unique_key=f"welcome:{user_id}")


async def main() -> None:
    clock = ManualClock()
    async with alkstore_trio.open_store(MemoryEngine(clock=clock)) as store:
        mails = store.queue("mails")

        first = await on_signup(store, 42)
        again = await on_signup(store, 42)  # the request was retried
        print(f"first: job {first}, created={first.created}")
        print(f"again: job {again}, created={again.created}")
        assert first.created
        assert not again.created
        assert again == first  # an Enqueued is the job id, an int

        # enqueue_many takes one key per payload: the duplicate in the batch, and the key
        # already held by job `first`, create nothing.
        batch = await mails.enqueue_many(
            [b"welcome 7", b"welcome 7", b"welcome 42", b"newsletter"],
            unique_keys=["welcome:7", "welcome:7", "welcome:42", None],
        )
        print("batch:", [(int(job), job.created) for job in batch])
        assert [job.created for job in batch] == [True, False, False, True]

        # The key frees when the job is done: a later signup mail can be enqueued again.
        handles = await mails.claim_batch("mailer", 10)
        assert await mails.ack_handles(handles) == [True] * 3
        assert (await on_signup(store, 42)).created

        # A window: the report is enqueued at most once per day, whatever became of it.
        reports = store.queue("reports")
        report = await reports.enqueue(b"nightly", unique_key="nightly", unique_for_s=DAY_S)
        handle = await reports.claim_one("reporter")
        assert handle is not None
        assert await handle.ack()
        refused = await reports.enqueue(b"nightly", unique_key="nightly", unique_for_s=DAY_S)
        print(f"report: job {report}; again after it ran: job {refused}, created={refused.created}")
        assert (refused, refused.created) == (report, False)
        clock.advance(DAY_S)
        tomorrow = await reports.enqueue(b"nightly", unique_key="nightly", unique_for_s=DAY_S)
        print(f"a day later: job {tomorrow}, created={tomorrow.created}")
        assert tomorrow.created


if __name__ == "__main__":
    trio.run(main)
