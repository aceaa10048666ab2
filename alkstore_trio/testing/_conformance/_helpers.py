"""Shared by the conformance modules: the contract's constants and field lists, and
small async assertions whose failures say what the contract expected and what the
engine did."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ... import Job, JobHandle, Queue, WakeListener
    from .._harness import EngineHarness


#: ``last_error`` of a row dead-lettered because its attempts ran out (Q3, Q4).
MAX_ATTEMPTS_EXCEEDED: Final = "max attempts exceeded"
#: ``last_error`` of a row failed without an error text (Q4).
FAILED: Final = "failed"
#: ``last_error`` of a row dead-lettered by the expiry sweep (Q9).
EXPIRED: Final = "expired"
#: The default largest payload (Q2): 1 MiB.
DEFAULT_MAX_PAYLOAD_BYTES: Final = 1024 * 1024
#: The 32-bit signed range of priorities (Q2).
INT32_MAX: Final = 2**31 - 1
INT32_MIN: Final = -(2**31)
#: How long a positive wake check waits at most. A conforming engine wakes long before;
#: the timeout only bounds the failure of a non-conforming one.
WAKE_TIMEOUT_S: Final = 10.0
#: "One instant later": small enough to sit between two whole-second deadlines, large
#: enough for any engine's timestamp resolution.
INSTANT_S: Final = 0.001

_TIMESTAMP_FIELDS: Final = (
    "run_at",
    "enqueued_at",
    "expires_at",
    "claimed_at",
    "claim_expires_at",
    "died_at",
    "completed_at",  # Q19.2
)
_JOB_FIELDS: Final = (
    "id",
    "queue",
    "payload",
    "priority",
    "state",
    "attempts",
    "max_attempts",
    "run_at",
    "enqueued_at",
    "visibility_timeout_s",
    "backoff_base_s",
    "expires_at",
    "claimed_by",
    "claimed_at",
    "claim_expires_at",
    "last_error",
    "died_at",
    "headers",
    "unique_key",
    "concurrency_key",
    "claim_token",
    "keep_completed_s",  # Q19.2
    "completed_at",
    "result",  # Q19.1
    "progress",  # Q19.7
)

Check = Callable[["EngineHarness"], "Awaitable[None]"]


def _any(value: object) -> Any:
    """Pass a deliberately ill-typed argument past the type checker."""
    return value


def _after(when: datetime, seconds: float) -> datetime:
    return when + timedelta(seconds=seconds)


def _jitter_range(base_s: float, attempt: int) -> tuple[int, int]:
    """Q5, written out independently of the library: the inclusive integer range of the
    backoff delay after claim number ``attempt`` (decision 12 for caps below 1 s)."""
    cap = min(base_s * 2 ** min(attempt - 1, 30), 3600)
    # A positive cap halves to at least 1 s, even when cap / 2 underflows to 0.0 (a
    # subnormal base such as 5e-324).
    low = max(math.ceil(cap / 2), 1) if cap > 0 else 0
    return low, max(low, math.floor(cap))


async def _raises(
    expected: type[BaseException],
    what: str,
    fn: Callable[..., object],
    /,
    *args: object,
    **kwargs: object,
) -> BaseException:
    """Call ``fn`` (awaiting its result, or entering it when it is an async context
    manager) and assert that it raised ``expected``; return the exception."""
    try:
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            await result
        elif hasattr(result, "__aenter__"):
            async with result:  # type: ignore[attr-defined]
                pass
    except expected as exc:
        return exc
    except Exception as exc:
        raise AssertionError(
            f"{what}: expected {expected.__name__}, got {type(exc).__name__}: {exc}"
        ) from exc
    raise AssertionError(f"{what}: expected {expected.__name__}, but nothing was raised")


async def _get(queue: Queue, job_id: int, what: str = "") -> Job:
    job = await queue.get_job(job_id)
    assert job is not None, (
        f"{what}get_job({job_id}) on {queue.name!r} returned None; expected a row"
    )
    return job


async def _claim(queue: Queue, worker_id: str = "worker", what: str = "") -> JobHandle:
    handle = await queue.claim_one(worker_id)
    assert handle is not None, (
        f"{what}claim_one({worker_id!r}) on {queue.name!r} returned None; expected a job"
    )
    return handle


async def _claim_id(queue: Queue, job_id: int, worker_id: str = "worker") -> JobHandle:
    handle = await _claim(queue, worker_id)
    assert handle.id == job_id, (
        f"claim_one on {queue.name!r} handed out {handle.id}, expected {job_id}"
    )
    return handle


async def _assert_state(queue: Queue, job_id: int, state: str, what: str) -> Job:
    job = await _get(queue, job_id, f"{what}: ")
    assert job.state == state, f"{what}: job {job_id} is {job.state!r}, expected {state!r}"
    return job


async def _assert_gone(queue: Queue, job_id: int, what: str) -> None:
    job = await queue.get_job(job_id)
    assert job is None, f"{what}: job {job_id} should be deleted, but get_job shows {job!r}"


async def _assert_dead(
    harness: EngineHarness, queue: Queue, job_id: int, last_error: str, what: str
) -> Job:
    """The row is dead with this ``last_error``, died now, and is nowhere else: no live
    row to cancel or ack, nothing to claim (Q4's atomic dead-letter move)."""
    now = await harness.now()
    job = await _assert_state(queue, job_id, "dead", what)
    assert job.last_error == last_error, (
        f"{what}: dead job {job_id} has last_error {job.last_error!r}, expected {last_error!r}"
    )
    assert job.died_at is not None, f"{what}: dead job {job_id} has no died_at"
    assert job.died_at <= now, (
        f"{what}: dead job {job_id} has died_at {job.died_at!r}, expected a time <= now ({now})"
    )
    assert await queue.ack_batch([job_id]) == 0, f"{what}: ack_batch deleted the dead job {job_id}"
    assert await queue.cancel(job_id) is False, (
        f"{what}: cancel({job_id}) returned True, so a live row remained next to the dead one"
    )
    again = await _get(queue, job_id, f"{what}: ")
    assert again == job, (
        f"{what}: the dead row changed after ack_batch/cancel: {job!r} -> {again!r}"
    )
    return job


async def _no_wake(listener: WakeListener, what: str) -> None:
    woken = await listener.wait(0)
    assert woken == frozenset(), f"{what}: expected no wake, but {sorted(woken)} were woken"


async def _wait_for_wakes(listener: WakeListener, expected: set[str], what: str) -> None:
    """Collect wakes until every queue in ``expected`` was woken (or a wait times out)."""
    seen: set[str] = set()
    while not expected <= seen:
        woken = await listener.wait(WAKE_TIMEOUT_S)
        if not woken:
            break
        seen |= woken
    assert seen == expected, f"{what}: expected wakes of {sorted(expected)}, got {sorted(seen)}"


async def _nothing_claimable(queue: Queue, what: str) -> None:
    handles = await queue.claim_batch("probe", 1000)
    assert handles == [], (
        f"{what}: expected nothing claimable, but claimed {[h.id for h in handles]}"
    )


def _assert_mentions(exc: BaseException, what: str, *parts: str) -> None:
    text = str(exc)
    for part in parts:
        assert part in text, f"{what}: the message {text!r} does not mention {part!r}"


def _assert_utc(job: Job, what: str) -> None:
    for name in _TIMESTAMP_FIELDS:
        value = getattr(job, name)
        if value is None:
            continue
        assert isinstance(value, datetime), f"{what}: {name} is {value!r}, not a datetime"
        offset = value.utcoffset()
        assert offset is not None, f"{what}: {name} = {value!r} is naive"
        assert offset == timedelta(0), (
            f"{what}: {name} = {value.isoformat()} is not in UTC (offset {offset})"
        )


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def _check(check: Check) -> Check:
    """Make a check fail with a plain AssertionError.

    A failing ``assert`` inside ``async with harness.open_store()`` reaches the caller
    wrapped in an exception group by the engine's nursery; unwrap it, so that every
    check fails the way a reader expects (and pytest shows the assertion itself).
    """

    @functools.wraps(check)
    async def run(harness: EngineHarness) -> None:
        try:
            await check(harness)
        except BaseExceptionGroup as group:
            leaves = _leaves(group)
            if not leaves or not all(isinstance(exc, AssertionError) for exc in leaves):
                raise
            if len(leaves) == 1:
                raise leaves[0] from None
            raise AssertionError("; ".join(str(exc) for exc in leaves)) from group

    return run


async def _dead_job(queue: Queue, payload: bytes, error: str = "boom") -> int:
    """Enqueue a job with the top priority, claim it and fail it; its id."""
    job_id = await queue.enqueue(payload, priority=INT32_MAX)
    assert await (await _claim_id(queue, job_id)).fail(error) is True, "fail was refused"
    return job_id
