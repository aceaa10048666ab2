"""Per-queue concurrency and job timeouts in one worker (R12, R13).

One worker serves two queues with six handler slots. ``reports`` jobs are slow and hit
a database that takes two of them at a time, so the queue is capped at 2
(``queue_concurrency``) and given a timeout of its own (``queue_job_timeout_s``); the
``emails`` queue takes whatever the reports leave. While the reports backlog is deep and
its two slots are busy, the emails still go through the other four: a queue at its cap
never holds up the others. One report hangs and is cancelled at its queue's timeout,
then retried, while the worker-wide ``job_timeout_s`` stays the default of the emails.

The same limits from the command line::

    alkstore-trio worker --queue emails=app:send --queue reports=app:report \\
        --concurrency 6 --queue-concurrency reports=2 \\
        --job-timeout-s 30 --queue-job-timeout-s reports=0.5

Run it with ``python examples/per_queue_limits.py``.
"""

import trio

import alkstore_trio

REPORTS, EMAILS = 6, 40


async def main() -> None:
    async with alkstore_trio.open_store("memory://") as store:
        running = {"reports": 0, "emails": 0}
        peak = {"reports": 0, "emails": 0, "both": 0}
        done = {"reports": 0, "emails": 0}
        emails_done_while_reports_ran = 0
        finished = trio.Event()

        def track(job: alkstore_trio.Job, change: int) -> None:
            running[job.queue] += change
            peak[job.queue] = max(peak[job.queue], running[job.queue])
            peak["both"] = max(peak["both"], running["reports"] + running["emails"])

        async def report(job: alkstore_trio.Job) -> None:
            track(job, +1)
            try:
                if job.payload == b"hangs" and job.attempts == 1:
                    await trio.sleep_forever()  # cancelled at the queue's timeout
                await trio.sleep(0.2)  # the slow query
            finally:
                track(job, -1)
            done["reports"] += 1
            if done["reports"] == REPORTS and done["emails"] == EMAILS:
                finished.set()

        async def send(job: alkstore_trio.Job) -> None:
            nonlocal emails_done_while_reports_ran
            track(job, +1)
            try:
                await trio.sleep(0.01)  # the mail server
            finally:
                track(job, -1)
            done["emails"] += 1
            emails_done_while_reports_ran += running["reports"] > 0
            if done["reports"] == REPORTS and done["emails"] == EMAILS:
                finished.set()

        # No backoff, so that the timed-out report is retried at once.
        reports = store.queue("reports", alkstore_trio.QueueOpts(backoff_base_s=0))
        await reports.enqueue(b"hangs")
        await reports.enqueue_many([b"report"] * (REPORTS - 1))
        await store.queue("emails").enqueue_many([b"mail"] * EMAILS)
        worker = alkstore_trio.Worker(
            store,
            {"reports": report, "emails": send},
            concurrency=6,
            queue_concurrency={"reports": 2},
            job_timeout_s=30,
            queue_job_timeout_s={"reports": 0.5},
        )
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                await finished.wait()
                worker.stop()

        stats = worker.statistics()
        print(f"peak handlers at once: reports {peak['reports']}, emails {peak['emails']}")
        print(f"emails sent while reports ran: {emails_done_while_reports_ran} of {EMAILS}")
        print(f"timed out and retried: {stats.timed_out} (the hanging report)")
        assert peak["reports"] == 2  # the cap, reached and never passed
        assert peak["both"] <= 6  # the worker-wide total holds too
        assert emails_done_while_reports_ran > 0  # the capped queue held up nothing
        assert stats.timed_out == 1
        assert (stats.acked, stats.retried) == (REPORTS + EMAILS, 1)


if __name__ == "__main__":
    trio.run(main)
