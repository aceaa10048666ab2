"""Waiting for a job's result (Q19.4): enqueue, wait, read what the handler returned.

A report service on PostgreSQL: a worker builds reports; "web requests" enqueue one and
wait for it with a deadline, as an endpoint that answers synchronously would:

- a report that is ready in time: ``queue.wait`` returns the job, ``completed``, with the
  handler's bytes in ``job.result``; it is woken by the notification the worker's ack
  sends, not by polling;
- a report that cannot be built: the wait returns the job ``dead``, with its
  ``last_error``;
- a request that gives up (``trio.move_on_after``): the wait ends, the job goes on, and
  a later wait finds it done;
- a job whose queue does not keep finished jobs: ``JobGone``, naming
  ``keep_completed_s``.

It needs a PostgreSQL server: set ``ALKSTORE_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/test``) and run
``python examples/wait_for_a_result.py``. It works in a schema of its own, created at the
start and dropped at the end.
"""

import os

import trio

import alkstore_trio
from alkstore_trio import Fail, Job, QueueOpts, Worker

DSN = os.environ.get("ALKSTORE_DSN", "postgresql://postgres@127.0.0.1:5432/test")
# A schema of this run's own (the pid keeps two runs apart), dropped at the end.
SCHEMA = f"example_wait_{os.getpid()}"
# Keep finished reports for an hour: a wait reads the job, so it must outlive its ack.
KEPT = QueueOpts(keep_completed_s=3600, max_attempts=1)


async def build_report(job: Job) -> bytes:
    """The handler: its return value is the job's result."""
    month = job.payload.decode()
    if month == "slow":
        await trio.sleep(0.5)  # stands for a report that takes a while
    if not month:
        raise Fail("which month? the payload is empty")
    return f"report for {month}: 42 orders".encode()


async def demo(store: alkstore_trio.Store) -> None:
    reports = store.queue("reports", KEPT)
    worker = Worker(store, {reports: build_report})
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)

        # A request that gets its answer in time.
        job_id = await reports.enqueue(b"March")
        with trio.fail_after(10):
            job = await reports.wait(job_id)
        print(f"job {job.id}: {job.state}, {job.result!r}")
        assert (job.state, job.result) == ("completed", b"report for March: 42 orders")

        # A request for a report that cannot be built: the job ends dead.
        job_id = await reports.enqueue(b"")
        with trio.fail_after(10):
            job = await reports.wait(job_id)
        print(f"job {job.id}: {job.state}, {job.last_error}")
        assert job.state == "dead"

        # A request that gives up after 0.1 s: the job is not touched, and finishes.
        job_id = await reports.enqueue(b"slow")
        with trio.move_on_after(0.1) as gave_up:
            await reports.wait(job_id)
        print(f"job {job_id}: the request gave up waiting: {gave_up.cancelled_caught}")
        with trio.fail_after(10):
            job = await reports.wait(job_id)
        print(f"job {job.id}: later found {job.state}, {job.result!r}")

        # A queue handle without keep_completed_s: its acked jobs are deleted.
        unkept = store.queue("unkept")
        job_id = await unkept.enqueue(b"x")
        handle = await unkept.claim_one("me")
        assert handle is not None
        assert await handle.ack()
        try:
            await unkept.wait(job_id)
        except alkstore_trio.JobGone as exc:
            print("JobGone:", exc)
        worker.stop()


async def main() -> None:
    # migrate="apply" creates the schema; an application would run
    # `alkstore-trio migrate` at deploy time instead.
    async with alkstore_trio.open_store(DSN, schema=SCHEMA, migrate="apply") as store:
        try:
            await demo(store)
        finally:
            with trio.CancelScope(shield=True):
                async with store.transaction() as tx:
                    await tx.execute(f'DROP SCHEMA "{SCHEMA}" CASCADE')


if __name__ == "__main__":
    trio.run(main)
