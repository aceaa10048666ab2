"""Q19.1 (R16): a handler's return value is its job's result, carried by the worker from
the handler to the ack, on trio's mock clock (nothing sleeps for real)."""

from __future__ import annotations

import logging

import pytest
from _worker_run import running, wait_until

from alkstore_trio import InvalidArgument, QueueOpts, open_store
from alkstore_trio._runtime._worker import Worker
from alkstore_trio.testing import TrioClock

KEPT = QueueOpts(keep_completed_s=3600)
LOGGER = "alkstore_trio.worker"


@pytest.fixture
async def store(autojump_clock):
    async with open_store("memory://", clock=TrioClock(), max_result_bytes=64) as opened:
        yield opened


async def test_q19_1_returned_bytes_are_stored_with_the_ack_of_kept_jobs(autojump_clock, store):
    queue = store.queue("q", KEPT)
    ids = await queue.enqueue_many([b"%d" % i for i in range(6)])

    async def handler(job):
        if job.payload == b"0":
            return None
        if job.payload == b"1":
            return bytearray(b"ba")
        return b"r" + job.payload

    worker = Worker(store, {queue: handler}, concurrency=2, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 6)
    jobs = [await queue.get_job(job_id) for job_id in ids]
    assert [job.state for job in jobs] == ["completed"] * 6
    assert [job.result for job in jobs] == [None, b"ba", b"r2", b"r3", b"r4", b"r5"]
    assert worker.statistics().results_discarded == 0


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("text", "handler returned a str; return bytes or None"),
        (True, "handler returned a bool; return bytes or None"),
        ({"a": 1}, "handler returned a dict; return bytes or None"),
        (b"x" * 65, "result of 65 bytes exceeds max_result_bytes=64"),
    ],
)
async def test_q19_1_a_bad_result_retries_the_job_with_a_clear_error(
    autojump_clock, store, value, error
):
    queue = store.queue("q", KEPT)
    job_id = await queue.enqueue(b"x")

    async def handler(job):
        return value

    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().retried == 1)
    job = await queue.get_job(job_id)
    assert (job.state, job.last_error, job.result) == ("pending", error, None)
    assert worker.statistics().handler_errors == 1


async def test_q19_1_an_unkept_jobs_result_is_discarded_counted_and_logged_once(
    autojump_clock, store, caplog
):
    queue = store.queue("plain")
    ids = await queue.enqueue_many([b"a", b"b", b"c"])

    async def handler(job):
        return b"result"

    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        async with running(worker):
            await wait_until(lambda: worker.statistics().acked == 3)
    assert [await queue.get_job(job_id) for job_id in ids] == [None, None, None]
    assert worker.statistics().results_discarded == 3
    discarded = [r for r in caplog.records if getattr(r, "event", None) == "result_discarded"]
    assert len(discarded) == 1, [r.getMessage() for r in discarded]
    assert "keep_completed_s" in discarded[0].getMessage()


@pytest.mark.parametrize("value", ["text", True, {"a": 1}, b"x" * 65])
async def test_q19_1_an_unkept_jobs_return_value_of_any_type_or_size_is_discarded_and_acked(
    autojump_clock, store, caplog, value
):
    """A handler written before results existed (returning True, say) keeps working on a
    queue that does not keep jobs: its return has nowhere to go and never retries it."""
    queue = store.queue("plain")
    job_id = await queue.enqueue(b"x")

    async def handler(job):
        return value

    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        async with running(worker):
            await wait_until(lambda: worker.statistics().acked == 1)
    stats = worker.statistics()
    assert (stats.retried, stats.handler_errors, stats.results_discarded) == (0, 0, 1)
    assert await queue.get_job(job_id) is None
    (record,) = [r for r in caplog.records if getattr(r, "event", None) == "result_discarded"]
    assert f"(a {type(value).__name__})" in record.getMessage()


@pytest.mark.parametrize("bad", [-1, 2**30 + 1, True, 1.5, "1"])
async def test_q19_1_max_result_bytes_is_validated(bad):
    with pytest.raises(InvalidArgument, match="max_result_bytes"):
        async with open_store("memory://", max_result_bytes=bad):
            pass


async def test_q19_1_max_result_bytes_bounds_an_ack_and_zero_allows_only_empty_results():
    async with open_store("memory://", max_result_bytes=0) as store:
        queue = store.queue("q", KEPT)
        await queue.enqueue_many([b"a", b"b"])
        first, second = await queue.claim_batch("w", 2)
        with pytest.raises(InvalidArgument, match="result of 1 bytes exceeds max_result_bytes=0"):
            await first.ack(result=b"x")
        assert await first.ack(result=b"") is True
        assert (await queue.get_job(first.id)).result == b""
        assert await second.ack() is True
