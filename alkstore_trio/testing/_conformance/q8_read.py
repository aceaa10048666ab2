"""Q8 read: ``queue.get_job`` shows every field, in UTC, of this queue's rows only."""

from __future__ import annotations

import dataclasses
from datetime import UTC, timedelta, timezone
from typing import TYPE_CHECKING

from ... import Headers, InvalidArgument, Job, QueueOpts
from ._helpers import _JOB_FIELDS, _after, _assert_utc, _check, _claim_id, _get, _raises

if TYPE_CHECKING:
    from .._harness import EngineHarness


@_check
async def q8_get_job_shows_every_field(harness: EngineHarness) -> None:
    """Q8: Job has exactly the contract's fields, and get_job shows each of them right
    for a pending, a processing and a dead row."""
    names = tuple(f.name for f in dataclasses.fields(Job))
    assert names == _JOB_FIELDS, f"Job's fields are {names}, expected {_JOB_FIELDS}"
    async with harness.open_store() as store:
        opts = QueueOpts(
            visibility_timeout_s=45, max_attempts=4, backoff_base_s=7, expires_in_s=1000
        )
        queue = store.queue("fields", opts)
        t0 = await harness.now()
        job_id = await queue.enqueue(b"\x00payload\xff", priority=-7, delay_s=20)
        pending = await _get(queue, job_id)
        expected = Job(
            id=job_id,
            queue="fields",
            payload=b"\x00payload\xff",
            priority=-7,
            state="pending",
            attempts=0,
            max_attempts=4,
            run_at=_after(t0, 20),
            enqueued_at=t0,
            visibility_timeout_s=45,
            backoff_base_s=7,
            expires_at=_after(t0, 1000),
            claimed_by=None,
            claimed_at=None,
            claim_expires_at=None,
            last_error=None,
            died_at=None,
            headers=Headers(),
        )
        assert pending == expected, f"pending row is {pending!r}, expected {expected!r}"
        await harness.advance(20)
        t1 = await harness.now()
        claimed = await _claim_id(queue, job_id, "worker-1")
        processing = await _get(queue, job_id)
        assert claimed.job.claim_token is not None, "a claim handed out no claim token"
        expected = dataclasses.replace(
            expected,
            state="processing",
            attempts=1,
            claimed_by="worker-1",
            claimed_at=t1,
            claim_expires_at=_after(t1, 45),
            claim_token=claimed.job.claim_token,
        )
        assert processing == expected, f"processing row is {processing!r}, expected {expected!r}"
        handle = await _claim_id(queue, await queue.enqueue(b"second"), "worker-2")
        assert await handle.retry("transient", delay_s=0) is True, "retry was refused"
        handle = await _claim_id(queue, handle.id, "worker-2")
        await harness.advance(5)
        t2 = await harness.now()
        assert await handle.fail("fatal") is True, "fail was refused"
        dead = await _get(queue, handle.id)
        assert (dead.state, dead.attempts, dead.last_error, dead.died_at) == (
            "dead",
            2,
            "fatal",
            t2,
        ), (
            f"dead row shows (state, attempts, last_error, died_at) = "
            f"{(dead.state, dead.attempts, dead.last_error, dead.died_at)!r}"
        )
        assert (dead.payload, dead.queue) == (b"second", "fields"), "the dead row lost its identity"
        assert dead.claim_token == handle.job.claim_token, "D1: the dead row lost its claim token"


@_check
async def q8_rows_of_other_queues_are_invisible(harness: EngineHarness) -> None:
    """Q8: get_job on another queue returns None for pending, processing and dead rows;
    unknown ids are None, not errors."""
    async with harness.open_store() as store:
        queue = store.queue("visible")
        other = store.queue("invisible")
        pending = await queue.enqueue(b"pending")
        processing = await queue.enqueue(b"processing", priority=2)
        dead = await queue.enqueue(b"dead", priority=1)
        await _claim_id(queue, processing)
        assert await (await _claim_id(queue, dead)).fail() is True, "fail was refused"
        for job_id in [pending, processing, dead]:
            assert await other.get_job(job_id) is None, (
                f"job {job_id} is visible from another queue"
            )
            assert await queue.get_job(job_id) is not None, f"job {job_id} vanished from its queue"
        for unknown in [dead + 1_000_000, 0, -1, 2**63 - 1]:
            assert await queue.get_job(unknown) is None, f"get_job({unknown}) returned a row"
        for bad in ["1", 1.0, None, 2**63]:
            await _raises(InvalidArgument, f"get_job({bad!r})", queue.get_job, bad)


@_check
async def q8_timestamps_are_aware_utc(harness: EngineHarness) -> None:
    """Q8: every timestamp get_job and a claim snapshot show is timezone-aware UTC, for
    pending, processing and dead rows."""
    async with harness.open_store() as store:
        queue = store.queue("utc", QueueOpts(expires_in_s=500))
        now = await harness.now()
        ids = [
            await queue.enqueue(b"plain"),
            await queue.enqueue(b"delayed", delay_s=-5),
            await queue.enqueue(b"utc run_at", run_at=_after(now, -1).astimezone(UTC)),
        ]
        for job_id in ids:
            _assert_utc(await _get(queue, job_id), f"pending job {job_id}")
        handles = await queue.claim_batch("w", 3)
        for handle in handles:
            _assert_utc(handle.job, f"claim snapshot of job {handle.id}")
            _assert_utc(await _get(queue, handle.id), f"processing job {handle.id}")
        assert await handles[0].fail() is True, "fail was refused"
        _assert_utc(await _get(queue, handles[0].id), f"dead job {handles[0].id}")


@_check
async def q8_run_at_given_in_another_zone_is_shown_in_utc(harness: EngineHarness) -> None:
    """Q8: a run_at given with a non-UTC offset is stored as the same instant and shown
    as a UTC datetime, by get_job and by the claim snapshot."""
    async with harness.open_store() as store:
        queue = store.queue("utc-zones")
        now = await harness.now()
        zones = [timezone(timedelta(hours=2)), timezone(timedelta(hours=-5, minutes=-30))]
        ids = []
        for seconds, zone in zip([-1, -2], zones, strict=True):
            given = _after(now, seconds).astimezone(zone)
            job_id = await queue.enqueue(b"x", run_at=given)
            ids.append(job_id)
            job = await _get(queue, job_id)
            assert job.run_at == given, f"run_at {job.run_at} is not the instant given ({given})"
            _assert_utc(job, f"job {job_id} enqueued with run_at={given.isoformat()}")
        for handle in await queue.claim_batch("w", 2):
            _assert_utc(handle.job, f"claim snapshot of job {handle.id}")
