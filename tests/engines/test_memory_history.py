"""Q19.2/Q19.3 in the memory engine: the history's purge heap deletes the oldest due rows
first, at most a batch at a time, strictly after their time, one queue at a time."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from alkstore_trio._core import EnqueueSpec, completed, enqueued_job
from alkstore_trio._engines._memory._history import History

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _kept(job_id: int, queue: str, keep_s: float, acked_after_s: float):
    spec = EnqueueSpec(queue, b"", 0, None, None, 3, 30.0, 1.0, None, keep_completed_s=keep_s)
    job = replace(enqueued_job(spec, job_id, T0), state="processing", attempts=1)
    return completed(job, T0 + timedelta(seconds=acked_after_s), b"r%d" % job_id)


def test_q19_3_the_purge_takes_the_oldest_due_rows_first_a_batch_at_a_time():
    history = History()
    # purge_at: job 1 at +50, job 2 at +20, job 3 at +30, job 4 at +1000; another queue's
    # job 5 at +10.
    for job in [
        _kept(1, "q", 40, 10), _kept(2, "q", 10, 10), _kept(3, "q", 25, 5),
        _kept(4, "q", 990, 10), _kept(5, "other", 5, 5),
    ]:  # fmt: skip
        history.keep(job)
    at_30 = T0 + timedelta(seconds=30)
    assert history.purge("q", at_30, batch=5) == 1  # job 3's purge_at == now: kept
    assert history.get(2) is None
    assert history.get(3) is not None
    later = T0 + timedelta(seconds=60)
    assert history.purge("q", later, batch=1) == 1  # the oldest first: job 3
    assert (history.get(3), history.get(1) is not None) == (None, True)
    assert history.purge("q", later, batch=1) == 1
    assert history.purge("q", later, batch=1) == 0  # job 4 is not due
    assert [job.id for job in history.list_jobs("q", "completed", 10, None)] == [4]
    assert [job.id for job in history.list_jobs("other", "completed", 10, None)] == [5]
    assert len(history) == 2


def test_q19_2_completed_keeps_the_claim_and_adds_the_ack():
    job = _kept(7, "q", 60, 3)
    assert (job.state, job.attempts, job.result) == ("completed", 1, b"r7")
    assert job.completed_at == T0 + timedelta(seconds=3)
