"""The conformance suite: the queue contract (rules Q1-Q12) as checks any engine must pass.

Why a suite of plain async functions rather than a pytest module: the contract binds every
engine, including engines written outside this repository, so the checks must run anywhere
an :class:`~alkstore_trio.testing.EngineHarness` can be built, with nothing but trio. Each
check opens a fresh store through the harness, drives *only* the public API, moves time
only through ``harness.advance`` and reads it only through ``harness.now`` (it never sleeps
and never assumes a start time), and fails with a plain :class:`AssertionError` whose
message says what the contract expected and what the engine did.

Each check is named after the rule it pins (``q4_heartbeat_is_an_absolute_reset``), so the
coverage of the contract can be read off the names. :data:`CONFORMANCE_CHECKS` lists them;
:func:`check_conformance` runs them and reports every failure at once, the way
:func:`trio.testing.check_one_way_stream` checks a stream implementation.

Where the contract is silent, the checks follow ``docs/dev/decisions-foundation.md``
(their docstrings say so).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import itertools
import math
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Final

import trio

from ... import (
    AlkstoreError,
    EngineError,
    HandleConsumed,
    Headers,
    InvalidArgument,
    Job,
    JobHandle,
    Queue,
    QueueOpts,
    SchemaError,
    StoreClosed,
    SweepResult,
    WakeListener,
)

if TYPE_CHECKING:
    from .._harness import EngineHarness

__all__ = ["CONFORMANCE_CHECKS", "check_conformance"]

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
)

Check = Callable[["EngineHarness"], "Awaitable[None]"]


# -- helpers ---------------------------------------------------------------------------


def _any(value: object) -> Any:
    """Pass a deliberately ill-typed argument past the type checker."""
    return value


def _after(when: datetime, seconds: float) -> datetime:
    return when + timedelta(seconds=seconds)


def _jitter_range(base_s: float, attempt: int) -> tuple[int, int]:
    """Q5, written out independently of the library: the inclusive integer range of the
    backoff delay after claim number ``attempt`` (decision 12 for caps below 1 s)."""
    cap = min(base_s * 2 ** min(attempt - 1, 30), 3600)
    low = math.ceil(cap / 2)
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


# -- Q1 queue handles and options -------------------------------------------------------


@_check
async def q1_queue_names_accept_1_to_63_allowed_characters(harness: EngineHarness) -> None:
    """Q1: names of 1-63 characters from ``[A-Za-z0-9_.:-]`` starting alphanumerically are
    accepted, and the engine stores and reads rows under them."""
    good = ["a", "Z", "7", "a" * 63, "A.b:c-d_e9", "9lives", "alk", "alkx", "alk-x", "alk.x"]
    async with harness.open_store() as store:
        for name in good:
            queue = store.queue(name)
            assert queue.name == name, f"queue({name!r}).name is {queue.name!r}"
            job_id = await queue.enqueue(b"named")
            job = await _get(queue, job_id, f"queue {name!r}: ")
            assert job.queue == name, f"a row enqueued on {name!r} shows queue {job.queue!r}"


@_check
async def q1_queue_names_reject_invalid_and_reserved_names(harness: EngineHarness) -> None:
    """Q1: empty, 64 characters, characters outside the set, a leading ``_ - . :``, the
    reserved ``alk_`` prefix and non-str names are InvalidArgument; wake listeners and
    transactions validate names the same way."""
    bad: list[object] = [
        "",
        "a" * 64,
        "a b",
        " a",
        "a ",
        "a/b",
        "a\n",
        "a\t",
        "a*",
        "a,b",
        "a;b",
        "é",
        "aé",
        "ａ",
        "a\x00",
        "_a",
        "-a",
        ".a",
        ":a",
        "alk_",
        "alk_jobs",
        None,
        1,
        b"bytes",
        ["a"],
    ]
    async with harness.open_store() as store:
        for name in bad:
            await _raises(InvalidArgument, f"store.queue({name!r})", store.queue, name)
        for name in ["", "alk_x", "a b"]:
            await _raises(
                InvalidArgument,
                f"open_wake_listener([{name!r}])",
                store.open_wake_listener,
                [name],
            )
        await _raises(InvalidArgument, "open_wake_listener([])", store.open_wake_listener, [])
        async with store.transaction() as tx:
            for name in ["", "alk_x", "-a", "a" * 64]:
                await _raises(InvalidArgument, f"tx.enqueue({name!r}, ...)", tx.enqueue, name, b"x")


@_check
async def q1_queue_handle_carries_its_opts_and_defaults(harness: EngineHarness) -> None:
    """Q1: ``QueueOpts`` defaults are 300 / 3 / 5 / None / None, it is frozen, and a handle
    carries the opts it was made with (``None`` means the defaults)."""
    opts = QueueOpts()
    assert (
        opts.visibility_timeout_s,
        opts.max_attempts,
        opts.backoff_base_s,
        opts.expires_in_s,
        opts.dead_letter_retention_s,
    ) == (300, 3, 5, None, None), f"QueueOpts() defaults are {opts!r}, expected 300/3/5/None/None"
    try:
        opts.max_attempts = 9  # type: ignore[misc]
    except AttributeError:
        pass
    else:
        raise AssertionError("QueueOpts is not frozen: assigning max_attempts succeeded")
    async with harness.open_store() as store:
        default = store.queue("opts-default")
        assert default.opts == QueueOpts(), (
            f"queue(name).opts is {default.opts!r}, expected defaults"
        )
        custom = QueueOpts(visibility_timeout_s=12, max_attempts=7, backoff_base_s=0.5)
        handle = store.queue("opts-custom", custom)
        assert handle.opts == custom, (
            f"queue(name, opts).opts is {handle.opts!r}, expected {custom!r}"
        )
        for bad in ["300", {"max_attempts": 3}, 5]:
            await _raises(InvalidArgument, f"queue(name, opts={bad!r})", store.queue, "q", bad)


@_check
async def q1_queue_opts_reject_invalid_values(harness: EngineHarness) -> None:
    """Q1: NaN, infinities, bools, wrong types, negatives, 0 where > 0 is required (and,
    by decision 8/9, durations over 100 years or max_attempts over int32) are
    InvalidArgument."""
    nan, inf = float("nan"), float("inf")
    over_100_years = 101 * 365 * 24 * 3600.0
    bad: dict[str, list[object]] = {
        "visibility_timeout_s": [0, 0.0, -1, -0.5, nan, inf, -inf, True, False, "300", None],
        "max_attempts": [0, -1, 3.0, True, False, "3", None, nan, 2**31],
        "backoff_base_s": [-1, -0.001, nan, inf, -inf, True, False, "5", None, over_100_years],
        "expires_in_s": [0, 0.0, -1, nan, inf, -inf, True, False, "60", over_100_years],
        "dead_letter_retention_s": [-1, -0.001, nan, inf, -inf, True, False, "0"],
    }
    for field, values in bad.items():
        for value in [*values, over_100_years, 2**1024, -(2**1024)]:
            await _raises(
                InvalidArgument, f"QueueOpts({field}={value!r})", QueueOpts, **{field: value}
            )
    async with harness.open_store() as store:
        for opts in [_any({"max_attempts": 3}), _any("defaults")]:
            await _raises(InvalidArgument, f"store.queue('q', {opts!r})", store.queue, "q", opts)


@_check
async def q1_queue_opts_accept_boundary_values(harness: EngineHarness) -> None:
    """Q1: the smallest legal values are accepted (``backoff_base_s=0``,
    ``dead_letter_retention_s=0``, ``max_attempts=1``, tiny positive durations) and ints
    and floats mean the same number of seconds."""
    cases: list[dict[str, Any]] = [
        {"visibility_timeout_s": 0.001},
        {"visibility_timeout_s": 1},
        {"visibility_timeout_s": 2.5},
        {"max_attempts": 1},
        {"max_attempts": 2**31 - 1},
        {"backoff_base_s": 0},
        {"backoff_base_s": 0.0},
        {"expires_in_s": 0.001},
        {"expires_in_s": None},
        {"dead_letter_retention_s": 0},
        {"dead_letter_retention_s": None},
        {"dead_letter_retention_s": 86400},
    ]
    for kwargs in cases:
        try:
            opts = QueueOpts(**kwargs)
        except InvalidArgument as exc:
            raise AssertionError(f"QueueOpts(**{kwargs!r}) was rejected: {exc}") from exc
        for field, value in kwargs.items():
            assert getattr(opts, field) == value, (
                f"QueueOpts(**{kwargs!r}).{field} is {getattr(opts, field)!r}, expected {value!r}"
            )
    assert QueueOpts(visibility_timeout_s=10) == QueueOpts(visibility_timeout_s=10.0), (
        "QueueOpts(visibility_timeout_s=10) differs from QueueOpts(visibility_timeout_s=10.0)"
    )
    async with harness.open_store() as store:
        queue = store.queue("tiny", QueueOpts(max_attempts=1, backoff_base_s=0))
        await queue.enqueue(b"x")
        await _claim(queue)


@_check
async def q1_rows_keep_the_stamps_of_the_handle_that_enqueued_them(harness: EngineHarness) -> None:
    """Q1: each row is stamped with the opts of the handle that enqueued it (default
    handles stamp 300 / 3 / 5 / None); another handle on the same queue name, with other
    opts, neither restamps the row nor changes its lease when it claims it."""
    async with harness.open_store() as store:
        now = await harness.now()
        plain = store.queue("stamps")
        custom = store.queue(
            "stamps",
            QueueOpts(visibility_timeout_s=10, max_attempts=5, backoff_base_s=2, expires_in_s=600),
        )
        plain_id = await plain.enqueue(b"plain", priority=1)
        custom_id = await custom.enqueue(b"custom")
        for queue, job_id, stamps in [
            (custom, plain_id, (300, 3, 5, None)),
            (plain, custom_id, (10, 5, 2, _after(now, 600))),
        ]:
            job = await _get(queue, job_id)
            seen = (job.visibility_timeout_s, job.max_attempts, job.backoff_base_s, job.expires_at)
            assert seen == stamps, (
                f"job {job_id} shows (visibility_timeout_s, max_attempts, backoff_base_s, "
                f"expires_at) = {seen!r}, expected {stamps!r}"
            )
        # Claimed through the *other* handle: the lease uses the row's own stamp.
        first = await _claim_id(custom, plain_id)
        second = await _claim_id(plain, custom_id)
        assert first.job.claim_expires_at == _after(now, 300), (
            f"claim_expires_at of a row stamped 300 s is {first.job.claim_expires_at}, "
            f"expected now + 300 s ({_after(now, 300)})"
        )
        assert second.job.claim_expires_at == _after(now, 10), (
            f"claim_expires_at of a row stamped 10 s is {second.job.claim_expires_at}, "
            f"expected now + 10 s ({_after(now, 10)})"
        )


# -- Q2 enqueue ---------------------------------------------------------------------------


@_check
async def q2_enqueue_without_delay_or_run_at_is_ready_now(harness: EngineHarness) -> None:
    """Q2: with neither ``delay_s`` nor ``run_at``, ``run_at = enqueued_at = now`` and the
    job is claimable at once; the new row is pending with 0 attempts."""
    async with harness.open_store() as store:
        await harness.advance(3)
        now = await harness.now()
        queue = store.queue("ready-now")
        job_id = await queue.enqueue(b"x")
        job = await _get(queue, job_id)
        assert job.run_at == now, f"run_at is {job.run_at}, expected now ({now})"
        assert job.enqueued_at == now, f"enqueued_at is {job.enqueued_at}, expected now ({now})"
        assert (job.state, job.attempts, job.last_error) == ("pending", 0, None), (
            f"a new row is (state, attempts, last_error) = "
            f"{(job.state, job.attempts, job.last_error)!r}, expected ('pending', 0, None)"
        )
        await _claim_id(queue, job_id)


@_check
async def q2_delay_wins_over_run_at(harness: EngineHarness) -> None:
    """Q2: when both are given, ``run_at = now + delay_s`` and ``run_at`` is ignored."""
    async with harness.open_store() as store:
        now = await harness.now()
        queue = store.queue("delay-wins")
        later = await queue.enqueue(b"x", delay_s=10, run_at=_after(now, 1000))
        sooner = await queue.enqueue(b"y", delay_s=0, run_at=_after(now, 1000))
        job = await _get(queue, later)
        assert job.run_at == _after(now, 10), (
            f"delay_s=10 with run_at=now+1000s gave run_at {job.run_at}, expected now + 10 s"
        )
        job = await _get(queue, sooner)
        assert job.run_at == now, (
            f"delay_s=0 with run_at=now+1000s gave run_at {job.run_at}, expected now"
        )
        await _claim_id(queue, sooner)
        assert await queue.claim_one("w") is None, "a job delayed by 10 s was claimable at once"
        await harness.advance(10)
        await _claim_id(queue, later)


@_check
async def q2_negative_delay_makes_the_job_ready_now(harness: EngineHarness) -> None:
    """Q2: a negative delay is legal: ``run_at = now + delay_s`` lies in the past, so the
    job is ready at once (and, being "earlier", orders before equal-priority jobs)."""
    async with harness.open_store() as store:
        now = await harness.now()
        queue = store.queue("negative-delay")
        plain = await queue.enqueue(b"plain")
        negative = await queue.enqueue(b"negative", delay_s=-30)
        job = await _get(queue, negative)
        assert job.run_at == _after(now, -30), (
            f"delay_s=-30 gave run_at {job.run_at}, expected now - 30 s ({_after(now, -30)})"
        )
        await _claim_id(queue, negative)
        await _claim_id(queue, plain)


@_check
async def q2_run_at_is_stored_as_given(harness: EngineHarness) -> None:
    """Q2: without a delay, ``run_at`` is stored as given: a past one is ready now, a
    future one becomes claimable exactly when it comes due."""
    async with harness.open_store() as store:
        now = await harness.now()
        queue = store.queue("run-at")
        past = await queue.enqueue(b"past", run_at=_after(now, -60))
        future = await queue.enqueue(b"future", run_at=_after(now, 60))
        for job_id, expected in [(past, _after(now, -60)), (future, _after(now, 60))]:
            job = await _get(queue, job_id)
            assert job.run_at == expected, (
                f"job {job_id} has run_at {job.run_at}, expected {expected}"
            )
            assert job.enqueued_at == now, (
                f"job {job_id} has enqueued_at {job.enqueued_at}, expected now"
            )
        await _claim_id(queue, past)
        await harness.advance(60 - INSTANT_S)
        assert await queue.claim_one("w") is None, "a job was claimable before its run_at"
        await harness.advance(INSTANT_S)
        await _claim_id(queue, future)


@_check
async def q2_run_at_must_be_timezone_aware(harness: EngineHarness) -> None:
    """Q2: a naive ``run_at`` (or a non-datetime) is InvalidArgument and enqueues nothing."""
    async with harness.open_store() as store:
        queue = store.queue("naive")
        for bad in [datetime(2030, 1, 1), 1700000000.0, "2030-01-01T00:00:00Z"]:
            await _raises(
                InvalidArgument, f"enqueue(run_at={bad!r})", queue.enqueue, b"x", run_at=bad
            )
            await _raises(
                InvalidArgument,
                f"enqueue_many(run_at={bad!r})",
                queue.enqueue_many,
                [b"x"],
                run_at=bad,
            )
        await _nothing_claimable(queue, "after rejected run_at values")


@_check
async def q2_expires_at_is_relative_to_enqueue_time(harness: EngineHarness) -> None:
    """Q2: ``expires_at = now + expires_in_s`` at enqueue, whatever the delay; no
    ``expires_in_s`` means no expiry."""
    async with harness.open_store() as store:
        queue = store.queue("expiring", QueueOpts(expires_in_s=100))
        first_now = await harness.now()
        first = await queue.enqueue(b"a")
        await harness.advance(7)
        second_now = await harness.now()
        second = await queue.enqueue(b"b", delay_s=50)
        third = await queue.enqueue(b"c", run_at=_after(second_now, 500))
        for job_id, expected in [
            (first, _after(first_now, 100)),
            (second, _after(second_now, 100)),
            (third, _after(second_now, 100)),
        ]:
            job = await _get(queue, job_id)
            assert job.expires_at == expected, (
                f"job {job_id} has expires_at {job.expires_at}, expected enqueue time + 100 s "
                f"({expected})"
            )
        never = await store.queue("expiring").enqueue(b"d")
        job = await _get(queue, never)
        assert job.expires_at is None, f"a row without expires_in_s has expires_at {job.expires_at}"


@_check
async def q2_max_attempts_override_is_the_only_per_job_stamp(harness: EngineHarness) -> None:
    """Q2: ``max_attempts=`` overrides the stamp for one job (the row shows it and obeys
    it); the other stamps still come from the handle; an override must be an int >= 1."""
    async with harness.open_store() as store:
        queue = store.queue("override", QueueOpts(max_attempts=3, visibility_timeout_s=40))
        once = await queue.enqueue(b"once", max_attempts=1, priority=1)
        many = await queue.enqueue_many([b"m1", b"m2"], max_attempts=9)
        plain = await queue.enqueue(b"plain")
        expectations = [(once, 1), (many[0], 9), (many[1], 9), (plain, 3)]
        for job_id, attempts in expectations:
            job = await _get(queue, job_id)
            assert job.max_attempts == attempts, (
                f"job {job_id} has max_attempts {job.max_attempts}, expected {attempts}"
            )
            assert job.visibility_timeout_s == 40, (
                f"job {job_id} has visibility_timeout_s {job.visibility_timeout_s}, expected "
                "the handle's 40"
            )
        handle = await _claim_id(queue, once)
        assert await handle.retry("boom", delay_s=0) is True, "retry of a valid claim was refused"
        await _assert_dead(harness, queue, once, "boom", "retry with max_attempts=1 override")
        for bad in [0, -1, 2.0, True, "3", 2**31]:
            await _raises(
                InvalidArgument,
                f"enqueue(max_attempts={bad!r})",
                queue.enqueue,
                b"x",
                max_attempts=bad,
            )


@_check
async def q2_payload_round_trips_byte_for_byte(harness: EngineHarness) -> None:
    """Q2: payloads are stored and returned exactly, as ``bytes``: empty, every byte value,
    NULs, a full 1 MiB; bytearray and memoryview are accepted."""
    everything = bytes(range(256))
    cases: list[tuple[object, bytes]] = [
        (b"", b""),
        (everything, everything),
        (everything[::-1] * 3, everything[::-1] * 3),
        (b"\x00" * 17, b"\x00" * 17),
        (bytearray(b"from a bytearray\xff"), b"from a bytearray\xff"),
        (memoryview(b"from a memoryview\x00\x01"), b"from a memoryview\x00\x01"),
        (memoryview(everything)[10:20], everything[10:20]),
        (b"\xab" * DEFAULT_MAX_PAYLOAD_BYTES, b"\xab" * DEFAULT_MAX_PAYLOAD_BYTES),
    ]
    async with harness.open_store() as store:
        queue = store.queue("payloads")
        ids = []
        for payload, expected in cases:
            job_id = await queue.enqueue(_any(payload))
            ids.append(job_id)
            job = await _get(queue, job_id)
            assert type(job.payload) is bytes, f"get_job payload is a {type(job.payload).__name__}"
            assert job.payload == expected, (
                f"payload of {len(expected)} bytes came back as {len(job.payload)} different bytes"
            )
        many = await queue.enqueue_many([bytearray(b"ba"), memoryview(b"mv"), b""])
        expected_by_id = dict(zip(ids, [expected for _, expected in cases], strict=True))
        expected_by_id.update(zip(many, [b"ba", b"mv", b""], strict=True))
        handles = await queue.claim_batch("w", len(expected_by_id))
        claimed = {h.id: h.job.payload for h in handles}
        assert set(claimed) == set(expected_by_id), "not every payload job could be claimed"
        for job_id, expected in expected_by_id.items():
            assert claimed[job_id] == expected, (
                f"the claimed snapshot of job {job_id} does not carry its payload exactly"
            )


@_check
async def q2_payload_must_be_bytes_within_the_maximum_size(harness: EngineHarness) -> None:
    """Q2: ``str`` and other types are InvalidArgument (no pickling), as is a payload over
    the maximum (default 1 MiB); nothing is enqueued and nobody is woken."""
    async with harness.open_store() as store:
        queue = store.queue("bad-payloads")
        async with store.open_wake_listener([queue]) as listener:
            for bad in ["text", 42, None, [1, 2], {"a": 1}, 1.5, object()]:
                await _raises(InvalidArgument, f"enqueue({type(bad).__name__})", queue.enqueue, bad)
            released = memoryview(b"released")
            released.release()
            await _raises(InvalidArgument, "enqueue(released memoryview)", queue.enqueue, released)
            await _raises(
                InvalidArgument,
                "enqueue(1 MiB + 1 byte)",
                queue.enqueue,
                b"x" * (DEFAULT_MAX_PAYLOAD_BYTES + 1),
            )
            await _no_wake(listener, "after rejected payloads")
        await _nothing_claimable(queue, "after rejected payloads")


@_check
async def q2_enqueue_rejects_invalid_options_without_effect(harness: EngineHarness) -> None:
    """Q2/Q12: bad ``priority`` (outside int32, not an int), ``delay_s`` (NaN, inf, bool,
    str) or ``max_attempts`` are InvalidArgument, with no row and no wake."""
    nan, inf = float("nan"), float("inf")
    bad_kwargs: list[dict[str, object]] = [
        {"priority": 2**31},
        {"priority": -(2**31) - 1},
        {"priority": 1.0},
        {"priority": "1"},
        {"priority": None},
        {"delay_s": nan},
        {"delay_s": inf},
        {"delay_s": -inf},
        {"delay_s": True},
        {"delay_s": "5"},
        {"delay_s": 2**1024},
        {"priority": 2**1024},
        {"max_attempts": 0},
    ]
    async with harness.open_store() as store:
        queue = store.queue("bad-options")
        async with store.open_wake_listener([queue]) as listener:
            for kwargs in bad_kwargs:
                await _raises(
                    InvalidArgument, f"enqueue(**{kwargs!r})", queue.enqueue, b"x", **kwargs
                )
                await _raises(
                    InvalidArgument,
                    f"enqueue_many(**{kwargs!r})",
                    queue.enqueue_many,
                    [b"x"],
                    **kwargs,
                )
            await _no_wake(listener, "after rejected options")
        await _nothing_claimable(queue, "after rejected options")


@_check
async def q2_priority_accepts_the_int32_range(harness: EngineHarness) -> None:
    """Q2: priorities from -2**31 to 2**31 - 1 are stored as given; larger runs first."""
    async with harness.open_store() as store:
        queue = store.queue("priorities")
        low = await queue.enqueue(b"low", priority=INT32_MIN)
        zero = await queue.enqueue(b"zero")
        high = await queue.enqueue(b"high", priority=INT32_MAX)
        for job_id, priority in [(low, INT32_MIN), (zero, 0), (high, INT32_MAX)]:
            job = await _get(queue, job_id)
            assert job.priority == priority, (
                f"job {job_id} has priority {job.priority}, expected {priority}"
            )
        for job_id in [high, zero, low]:
            await _claim_id(queue, job_id)


@_check
async def q2_ids_increase_in_enqueue_order(harness: EngineHarness) -> None:
    """Q2: ids increase in enqueue order across enqueue, enqueue_many, transactions and
    queues of one engine; enqueue_many returns ids in payload order."""
    async with harness.open_store() as store:
        a = store.queue("ids-a")
        b = store.queue("ids-b")
        rows: list[tuple[Queue, int, bytes]] = [(a, await a.enqueue(b"1"), b"1")]
        rows += [
            (a, i, p) for i, p in zip(await a.enqueue_many([b"2", b"3"]), [b"2", b"3"], strict=True)
        ]
        rows.append((b, await b.enqueue(b"5"), b"5"))
        async with store.transaction() as tx:
            rows.append((a, await tx.enqueue(a, b"6"), b"6"))
            rows.append((b, await tx.enqueue("ids-b", b"7"), b"7"))
        rows += [
            (b, i, p) for i, p in zip(await b.enqueue_many([b"8", b"9"]), [b"8", b"9"], strict=True)
        ]
        rows.append((a, await a.enqueue(b"10"), b"10"))
        ids = [job_id for _, job_id, _ in rows]
        assert all(isinstance(i, int) and not isinstance(i, bool) for i in ids), (
            f"job ids must be ints; got {ids!r}"
        )
        increasing = all(x < y for x, y in itertools.pairwise(ids))
        assert increasing, f"ids do not strictly increase in enqueue order: {ids}"
        for queue, job_id, payload in rows:
            job = await _get(queue, job_id)
            assert job.payload == payload, f"job {job_id} holds another payload than enqueued"


@_check
async def q2_enqueue_many_is_atomic_with_one_clock_read(harness: EngineHarness) -> None:
    """Q2: enqueue_many resolves every row with one clock read and is all or none: one bad
    payload (wrong type or too large) anywhere in the list enqueues nothing and wakes
    nobody; an empty list returns ``[]`` (decision 6)."""
    async with harness.open_store() as store:
        queue = store.queue("many", QueueOpts(expires_in_s=50))
        async with store.open_wake_listener([queue]) as listener:
            for bad in [
                [b"ok", _any("not bytes"), b"ok"],
                [b"ok", b"y" * (DEFAULT_MAX_PAYLOAD_BYTES + 1)],
                [_any(None)],
            ]:
                await _raises(
                    InvalidArgument, "enqueue_many with one bad payload", queue.enqueue_many, bad
                )
            for bad_arg in [b"single bytes", "a string", 5, None]:
                await _raises(
                    InvalidArgument, f"enqueue_many({bad_arg!r})", queue.enqueue_many, bad_arg
                )
            assert await queue.enqueue_many([]) == [], "enqueue_many([]) did not return []"
            await _no_wake(listener, "after rejected or empty enqueue_many")
            await _nothing_claimable(queue, "after rejected or empty enqueue_many")
            now = await harness.now()
            payloads = [b"p%d" % i for i in range(5)]
            ids = await queue.enqueue_many(iter(payloads), priority=4, delay_s=2)
            assert len(ids) == len(payloads), f"enqueue_many of 5 payloads returned {ids!r}"
            for job_id, payload in zip(ids, payloads, strict=True):
                job = await _get(queue, job_id)
                seen = (job.payload, job.priority, job.enqueued_at, job.run_at, job.expires_at)
                expected = (payload, 4, now, _after(now, 2), _after(now, 50))
                assert seen == expected, (
                    f"job {job_id} of enqueue_many shows (payload, priority, enqueued_at, run_at, "
                    f"expires_at) = {seen!r}, expected {expected!r}"
                )


@_check
async def q2_enqueue_wakes_its_queue(harness: EngineHarness) -> None:
    """Q2: a committed enqueue or enqueue_many wakes its queue's listeners (names or
    handles), not the listeners of other queues."""
    async with harness.open_store() as store:
        queue = store.queue("woken")
        other = store.queue("not-woken")
        async with (
            store.open_wake_listener([queue]) as by_handle,
            store.open_wake_listener(["woken", "third"]) as by_name,
            store.open_wake_listener([other]) as bystander,
        ):
            assert by_handle.queues == frozenset({"woken"}), (
                f"listener.queues is {by_handle.queues!r}"
            )
            await _no_wake(by_handle, "before any enqueue")
            await queue.enqueue(b"x")
            await _wait_for_wakes(by_handle, {"woken"}, "after enqueue (listener by handle)")
            await _wait_for_wakes(by_name, {"woken"}, "after enqueue (listener by name)")
            await _no_wake(by_handle, "a second wait after one enqueue")
            await queue.enqueue_many([b"a", b"b", b"c"])
            await _wait_for_wakes(by_handle, {"woken"}, "after enqueue_many")
            await _no_wake(by_handle, "a second wait after one enqueue_many")
            await _wait_for_wakes(by_name, {"woken"}, "after enqueue_many (listener by name)")
            await _no_wake(bystander, "a listener of another queue")
            await _raises(InvalidArgument, "listener.wait(-1)", by_handle.wait, -1)


# -- Q3 claim -----------------------------------------------------------------------------


@_check
async def q3_claim_order_is_priority_then_run_at_then_id(harness: EngineHarness) -> None:
    """Q3: claimable rows are handed out by priority DESC, then run_at ASC, then id ASC;
    rows not yet due wait."""
    async with harness.open_store() as store:
        now = await harness.now()
        queue = store.queue("order")
        a = await queue.enqueue(b"a", priority=0, run_at=_after(now, -10))
        b = await queue.enqueue(b"b", priority=5)
        c = await queue.enqueue(b"c", priority=5, run_at=_after(now, -5))
        d = await queue.enqueue(b"d", priority=0, run_at=_after(now, -10))
        e = await queue.enqueue(b"e", priority=-3, delay_s=-100)
        f = await queue.enqueue(b"f", priority=5, run_at=_after(now, -5))
        g = await queue.enqueue(b"g", priority=10, delay_s=5)
        expected = [c, f, b, a, d, e]
        got = []
        while (handle := await queue.claim_one("w")) is not None:
            got.append(handle.id)
        assert got == expected, f"claim order was {got}, expected {expected} (priority, run_at, id)"
        await harness.advance(5)
        await _claim_id(queue, g)


@_check
async def q3_reclaimable_rows_take_their_place_in_the_order(harness: EngineHarness) -> None:
    """Q3: a lapsed claim with attempts left competes with pending rows in the same
    order (priority DESC, run_at ASC, id ASC)."""
    async with harness.open_store() as store:
        queue = store.queue("reclaim-order", QueueOpts(visibility_timeout_s=10))
        middle = await queue.enqueue(b"middle", priority=1)
        await _claim_id(queue, middle, "w1")
        low = await queue.enqueue(b"low", priority=0)
        high = await queue.enqueue(b"high", priority=2)
        await harness.advance(11)
        got = [h.id for h in [await _claim(queue, "w2") for _ in range(3)]]
        assert got == [high, middle, low], (
            f"claim order with a reclaimable row was {got}, expected {[high, middle, low]}"
        )


@_check
async def q3_claim_batch_takes_the_best_n(harness: EngineHarness) -> None:
    """Q3: claim_batch(n) claims the n best claimable rows, at most what there is; an
    empty or drained queue gives ``[]`` / ``None``."""
    async with harness.open_store() as store:
        queue = store.queue("batch")
        assert await queue.claim_one("w") is None, "claim_one on an empty queue returned a job"
        assert await queue.claim_batch("w", 5) == [], "claim_batch on an empty queue returned jobs"
        ids = {p: await queue.enqueue(b"%d" % p, priority=p) for p in [1, 4, 2, 5, 3]}
        first = await queue.claim_batch("w", 3)
        assert {h.id for h in first} == {ids[5], ids[4], ids[3]}, (
            f"claim_batch(3) took {sorted(h.id for h in first)}, expected the priorities 5, 4, 3"
        )
        rest = await queue.claim_batch("w", 10)
        assert {h.id for h in rest} == {ids[1], ids[2]}, (
            f"claim_batch(10) took {sorted(h.id for h in rest)}, expected the 2 remaining jobs"
        )
        assert await queue.claim_batch("w", 10) == [], "a drained queue still handed out jobs"


@_check
async def q3_claim_batch_with_n_at_most_zero_has_no_effect(harness: EngineHarness) -> None:
    """Q3 and decision 5: ``n <= 0`` returns ``[]`` before any effect, not even the
    pre-claim sweep; worker_id and the type of n are still validated."""
    async with harness.open_store() as store:
        queue = store.queue("zero-n", QueueOpts(visibility_timeout_s=10, max_attempts=1))
        spent = await queue.enqueue(b"spent", priority=1)
        await _claim_id(queue, spent)
        await harness.advance(11)
        ready = await queue.enqueue(b"ready")
        for n in [0, -1, -(2**40)]:
            got = await queue.claim_batch("w", n)
            assert got == [], f"claim_batch('w', {n}) returned {got!r}, expected []"
        await _raises(InvalidArgument, "claim_batch('', 0)", queue.claim_batch, "", 0)
        job = await _assert_state(queue, spent, "processing", "after claim_batch(n <= 0)")
        assert job.attempts == 1, (
            f"after claim_batch(n <= 0) the lapsed row has {job.attempts} attempts"
        )
        job = await _assert_state(queue, ready, "pending", "after claim_batch(n <= 0)")
        assert job.attempts == 0, f"claim_batch(n <= 0) claimed job {ready}"
        await _claim_id(queue, ready)
        await _assert_dead(harness, queue, spent, MAX_ATTEMPTS_EXCEEDED, "the next real claim")


@_check
async def q3_claim_batch_n_must_be_an_int(harness: EngineHarness) -> None:
    """Q3: n must be an int: a float, str or None is InvalidArgument and claims nothing."""
    async with harness.open_store() as store:
        queue = store.queue("n-type")
        job_id = await queue.enqueue(b"x")
        for bad in [1.0, 2.5, "1", None, float("nan")]:
            await _raises(
                InvalidArgument, f"claim_batch('w', {bad!r})", queue.claim_batch, "w", bad
            )
        await _assert_state(queue, job_id, "pending", "after rejected n values")


@_check
async def q3_worker_id_must_be_a_non_empty_str(harness: EngineHarness) -> None:
    """Q3 and decision 9: worker_id is a non-empty str of at most 200 characters without
    NUL or lone surrogates; anything else is InvalidArgument and claims nothing."""
    async with harness.open_store() as store:
        queue = store.queue("worker-ids")
        ids = await queue.enqueue_many([b"1", b"2"])
        for bad in ["", None, 7, b"worker", ["w"], "w\x00", "\ud800", "w" * 201]:
            shown = bad if not isinstance(bad, str) or len(bad) < 20 else f"<{len(bad)} chars>"
            await _raises(InvalidArgument, f"claim_one({shown!r})", queue.claim_one, bad)
            await _raises(InvalidArgument, f"claim_batch({shown!r}, 1)", queue.claim_batch, bad, 1)
        for job_id in ids:
            await _assert_state(queue, job_id, "pending", "after rejected worker ids")
        for worker in ["w" * 200, "wörker-ü 1"]:
            handle = await _claim(queue, worker)
            job = await _get(queue, handle.id)
            assert job.claimed_by == worker, (
                f"claimed_by is {job.claimed_by!r}, expected {worker!r}"
            )


@_check
async def q3_claim_sets_the_claim_fields(harness: EngineHarness) -> None:
    """Q3: a claim sets state processing, attempts + 1, claimed_by, claimed_at = now and
    claim_expires_at = now + the row's own visibility_timeout_s; the handle's snapshot is
    the claimed row."""
    async with harness.open_store() as store:
        short = store.queue("fields", QueueOpts(visibility_timeout_s=17))
        long = store.queue("fields", QueueOpts(visibility_timeout_s=1000))
        short_id = await short.enqueue(b"short", priority=1)
        long_id = await long.enqueue(b"long")
        await harness.advance(2)
        now = await harness.now()
        handles = await short.claim_batch("worker-7", 2)
        assert {h.id for h in handles} == {short_id, long_id}, (
            "claim_batch(2) did not take both jobs"
        )
        for handle in handles:
            own = 17 if handle.id == short_id else 1000
            row = await _get(short, handle.id)
            assert handle.job == row, (
                f"the handle's snapshot {handle.job!r} differs from the row {row!r}"
            )
            assert handle.id == row.id, "handle.id differs from the row's id"
            seen = (row.state, row.attempts, row.claimed_by, row.claimed_at, row.claim_expires_at)
            expected = ("processing", 1, "worker-7", now, _after(now, own))
            assert seen == expected, (
                f"claimed job {row.id}: (state, attempts, claimed_by, claimed_at, "
                f"claim_expires_at) = {seen!r}, expected {expected!r}"
            )
            assert row.run_at == row.enqueued_at, "a claim changed run_at"


@_check
async def q3_delayed_rows_are_not_claimable_until_due(harness: EngineHarness) -> None:
    """Q3: a pending row is claimable when ``run_at <= now``: not before, exactly at."""
    async with harness.open_store() as store:
        queue = store.queue("delayed")
        job_id = await queue.enqueue(b"x", delay_s=30)
        assert await queue.claim_one("w") is None, "a job delayed 30 s was claimable at once"
        await harness.advance(30 - INSTANT_S)
        assert await queue.claim_one("w") is None, "a delayed job was claimable before run_at"
        await harness.advance(INSTANT_S)
        await _claim_id(queue, job_id)


@_check
async def q3_expired_rows_are_never_claimed(harness: EngineHarness) -> None:
    """Q3: a row with ``now > expires_at`` is never claimed, pending or lapsed (it waits for
    the sweep); at ``now == expires_at`` it is not expired yet."""
    async with harness.open_store() as store:
        queue = store.queue("expired", QueueOpts(expires_in_s=60, visibility_timeout_s=10))
        first = await queue.enqueue(b"first", priority=1)
        second = await queue.enqueue(b"second")
        await harness.advance(60)
        await _claim_id(queue, first)
        await harness.advance(INSTANT_S)
        assert await queue.claim_one("w") is None, "an expired pending job was claimed"
        await harness.advance(11)
        assert await queue.claim_one("w") is None, "an expired, lapsed claim was reclaimed"
        await _assert_state(queue, second, "pending", "an expired row before the sweep")
        job = await _assert_state(queue, first, "processing", "an expired lapsed row")
        assert job.attempts == 1, f"an expired row was reclaimed: attempts {job.attempts}"


@_check
async def q3_reclaim_after_the_deadline_consumes_an_attempt(harness: EngineHarness) -> None:
    """Q3: after the deadline another worker reclaims the row: attempts + 1, new
    claimed_by / claimed_at / deadline."""
    async with harness.open_store() as store:
        queue = store.queue("reclaim", QueueOpts(visibility_timeout_s=30))
        job_id = await queue.enqueue(b"x")
        first = await _claim_id(queue, job_id, "w1")
        assert first.job.attempts == 1, f"first claim shows attempts {first.job.attempts}"
        await harness.advance(31)
        now = await harness.now()
        second = await _claim_id(queue, job_id, "w2")
        row = await _get(queue, job_id)
        seen = (row.attempts, row.claimed_by, row.claimed_at, row.claim_expires_at)
        expected = (2, "w2", now, _after(now, 30))
        assert seen == expected, (
            f"reclaimed row: (attempts, claimed_by, claimed_at, claim_expires_at) = {seen!r}, "
            f"expected {expected!r}"
        )
        assert second.job.attempts == 2, (
            f"the reclaim's snapshot shows attempts {second.job.attempts}"
        )


@_check
async def q3_reclaimed_holder_is_refused_and_the_row_untouched(harness: EngineHarness) -> None:
    """Q3/Q4: once another worker reclaimed the row, the first holder's heartbeat, ack,
    retry and fail return False and change nothing; the new holder's work."""
    async with harness.open_store() as store:
        queue = store.queue("loser", QueueOpts(visibility_timeout_s=30))
        ids = await queue.enqueue_many([b"hb", b"ack", b"retry", b"fail"])
        losers = {h.id: h for h in await queue.claim_batch("loser", 4)}
        assert set(losers) == set(ids), "claim_batch(4) did not claim the 4 jobs"
        await harness.advance(31)
        winners = {h.id: h for h in await queue.claim_batch("winner", 4)}
        assert set(winners) == set(ids), "the 4 lapsed jobs were not all reclaimed"
        operations: list[tuple[str, Callable[[JobHandle], Awaitable[bool]]]] = [
            ("heartbeat", lambda h: h.heartbeat()),
            ("ack", lambda h: h.ack()),
            ("retry", lambda h: h.retry("late", delay_s=0)),
            ("fail", lambda h: h.fail("late")),
        ]
        for job_id, (name, operation) in zip(ids, operations, strict=True):
            before = await _get(queue, job_id)
            result = await operation(losers[job_id])
            assert result is False, (
                f"the reclaimed holder's {name} returned {result!r}, expected False"
            )
            after = await _get(queue, job_id)
            assert after == before, f"the refused {name} changed the row: {before!r} -> {after!r}"
        for job_id in ids:
            assert await winners[job_id].ack() is True, (
                f"the new holder of job {job_id} could not ack"
            )


@_check
async def q3_pre_claim_sweep_dead_letters_lapsed_claims_at_budget(harness: EngineHarness) -> None:
    """Q3 step 1: a lapsed claim with no attempts left stays processing until the next
    claim on *its* queue, which dead-letters it ("max attempts exceeded"), whether or not
    that claim hands anything out."""
    async with harness.open_store() as store:
        queue = store.queue("budget", QueueOpts(visibility_timeout_s=10, max_attempts=2))
        other = store.queue("budget-elsewhere")
        await other.enqueue(b"other")
        spent = await queue.enqueue(b"spent")
        await _claim_id(queue, spent, "w1")
        await harness.advance(11)
        await _claim_id(queue, spent, "w2")
        await harness.advance(11)
        job = await _assert_state(
            queue, spent, "processing", "a lapsed row at budget before a claim"
        )
        assert job.attempts == 2, f"attempts is {job.attempts}, expected 2"
        await _claim(other, "w3", "claim on another queue: ")
        await _assert_state(queue, spent, "processing", "after a claim on another queue")
        assert await queue.claim_one("w3") is None, "a lapsed claim at its budget was reclaimed"
        dead = await _assert_dead(harness, queue, spent, MAX_ATTEMPTS_EXCEEDED, "pre-claim sweep")
        now = await harness.now()
        assert dead.died_at == now, f"died_at is {dead.died_at}, expected the claim's now ({now})"
        assert (dead.attempts, dead.claimed_by) == (2, "w2"), (
            f"decision 1: the dead row keeps attempts and claimed_by; got "
            f"{(dead.attempts, dead.claimed_by)!r}, expected (2, 'w2')"
        )
        # The same when the sweeping claim does hand something out.
        once = store.queue("budget-once", QueueOpts(visibility_timeout_s=10, max_attempts=1))
        lapsed = await once.enqueue(b"lapsed", priority=9)
        await _claim_id(once, lapsed)
        await harness.advance(11)
        fresh = await once.enqueue(b"fresh")
        await _claim_id(once, fresh)
        await _assert_dead(
            harness, once, lapsed, MAX_ATTEMPTS_EXCEEDED, "sweep by a fruitful claim"
        )


@_check
async def q3_concurrent_claims_hand_out_each_job_exactly_once(harness: EngineHarness) -> None:
    """Q3: ten trio tasks claiming concurrently (claim_one and claim_batch) hand out every
    job exactly once; after the leases lapse, concurrent reclaims again hand out each
    (job id, attempts) pair exactly once, and the old holders are refused."""
    async with harness.open_store() as store:
        queue = store.queue("exactly-once", QueueOpts(visibility_timeout_s=60, max_attempts=5))
        ids = await queue.enqueue_many([b"%d" % i for i in range(64)])

        async def claim_everything(rounds: list[tuple[str, JobHandle]]) -> None:
            async def claimer(worker: str, k: int) -> None:
                while True:
                    if k == 1:
                        handle = await queue.claim_one(worker)
                        batch = [] if handle is None else [handle]
                    else:
                        batch = await queue.claim_batch(worker, k)
                    if not batch:
                        return
                    rounds.extend((worker, h) for h in batch)
                    await trio.lowlevel.checkpoint()

            async with trio.open_nursery() as nursery:
                for i in range(10):
                    nursery.start_soon(claimer, f"worker-{i}", 1 + i % 4)

        first_round: list[tuple[str, JobHandle]] = []
        second_round: list[tuple[str, JobHandle]] = []
        for attempt in [1, 2]:
            handouts: list[tuple[str, JobHandle]] = first_round if attempt == 1 else []
            await claim_everything(handouts)
            counts = Counter(h.id for _, h in handouts)
            twice = sorted(job_id for job_id, n in counts.items() if n > 1)
            assert not twice, f"round {attempt}: jobs handed out more than once: {twice}"
            missing = sorted(set(ids) - set(counts))
            assert not missing, f"round {attempt}: jobs never handed out: {missing}"
            tokens = {h.job.attempts for _, h in handouts}
            assert tokens == {attempt}, f"round {attempt}: claim tokens were {sorted(tokens)}"
            for worker, handle in handouts:
                row = await _get(queue, handle.id)
                assert row.claimed_by == worker, (
                    f"round {attempt}: job {handle.id} was handed to {worker} but the row says "
                    f"{row.claimed_by!r}"
                )
            if attempt == 1:
                await harness.advance(61)
            else:
                second_round = handouts
        refused = [await h.ack() for _, h in first_round]
        assert not any(refused), (
            f"{sum(refused)} acks of first-round holders succeeded after reclaim"
        )
        acked = [await h.ack() for _, h in second_round]
        assert all(acked), f"{acked.count(False)} acks of second-round holders were refused"


# -- Q4 job handle operations -------------------------------------------------------------


@_check
async def q4_heartbeat_is_an_absolute_reset(harness: EngineHarness) -> None:
    """Q4: heartbeat(extend_s) sets claim_expires_at = now + extend_s (it may shorten the
    lease; repeating it does not add up); claimed_at and attempts do not change."""
    async with harness.open_store() as store:
        queue = store.queue("heartbeat", QueueOpts(visibility_timeout_s=30))
        job_id = await queue.enqueue(b"x")
        claimed_at = await harness.now()
        handle = await _claim_id(queue, job_id)
        await harness.advance(10)
        now = await harness.now()
        assert await handle.heartbeat(5) is True, "a heartbeat within the lease was refused"
        row = await _get(queue, job_id)
        assert row.claim_expires_at == _after(now, 5), (
            f"heartbeat(5) set claim_expires_at {row.claim_expires_at}, expected now + 5 s "
            f"({_after(now, 5)}), not an extension of the old deadline"
        )
        assert (row.claimed_at, row.attempts) == (claimed_at, 1), (
            f"heartbeat changed (claimed_at, attempts) to {(row.claimed_at, row.attempts)!r}"
        )
        await harness.advance(5)
        now = await harness.now()
        for _ in range(3):
            assert await handle.heartbeat(100) is True, "a repeated heartbeat was refused"
        row = await _get(queue, job_id)
        assert row.claim_expires_at == _after(now, 100), (
            f"three heartbeat(100) at one instant set claim_expires_at {row.claim_expires_at}, "
            f"expected now + 100 s ({_after(now, 100)})"
        )
        assert (row.claimed_at, row.attempts, row.state) == (claimed_at, 1, "processing"), (
            "heartbeat changed claimed_at, attempts or state"
        )


@_check
async def q4_heartbeat_defaults_to_the_rows_visibility_timeout(harness: EngineHarness) -> None:
    """Q4: heartbeat() without extend_s sets claim_expires_at = now + the row's own
    visibility_timeout_s."""
    async with harness.open_store() as store:
        short = store.queue("hb-default", QueueOpts(visibility_timeout_s=20))
        long = store.queue("hb-default", QueueOpts(visibility_timeout_s=500))
        short_id = await short.enqueue(b"s", priority=1)
        long_id = await long.enqueue(b"l")
        h_short = await _claim_id(long, short_id)
        h_long = await _claim_id(short, long_id)
        await harness.advance(7)
        now = await harness.now()
        for handle, own in [(h_short, 20), (h_long, 500)]:
            assert await handle.heartbeat() is True, "heartbeat() within the lease was refused"
            row = await _get(short, handle.id)
            assert row.claim_expires_at == _after(now, own), (
                f"heartbeat() set claim_expires_at {row.claim_expires_at}, expected now + the "
                f"row's visibility_timeout_s {own} ({_after(now, own)})"
            )


@_check
async def q4_heartbeat_rejects_invalid_extend(harness: EngineHarness) -> None:
    """Decision 3: extend_s must be a finite number > 0 or None; otherwise
    InvalidArgument, and the lease is unchanged."""
    async with harness.open_store() as store:
        queue = store.queue("hb-invalid")
        await queue.enqueue(b"x")
        handle = await _claim(queue)
        before = await _get(queue, handle.id)
        for bad in [0, 0.0, -1, float("nan"), float("inf"), True, "5"]:
            await _raises(InvalidArgument, f"heartbeat({bad!r})", handle.heartbeat, bad)
        after = await _get(queue, handle.id)
        assert after == before, "a rejected heartbeat changed the row"
        assert await handle.ack() is True, "a rejected heartbeat spoiled the handle"


@_check
async def q4_late_heartbeat_is_refused(harness: EngineHarness) -> None:
    """Q4: a heartbeat after the deadline returns False, leaves the row as it was, and the
    row stays reclaimable."""
    async with harness.open_store() as store:
        queue = store.queue("late-hb", QueueOpts(visibility_timeout_s=30))
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        await harness.advance(31)
        before = await _get(queue, job_id)
        for extend in [None, 1000]:
            result = await handle.heartbeat(extend)
            assert result is False, (
                f"a late heartbeat({extend}) returned {result!r}, expected False"
            )
        after = await _get(queue, job_id)
        assert after == before, f"a refused heartbeat changed the row: {before!r} -> {after!r}"
        again = await _claim_id(queue, job_id, "rescuer")
        assert again.job.attempts == 2, "the row was not reclaimed after a refused heartbeat"


@_check
async def q4_claim_is_valid_at_the_deadline_instant(harness: EngineHarness) -> None:
    """Q4: at ``now == claim_expires_at`` the claim is still valid (heartbeat, ack, retry,
    fail and ack_batch succeed) and the row is not reclaimable."""
    async with harness.open_store() as store:
        queue = store.queue("deadline", QueueOpts(visibility_timeout_s=30))
        ids = await queue.enqueue_many([b"hb", b"ack", b"retry", b"fail", b"batch"])
        handles = {h.id: h for h in await queue.claim_batch("holder", 5)}
        assert set(handles) == set(ids), "claim_batch(5) did not claim the 5 jobs"
        await harness.advance(30)
        assert await queue.claim_one("thief") is None, "a row was reclaimed at now == deadline"
        hb, ack, retry, fail, batch = ids
        assert await handles[hb].heartbeat() is True, "heartbeat at now == deadline was refused"
        assert await handles[ack].ack() is True, "ack at now == deadline was refused"
        assert await handles[retry].retry(delay_s=100) is True, (
            "retry at now == deadline was refused"
        )
        assert await handles[fail].fail() is True, "fail at now == deadline was refused"
        assert await queue.ack_batch([batch]) == 1, "ack_batch at now == deadline did not count"


@_check
async def q4_claim_lapses_one_instant_after_the_deadline(harness: EngineHarness) -> None:
    """Q4: one instant after the deadline every holder operation returns False and leaves
    the row untouched, and the row is reclaimable."""
    async with harness.open_store() as store:
        queue = store.queue("lapsed", QueueOpts(visibility_timeout_s=30))
        ids = await queue.enqueue_many([b"hb", b"ack", b"retry", b"fail", b"batch"])
        handles = {h.id: h for h in await queue.claim_batch("holder", 5)}
        await harness.advance(30 + INSTANT_S)
        operations: list[tuple[str, Callable[[JobHandle], Awaitable[bool]]]] = [
            ("heartbeat", lambda h: h.heartbeat()),
            ("ack", lambda h: h.ack()),
            ("retry", lambda h: h.retry("late", delay_s=0)),
            ("fail", lambda h: h.fail("late")),
        ]
        for job_id, (name, operation) in zip(ids, operations, strict=False):
            before = await _get(queue, job_id)
            result = await operation(handles[job_id])
            assert result is False, f"{name} one instant after the deadline returned {result!r}"
            after = await _get(queue, job_id)
            assert after == before, f"the refused {name} changed the row: {before!r} -> {after!r}"
        assert await queue.ack_batch([ids[-1]]) == 0, "ack_batch counted a lapsed claim"
        reclaimed = await queue.claim_batch("rescuer", 10)
        assert {h.id for h in reclaimed} == set(ids), (
            f"one instant after the deadline, reclaims took {sorted(h.id for h in reclaimed)}, "
            f"expected all of {ids}"
        )


@_check
async def q4_ack_deletes_the_row(harness: EngineHarness) -> None:
    """Q4: ack deletes the row (not dead-lettered: get_job shows nothing)."""
    async with harness.open_store() as store:
        queue = store.queue("ack")
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        assert await handle.ack() is True, "ack of a valid claim was refused"
        await _assert_gone(queue, job_id, "after ack")
        assert await queue.cancel(job_id) is False, "cancel found a live row after ack"
        await _nothing_claimable(queue, "after ack")


@_check
async def q4_retry_at_budget_dead_letters(harness: EngineHarness) -> None:
    """Q4: retry on the last allowed attempt moves the row to dead with
    ``last_error = error`` or "max attempts exceeded" (a given delay is ignored); claim
    fields are kept (decision 1)."""
    async with harness.open_store() as store:
        queue = store.queue("retry-budget", QueueOpts(max_attempts=1))
        cases: list[tuple[dict[str, Any], str]] = [
            ({}, MAX_ATTEMPTS_EXCEEDED),
            ({"error": "boom"}, "boom"),
            ({"error": ""}, ""),
            ({"error": "boom", "delay_s": 30}, "boom"),
            ({"delay_s": 0}, MAX_ATTEMPTS_EXCEEDED),
        ]
        for kwargs, last_error in cases:
            job_id = await queue.enqueue(b"x")
            claimed_at = await harness.now()
            handle = await _claim_id(queue, job_id, "holder")
            await harness.advance(1)
            now = await harness.now()
            assert await handle.retry(**kwargs) is True, (
                f"retry(**{kwargs!r}) at budget was refused"
            )
            dead = await _assert_dead(harness, queue, job_id, last_error, f"retry(**{kwargs!r})")
            seen = (dead.died_at, dead.attempts, dead.claimed_by, dead.claimed_at)
            expected = (now, 1, "holder", claimed_at)
            assert seen == expected, (
                f"retry(**{kwargs!r}) at budget: (died_at, attempts, claimed_by, claimed_at) = "
                f"{seen!r}, expected {expected!r}"
            )


@_check
async def q4_retry_below_budget_with_an_explicit_delay(harness: EngineHarness) -> None:
    """Q4: below budget, retry puts the row back to pending with run_at = now + delay_s
    (0 = ready now), last_error = error (None clears it), attempts kept, claim fields
    cleared (decision 1)."""
    async with harness.open_store() as store:
        queue = store.queue("retry-delay", QueueOpts(max_attempts=5, backoff_base_s=1000))
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        await harness.advance(2)
        now = await harness.now()
        assert await handle.retry("first failure", delay_s=30) is True, "retry was refused"
        row = await _get(queue, job_id)
        seen = (row.state, row.run_at, row.last_error, row.attempts)
        expected = ("pending", _after(now, 30), "first failure", 1)
        assert seen == expected, f"after retry(delay_s=30): {seen!r}, expected {expected!r}"
        assert (row.claimed_by, row.claimed_at, row.claim_expires_at) == (None, None, None), (
            f"retry left claim fields {(row.claimed_by, row.claimed_at, row.claim_expires_at)!r}"
        )
        await harness.advance(30 - INSTANT_S)
        assert await queue.claim_one("w") is None, "a retried job was claimable before its delay"
        await harness.advance(INSTANT_S)
        handle = await _claim_id(queue, job_id)
        assert handle.job.attempts == 2, f"the second claim shows attempts {handle.job.attempts}"
        now = await harness.now()
        assert await handle.retry(delay_s=0) is True, "retry(delay_s=0) was refused"
        row = await _get(queue, job_id)
        assert (row.run_at, row.last_error, row.state) == (now, None, "pending"), (
            f"retry(delay_s=0) gave (run_at, last_error, state) = "
            f"{(row.run_at, row.last_error, row.state)!r}, expected ({now}, None, 'pending')"
        )
        handle = await _claim_id(queue, job_id)
        assert handle.job.attempts == 3, "a job retried with delay_s=0 was not ready at once"


@_check
async def q4_retry_and_fail_reject_invalid_arguments_without_effect(harness: EngineHarness) -> None:
    """Q4/Q12 and decisions 4/9: a negative or non-finite delay_s, or an error that is not
    a storable str, is InvalidArgument; the row is untouched and the handle not consumed."""
    async with harness.open_store() as store:
        queue = store.queue("retry-invalid")
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        before = await _get(queue, job_id)
        nan, inf = float("nan"), float("inf")
        for bad in [-1, -0.001, nan, inf, True, "5"]:
            await _raises(InvalidArgument, f"retry(delay_s={bad!r})", handle.retry, delay_s=bad)
        for bad_error in [5, b"bytes", "a\x00b", "\ud800", "e" * 65537]:
            shown = bad_error if not isinstance(bad_error, str) or len(bad_error) < 20 else "<long>"
            await _raises(InvalidArgument, f"retry(error={shown!r})", handle.retry, bad_error)
            await _raises(InvalidArgument, f"fail(error={shown!r})", handle.fail, bad_error)
        after = await _get(queue, job_id)
        assert after == before, "a rejected retry/fail changed the row"
        assert await handle.fail("e" * 65536) is True, (
            "fail with a 65536-character error (decision 9's limit) was refused or the "
            "handle was consumed by the rejected calls"
        )


@_check
async def q4_fail_dead_letters_now(harness: EngineHarness) -> None:
    """Q4: fail moves the row to dead at once, whatever attempts are left, with
    ``last_error = error`` or "failed"."""
    async with harness.open_store() as store:
        queue = store.queue("fail", QueueOpts(max_attempts=10))
        for kwargs, last_error in [
            ({}, FAILED),
            ({"error": "bad input"}, "bad input"),
            ({"error": ""}, ""),
        ]:
            job_id = await queue.enqueue(b"x")
            handle = await _claim_id(queue, job_id, "holder")
            assert await handle.fail(**kwargs) is True, f"fail(**{kwargs!r}) was refused"
            dead = await _assert_dead(harness, queue, job_id, last_error, f"fail(**{kwargs!r})")
            now = await harness.now()
            assert (dead.died_at, dead.attempts, dead.claimed_by) == (now, 1, "holder"), (
                f"fail(**{kwargs!r}): (died_at, attempts, claimed_by) = "
                f"{(dead.died_at, dead.attempts, dead.claimed_by)!r}, expected ({now}, 1, 'holder')"
            )


@_check
async def q4_ack_retry_fail_are_one_shot(harness: EngineHarness) -> None:
    """Q4: after ack, retry or fail returned (True or False), every further operation on
    the handle, heartbeat included, raises HandleConsumed and changes nothing."""
    async with harness.open_store() as store:
        opts = QueueOpts(visibility_timeout_s=30)
        operations: list[tuple[str, Callable[[JobHandle], Awaitable[bool]]]] = [
            ("ack", lambda h: h.ack()),
            ("retry", lambda h: h.retry("again", delay_s=0)),
            ("fail", lambda h: h.fail("broken")),
        ]
        for name, operation in operations:
            for outcome in [True, False]:
                queue = store.queue(f"one-shot-{name}-{outcome}", opts)
                job_id = await queue.enqueue(b"x")
                handle = await _claim_id(queue, job_id)
                if not outcome:
                    await harness.advance(31)
                result = await operation(handle)
                assert result is outcome, f"{name} returned {result!r}, expected {outcome}"
                before = await queue.get_job(job_id)
                for again, call in [
                    ("heartbeat", handle.heartbeat),
                    ("ack", handle.ack),
                    ("retry", handle.retry),
                    ("fail", handle.fail),
                ]:
                    await _raises(HandleConsumed, f"{again} after {name} returned {outcome}", call)
                after = await queue.get_job(job_id)
                assert after == before, f"a HandleConsumed {name} changed the row"


@_check
async def q4_heartbeat_does_not_consume_the_handle(harness: EngineHarness) -> None:
    """Q4: heartbeat is repeatable, refused or not; a later ack still runs (and answers
    by the claim's validity)."""
    async with harness.open_store() as store:
        queue = store.queue("hb-repeat", QueueOpts(visibility_timeout_s=30))
        ids = await queue.enqueue_many([b"a", b"b"])
        first, second = sorted(await queue.claim_batch("w", 2), key=lambda h: h.id)
        for _ in range(3):
            assert await first.heartbeat() is True, "a repeated heartbeat was refused"
        assert await first.ack() is True, "ack after heartbeats was refused"
        await harness.advance(31)
        assert await second.heartbeat() is False, "a late heartbeat was not refused"
        assert await second.heartbeat() is False, "a second late heartbeat was not refused"
        assert await second.ack() is False, "ack after a refused heartbeat was not refused"
        await _raises(HandleConsumed, "heartbeat after ack returned False", second.heartbeat)
        await _assert_gone(queue, ids[0], "the acked job")


@_check
async def q4_dead_letter_moves_are_atomic(harness: EngineHarness) -> None:
    """Q4: after each dead-letter move (retry at budget, fail, the pre-claim sweep, the
    expiry sweep) the row is in exactly one place: dead, with no live row left."""
    async with harness.open_store() as store:
        queue = store.queue(
            "dead-moves", QueueOpts(visibility_timeout_s=10, max_attempts=1, expires_in_s=1000)
        )
        by_retry = await queue.enqueue(b"retry", priority=3)
        by_fail = await queue.enqueue(b"fail", priority=2)
        by_sweep = await queue.enqueue(b"sweep", priority=1)
        by_expiry = await queue.enqueue(b"expiry", delay_s=5000)
        assert await (await _claim_id(queue, by_retry)).retry() is True, "retry was refused"
        await _assert_dead(harness, queue, by_retry, MAX_ATTEMPTS_EXCEEDED, "retry at budget")
        assert await (await _claim_id(queue, by_fail)).fail() is True, "fail was refused"
        await _assert_dead(harness, queue, by_fail, FAILED, "fail")
        await _claim_id(queue, by_sweep)
        await harness.advance(11)
        assert await queue.claim_one("w") is None, "nothing should be claimable"
        await _assert_dead(harness, queue, by_sweep, MAX_ATTEMPTS_EXCEEDED, "pre-claim sweep")
        await harness.advance(1000)
        result = await queue.sweep_expired()
        assert result.expired == 1, f"sweep_expired() returned {result!r}, expected 1 expired"
        await _assert_dead(harness, queue, by_expiry, EXPIRED, "expiry sweep")
        await _nothing_claimable(queue, "after every dead-letter move")


@_check
async def q4_ack_handles_acks_valid_claims_in_one_call_and_refuses_stale_ones(
    harness: EngineHarness,
) -> None:
    """Q4/R2 (D18): ``queue.ack_handles`` acks each handle under V, token included: valid
    claims are deleted; lapsed, reclaimed-by-another-worker (still held, or given back)
    and cancelled claims are refused per handle (False, row untouched); the result is one
    bool per handle, in order; afterwards every handle is consumed."""
    async with harness.open_store() as store:
        short = store.queue("ack-handles", QueueOpts(visibility_timeout_s=10))
        long = store.queue("ack-handles", QueueOpts(visibility_timeout_s=1000))
        reclaimed = await short.enqueue(b"reclaimed", priority=6)
        given_back = await short.enqueue(b"given-back", priority=5)
        valid_a = await long.enqueue(b"valid-a", priority=3)
        cancelled = await long.enqueue(b"cancelled", priority=2)
        valid_b = await long.enqueue(b"valid-b", priority=1)
        lapsed = await short.enqueue(b"lapsed", priority=0)
        stale = {h.id: h for h in await long.claim_batch("worker-a", 6)}
        assert len(stale) == 6, f"claim_batch(6) claimed {sorted(stale)}"
        await harness.advance(11)
        # Another worker reclaims the two best lapsed jobs: it keeps one (processing under
        # a newer token) and gives the other back (pending, attempts moved on).
        winners = {h.id: h for h in await long.claim_batch("worker-b", 2)}
        assert set(winners) == {reclaimed, given_back}, f"worker-b reclaimed {sorted(winners)}"
        assert await winners[given_back].retry("again", delay_s=10_000) is True, "retry refused"
        assert await long.cancel(cancelled) is True, "cancel refused"
        order = [lapsed, valid_a, reclaimed, cancelled, valid_b, given_back]
        expected = [False, True, False, False, True, False]
        handles = [stale[job_id] for job_id in order]
        refused = (lapsed, reclaimed, given_back)
        before = {job_id: await _get(long, job_id) for job_id in refused}
        results = await long.ack_handles(handles)
        assert results == expected, (
            f"ack_handles over {order} (lapsed, valid, reclaimed, cancelled, valid, given "
            f"back) returned {results}, expected {expected}"
        )
        await _assert_gone(long, valid_a, "ack_handles of a valid claim")
        await _assert_gone(long, valid_b, "ack_handles of a valid claim")
        await _assert_gone(long, cancelled, "ack_handles of a cancelled claim")
        for job_id, row in before.items():
            after = await _get(long, job_id)
            assert after == row, f"a refused ack_handles changed job {job_id}: {row!r} -> {after!r}"
        for job_id, handle in zip(order, handles, strict=True):
            await _raises(HandleConsumed, f"ack() of handle {job_id} after ack_handles", handle.ack)
        await _raises(HandleConsumed, "ack_handles of consumed handles", long.ack_handles, handles)
        assert await winners[reclaimed].ack() is True, "the new holder could not ack"


@_check
async def q4_ack_handles_rejects_foreign_consumed_and_duplicate_handles_without_effect(
    harness: EngineHarness,
) -> None:
    """Q4/R2 (D18): a handle of another queue or store, a non-handle or a job listed twice
    is InvalidArgument; a consumed handle is HandleConsumed; either way nothing is acked
    and no handle is consumed. An empty list returns []."""
    async with harness.open_store() as store, harness.open_store() as elsewhere:
        queue = store.queue("ack-handles-check")
        other = store.queue("ack-handles-other")
        far = elsewhere.queue("ack-handles-check")
        ids = await queue.enqueue_many([b"a", b"b", b"c"])
        await other.enqueue(b"o")
        await far.enqueue(b"f")
        mine = await queue.claim_batch("w", 3)
        assert [h.id for h in mine] == ids, f"claimed {[h.id for h in mine]}, expected {ids}"
        foreign = await _claim(other, "w")
        remote = await _claim(far, "w")
        assert await queue.ack_handles([]) == [], "ack_handles([]) did not return []"
        bad_calls: list[tuple[str, object]] = [
            ("another queue's handle", [mine[0], foreign]),
            ("another store's handle", [mine[0], remote]),
            ("a job id", [mine[0], ids[1]]),
            ("a handle twice", [mine[0], mine[0]]),
            ("not an iterable", 5),
        ]
        for what, bad in bad_calls:
            await _raises(InvalidArgument, f"ack_handles with {what}", queue.ack_handles, bad)
        assert await mine[2].ack() is True, "ack refused"
        await _raises(HandleConsumed, "ack_handles with a consumed handle", queue.ack_handles, mine)
        for job_id in ids[:2]:
            await _assert_state(queue, job_id, "processing", "after rejected ack_handles calls")
        assert await queue.ack_handles(iter(mine[:2])) == [True, True], (
            "ack_handles of the untouched handles after the rejected calls did not ack them"
        )
        assert await foreign.ack() is True, "the other queue's handle was consumed or disturbed"
        assert await remote.ack() is True, "the other store's handle was consumed or disturbed"


@_check
async def q4_ack_handles_and_claim_acks_valid_claims_then_claims_the_best_n(
    harness: EngineHarness,
) -> None:
    """Q3/Q4/R2 (D21): ``queue.ack_handles_and_claim(handles, worker_id, n)`` is
    ``ack_handles(handles)`` then ``claim_batch(worker_id, n)`` in one atomic step: valid
    claims are deleted, lapsed, reclaimed and cancelled ones refused per handle (False,
    row untouched by the ack); then the n best claimable rows are claimed, best first,
    for ``worker_id``, at the same instant; every handle is consumed."""
    async with harness.open_store() as store:
        short = store.queue("ack-and-claim", QueueOpts(visibility_timeout_s=10))
        long = store.queue("ack-and-claim", QueueOpts(visibility_timeout_s=1000))
        reclaimed = await short.enqueue(b"reclaimed", priority=9)
        valid_a = await long.enqueue(b"valid-a", priority=8)
        cancelled = await long.enqueue(b"cancelled", priority=7)
        valid_b = await long.enqueue(b"valid-b", priority=6)
        lapsed = await short.enqueue(b"lapsed", priority=-5)
        stale = {h.id: h for h in await long.claim_batch("worker-a", 5)}
        assert len(stale) == 5, f"claim_batch(5) claimed {sorted(stale)}"
        await harness.advance(11)
        winner = await _claim(long, "worker-b", "the reclaim of the best lapsed job: ")
        assert winner.id == reclaimed, f"worker-b reclaimed {winner.id}, expected {reclaimed}"
        assert await long.cancel(cancelled) is True, "cancel refused"
        fresh_high = await long.enqueue(b"fresh-high", priority=3)
        fresh_mid = await long.enqueue(b"fresh-mid", priority=2)
        fresh_low = await long.enqueue(b"fresh-low", priority=1)
        order = [lapsed, valid_a, reclaimed, cancelled, valid_b]
        handles = [stale[job_id] for job_id in order]
        before = await _get(long, reclaimed)
        now = await harness.now()
        results, claimed = await long.ack_handles_and_claim(handles, "worker-c", 2)
        assert results == [False, True, False, False, True], (
            f"ack_handles_and_claim acks over {order} (lapsed, valid, reclaimed, cancelled, "
            f"valid) returned {results}, expected [False, True, False, False, True]"
        )
        assert [h.id for h in claimed] == [fresh_high, fresh_mid], (
            f"ack_handles_and_claim(n=2) claimed {[h.id for h in claimed]}, expected the two "
            f"best claimable jobs {[fresh_high, fresh_mid]} (priorities 3 and 2)"
        )
        for handle in claimed:
            job = handle.job
            seen = (job.state, job.attempts, job.claimed_by, job.claimed_at)
            assert seen == ("processing", 1, "worker-c", now), (
                f"claimed job {job.id} is {seen}, expected ('processing', 1, 'worker-c', {now})"
            )
            assert job.claim_expires_at == _after(now, 1000), (
                f"claimed job {job.id} has claim_expires_at {job.claim_expires_at}, "
                f"expected now + its visibility_timeout_s ({_after(now, 1000)})"
            )
            assert await _get(long, job.id) == job, f"the snapshot of job {job.id} is not the row"
        for job_id in (valid_a, valid_b, cancelled):
            await _assert_gone(long, job_id, "ack_handles_and_claim of a valid or cancelled claim")
        assert await _get(long, reclaimed) == before, "a refused ack changed the reclaimed row"
        for job_id, handle in zip(order, handles, strict=True):
            await _raises(
                HandleConsumed, f"ack() of handle {job_id} after ack_handles_and_claim", handle.ack
            )
        # The lapsed row (attempts left) and the last fresh one are what remains.
        rest, more = await long.ack_handles_and_claim([], "worker-d", 10)
        assert rest == [], f"ack_handles_and_claim([]) acked {rest}"
        assert [h.id for h in more] == [fresh_low, lapsed], (
            f"ack_handles_and_claim([], n=10) claimed {[h.id for h in more]}, expected "
            f"{[fresh_low, lapsed]}"
        )
        assert await winner.ack() is True, "the new holder could not ack"


@_check
async def q4_ack_handles_and_claim_claims_after_the_acks_took_effect(
    harness: EngineHarness,
) -> None:
    """R2 (D21): the claim part runs after the acks: an acked job is never handed out
    again; a claim whose ack was refused because it lapsed is reclaimed by the same call
    when it is among the best (a reclaim consumes an attempt); with nothing else left
    the call hands out only what remains."""
    async with harness.open_store() as store:
        queue = store.queue("ack-then-claim", QueueOpts(visibility_timeout_s=10))
        done = await queue.enqueue(b"done", priority=5)
        late = await queue.enqueue(b"late", priority=4)
        held = {h.id: h for h in await queue.claim_batch("w1", 2)}
        assert set(held) == {done, late}, f"claim_batch(2) claimed {sorted(held)}"
        await harness.advance(10)
        # At the deadline instant both claims are valid: both acks go through and the
        # claim finds nothing (neither acked row comes back).
        results, claimed = await queue.ack_handles_and_claim(held.values(), "w2", 10)
        assert results == [True, True], f"acks at the deadline instant returned {results}"
        assert claimed == [], (
            f"the claim after the acks handed out {[h.id for h in claimed]}, expected nothing"
        )
        await _assert_gone(queue, done, "an acked job")
        await _assert_gone(queue, late, "an acked job")
        # One instant after its deadline a claim's ack is refused, and the same call
        # reclaims the job (attempt 2), beside the valid claim it acked.
        first = await queue.enqueue(b"first", priority=3)
        second = await queue.enqueue(b"second", priority=2)
        a = await _claim_id(queue, first, "w1")
        await harness.advance(5)
        b = await _claim_id(queue, second, "w1")
        await harness.advance(5 + INSTANT_S)
        results, claimed = await queue.ack_handles_and_claim([a, b], "w2", 10)
        assert results == [False, True], (
            f"acks of (lapsed, valid) returned {results}, expected [False, True]"
        )
        assert [(h.id, h.job.attempts, h.job.claimed_by) for h in claimed] == [(first, 2, "w2")], (
            f"the claim after the acks handed out "
            f"{[(h.id, h.job.attempts, h.job.claimed_by) for h in claimed]}, expected the "
            f"lapsed job {first} reclaimed by 'w2' on attempt 2"
        )
        await _assert_gone(queue, second, "the acked job")
        assert await claimed[0].ack() is True, "the reclaimed job's new handle could not ack"


@_check
async def q4_ack_handles_and_claim_runs_the_pre_claim_sweep_like_claim_batch(
    harness: EngineHarness,
) -> None:
    """Q3/R2 (D21): with ``n >= 1`` the claim part runs the pre-claim sweep (a lapsed
    claim at its budget is dead-lettered, "max attempts exceeded", died now), whether or
    not it hands anything out; with ``n <= 0`` only the acks run: no sweep, no claim
    (decision 5)."""
    async with harness.open_store() as store:
        queue = store.queue("ack-claim-sweep", QueueOpts(visibility_timeout_s=10, max_attempts=1))
        spent = await queue.enqueue(b"spent", priority=9)
        kept = await queue.enqueue(b"kept")
        await _claim_id(queue, spent, "w1")
        await harness.advance(5)
        kept_handle = await _claim_id(queue, kept, "w1")
        await harness.advance(6)
        ready = await queue.enqueue(b"ready")
        results, claimed = await queue.ack_handles_and_claim([kept_handle], "w2", 0)
        assert (results, claimed) == ([True], []), (
            f"ack_handles_and_claim(n=0) returned {(results, claimed)!r}, expected ([True], [])"
        )
        await _assert_gone(queue, kept, "an ack with n=0")
        job = await _assert_state(queue, spent, "processing", "after ack_handles_and_claim(n=0)")
        assert job.attempts == 1, f"n=0 touched the spent row: attempts {job.attempts}"
        await _assert_state(queue, ready, "pending", "after ack_handles_and_claim(n=0)")
        assert await queue.ack_handles_and_claim([], "w2", -3) == ([], []), (
            "ack_handles_and_claim([], n=-3) did not return ([], [])"
        )
        await _assert_state(queue, spent, "processing", "after ack_handles_and_claim([], n=-3)")
        results, claimed = await queue.ack_handles_and_claim([], "w2", 1)
        assert (results, [h.id for h in claimed]) == ([], [ready]), (
            f"ack_handles_and_claim([], n=1) returned {results}, "
            f"{[h.id for h in claimed]}, expected [], [{ready}]"
        )
        dead = await _assert_dead(harness, queue, spent, MAX_ATTEMPTS_EXCEEDED, "the sweep")
        assert dead.died_at == await harness.now(), "the sweep's died_at is not the call's now"
        # A fruitless call sweeps too.
        again = await queue.enqueue(b"again")
        held = await _claim_id(queue, again, "w3")
        await harness.advance(11)
        other = store.queue("ack-claim-sweep", QueueOpts(visibility_timeout_s=100))
        mine = await other.enqueue(b"mine")
        mine_handle = await _claim_id(other, mine, "w3")
        results, claimed = await other.ack_handles_and_claim([mine_handle], "w3", 5)
        assert (results, claimed) == ([True], []), (
            f"a fruitless ack_handles_and_claim returned {(results, claimed)!r}, "
            "expected ([True], [])"
        )
        await _assert_dead(harness, queue, held.id, MAX_ATTEMPTS_EXCEEDED, "a fruitless sweep")


@_check
async def q4_ack_handles_and_claim_rejects_bad_arguments_without_effect(
    harness: EngineHarness,
) -> None:
    """Q4/Q12/R2 (D21): a handle of another queue or store, a non-handle, a job listed
    twice, a bad ``worker_id`` or a non-int ``n`` is InvalidArgument; a consumed handle
    is HandleConsumed; either way nothing is acked, nothing is claimed or swept, and no
    handle is consumed."""
    async with harness.open_store() as store, harness.open_store() as elsewhere:
        queue = store.queue("ack-claim-check", QueueOpts(visibility_timeout_s=10, max_attempts=1))
        other = store.queue("ack-claim-other")
        far = elsewhere.queue("ack-claim-check")
        spent = await queue.enqueue(b"spent", priority=9)
        await _claim_id(queue, spent, "w0")
        await harness.advance(11)
        ids = await queue.enqueue_many([b"a", b"b", b"c"])
        mine = await queue.claim_batch("w", 3)
        assert [h.id for h in mine] == ids, f"claimed {[h.id for h in mine]}, expected {ids}"
        await _assert_dead(harness, queue, spent, MAX_ATTEMPTS_EXCEEDED, "setup sweep")
        waiting = await queue.enqueue(b"waiting")
        await other.enqueue(b"o")
        await far.enqueue(b"f")
        foreign = await _claim(other, "w")
        remote = await _claim(far, "w")
        # Make a new spent claim, so that a wrongly run claim would be seen sweeping it.
        lapsing_queue = store.queue(
            "ack-claim-check", QueueOpts(visibility_timeout_s=1, max_attempts=1)
        )
        lapsing = await lapsing_queue.enqueue(b"lapsing", priority=9)
        await _claim_id(queue, lapsing, "w0")
        await harness.advance(2)
        bad_calls: list[tuple[str, object, object, object]] = [
            ("another queue's handle", [mine[0], foreign], "w", 1),
            ("another store's handle", [mine[0], remote], "w", 1),
            ("a job id", [mine[0], ids[1]], "w", 1),
            ("a handle twice", [mine[0], mine[0]], "w", 1),
            ("not an iterable", 5, "w", 1),
            ("an empty worker_id", mine[:2], "", 1),
            ("a non-str worker_id", mine[:2], 7, 1),
            ("a float n", mine[:2], "w", 1.0),
            ("a bool n", mine[:2], "w", True),
            ("n=None", [], "w", None),
        ]
        for what, handles, worker, n in bad_calls:
            await _raises(
                InvalidArgument,
                f"ack_handles_and_claim with {what}",
                queue.ack_handles_and_claim,
                handles,
                worker,
                n,
            )
        assert await mine[2].ack() is True, "ack refused"
        await _raises(
            HandleConsumed,
            "ack_handles_and_claim with a consumed handle",
            queue.ack_handles_and_claim,
            mine,
            "w",
            1,
        )
        for job_id in ids[:2]:
            await _assert_state(queue, job_id, "processing", "after rejected calls")
        await _assert_state(queue, waiting, "pending", "after rejected calls")
        await _assert_state(queue, lapsing, "processing", "after rejected calls (no sweep)")
        results, claimed = await queue.ack_handles_and_claim(iter(mine[:2]), "w", 1)
        assert (results, [h.id for h in claimed]) == ([True, True], [waiting]), (
            "ack_handles_and_claim of the untouched handles after the rejected calls returned "
            f"{results}, {[h.id for h in claimed]}; expected [True, True], [{waiting}]"
        )
        await _assert_dead(harness, queue, lapsing, MAX_ATTEMPTS_EXCEEDED, "the call's sweep")
        assert await foreign.ack() is True, "the other queue's handle was consumed or disturbed"
        assert await remote.ack() is True, "the other store's handle was consumed or disturbed"


@_check
async def q4_heartbeat_handles_renews_valid_claims_and_refuses_stale_ones(
    harness: EngineHarness,
) -> None:
    """Q4/R2 (D19): ``queue.heartbeat_handles`` renews each handle's claim under V, token
    included, as an absolute reset to now + ``extend_s`` (default: each row's own
    visibility_timeout_s); lapsed, reclaimed-by-another-worker and cancelled claims are
    refused per handle (False, row untouched); the result is one bool per handle, in
    order; no handle is consumed. Foreign, duplicate or consumed handles and a bad
    ``extend_s`` are rejected without effect."""
    async with harness.open_store() as store:
        short = store.queue("hb-handles", QueueOpts(visibility_timeout_s=10))
        mid = store.queue("hb-handles", QueueOpts(visibility_timeout_s=100))
        long = store.queue("hb-handles", QueueOpts(visibility_timeout_s=1000))
        reclaimed = await short.enqueue(b"reclaimed", priority=5)
        valid_a = await long.enqueue(b"valid-a", priority=3)
        cancelled = await long.enqueue(b"cancelled", priority=2)
        valid_b = await mid.enqueue(b"valid-b", priority=1)
        lapsed = await short.enqueue(b"lapsed", priority=0)
        claimed_at = await harness.now()
        stale = {h.id: h for h in await long.claim_batch("worker-a", 5)}
        assert len(stale) == 5, f"claim_batch(5) claimed {sorted(stale)}"
        await harness.advance(11)
        winner = await _claim(long, "worker-b", "the reclaim of the best lapsed job")
        assert winner.id == reclaimed, f"worker-b reclaimed {winner.id}, expected {reclaimed}"
        assert await long.cancel(cancelled) is True, "cancel refused"
        order = [lapsed, valid_a, reclaimed, cancelled, valid_b]
        expected = [False, True, False, False, True]
        handles = [stale[job_id] for job_id in order]
        before = {job_id: await _get(long, job_id) for job_id in (lapsed, reclaimed)}
        now = await harness.now()
        results = await long.heartbeat_handles(handles)
        assert results == expected, (
            f"heartbeat_handles over {order} (lapsed, valid, reclaimed, cancelled, valid) "
            f"returned {results}, expected {expected}"
        )
        for job_id, seconds in ((valid_a, 1000), (valid_b, 100)):
            row = await _get(long, job_id)
            assert row.claim_expires_at == _after(now, seconds), (
                f"heartbeat_handles set job {job_id}'s claim_expires_at {row.claim_expires_at}"
                f", expected now + its visibility_timeout_s ({_after(now, seconds)})"
            )
            assert (row.state, row.claimed_at, row.attempts) == ("processing", claimed_at, 1), (
                f"heartbeat_handles changed job {job_id}'s state, claimed_at or attempts"
            )
        for job_id, row in before.items():
            after = await _get(long, job_id)
            assert after == row, (
                f"a refused heartbeat_handles changed job {job_id}: {row!r} -> {after!r}"
            )
        await _assert_gone(long, cancelled, "heartbeat_handles of a cancelled claim")
        # Not consumed: the same handles renew again, an absolute reset that may shorten.
        await harness.advance(1)
        now = await harness.now()
        pair = [stale[valid_a], stale[valid_b]]
        assert await long.heartbeat_handles(pair, extend_s=5) == [True, True], (
            "a repeated heartbeat_handles(extend_s=5) of valid claims was refused"
        )
        for job_id in (valid_a, valid_b):
            row = await _get(long, job_id)
            assert row.claim_expires_at == _after(now, 5), (
                f"heartbeat_handles(extend_s=5) set job {job_id}'s claim_expires_at "
                f"{row.claim_expires_at}, expected now + 5 s ({_after(now, 5)})"
            )
        # Rejected calls: nothing renewed, nothing consumed.
        assert await long.heartbeat_handles([]) == [], "heartbeat_handles([]) did not return []"
        other = store.queue("hb-handles-other")
        await other.enqueue(b"o")
        foreign = await _claim(other, "w")
        bad_calls: list[tuple[str, object, object]] = [
            ("another queue's handle", [pair[0], foreign], None),
            ("a job id", [pair[0], valid_b], None),
            ("a handle twice", [pair[0], pair[0]], None),
            ("not an iterable", 5, None),
            ("extend_s=0", pair, 0),
            ("a negative extend_s", pair, -1),
        ]
        for what, bad, extend in bad_calls:
            await _raises(
                InvalidArgument,
                f"heartbeat_handles with {what}",
                long.heartbeat_handles,
                bad,
                extend,
            )
        await harness.advance(1)
        assert await stale[valid_a].ack() is True, "ack after heartbeat_handles was refused"
        await _raises(
            HandleConsumed, "heartbeat_handles with a consumed handle", long.heartbeat_handles, pair
        )
        row = await _get(long, valid_b)
        assert row.claim_expires_at == _after(now, 5), (
            f"a rejected heartbeat_handles renewed job {valid_b}: {row.claim_expires_at}"
        )
        assert await stale[lapsed].ack() is False, "ack of a lapsed claim was not refused"
        assert await stale[valid_b].ack() is True, "ack after heartbeat_handles was refused"
        assert await winner.ack() is True, "the new holder could not ack"
        assert await foreign.ack() is True, "the other queue's handle was disturbed"


@_check
async def q4_retry_handles_retries_valid_claims_and_refuses_stale_ones(
    harness: EngineHarness,
) -> None:
    """Q4/R2 (D20): ``queue.retry_handles`` applies each ``(handle, error, delay_s)`` as
    ``handle.retry(error, delay_s)`` would, under V, token included, in one call: below
    budget the row is pending after ``delay_s`` (``0`` = at once) or after the backoff
    curve (one draw from the store's rng per item that needs it, in item order, refused
    items included: decision 2), with ``last_error = error`` and the claim fields
    cleared; on the last allowed attempt it is dead-lettered; lapsed, reclaimed (still
    held, or given back) and cancelled claims are refused per item (False, row
    untouched). The result is one bool per item, in order; every handle is consumed."""
    seed = 5150
    base = 60
    reference = random.Random(seed)
    async with harness.open_store(rng=random.Random(seed)) as store:
        short = store.queue(
            "retry-handles", QueueOpts(visibility_timeout_s=10, backoff_base_s=base)
        )
        long = store.queue(
            "retry-handles", QueueOpts(visibility_timeout_s=1000, backoff_base_s=base)
        )
        reclaimed = await short.enqueue(b"reclaimed", priority=8)
        given_back = await short.enqueue(b"given-back", priority=7)
        explicit = await long.enqueue(b"explicit", priority=6)
        backoff = await long.enqueue(b"backoff", priority=5)
        spent_error = await long.enqueue(b"spent-error", priority=4, max_attempts=1)
        spent_default = await long.enqueue(b"spent-default", priority=3, max_attempts=1)
        cancelled = await long.enqueue(b"cancelled", priority=2)
        at_once = await long.enqueue(b"at-once", priority=1)
        lapsed = await short.enqueue(b"lapsed", priority=0)
        claimed_at = await harness.now()
        stale = {h.id: h for h in await long.claim_batch("worker-a", 9)}
        assert len(stale) == 9, f"claim_batch(9) claimed {sorted(stale)}"
        await harness.advance(11)
        # Another worker reclaims the two best lapsed jobs: it keeps one (processing under
        # a newer token) and gives the other back (pending, attempts moved on).
        winners = {h.id: h for h in await long.claim_batch("worker-b", 2)}
        assert set(winners) == {reclaimed, given_back}, f"worker-b reclaimed {sorted(winners)}"
        assert await winners[given_back].retry("again", delay_s=10_000) is True, "retry refused"
        assert await long.cancel(cancelled) is True, "cancel refused"
        items: list[tuple[JobHandle, str | None, float | None]] = [
            (stale[lapsed], None, None),
            (stale[explicit], "boom", 30),
            (stale[reclaimed], None, None),
            (stale[backoff], None, None),
            (stale[spent_error], "last", 5),
            (stale[cancelled], None, None),
            (stale[spent_default], None, None),
            (stale[given_back], "late", 0),
            (stale[at_once], "now", 0),
        ]
        expected = [False, True, False, True, True, False, True, False, True]
        refused = (lapsed, reclaimed, given_back)
        before = {job_id: await _get(long, job_id) for job_id in refused}
        now = await harness.now()
        results = await long.retry_handles(items)
        assert results == expected, (
            "retry_handles over (lapsed, explicit delay, reclaimed, backoff, at budget with "
            "an error, cancelled, at budget, given back, delay 0) returned "
            f"{results}, expected {expected}"
        )
        # Draws, in item order: lapsed, reclaimed, backoff, cancelled (the items without
        # delay_s below budget); the third is the backoff item's delay.
        draws = [reference.randint(*_jitter_range(base, 1)) for _ in range(4)]
        for job_id, delay, error in (
            (explicit, 30, "boom"),
            (backoff, draws[2], None),
            (at_once, 0, "now"),
        ):
            row = await _get(long, job_id)
            seen = (row.state, row.run_at, row.last_error, row.attempts)
            want = ("pending", _after(now, delay), error, 1)
            assert seen == want, (
                f"retry_handles of job {job_id}: (state, run_at, last_error, attempts) = "
                f"{seen!r}, expected {want!r}"
            )
            assert (row.claimed_by, row.claimed_at, row.claim_expires_at) == (None, None, None), (
                f"retry_handles left job {job_id}'s claim fields set"
            )
        for job_id, last_error in ((spent_error, "last"), (spent_default, MAX_ATTEMPTS_EXCEEDED)):
            dead = await _assert_dead(
                harness, long, job_id, last_error, "retry_handles on the last attempt"
            )
            seen_dead = (dead.died_at, dead.attempts, dead.claimed_by, dead.claimed_at)
            want_dead = (now, 1, "worker-a", claimed_at)
            assert seen_dead == want_dead, (
                f"retry_handles at budget of job {job_id}: (died_at, attempts, claimed_by, "
                f"claimed_at) = {seen_dead!r}, expected {want_dead!r}"
            )
        await _assert_gone(long, cancelled, "retry_handles of a cancelled claim")
        for job_id, row in before.items():
            after = await _get(long, job_id)
            assert after == row, (
                f"a refused retry_handles changed job {job_id}: {row!r} -> {after!r}"
            )
        for handle, _, _ in items:
            await _raises(
                HandleConsumed, f"ack() of handle {handle.id} after retry_handles", handle.ack
            )
        await _raises(
            HandleConsumed, "retry_handles of consumed handles", long.retry_handles, items
        )
        # The job retried with delay 0 is ready at once, beside the lapsed claim.
        probe = {h.id: h for h in await long.claim_batch("probe", 10)}
        assert set(probe) == {lapsed, at_once}, (
            f"after retry_handles, claimed {sorted(probe)}; expected {sorted({lapsed, at_once})}"
        )
        assert await winners[reclaimed].ack() is True, "the new holder could not ack"


@_check
async def q4_retry_handles_dead_letters_claims_on_their_last_attempt(
    harness: EngineHarness,
) -> None:
    """Q4/R2 (D20): an item of ``retry_handles`` whose claim is the job's last allowed
    attempt moves the row to dead with ``last_error = error`` or "max attempts exceeded"
    (a given delay is ignored, and no backoff is drawn: decision 2), keeping its claim
    fields (decision 1); nothing is left claimable."""
    seed = 99
    async with harness.open_store(rng=random.Random(seed)) as store:
        queue = store.queue("retry-handles-budget", QueueOpts(max_attempts=2, backoff_base_s=60))
        cases: list[tuple[str | None, float | None, str]] = [
            (None, None, MAX_ATTEMPTS_EXCEEDED),
            ("boom", None, "boom"),
            ("", None, ""),
            ("boom", 30, "boom"),
            (None, 0, MAX_ATTEMPTS_EXCEEDED),
        ]
        ids = await queue.enqueue_many([b"%d" % i for i in range(len(cases))])
        first = await queue.claim_batch("holder", len(cases))
        assert await queue.retry_handles([(h, None, 0) for h in first]) == [True] * len(cases), (
            "retry_handles(delay_s=0) below budget was refused"
        )
        claimed_at = await harness.now()
        last = {h.id: h for h in await queue.claim_batch("holder", len(cases))}
        assert set(last) == set(ids), f"the second claim took {sorted(last)}, expected {ids}"
        await harness.advance(1)
        now = await harness.now()
        items = [
            (last[job_id], error, delay)
            for job_id, (error, delay, _) in zip(ids, cases, strict=True)
        ]
        results = await queue.retry_handles(items)
        assert results == [True] * len(cases), (
            f"retry_handles on the last attempt returned {results}"
        )
        for job_id, (error, delay, last_error) in zip(ids, cases, strict=True):
            what = f"retry_handles item (error={error!r}, delay_s={delay!r}) at budget"
            dead = await _assert_dead(harness, queue, job_id, last_error, what)
            seen = (dead.died_at, dead.attempts, dead.claimed_by, dead.claimed_at)
            assert seen == (now, 2, "holder", claimed_at), (
                f"{what}: (died_at, attempts, claimed_by, claimed_at) = {seen!r}, expected "
                f"{(now, 2, 'holder', claimed_at)!r}"
            )
        await _nothing_claimable(queue, "after retry_handles at budget")
        # No item drew: the next draw is the rng's first.
        job_id = await queue.enqueue(b"probe")
        handle = await _claim_id(queue, job_id)
        now = await harness.now()
        assert await queue.retry_handles([(handle, None, None)]) == [True], "retry refused"
        row = await _get(queue, job_id)
        expected = random.Random(seed).randint(*_jitter_range(60, 1))
        assert row.run_at == _after(now, expected), (
            f"the first backoff draw after retries at budget gave run_at {row.run_at}, "
            f"expected now + {expected} s: a retry at budget drew from the rng"
        )


@_check
async def q4_fail_handles_dead_letters_valid_claims_and_refuses_stale_ones(
    harness: EngineHarness,
) -> None:
    """Q4/R2 (D20): ``queue.fail_handles`` applies each ``(handle, error)`` as
    ``handle.fail(error)`` would, under V, token included, in one call: the row moves to
    dead now with ``last_error = error`` or "failed", whatever attempts are left, keeping
    its claim fields; lapsed, reclaimed and cancelled claims are refused per item (False,
    row untouched). The result is one bool per item, in order; every handle is
    consumed."""
    async with harness.open_store() as store:
        short = store.queue("fail-handles", QueueOpts(visibility_timeout_s=10, max_attempts=10))
        long = store.queue("fail-handles", QueueOpts(visibility_timeout_s=1000, max_attempts=10))
        reclaimed = await short.enqueue(b"reclaimed", priority=5)
        with_error = await long.enqueue(b"with-error", priority=4)
        default = await long.enqueue(b"default", priority=3)
        empty = await long.enqueue(b"empty", priority=2)
        cancelled = await long.enqueue(b"cancelled", priority=1)
        lapsed = await short.enqueue(b"lapsed", priority=0)
        claimed_at = await harness.now()
        stale = {h.id: h for h in await long.claim_batch("worker-a", 6)}
        assert len(stale) == 6, f"claim_batch(6) claimed {sorted(stale)}"
        await harness.advance(11)
        winner = await _claim(long, "worker-b", "the reclaim of the best lapsed job")
        assert winner.id == reclaimed, f"worker-b reclaimed {winner.id}, expected {reclaimed}"
        assert await long.cancel(cancelled) is True, "cancel refused"
        items: list[tuple[JobHandle, str | None]] = [
            (stale[lapsed], "lapsed"),
            (stale[with_error], "bad input"),
            (stale[reclaimed], None),
            (stale[default], None),
            (stale[cancelled], "gone"),
            (stale[empty], ""),
        ]
        expected = [False, True, False, True, False, True]
        before = {job_id: await _get(long, job_id) for job_id in (lapsed, reclaimed)}
        now = await harness.now()
        results = await long.fail_handles(items)
        assert results == expected, (
            "fail_handles over (lapsed, valid, reclaimed, valid, cancelled, valid) returned "
            f"{results}, expected {expected}"
        )
        for job_id, last_error in ((with_error, "bad input"), (default, FAILED), (empty, "")):
            dead = await _assert_dead(harness, long, job_id, last_error, "fail_handles")
            seen = (dead.died_at, dead.attempts, dead.claimed_by, dead.claimed_at)
            assert seen == (now, 1, "worker-a", claimed_at), (
                f"fail_handles of job {job_id}: (died_at, attempts, claimed_by, claimed_at) "
                f"= {seen!r}, expected {(now, 1, 'worker-a', claimed_at)!r}"
            )
        await _assert_gone(long, cancelled, "fail_handles of a cancelled claim")
        for job_id, row in before.items():
            after = await _get(long, job_id)
            assert after == row, (
                f"a refused fail_handles changed job {job_id}: {row!r} -> {after!r}"
            )
        for handle, _ in items:
            await _raises(
                HandleConsumed, f"retry() of handle {handle.id} after fail_handles", handle.retry
            )
        await _raises(HandleConsumed, "fail_handles of consumed handles", long.fail_handles, items)
        assert await winner.ack() is True, "the new holder could not ack"
        probe = [h.id for h in await long.claim_batch("probe", 10)]
        assert probe == [lapsed], f"after fail_handles, claimed {probe}, expected [{lapsed}]"


@_check
async def q4_retry_and_fail_handles_reject_bad_items_without_effect(
    harness: EngineHarness,
) -> None:
    """Q4/Q12 (D20): for ``retry_handles`` and ``fail_handles``, a non-iterable, an item
    that is not a tuple of the right size, a non-handle, a handle of another queue or
    store, a job listed twice, or a bad error or delay is InvalidArgument; a consumed
    handle is HandleConsumed. Either way nothing is retried or failed, no handle is
    consumed and no backoff is drawn. An empty iterable returns [] and draws nothing;
    any iterable of items is accepted."""
    seed = 31337
    async with (
        harness.open_store(rng=random.Random(seed)) as store,
        harness.open_store() as elsewhere,
    ):
        queue = store.queue("finish-handles-check", QueueOpts(backoff_base_s=60))
        other = store.queue("finish-handles-other")
        far = elsewhere.queue("finish-handles-check")
        ids = await queue.enqueue_many([b"a", b"b", b"c"])
        await other.enqueue(b"o")
        await far.enqueue(b"f")
        mine = await queue.claim_batch("w", 3)
        assert [h.id for h in mine] == ids, f"claimed {[h.id for h in mine]}, expected {ids}"
        foreign = await _claim(other, "w")
        remote = await _claim(far, "w")
        before = {job_id: await _get(queue, job_id) for job_id in ids}
        assert await queue.retry_handles([]) == [], "retry_handles([]) did not return []"
        assert await queue.fail_handles(iter([])) == [], "fail_handles([]) did not return []"
        a, b, c = mine
        nan = float("nan")
        bad_retries: list[tuple[str, object]] = [
            ("not an iterable", 5),
            ("a str", "abc"),
            ("a bare handle", [a]),
            ("a list item", [[a, None, None]]),
            ("a 2-tuple", [(a, None)]),
            ("a 4-tuple", [(a, None, None, None)]),
            ("a job id", [(a, None, None), (ids[1], None, None)]),
            ("another queue's handle", [(a, None, None), (foreign, None, None)]),
            ("another store's handle", [(a, None, None), (remote, None, None)]),
            ("a handle twice", [(a, None, None), (a, "again", 0)]),
            ("a negative delay", [(a, None, None), (b, None, -1)]),
            ("a NaN delay", [(a, None, None), (b, None, nan)]),
            ("an infinite delay", [(a, None, None), (b, None, float("inf"))]),
            ("a bool delay", [(a, None, None), (b, None, True)]),
            ("a str delay", [(a, None, None), (b, None, "5")]),
            ("a bytes error", [(a, None, None), (b, b"boom", 0)]),
            ("an error with NUL", [(a, None, None), (b, "a\x00b", 0)]),
            ("a too long error", [(a, None, None), (b, "e" * 65537, 0)]),
        ]
        for what, bad in bad_retries:
            await _raises(InvalidArgument, f"retry_handles with {what}", queue.retry_handles, bad)
        bad_fails: list[tuple[str, object]] = [
            ("not an iterable", 5),
            ("a bare handle", [a]),
            ("a 3-tuple", [(a, None, None)]),
            ("a job id", [(a, None), (ids[1], None)]),
            ("another queue's handle", [(a, None), (foreign, None)]),
            ("another store's handle", [(a, None), (remote, None)]),
            ("a handle twice", [(a, None), (a, "again")]),
            ("an int error", [(a, None), (b, 5)]),
            ("an error with NUL", [(a, None), (b, "a\x00b")]),
        ]
        for what, bad in bad_fails:
            await _raises(InvalidArgument, f"fail_handles with {what}", queue.fail_handles, bad)
        exc = await _raises(
            InvalidArgument,
            "retry_handles with delay_s=-9",
            queue.retry_handles,
            [(a, None, None), (b, None, -9)],
        )
        _assert_mentions(exc, "retry_handles with delay_s=-9", "delay_s", "-9")
        assert await c.ack() is True, "ack refused"
        await _raises(
            HandleConsumed,
            "retry_handles with a consumed handle",
            queue.retry_handles,
            [(a, None, None), (c, None, None)],
        )
        await _raises(
            HandleConsumed,
            "fail_handles with a consumed handle",
            queue.fail_handles,
            [(a, None), (c, None)],
        )
        for job_id in ids[:2]:
            after = await _get(queue, job_id)
            assert after == before[job_id], (
                f"a rejected retry_handles/fail_handles changed job {job_id}: "
                f"{before[job_id]!r} -> {after!r}"
            )
        # Nothing was consumed, and nothing drawn: the first accepted backoff item gets
        # the rng's first draw.
        now = await harness.now()
        assert await queue.retry_handles(iter([(a, None, None)])) == [True], (
            "retry_handles of an untouched handle after the rejected calls was refused"
        )
        row = await _get(queue, a.id)
        first_draw = random.Random(seed).randint(*_jitter_range(60, 1))
        assert row.run_at == _after(now, first_draw), (
            f"retry_handles after rejected calls gave run_at {row.run_at}, expected now + "
            f"{first_draw} s (the rng's first draw): a rejected call drew from the rng"
        )
        assert await queue.fail_handles(item for item in [(b, None)]) == [True], (
            "fail_handles of an untouched handle after the rejected calls was refused"
        )
        await _assert_dead(harness, queue, b.id, FAILED, "fail_handles after rejected calls")
        assert await foreign.ack() is True, "the other queue's handle was consumed or disturbed"
        assert await remote.ack() is True, "the other store's handle was consumed or disturbed"


# -- Q5 backoff ---------------------------------------------------------------------------


async def _backoff_delays(
    harness: EngineHarness, queue: Queue, handles: Sequence[JobHandle]
) -> list[float]:
    """Retry every handle with the backoff curve; return each row's run_at - now."""
    delays = []
    for handle in handles:
        assert await handle.retry("again") is True, "a retry below budget was refused"
        now = await harness.now()
        row = await _get(queue, handle.id)
        assert row.state == "pending", f"a retry below budget left the row {row.state!r}"
        delays.append((row.run_at - now).total_seconds())
    return delays


def _assert_in_range(delays: Sequence[float], base_s: float, attempt: int) -> None:
    low, high = _jitter_range(base_s, attempt)
    for delay in delays:
        assert delay == int(delay), (
            f"base {base_s} s, attempt {attempt}: backoff delay {delay} s is not an integer"
        )
        assert low <= delay <= high, (
            f"base {base_s} s, attempt {attempt}: backoff delay {delay} s is outside "
            f"[{low}, {high}]"
        )


@_check
async def q5_backoff_delay_is_within_the_equal_jitter_range(harness: EngineHarness) -> None:
    """Q5: without delay_s, retry waits an integer number of seconds drawn from
    [ceil(cap/2), floor(cap)], cap = base * 2**(attempt - 1): base 2 gives [1, 2], [2, 4],
    [4, 8], [8, 16] for attempts 1-4."""
    async with harness.open_store(rng=random.Random(20240607)) as store:
        base = 2
        queue = store.queue("backoff", QueueOpts(backoff_base_s=base, max_attempts=6))
        await queue.enqueue_many([b"%d" % i for i in range(16)])
        for attempt in range(1, 5):
            handles = await queue.claim_batch("w", 100)
            assert len(handles) == 16, f"attempt {attempt}: claimed {len(handles)} of 16 jobs"
            assert {h.job.attempts for h in handles} == {attempt}, "unexpected claim tokens"
            delays = await _backoff_delays(harness, queue, handles)
            _assert_in_range(delays, base, attempt)
            await harness.advance(_jitter_range(base, attempt)[1])


@_check
async def q5_backoff_is_capped_at_one_hour(harness: EngineHarness) -> None:
    """Q5: the cap is min(base * 2**min(attempt - 1, 30), 3600): base 2000 gives
    [1000, 2000] then [1800, 3600]; base 5 at attempt 30 gives [1800, 3600]."""
    async with harness.open_store(rng=random.Random(7)) as store:
        big = store.queue("backoff-big", QueueOpts(backoff_base_s=2000, max_attempts=5))
        await big.enqueue_many([b"a", b"b", b"c", b"d"])
        for attempt in [1, 2]:
            handles = await big.claim_batch("w", 10)
            assert len(handles) == 4, f"attempt {attempt}: claimed {len(handles)} of 4 jobs"
            _assert_in_range(await _backoff_delays(harness, big, handles), 2000, attempt)
            await harness.advance(3600)
        late = store.queue("backoff-late", QueueOpts(backoff_base_s=5, max_attempts=40))
        job_id = await late.enqueue(b"x")
        for _ in range(29):
            assert await (await _claim_id(late, job_id)).retry(delay_s=0) is True, "retry refused"
        handle = await _claim_id(late, job_id)
        assert handle.job.attempts == 30, f"expected attempt 30, got {handle.job.attempts}"
        _assert_in_range(await _backoff_delays(harness, late, [handle]), 5, 30)


@_check
async def q5_backoff_base_zero_retries_at_once(harness: EngineHarness) -> None:
    """Q5: base 0 gives a delay of 0: the retried job is ready at once."""
    async with harness.open_store(rng=random.Random(3)) as store:
        queue = store.queue("backoff-zero", QueueOpts(backoff_base_s=0, max_attempts=4))
        job_id = await queue.enqueue(b"x")
        for attempt in [1, 2, 3]:
            handle = await _claim_id(queue, job_id)
            delays = await _backoff_delays(harness, queue, [handle])
            assert delays == [0], f"base 0, attempt {attempt}: delay {delays[0]} s, expected 0"


@_check
async def q5_backoff_below_one_second_waits_one_second(harness: EngineHarness) -> None:
    """Q5 with decision 12: when 0 < cap < 1 the delay is ceil(cap/2) = 1 s
    (base 0.5: attempt 1 and 2 wait 1 s, attempt 3 waits 1 or 2 s)."""
    async with harness.open_store(rng=random.Random(11)) as store:
        queue = store.queue("backoff-tiny", QueueOpts(backoff_base_s=0.5, max_attempts=5))
        job_id = await queue.enqueue(b"x")
        for attempt in [1, 2, 3]:
            handle = await _claim_id(queue, job_id)
            delays = await _backoff_delays(harness, queue, [handle])
            _assert_in_range(delays, 0.5, attempt)
            await harness.advance(2)


@_check
async def q5_backoff_draws_come_from_the_injected_rng(harness: EngineHarness) -> None:
    """Q5 with decision 2: the store's rng makes delays reproducible: each retry call that
    needs the curve draws exactly one ``randint(low, high)`` before reaching the engine
    (even when the engine then refuses); calls that raise first, and retries at budget or
    with an explicit delay, draw nothing."""
    seed = 424242
    base = 60
    reference = random.Random(seed)
    async with harness.open_store(rng=random.Random(seed)) as store:
        queue = store.queue(
            "backoff-rng", QueueOpts(backoff_base_s=base, max_attempts=3, visibility_timeout_s=30)
        )
        ids = await queue.enqueue_many([b"a", b"b", b"c"])
        a, b, c = sorted(await queue.claim_batch("w", 3), key=lambda h: h.id)
        await _raises(InvalidArgument, "retry(delay_s=-1)", a.retry, delay_s=-1)
        assert await a.retry(delay_s=5) is True, "retry(delay_s=5) was refused"
        expected = reference.randint(*_jitter_range(base, 1))
        delays = await _backoff_delays(harness, queue, [b])
        assert delays == [expected], (
            f"the first backoff draw gave {delays[0]} s; a Random({seed}).randint over "
            f"{_jitter_range(base, 1)} gives {expected} s"
        )
        await harness.advance(31)
        assert await c.retry() is False, "retry of a lapsed claim was not refused"
        reference.randint(*_jitter_range(base, 1))  # drawn by the refused retry
        await harness.advance(3600)
        handles = {h.id: h for h in await queue.claim_batch("w", 3)}
        assert set(handles) == set(ids), "the three jobs were not claimable again"
        expected = reference.randint(*_jitter_range(base, 2))
        delays = await _backoff_delays(harness, queue, [handles[ids[0]]])
        assert delays == [expected], (
            f"after one refused retry, the next draw gave {delays[0]} s, expected {expected} s"
        )


# -- Q6 batch ack -------------------------------------------------------------------------


@_check
async def q6_ack_batch_deletes_only_valid_claims_of_this_queue(harness: EngineHarness) -> None:
    """Q6: ack_batch deletes each distinct id that is processing within its deadline in
    this queue, whoever claimed it; lapsed, pending, dead, unknown, other-queue ids and
    duplicates are not counted."""
    async with harness.open_store() as store:
        short = store.queue("batch-ack", QueueOpts(visibility_timeout_s=10))
        long = store.queue("batch-ack", QueueOpts(visibility_timeout_s=1000))
        other = store.queue("batch-ack-other", QueueOpts(visibility_timeout_s=1000))
        lapsed = await short.enqueue(b"lapsed", priority=4)
        valid_a = await long.enqueue(b"valid-a", priority=3)
        valid_b = await long.enqueue(b"valid-b", priority=2)
        dead = await long.enqueue(b"dead", priority=1)
        pending = await long.enqueue(b"pending", delay_s=10_000)
        foreign = await other.enqueue(b"foreign")
        a_handles = {h.id: h for h in await long.claim_batch("worker-a", 2)}
        assert set(a_handles) == {lapsed, valid_a}, "worker-a did not claim the two best jobs"
        b_handle = await _claim_id(long, valid_b, "worker-b")
        assert await (await _claim_id(long, dead, "worker-c")).fail() is True, "fail was refused"
        foreign_handle = await _claim_id(other, foreign)
        await harness.advance(11)
        unknown = max(lapsed, valid_a, valid_b, dead, pending, foreign) + 1_000_000
        mixed = [lapsed, valid_a, valid_b, pending, dead, unknown, foreign, valid_a, valid_b, -5]
        count = await long.ack_batch(mixed)
        assert count == 2, f"ack_batch({mixed}) returned {count}, expected 2"
        await _assert_gone(long, valid_a, "ack_batch of a valid claim")
        await _assert_gone(long, valid_b, "ack_batch of a valid claim")
        await _assert_state(long, lapsed, "processing", "ack_batch of a lapsed claim")
        await _assert_state(long, pending, "pending", "ack_batch of a pending job")
        await _assert_state(long, dead, "dead", "ack_batch of a dead job")
        await _assert_state(other, foreign, "processing", "ack_batch from another queue")
        assert await b_handle.ack() is False, "the holder could ack a row ack_batch deleted"
        assert await a_handles[lapsed].heartbeat() is False, "the lapsed claim came back to life"
        assert await foreign_handle.ack() is True, "the other queue's job was disturbed"


@_check
async def q6_ack_batch_counts_a_claim_at_its_deadline_instant(harness: EngineHarness) -> None:
    """Q6: ``now <= claim_expires_at`` counts; one instant later does not."""
    async with harness.open_store() as store:
        queue = store.queue("batch-deadline", QueueOpts(visibility_timeout_s=30))
        ids = await queue.enqueue_many([b"a", b"b"])
        await queue.claim_batch("w", 2)
        await harness.advance(30)
        assert await queue.ack_batch([ids[0]]) == 1, "ack_batch at now == deadline did not count"
        await harness.advance(INSTANT_S)
        assert await queue.ack_batch([ids[1]]) == 0, "ack_batch one instant late counted"
        await _assert_state(queue, ids[1], "processing", "a lapsed claim after ack_batch")


@_check
async def q6_ack_batch_of_nothing_returns_zero(harness: EngineHarness) -> None:
    """Q6: an empty list (or empty iterable) returns 0; ids must be ints."""
    async with harness.open_store() as store:
        queue = store.queue("batch-empty")
        job_id = await queue.enqueue(b"x")
        await _claim_id(queue, job_id)
        assert await queue.ack_batch([]) == 0, "ack_batch([]) did not return 0"
        assert await queue.ack_batch(iter(())) == 0, "ack_batch(empty iterator) did not return 0"
        for bad in [[1.0], ["1"], [None], "12", 5, [True], [2**63]]:
            await _raises(InvalidArgument, f"ack_batch({bad!r})", queue.ack_batch, bad)
        await _assert_state(queue, job_id, "processing", "after rejected ack_batch calls")
        assert await queue.ack_batch((job_id,)) == 1, "ack_batch of a tuple did not count"


# -- Q7 cancel ----------------------------------------------------------------------------


@_check
async def q7_cancel_deletes_a_pending_row(harness: EngineHarness) -> None:
    """Q7: cancel deletes a pending row (delayed or ready); a second cancel is False."""
    async with harness.open_store() as store:
        queue = store.queue("cancel-pending")
        ready = await queue.enqueue(b"ready")
        delayed = await queue.enqueue(b"delayed", delay_s=60)
        for job_id in [ready, delayed]:
            assert await queue.cancel(job_id) is True, (
                f"cancel of pending job {job_id} returned False"
            )
            await _assert_gone(queue, job_id, "cancel of a pending job")
            assert await queue.cancel(job_id) is False, "a second cancel returned True"
        await harness.advance(60)
        await _nothing_claimable(queue, "after cancelling every pending job")


@_check
async def q7_cancel_deletes_a_processing_row_and_refuses_its_holder(harness: EngineHarness) -> None:
    """Q7: cancel deletes a processing row; the holder is not interrupted, but its
    heartbeat, ack, retry and fail return False afterwards."""
    async with harness.open_store() as store:
        queue = store.queue("cancel-processing")
        ids = await queue.enqueue_many([b"ack", b"retry", b"fail"])
        handles = {h.id: h for h in await queue.claim_batch("holder", 3)}
        for job_id in ids:
            assert await queue.cancel(job_id) is True, (
                f"cancel of processing job {job_id} returned False"
            )
            await _assert_gone(queue, job_id, "cancel of a processing job")
        first, second, third = (handles[i] for i in ids)
        assert await first.heartbeat() is False, "heartbeat of a cancelled job was not refused"
        assert await first.ack() is False, "ack of a cancelled job was not refused"
        assert await second.retry(delay_s=0) is False, "retry of a cancelled job was not refused"
        assert await third.fail() is False, "fail of a cancelled job was not refused"
        for job_id in ids:
            await _assert_gone(queue, job_id, "a refused operation on a cancelled job")


@_check
async def q7_cancel_does_not_touch_dead_unknown_or_other_queue_rows(harness: EngineHarness) -> None:
    """Q7: cancel returns False for a dead row (which stays), an unknown id and another
    queue's row (which stays live)."""
    async with harness.open_store() as store:
        queue = store.queue("cancel-misses")
        other = store.queue("cancel-other")
        dead = await queue.enqueue(b"dead")
        assert await (await _claim_id(queue, dead)).fail("gone") is True, "fail was refused"
        foreign = await other.enqueue(b"foreign")
        before = await _get(queue, dead)
        assert await queue.cancel(dead) is False, "cancel of a dead job returned True"
        after = await _get(queue, dead)
        assert after == before, "cancel changed a dead row"
        assert await queue.cancel(foreign) is False, "cancel of another queue's job returned True"
        await _assert_state(other, foreign, "pending", "cancel from another queue")
        for unknown in [foreign + 1_000_000, 0, -1]:
            assert await queue.cancel(unknown) is False, f"cancel({unknown}) returned True"
        await _raises(InvalidArgument, "cancel('1')", queue.cancel, "1")


# -- Q8 read -------------------------------------------------------------------------------


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
        await _claim_id(queue, job_id, "worker-1")
        processing = await _get(queue, job_id)
        expected = dataclasses.replace(
            expected,
            state="processing",
            attempts=1,
            claimed_by="worker-1",
            claimed_at=t1,
            claim_expires_at=_after(t1, 45),
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


# -- Q9 sweep ------------------------------------------------------------------------------


@_check
async def q9_sweep_dead_letters_expired_pending_and_processing_rows(harness: EngineHarness) -> None:
    """Q9: sweep_expired moves every live row with now > expires_at, pending or
    processing, to dead with "expired" (claim fields kept, decision 1); at
    now == expires_at nothing expires; unexpiring and younger rows stay."""
    async with harness.open_store() as store:
        queue = store.queue("sweep", QueueOpts(expires_in_s=60, visibility_timeout_s=1000))
        forever = store.queue("sweep")
        pending = await queue.enqueue(b"pending", delay_s=-1)
        processing = await queue.enqueue(b"processing", priority=1)
        holder = await _claim_id(queue, processing, "holder")
        immortal = await forever.enqueue(b"immortal", delay_s=1_000_000)
        await harness.advance(30)
        younger = await queue.enqueue(b"younger", delay_s=1_000_000)
        await harness.advance(30)
        result = await queue.sweep_expired()
        assert result == SweepResult(0, 0), f"at now == expires_at the sweep returned {result!r}"
        assert isinstance(result, SweepResult), f"sweep_expired returned a {type(result).__name__}"
        await harness.advance(INSTANT_S)
        result = await queue.sweep_expired()
        assert result == SweepResult(expired=2, purged=0), (
            f"sweep_expired returned {result!r}, expected SweepResult(expired=2, purged=0)"
        )
        await _assert_dead(harness, queue, pending, EXPIRED, "an expired pending row")
        dead = await _assert_dead(harness, queue, processing, EXPIRED, "an expired processing row")
        now = await harness.now()
        assert (dead.died_at, dead.attempts, dead.claimed_by) == (now, 1, "holder"), (
            f"expired processing row: (died_at, attempts, claimed_by) = "
            f"{(dead.died_at, dead.attempts, dead.claimed_by)!r}, expected ({now}, 1, 'holder')"
        )
        assert await holder.ack() is False, "the holder of an expired row could still ack"
        await _assert_state(queue, immortal, "pending", "a row without expiry")
        await _assert_state(queue, younger, "pending", "a row not yet expired")
        again = await queue.sweep_expired()
        assert again == SweepResult(0, 0), f"a second sweep returned {again!r}"


@_check
async def q9_retention_none_keeps_dead_rows_forever(harness: EngineHarness) -> None:
    """Q9: with dead_letter_retention_s=None no dead row is ever purged."""
    async with harness.open_store() as store:
        queue = store.queue("keep-dead")
        dead = await queue.enqueue(b"x")
        assert await (await _claim_id(queue, dead)).fail() is True, "fail was refused"
        await harness.advance(10 * 365 * 24 * 3600)
        result = await queue.sweep_expired()
        assert result == SweepResult(0, 0), f"sweep with retention None returned {result!r}"
        await _assert_state(queue, dead, "dead", "a dead row under retention None")


@_check
async def q9_retention_zero_purges_dead_rows_after_their_death_instant(
    harness: EngineHarness,
) -> None:
    """Q9: retention 0 purges a dead row once ``died_at + 0 < now``: not at the instant
    it died, one instant later yes."""
    async with harness.open_store() as store:
        queue = store.queue("purge-now", QueueOpts(dead_letter_retention_s=0))
        dead = await queue.enqueue(b"x")
        assert await (await _claim_id(queue, dead)).fail() is True, "fail was refused"
        result = await queue.sweep_expired()
        assert result == SweepResult(0, 0), f"retention 0 purged at the death instant: {result!r}"
        await _assert_state(queue, dead, "dead", "a row that just died")
        await harness.advance(INSTANT_S)
        result = await queue.sweep_expired()
        assert result == SweepResult(0, 1), f"retention 0 one instant later returned {result!r}"
        await _assert_gone(queue, dead, "a purged dead row")


@_check
async def q9_retention_purges_dead_rows_after_the_retention(harness: EngineHarness) -> None:
    """Q9: a positive retention purges dead rows with ``died_at + retention < now`` (and
    the expired rows the same sweep kills are not purged by it)."""
    async with harness.open_store() as store:
        queue = store.queue("purge-later", QueueOpts(dead_letter_retention_s=100, expires_in_s=150))
        old = await queue.enqueue(b"old")
        assert await (await _claim_id(queue, old)).fail() is True, "fail was refused"
        await harness.advance(50)
        young = await queue.enqueue(b"young")
        assert await (await _claim_id(queue, young)).fail() is True, "fail was refused"
        expiring = await queue.enqueue(b"expiring", delay_s=1_000_000)
        await harness.advance(50)
        assert await queue.sweep_expired() == SweepResult(0, 0), "purged at died_at + retention"
        await harness.advance(INSTANT_S)
        result = await queue.sweep_expired()
        assert result == SweepResult(0, 1), f"expected to purge only the old row; got {result!r}"
        await _assert_gone(queue, old, "a dead row past its retention")
        await _assert_state(queue, young, "dead", "a dead row within its retention")
        await harness.advance(150)
        result = await queue.sweep_expired()
        assert result == SweepResult(1, 1), f"expected 1 expired and 1 purged; got {result!r}"
        await _assert_dead(harness, queue, expiring, EXPIRED, "a row expired by this sweep")
        await _assert_gone(queue, young, "a dead row past its retention")


@_check
async def q9_sweep_is_scoped_to_its_queue(harness: EngineHarness) -> None:
    """Q9: a sweep expires and purges only its own queue's rows."""
    async with harness.open_store() as store:
        opts = QueueOpts(expires_in_s=10, dead_letter_retention_s=0)
        mine = store.queue("sweep-mine", opts)
        theirs = store.queue("sweep-theirs", opts)
        rows = {}
        for queue in [mine, theirs]:
            dead = await queue.enqueue(b"dead")
            assert await (await _claim_id(queue, dead)).fail() is True, "fail was refused"
            live = await queue.enqueue(b"live", delay_s=1000)
            rows[queue.name] = (dead, live)
        await harness.advance(11)
        result = await mine.sweep_expired()
        assert result == SweepResult(1, 1), f"the sweep of one queue returned {result!r}"
        dead, live = rows["sweep-theirs"]
        await _assert_state(theirs, dead, "dead", "another queue's dead row")
        await _assert_state(theirs, live, "pending", "another queue's expired row")
        result = await theirs.sweep_expired()
        assert result == SweepResult(1, 1), f"the other queue's own sweep returned {result!r}"


@_check
async def q9_retention_is_that_of_the_sweeping_handle(harness: EngineHarness) -> None:
    """Q1/Q9: dead_letter_retention_s is not stamped on rows: the sweeping handle's own
    retention decides."""
    async with harness.open_store() as store:
        keeper = store.queue("retention-handle")
        purger = store.queue("retention-handle", QueueOpts(dead_letter_retention_s=0))
        dead = await keeper.enqueue(b"x")
        assert await (await _claim_id(keeper, dead)).fail() is True, "fail was refused"
        await harness.advance(1)
        result = await keeper.sweep_expired()
        assert result == SweepResult(0, 0), f"a handle with retention None purged: {result!r}"
        result = await purger.sweep_expired()
        assert result == SweepResult(0, 1), f"a handle with retention 0 returned {result!r}"
        await _assert_gone(keeper, dead, "a purged dead row")


# -- Q10 transactions ---------------------------------------------------------------------


class _Rollback(Exception):
    """Raised inside a transaction block to roll it back."""


@_check
async def q10_transaction_rows_appear_and_wake_only_after_commit(harness: EngineHarness) -> None:
    """Q10: rows enqueued in a transaction are invisible and unclaimable, and wake nobody,
    until the block commits; then all are visible and their queues woken."""
    async with harness.open_store() as store:
        first = store.queue("tx-first")
        second = store.queue("tx-second")
        async with store.open_wake_listener([first, second]) as listener:
            async with store.transaction() as tx:
                one = await tx.enqueue(first, b"one", priority=2)
                two = await tx.enqueue("tx-second", b"two", delay_s=-1)
                three = await tx.enqueue(first, bytearray(b"three"), max_attempts=9)
                assert one < two < three, f"transaction ids {[one, two, three]} do not increase"
                for queue, job_id in [(first, one), (second, two), (first, three)]:
                    seen = await queue.get_job(job_id)
                    assert seen is None, f"job {job_id} is visible before the commit: {seen!r}"
                assert await first.claim_one("early") is None, "claimed a row before the commit"
                assert await second.claim_one("early") is None, "claimed a row before the commit"
                await _no_wake(listener, "inside the transaction")
            now = await harness.now()
            await _wait_for_wakes(listener, {"tx-first", "tx-second"}, "after the commit")
        for queue, job_id, payload in [
            (first, one, b"one"),
            (second, two, b"two"),
            (first, three, b"three"),
        ]:
            job = await _get(queue, job_id, "after the commit: ")
            assert (job.state, job.payload, job.enqueued_at) == ("pending", payload, now), (
                f"committed job {job_id}: (state, payload, enqueued_at) = "
                f"{(job.state, job.payload, job.enqueued_at)!r}"
            )
        assert (await _get(first, one)).priority == 2, "the transaction lost the priority"
        assert (await _get(first, three)).max_attempts == 9, "the transaction lost max_attempts"
        assert (await _get(second, two)).run_at == _after(now, -1), "the transaction lost delay_s"
        await _claim_id(first, one)


@_check
async def q10_transaction_rolls_back_on_exception(harness: EngineHarness) -> None:
    """Q10: an exception (or cancellation) inside the block rolls every row back: no row,
    no wake; the exception propagates; the rolled-back ids are never used again."""
    async with harness.open_store() as store:
        queue = store.queue("tx-rollback")
        async with store.open_wake_listener([queue, "tx-rollback-2"]) as listener:
            propagated = False
            try:
                async with store.transaction() as tx:
                    lost = [await tx.enqueue(queue, b"a"), await tx.enqueue("tx-rollback-2", b"b")]
                    raise _Rollback
            except _Rollback:
                propagated = True
            assert propagated, "the exception raised inside the transaction did not propagate"
            with trio.CancelScope() as scope:
                async with store.transaction() as tx:
                    lost.append(await tx.enqueue(queue, b"c"))
                    scope.cancel()
                    await trio.lowlevel.checkpoint()
            assert scope.cancelled_caught, "the cancellation did not reach the cancel scope"
            await _no_wake(listener, "after rolled-back transactions")
        for job_id in lost:
            assert await queue.get_job(job_id) is None, f"rolled-back job {job_id} is visible"
            assert await store.queue("tx-rollback-2").get_job(job_id) is None, (
                f"rolled-back job {job_id} is visible"
            )
        await _nothing_claimable(queue, "after rolled-back transactions")
        await _nothing_claimable(store.queue("tx-rollback-2"), "after rolled-back transactions")
        fresh = await queue.enqueue(b"fresh")
        assert fresh > max(lost), f"id {fresh} reuses or precedes rolled-back ids {lost}"


@_check
async def q10_transaction_stamps_handle_opts_or_the_defaults(harness: EngineHarness) -> None:
    """Q1/Q10: a row enqueued in a transaction through a queue handle carries the handle's
    stamps; one enqueued by bare name carries the defaults 300 / 3 / 5 / None."""
    async with harness.open_store() as store:
        opts = QueueOpts(
            visibility_timeout_s=45, max_attempts=6, backoff_base_s=0.5, expires_in_s=99
        )
        handle = store.queue("tx-stamps", opts)
        async with store.transaction() as tx:
            stamped = await tx.enqueue(handle, b"stamped")
            bare = await tx.enqueue("tx-stamps", b"bare")
        now = await harness.now()
        for job_id, expected in [
            (stamped, (45, 6, 0.5, _after(now, 99))),
            (bare, (300, 3, 5, None)),
        ]:
            job = await _get(handle, job_id)
            seen = (job.visibility_timeout_s, job.max_attempts, job.backoff_base_s, job.expires_at)
            assert seen == expected, (
                f"transactional job {job_id}: (visibility_timeout_s, max_attempts, "
                f"backoff_base_s, expires_at) = {seen!r}, expected {expected!r}"
            )


@_check
async def q10_transaction_validates_arguments_without_effect(harness: EngineHarness) -> None:
    """Q10/Q12 and decision 7: bad arguments to tx.enqueue are InvalidArgument at once and
    buffer nothing (the transaction can still commit its good rows); a queue handle of
    another store is InvalidArgument."""
    async with harness.open_store() as store:
        queue = store.queue("tx-validate")
        async with store.transaction() as tx:
            await _raises(InvalidArgument, "tx.enqueue(str payload)", tx.enqueue, queue, "text")
            await _raises(
                InvalidArgument,
                "tx.enqueue(priority=2**31)",
                tx.enqueue,
                queue,
                b"x",
                priority=2**31,
            )
            await _raises(
                InvalidArgument,
                "tx.enqueue(1 MiB + 1)",
                tx.enqueue,
                queue,
                b"x" * (DEFAULT_MAX_PAYLOAD_BYTES + 1),
            )
            await _raises(
                InvalidArgument,
                "tx.enqueue(naive run_at)",
                tx.enqueue,
                queue,
                b"x",
                run_at=datetime(2030, 1, 1),
            )
            await _raises(InvalidArgument, "tx.enqueue(queue=5)", tx.enqueue, 5, b"x")
            good = await tx.enqueue(queue, b"good")
        handles = await queue.claim_batch("w", 10)
        assert [h.id for h in handles] == [good], (
            f"after rejected tx.enqueue calls the commit produced {[h.id for h in handles]}, "
            f"expected only [{good}]"
        )
        async with harness.open_store() as elsewhere:
            foreign = elsewhere.queue("tx-validate")
            async with store.transaction() as tx:
                await _raises(
                    InvalidArgument, "tx.enqueue(another store's handle)", tx.enqueue, foreign, b"x"
                )


@_check
async def q10_finished_transaction_is_consumed(harness: EngineHarness) -> None:
    """Decision 7: a transaction whose block ended (committed or rolled back) raises
    HandleConsumed on enqueue and enqueues nothing."""
    async with harness.open_store() as store:
        queue = store.queue("tx-finished")
        async with store.transaction() as committed:
            await committed.enqueue(queue, b"x")
        await _raises(
            HandleConsumed, "enqueue on a committed transaction", committed.enqueue, queue, b"y"
        )
        with contextlib.suppress(_Rollback):
            async with store.transaction() as rolled_back:
                raise _Rollback
        await _raises(
            HandleConsumed, "enqueue on a rolled-back transaction", rolled_back.enqueue, queue, b"z"
        )
        handles = await queue.claim_batch("w", 10)
        assert [h.job.payload for h in handles] == [b"x"], (
            f"expected only the committed row; claimed {[h.job.payload for h in handles]}"
        )


# -- Q11 closed store ---------------------------------------------------------------------


async def _assert_everything_closed(
    store_ops: Sequence[tuple[str, Callable[[], object]]],
) -> None:
    for what, call in store_ops:
        await _raises(StoreClosed, f"{what} after close", call)


@_check
async def q11_every_operation_after_close_raises_store_closed(harness: EngineHarness) -> None:
    """Q11: after ``aclose()``, every operation of the store, its queue handles, its job
    handles (fresh or consumed), transactions and wake listeners raises StoreClosed."""
    async with harness.open_store() as store:
        queue = store.queue("closing")
        ids = await queue.enqueue_many([b"a", b"b"])
        fresh, consumed = sorted(await queue.claim_batch("w", 2), key=lambda h: h.id)
        assert await consumed.ack() is True, "ack was refused"
        async with store.open_wake_listener([queue]) as listener:
            await store.aclose()
            assert store.closed, "store.closed is False after aclose()"
            await _raises(StoreClosed, "listener.wait(0) after close", listener.wait, 0)
            await _raises(StoreClosed, "listener.wait(None) after close", listener.wait, None)
        await _assert_everything_closed(
            [
                ("store.queue", lambda: store.queue("closing")),
                ("store.queue with opts", lambda: store.queue("other", QueueOpts())),
                ("store.transaction", store.transaction),
                ("store.open_wake_listener", lambda: store.open_wake_listener(["closing"])),
                ("queue.enqueue", lambda: queue.enqueue(b"x")),
                ("queue.enqueue_many", lambda: queue.enqueue_many([b"x"])),
                ("queue.enqueue_many([])", lambda: queue.enqueue_many([])),
                ("queue.claim_one", lambda: queue.claim_one("w")),
                ("queue.claim_batch", lambda: queue.claim_batch("w", 3)),
                ("queue.claim_batch(n=0)", lambda: queue.claim_batch("w", 0)),
                ("queue.ack_batch", lambda: queue.ack_batch(ids)),
                ("queue.ack_batch([])", lambda: queue.ack_batch([])),
                ("queue.cancel", lambda: queue.cancel(ids[0])),
                ("queue.get_job", lambda: queue.get_job(ids[0])),
                ("queue.sweep_expired", queue.sweep_expired),
                ("queue.ack_handles", lambda: queue.ack_handles([fresh])),
                ("queue.heartbeat_handles", lambda: queue.heartbeat_handles([fresh])),
                ("queue.retry_handles", lambda: queue.retry_handles([(fresh, None, None)])),
                ("queue.retry_handles([])", lambda: queue.retry_handles([])),
                ("queue.fail_handles", lambda: queue.fail_handles([(fresh, None)])),
                ("queue.fail_handles([])", lambda: queue.fail_handles([])),
                (
                    "queue.ack_handles_and_claim",
                    lambda: queue.ack_handles_and_claim([fresh], "w", 3),
                ),
                (
                    "queue.ack_handles_and_claim([], n=0)",
                    lambda: queue.ack_handles_and_claim([], "w", 0),
                ),
                ("handle.heartbeat", fresh.heartbeat),
                ("handle.ack", fresh.ack),
                ("handle.retry", fresh.retry),
                ("handle.fail", fresh.fail),
                ("consumed handle.heartbeat", consumed.heartbeat),
                ("consumed handle.ack", consumed.ack),
                ("store.stats (D22)", store.stats),
                ("store.get_job (D26)", lambda: store.get_job(ids[0])),
                ("queue.list_jobs (D26)", lambda: queue.list_jobs("dead")),
                ("queue.requeue_dead (D24)", lambda: queue.requeue_dead(ids)),
                ("queue.requeue_dead([]) (D24)", lambda: queue.requeue_dead([])),
                ("queue.purge_dead (D25)", queue.purge_dead),
            ]
        )


@_check
async def q11_leaving_the_store_block_closes_everything(harness: EngineHarness) -> None:
    """Q11: leaving the store's ``async with`` closes it like ``aclose()``: handles kept
    past the block raise StoreClosed."""
    async with harness.open_store() as store:
        queue = store.queue("left-behind")
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        async with store.transaction() as tx:
            pass
    assert store.closed, "store.closed is False after leaving its block"
    await _assert_everything_closed(
        [
            ("store.queue", lambda: store.queue("left-behind")),
            ("store.transaction", store.transaction),
            ("store.open_wake_listener", lambda: store.open_wake_listener([queue])),
            ("queue.enqueue", lambda: queue.enqueue(b"x")),
            ("queue.claim_one", lambda: queue.claim_one("w")),
            ("queue.get_job", lambda: queue.get_job(job_id)),
            ("queue.sweep_expired", queue.sweep_expired),
            ("handle.heartbeat", handle.heartbeat),
            ("handle.ack", handle.ack),
            ("finished tx.enqueue", lambda: tx.enqueue(queue, b"x")),
        ]
    )


@_check
async def q11_a_transaction_open_at_close_raises_store_closed(harness: EngineHarness) -> None:
    """Q11: when the store closes while a transaction is open, its enqueue raises
    StoreClosed and so does its commit (leaving the block)."""
    async with harness.open_store() as store:
        queue = store.queue("tx-at-close")
        commit_raised: BaseException | None = None
        try:
            async with store.transaction() as tx:
                await tx.enqueue(queue, b"before close")
                await store.aclose()
                await _raises(StoreClosed, "tx.enqueue after close", tx.enqueue, queue, b"x")
        except StoreClosed as exc:
            commit_raised = exc
        assert commit_raised is not None, (
            "committing a transaction after close did not raise StoreClosed"
        )


@_check
async def q11_a_blocked_wake_listener_wakes_up_with_store_closed(harness: EngineHarness) -> None:
    """Q11: a task blocked in ``listener.wait()`` when the store closes gets StoreClosed."""
    async with harness.open_store() as store, store.open_wake_listener(["blocked"]) as listener:
        outcome: list[str] = []

        async def wait_for_close(
            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
        ) -> None:
            task_status.started()
            try:
                woken = await listener.wait(WAKE_TIMEOUT_S)
            except StoreClosed:
                outcome.append("StoreClosed")
            else:
                outcome.append(f"returned {sorted(woken)}")

        async with trio.open_nursery() as nursery:
            await nursery.start(wait_for_close)
            await store.aclose()
        assert outcome == ["StoreClosed"], (
            f"a blocked wait ended with {outcome}, expected StoreClosed"
        )


@_check
async def q11_closing_twice_is_harmless(harness: EngineHarness) -> None:
    """Q11: ``aclose()`` twice, then leaving the block, raises nothing."""
    async with harness.open_store() as store:
        await store.queue("twice").enqueue(b"x")
        await store.aclose()
        await store.aclose()
    await store.aclose()


@_check
async def q11_store_closed_is_reported_before_other_errors(harness: EngineHarness) -> None:
    """Q11 with decision 4: checks run in the order closed -> consumed -> arguments, so a
    closed store reports StoreClosed even for calls that are also consumed or invalid."""
    async with harness.open_store() as store:
        queue = store.queue("check-order")
        await queue.enqueue(b"x")
        handle = await _claim(queue)
        assert await handle.ack() is True, "ack was refused"
        await _raises(HandleConsumed, "consumed handle.retry(delay_s=-1)", handle.retry, delay_s=-1)
        async with store.open_wake_listener([queue]) as listener:
            await store.aclose()
            await _assert_everything_closed(
                [
                    ("listener.wait(-1)", lambda: listener.wait(-1)),
                    ("store.queue('alk_bad')", lambda: store.queue("alk_bad")),
                    ("store.open_wake_listener([])", lambda: store.open_wake_listener([])),
                    ("queue.enqueue(str)", lambda: queue.enqueue(_any("text"))),
                    ("queue.claim_batch('', 1)", lambda: queue.claim_batch("", 1)),
                    ("queue.get_job('1')", lambda: queue.get_job(_any("1"))),
                    ("consumed handle.retry(delay_s=-1)", lambda: handle.retry(delay_s=-1)),
                    (
                        "queue.retry_handles with a consumed handle and delay_s=-1",
                        lambda: queue.retry_handles([(handle, None, -1)]),
                    ),
                    (
                        "queue.fail_handles with a consumed handle and a bad item",
                        lambda: queue.fail_handles([(handle, None), _any(5)]),
                    ),
                ]
            )


# -- Q12 errors ---------------------------------------------------------------------------


@_check
async def q12_errors_form_one_hierarchy(harness: EngineHarness) -> None:
    """Q12: every error is an AlkstoreError; InvalidArgument is also a ValueError; the
    errors the engine raises are these classes."""
    assert issubclass(AlkstoreError, Exception), "AlkstoreError is not an Exception"
    assert issubclass(InvalidArgument, ValueError), "InvalidArgument is not a ValueError"
    for cls in [InvalidArgument, StoreClosed, HandleConsumed, SchemaError, EngineError]:
        assert issubclass(cls, AlkstoreError), f"{cls.__name__} is not an AlkstoreError"
    async with harness.open_store() as store:
        queue = store.queue("errors")
        exc = await _raises(ValueError, "enqueue(str) caught as ValueError", queue.enqueue, "text")
        assert isinstance(exc, InvalidArgument), f"enqueue(str) raised {type(exc).__name__}"
        await queue.enqueue(b"x")
        handle = await _claim(queue)
        await handle.ack()
        exc = await _raises(AlkstoreError, "ack twice", handle.ack)
        assert isinstance(exc, HandleConsumed), f"ack twice raised {type(exc).__name__}"
    exc = await _raises(AlkstoreError, "enqueue after close", queue.enqueue, b"x")
    assert isinstance(exc, StoreClosed), f"enqueue after close raised {type(exc).__name__}"


@_check
async def q12_messages_name_the_parameter_and_the_value(harness: EngineHarness) -> None:
    """Q12: an InvalidArgument message names the parameter and the offending value."""
    async with harness.open_store() as store:
        queue = store.queue("messages")
        await queue.enqueue(b"x")
        handle = await _claim(queue)
        cases: list[tuple[str, Callable[[], object], tuple[str, ...]]] = [
            ("queue name", lambda: store.queue("bad name!"), ("name", "bad name!")),
            ("reserved name", lambda: store.queue("alk_x"), ("alk_", "alk_x")),
            ("opts", lambda: QueueOpts(visibility_timeout_s=-4), ("visibility_timeout_s", "-4")),
            ("opts", lambda: QueueOpts(max_attempts=0), ("max_attempts", "0")),
            ("opts", lambda: QueueOpts(backoff_base_s=float("nan")), ("backoff_base_s", "nan")),
            ("priority", lambda: queue.enqueue(b"x", priority=2**31), ("priority", "2147483648")),
            ("delay_s", lambda: queue.enqueue(b"x", delay_s=float("inf")), ("delay_s", "inf")),
            ("max_attempts", lambda: queue.enqueue(b"x", max_attempts=-3), ("max_attempts", "-3")),
            (
                "run_at",
                lambda: queue.enqueue(b"x", run_at=datetime(2030, 1, 2)),
                ("run_at", "2030"),
            ),
            ("worker_id", lambda: queue.claim_one(""), ("worker_id", "''")),
            ("n", lambda: queue.claim_batch("w", _any(2.5)), ("n", "2.5")),
            ("extend_s", lambda: handle.heartbeat(-7), ("extend_s", "-7")),
            ("delay_s", lambda: handle.retry(delay_s=-9), ("delay_s", "-9")),
            ("error", lambda: handle.fail(_any(12345)), ("error", "12345")),
            (
                "retry_handles delay_s",
                lambda: queue.retry_handles([(handle, None, -9)]),
                ("delay_s", "-9"),
            ),
            (
                "fail_handles error",
                lambda: queue.fail_handles([(handle, _any(12345))]),
                ("error", "12345"),
            ),
            ("job_id", lambda: queue.get_job(_any("77")), ("job_id", "77")),
            ("payload", lambda: queue.enqueue(_any(3.25)), ("payload", "float")),
            (
                "payload size",
                lambda: queue.enqueue(b"x" * (DEFAULT_MAX_PAYLOAD_BYTES + 1)),
                ("payload",),
            ),
        ]
        for what, call, parts in cases:
            exc = await _raises(InvalidArgument, what, call)
            _assert_mentions(exc, what, *parts)


@_check
async def q12_messages_never_contain_the_payload(harness: EngineHarness) -> None:
    """Q12: no error message echoes a payload (too large, wrong type, or inside a bad
    batch), and neither do the reprs of jobs and handles."""
    secret = "SECRET-PAYLOAD-7f3a"
    async with harness.open_store() as store:
        queue = store.queue("no-echo")
        calls: list[tuple[str, Callable[[], object]]] = [
            ("too large", lambda: queue.enqueue(secret.encode() * 70_000)),
            ("str", lambda: queue.enqueue(_any(secret))),
            ("dict", lambda: queue.enqueue(_any({"password": secret}))),
            ("list of str", lambda: queue.enqueue_many([b"ok", _any(secret)])),
            ("single str", lambda: queue.enqueue_many(_any(secret))),
            ("single bytes", lambda: queue.enqueue_many(_any(secret.encode()))),
        ]
        for what, call in calls:
            exc = await _raises(InvalidArgument, f"payload {what}", call)
            assert secret not in f"{exc} {exc!r}", (
                f"the InvalidArgument for a bad payload ({what}) echoes the payload: {exc}"
            )
        job_id = await queue.enqueue(secret.encode())
        handle = await _claim_id(queue, job_id)
        for what, text in [
            ("repr(Job)", repr(handle.job)),
            ("str(Job)", str(handle.job)),
            ("repr(JobHandle)", repr(handle)),
            ("repr(get_job)", repr(await queue.get_job(job_id))),
        ]:
            assert secret not in text, f"{what} shows the payload: {text}"


@_check
async def q12_bad_input_has_no_partial_effect(harness: EngineHarness) -> None:
    """Q12: a rejected call changes nothing: no row, no claim, no sweep, no wake, no
    consumed handle."""
    async with harness.open_store() as store:
        queue = store.queue("no-partial", QueueOpts(visibility_timeout_s=10, max_attempts=1))
        spent = await queue.enqueue(b"spent", priority=5)
        await _claim_id(queue, spent)
        await harness.advance(11)
        ready = await queue.enqueue(b"ready")
        async with store.open_wake_listener([queue]) as listener:
            for what, call in [
                ("enqueue(priority='high')", lambda: queue.enqueue(b"x", priority=_any("high"))),
                ("enqueue_many with a bad payload", lambda: queue.enqueue_many([b"x", _any(1)])),
                ("claim_batch('', 5)", lambda: queue.claim_batch("", 5)),
                ("claim_batch('w', 1.5)", lambda: queue.claim_batch("w", _any(1.5))),
                ("claim_one(None)", lambda: queue.claim_one(_any(None))),
                ("ack_batch(['x'])", lambda: queue.ack_batch(_any(["x"]))),
            ]:
                await _raises(InvalidArgument, what, call)
            await _no_wake(listener, "after rejected calls")
        await _assert_state(
            queue, spent, "processing", "a rejected claim must not run the pre-claim sweep"
        )
        await _assert_state(queue, ready, "pending", "a rejected claim must not claim")
        handles = await queue.claim_batch("w", 10)
        assert [h.id for h in handles] == [ready], (
            f"after rejected calls the queue held {[h.id for h in handles]}, expected [{ready}]"
        )


# -- D22-D26 the operator's API (decisions, where the contract is silent) ------------------


async def _dead_job(queue: Queue, payload: bytes, error: str = "boom") -> int:
    """Enqueue a job with the top priority, claim it and fail it; its id."""
    job_id = await queue.enqueue(payload, priority=INT32_MAX)
    assert await (await _claim_id(queue, job_id)).fail(error) is True, "fail was refused"
    return job_id


@_check
async def d22_stats_counts_each_queue_by_state_at_one_instant(harness: EngineHarness) -> None:
    """D22: ``store.stats()`` counts, per queue with rows, ready and delayed pending rows,
    processing rows and the lapsed ones among them, and dead rows, at the engine's clock;
    the oldest ready row's age is ``now - min(run_at)`` of the ready rows. ``stats(queue)``
    lists only that queue, even when it has no rows."""
    async with harness.open_store() as store:
        empty = await store.stats()
        assert empty.queues == (), f"a fresh store's stats list queues: {empty.queues!r}"
        assert empty.now == await harness.now(), (
            f"stats().now is {empty.now!r}, expected the engine's clock {await harness.now()!r}"
        )
        stats_a = store.queue("stats-a", QueueOpts(visibility_timeout_s=10))
        stats_b = store.queue("stats-b")
        await _dead_job(stats_a, b"dead")
        lapsed = await stats_a.enqueue(b"lapsed", priority=5)
        await _claim_id(stats_a, lapsed)
        await harness.advance(10 + INSTANT_S)
        held = await stats_a.enqueue(b"held", priority=9)
        assert await (await _claim_id(stats_a, held)).heartbeat(1000) is True, "heartbeat"
        await stats_a.enqueue(b"old ready")
        await harness.advance(30)
        await stats_a.enqueue(b"new ready")
        await stats_a.enqueue(b"delayed", delay_s=60)
        await stats_b.enqueue(b"b delayed", delay_s=1)
        stats = await store.stats()
        now = await harness.now()
        assert stats.now == now, f"stats().now is {stats.now!r}, expected {now!r}"
        assert [entry.queue for entry in stats.queues] == ["stats-a", "stats-b"], (
            f"stats() listed {[entry.queue for entry in stats.queues]}"
        )
        a, b = stats.queues
        got = (a.pending_ready, a.pending_delayed, a.processing, a.reclaimable, a.dead)
        assert got == (2, 1, 2, 1, 1), (
            f"stats-a (ready, delayed, processing, reclaimable, dead) = {got}, "
            "expected (2, 1, 2, 1, 1)"
        )
        assert a.oldest_ready_age_s == 30.0, (
            f"stats-a oldest_ready_age_s = {a.oldest_ready_age_s!r}, expected 30.0"
        )
        got_b = (b.pending_ready, b.pending_delayed, b.processing, b.dead, b.oldest_ready_age_s)
        assert got_b == (0, 1, 0, 0, None), f"stats-b = {b!r}"
        only = await store.stats("stats-b")
        assert only.queues == (b,), f"stats('stats-b') = {only.queues!r}, expected ({b!r},)"
        nothing = await store.stats(store.queue("stats-none"))
        assert [(e.queue, e.live, e.dead) for e in nothing.queues] == [("stats-none", 0, 0)], (
            f"stats of a queue without rows = {nothing.queues!r}"
        )
        await _raises(InvalidArgument, "stats('alk_x')", store.stats, "alk_x")
        await _raises(InvalidArgument, "stats(7)", store.stats, _any(7))


@_check
async def d23_ids_issued_minus_live_and_dead_counts_the_rows_gone(harness: EngineHarness) -> None:
    """D23: ``stats().ids_issued`` counts every id handed out (rolled-back transactions
    included), so ``ids_issued - live - dead`` grows by each ack, cancel and purge, and
    by nothing else."""

    def gone(stats: Any) -> int:
        return int(stats.ids_issued - sum(e.live + e.dead for e in stats.queues))

    async with harness.open_store() as store:
        queue = store.queue("gone")
        ids = await queue.enqueue_many([b"a", b"b", b"c", b"d"])
        first = await store.stats()
        assert first.ids_issued >= 4, f"ids_issued = {first.ids_issued} after 4 enqueues"
        assert gone(first) == 0, f"rows gone before any ack: {gone(first)}"
        assert await (await _claim_id(queue, ids[0])).ack() is True, "ack was refused"
        assert await queue.cancel(ids[1]) is True, "cancel was refused"
        await (await _claim_id(queue, ids[2])).fail()
        after = await store.stats()
        assert gone(after) == 2, f"after one ack and one cancel, {gone(after)} rows gone"
        assert await queue.purge_dead() == 1, "purge_dead did not delete the dead row"
        assert gone(await store.stats()) == 3, "a purge is not counted as a row gone"


@_check
async def d24_requeue_dead_moves_listed_dead_rows_back_to_pending_with_attempts_reset(
    harness: EngineHarness,
) -> None:
    """D24: ``requeue_dead(ids)`` moves the listed dead rows of this queue back to pending,
    ready now, attempts 0, enqueued now, claim fields and ``died_at`` cleared, id,
    payload, priority, stamps and ``last_error`` kept; ids that are live, unknown or of
    another queue are ignored; the count is returned; the queue is woken and the jobs
    are claimable at once."""
    async with harness.open_store() as store:
        opts = QueueOpts(max_attempts=2, visibility_timeout_s=30, backoff_base_s=7)
        queue = store.queue("redrive", opts)
        other = store.queue("redrive-other")
        dead = await _dead_job(queue, b"\x00dead", "went wrong")
        before = await _get(queue, dead)
        theirs = await _dead_job(other, b"theirs")
        live = await queue.enqueue(b"live", delay_s=100)
        await harness.advance(5)
        async with store.open_wake_listener([queue]) as listener:
            count = await queue.requeue_dead([dead, theirs, live, 10**12, dead])
            assert count == 1, f"requeue_dead returned {count}, expected 1"
            await _wait_for_wakes(listener, {"redrive"}, "requeue_dead")
        now = await harness.now()
        job = await _get(queue, dead)
        expected = dataclasses.replace(
            before,
            state="pending",
            attempts=0,
            run_at=now,
            enqueued_at=now,
            claimed_by=None,
            claimed_at=None,
            claim_expires_at=None,
            died_at=None,
        )
        assert job == expected, f"the redriven row is {job!r}, expected {expected!r}"
        assert job.payload == b"\x00dead", "the redriven row lost its payload"
        await _assert_state(other, theirs, "dead", "another queue's dead row")
        await _assert_state(queue, live, "pending", "a live row listed for redrive")
        handle = await _claim_id(queue, dead)
        assert handle.job.attempts == 1, (
            f"the redriven job's claim is attempt {handle.job.attempts}"
        )
        assert await queue.requeue_dead([dead]) == 0, "a processing row was redriven"
        assert await queue.requeue_dead([]) == 0, "requeue_dead([]) moved rows"


@_check
async def d24_requeue_dead_all_redrives_every_dead_row_of_the_queue_only(
    harness: EngineHarness,
) -> None:
    """D24: ``requeue_dead(all=True)`` redrives every dead row of this queue, and no
    other queue's; a second call finds nothing."""
    async with harness.open_store() as store:
        queue = store.queue("redrive-all")
        other = store.queue("redrive-all-other")
        mine = [await _dead_job(queue, b"m1"), await _dead_job(queue, b"m2")]
        theirs = await _dead_job(other, b"t")
        assert await queue.requeue_dead(all=True) == 2, "requeue_dead(all=True) miscounted"
        for job_id in mine:
            await _assert_state(queue, job_id, "pending", "a redriven row")
        await _assert_state(other, theirs, "dead", "another queue's dead row")
        assert await queue.requeue_dead(all=True) == 0, "a second redrive found rows"
        stats = await store.stats(queue)
        assert (stats.queues[0].pending_ready, stats.queues[0].dead) == (2, 0), (
            f"stats after the redrive: {stats.queues[0]!r}"
        )


@_check
async def d24_requeue_dead_restarts_the_time_to_live(harness: EngineHarness) -> None:
    """D24: a redriven row's ``expires_at`` keeps its distance from ``enqueued_at``, which
    becomes now: a job that died of expiry gets its whole time to live again (and the
    sweep expires it only after that)."""
    async with harness.open_store() as store:
        queue = store.queue("redrive-ttl", QueueOpts(expires_in_s=20))
        job_id = await queue.enqueue(b"x", delay_s=1000)
        await harness.advance(20 + INSTANT_S)
        assert await queue.sweep_expired() == SweepResult(1, 0), "the row did not expire"
        await harness.advance(100)
        assert await queue.requeue_dead([job_id]) == 1, "the expired row was not redriven"
        now = await harness.now()
        job = await _get(queue, job_id)
        assert job.expires_at == _after(now, 20), (
            f"redriven expires_at is {job.expires_at!r}, expected {_after(now, 20)!r}"
        )
        await harness.advance(20)
        assert await queue.sweep_expired() == SweepResult(0, 0), "expired before its new TTL"
        await harness.advance(INSTANT_S)
        assert await queue.sweep_expired() == SweepResult(1, 0), "did not expire after it"


@_check
async def d24_requeue_dead_rejects_bad_arguments_without_effect(harness: EngineHarness) -> None:
    """D24: neither or both of ``ids`` and ``all=True``, a non-bool ``all``, or ids that
    are not an iterable of 64-bit ints raise InvalidArgument, and nothing is moved."""
    async with harness.open_store() as store:
        queue = store.queue("redrive-bad")
        dead = await _dead_job(queue, b"x")
        bad: list[tuple[str, Callable[[], Awaitable[int]]]] = [
            ("requeue_dead()", lambda: queue.requeue_dead()),
            ("requeue_dead([id], all=True)", lambda: queue.requeue_dead([dead], all=True)),
            ("requeue_dead(all=1)", lambda: queue.requeue_dead(all=_any(1))),
            ("requeue_dead('12')", lambda: queue.requeue_dead(_any("12"))),
            ("requeue_dead(7)", lambda: queue.requeue_dead(_any(7))),
            ("requeue_dead([id, 'x'])", lambda: queue.requeue_dead(_any([dead, "x"]))),
            ("requeue_dead([id, 2**63])", lambda: queue.requeue_dead([dead, 2**63])),
            ("requeue_dead([True])", lambda: queue.requeue_dead(_any([True]))),
        ]
        for what, call in bad:
            await _raises(InvalidArgument, what, call)
        await _assert_state(queue, dead, "dead", "a dead row after rejected redrives")


@_check
async def d25_purge_dead_deletes_dead_rows_older_than_the_limit(harness: EngineHarness) -> None:
    """D25: ``purge_dead(older_than_s)`` deletes this queue's dead rows with
    ``died_at + older_than_s < now`` (not at the instant, one instant later yes);
    ``purge_dead()`` deletes every one; live rows and other queues are untouched; a bad
    ``older_than_s`` raises InvalidArgument with no effect."""
    async with harness.open_store() as store:
        queue = store.queue("purge")
        other = store.queue("purge-other")
        old = await _dead_job(queue, b"old")
        theirs = await _dead_job(other, b"theirs")
        await harness.advance(10)
        young = await _dead_job(queue, b"young")
        live = await queue.enqueue(b"live")
        for bad in (-1, math.nan, "5", True):
            await _raises(InvalidArgument, f"purge_dead({bad!r})", queue.purge_dead, _any(bad))
        assert await queue.purge_dead(10) == 0, "purged at died_at + older_than_s == now"
        await harness.advance(INSTANT_S)
        assert await queue.purge_dead(10) == 1, "did not purge the row older than 10 s"
        await _assert_gone(queue, old, "a purged dead row")
        await _assert_state(queue, young, "dead", "a younger dead row")
        assert await queue.purge_dead() == 1, "purge_dead() did not purge the rest"
        await _assert_gone(queue, young, "a purged dead row")
        await _assert_state(queue, live, "pending", "a live row after purge_dead")
        await _assert_state(other, theirs, "dead", "another queue's dead row")


@_check
async def d29_purge_dead_dry_run_counts_what_purge_would_delete_and_deletes_nothing(
    harness: EngineHarness,
) -> None:
    """D29: ``purge_dead(older_than_s, dry_run=True)`` returns what the same purge would
    delete now (same boundary: not at ``died_at + older_than_s == now``), of this queue
    only, and deletes nothing; a non-bool ``dry_run`` raises InvalidArgument."""
    async with harness.open_store() as store:
        queue = store.queue("dry")
        other = store.queue("dry-other")
        old = await _dead_job(queue, b"old")
        await _dead_job(other, b"theirs")
        await harness.advance(10)
        young = await _dead_job(queue, b"young")
        await queue.enqueue(b"live")
        for bad in (1, "yes", None):
            await _raises(
                InvalidArgument,
                f"purge_dead(dry_run={bad!r})",
                queue.purge_dead,
                dry_run=_any(bad),
            )
        assert await queue.purge_dead(10, dry_run=True) == 0, "counted at the boundary"
        await harness.advance(INSTANT_S)
        for _ in range(2):  # a dry run changes nothing, so it can be repeated
            assert await queue.purge_dead(10, dry_run=True) == 1, "dry run miscounted"
            assert await queue.purge_dead(dry_run=True) == 2, "dry run of all miscounted"
        await _assert_state(queue, old, "dead", "a dead row after a dry run")
        await _assert_state(queue, young, "dead", "a dead row after a dry run")
        assert await queue.purge_dead(10) == 1, "the purge disagrees with its dry run"
        assert await queue.purge_dead(dry_run=True) == 1, "dry run after a purge"
        assert await other.purge_dead(dry_run=True) == 1, "another queue's count changed"


@_check
async def d26_store_get_job_finds_a_row_by_id_in_any_queue(harness: EngineHarness) -> None:
    """D26: ``store.get_job(id)`` returns the row with this id, live or dead, whatever its
    queue (exactly what ``queue.get_job`` of its queue shows), or ``None``; a bad id
    raises InvalidArgument."""
    async with harness.open_store() as store:
        first = store.queue("find-a")
        second = store.queue("find-b")
        live = await first.enqueue(b"live")
        dead = await _dead_job(second, b"dead")
        for queue, job_id in ((first, live), (second, dead)):
            found = await store.get_job(job_id)
            assert found == await queue.get_job(job_id), (
                f"store.get_job({job_id}) = {found!r} differs from {queue.name}.get_job"
            )
            assert found is not None
            _assert_utc(found, f"store.get_job({job_id})")
        assert await store.get_job(10**15) is None, "store.get_job of an unknown id"
        for bad in ("1", 2**63, True, 1.0):
            await _raises(InvalidArgument, f"store.get_job({bad!r})", store.get_job, _any(bad))


@_check
async def d26_list_jobs_pages_through_one_state_by_id(harness: EngineHarness) -> None:
    """D26: ``queue.list_jobs(state, limit=, after_id=)`` returns this queue's rows in
    that state with ids above ``after_id``, ids ascending, at most ``limit``; bad
    arguments raise InvalidArgument."""
    async with harness.open_store() as store:
        queue = store.queue("listing")
        other = store.queue("listing-other")
        pending = await queue.enqueue_many([b"p1", b"p2", b"p3"], priority=-1)
        await other.enqueue(b"theirs")
        held = await queue.enqueue(b"held", priority=5)
        await _claim_id(queue, held)
        dead = await _dead_job(queue, b"dead")
        page = await queue.list_jobs("pending", limit=2)
        assert [job.id for job in page] == pending[:2], f"first page: {[j.id for j in page]}"
        page = await queue.list_jobs("pending", limit=2, after_id=page[-1].id)
        assert [job.id for job in page] == pending[2:], f"second page: {[j.id for j in page]}"
        assert page[0] == await _get(queue, pending[2]), "a listed row differs from get_job"
        listed = [job.id for job in await queue.list_jobs("processing")]
        assert listed == [held], f"processing rows listed: {listed}"
        dead_rows = await queue.list_jobs("dead")
        assert [(j.id, j.state) for j in dead_rows] == [(dead, "dead")], f"dead: {dead_rows!r}"
        bad: list[tuple[str, Callable[[], Awaitable[list[Job]]]]] = [
            ("state='done'", lambda: queue.list_jobs(_any("done"))),
            ("state=None", lambda: queue.list_jobs(_any(None))),
            ("limit=0", lambda: queue.list_jobs("dead", limit=0)),
            ("limit=1001", lambda: queue.list_jobs("dead", limit=1001)),
            ("limit=True", lambda: queue.list_jobs("dead", limit=_any(True))),
            ("after_id='1'", lambda: queue.list_jobs("dead", after_id=_any("1"))),
        ]
        for what, call in bad:
            await _raises(InvalidArgument, f"list_jobs({what})", call)


# -- D27 per-queue counters of finished jobs ------------------------------------------


async def _totals(store: Any, queue: Queue) -> tuple[int, int, int]:
    """``(acked_total, dead_lettered_total, cancelled_total)`` of ``queue`` (D27)."""
    (entry,) = (await store.stats(queue)).queues
    return entry.acked_total, entry.dead_lettered_total, entry.cancelled_total


async def _assert_totals(store: Any, queue: Queue, want: tuple[int, int, int], after: str) -> None:
    got = await _totals(store, queue)
    assert got == want, (
        f"after {after}, {queue.name!r} (acked_total, dead_lettered_total, cancelled_total) "
        f"= {got}, expected {want}"
    )


@_check
async def d27_stats_count_each_queues_acked_jobs(harness: EngineHarness) -> None:
    """D27: a queue's ``acked_total`` counts its jobs deleted by an ack, whichever call
    acked them (``ack``, ``ack_batch``, ``ack_handles``, ``ack_handles_and_claim``); a
    refused ack counts nothing, and no other queue's counters move."""
    async with harness.open_store() as store:
        queue = store.queue("count-acked", QueueOpts(visibility_timeout_s=10))
        other = store.queue("count-acked-other")
        await other.enqueue(b"bystander")
        await queue.enqueue_many([b"%d" % i for i in range(7)])
        await _assert_totals(store, queue, (0, 0, 0), "enqueues only")
        assert await (await _claim(queue)).ack() is True, "ack was refused"
        await _assert_totals(store, queue, (1, 0, 0), "one ack")
        h2, h3 = await queue.claim_batch("worker", 2)
        assert await queue.ack_batch([h2.id, h3.id, 10**12]) == 2, "ack_batch miscounted"
        await _assert_totals(store, queue, (3, 0, 0), "ack_batch of two jobs")
        h4, h5 = await queue.claim_batch("worker", 2)
        assert await queue.ack_handles([h4, h5]) == [True, True], "ack_handles refused"
        await _assert_totals(store, queue, (5, 0, 0), "ack_handles of two jobs")
        acked, claimed = await queue.ack_handles_and_claim([await _claim(queue)], "worker", 1)
        assert (acked, len(claimed)) == ([True], 1), "ack_handles_and_claim misbehaved"
        await _assert_totals(store, queue, (6, 0, 0), "ack_handles_and_claim of one job")
        await harness.advance(10 + INSTANT_S)
        assert await claimed[0].ack() is False, "a lapsed claim was acked"
        await _assert_totals(store, queue, (6, 0, 0), "a refused ack")
        await _assert_totals(store, other, (0, 0, 0), "acks of another queue")


@_check
async def d27_stats_count_each_queues_dead_letter_moves(harness: EngineHarness) -> None:
    """D27: a queue's ``dead_lettered_total`` counts every move of its jobs to dead:
    ``fail``, ``retry`` at budget, ``fail_handles``, ``retry_handles`` at budget, the
    pre-claim sweep of ``claim_one`` and of ``ack_handles_and_claim``, and the expiry
    sweep; a job redriven and dead again counts twice. A retry below budget, a redrive
    and a purge count nothing."""
    async with harness.open_store() as store:
        opts = QueueOpts(visibility_timeout_s=10, max_attempts=1, expires_in_s=1000)
        queue = store.queue("count-dead", opts)
        again = store.queue("count-dead-retry", QueueOpts(max_attempts=2))
        ids = await queue.enqueue_many([b"%d" % i for i in range(8)])
        assert await (await _claim_id(queue, ids[0])).fail("boom") is True, "fail refused"
        await _assert_totals(store, queue, (0, 1, 0), "fail")
        assert await (await _claim_id(queue, ids[1])).retry("again") is True, "retry refused"
        await _assert_totals(store, queue, (0, 2, 0), "retry at budget")
        (h2,) = await queue.claim_batch("worker", 1)
        assert await queue.fail_handles([(h2, None)]) == [True], "fail_handles refused"
        await _assert_totals(store, queue, (0, 3, 0), "fail_handles")
        (h3,) = await queue.claim_batch("worker", 1)
        assert await queue.retry_handles([(h3, None, None)]) == [True], "retry_handles refused"
        await _assert_totals(store, queue, (0, 4, 0), "retry_handles at budget")
        await _claim_id(queue, ids[4])
        await harness.advance(10 + INSTANT_S)
        await _claim_id(queue, ids[5])  # its pre-claim sweep buries job 4
        await _assert_state(queue, ids[4], "dead", "a lapsed claim at budget")
        await _assert_totals(store, queue, (0, 5, 0), "claim_one's pre-claim sweep")
        held = await _claim_id(queue, ids[6])
        assert await held.heartbeat(1000) is True, "heartbeat refused"
        await harness.advance(10 + INSTANT_S)
        acked, claimed = await queue.ack_handles_and_claim([held], "worker", 1)
        assert (acked, [h.id for h in claimed]) == ([True], [ids[7]]), (
            f"ack_handles_and_claim acked {acked} and claimed {[h.id for h in claimed]}"
        )
        await _assert_state(queue, ids[5], "dead", "a lapsed claim at budget")
        await _assert_totals(store, queue, (1, 6, 0), "ack_handles_and_claim's sweep")
        await harness.advance(1000)
        assert await queue.sweep_expired() == SweepResult(1, 0), "job 7 did not expire"
        await _assert_totals(store, queue, (1, 7, 0), "the expiry sweep")
        assert await queue.requeue_dead([ids[0]]) == 1, "the redrive moved nothing"
        await _assert_totals(store, queue, (1, 7, 0), "a redrive")
        assert await (await _claim_id(queue, ids[0])).fail() is True, "fail refused"
        await _assert_totals(store, queue, (1, 8, 0), "the redriven job's second death")
        assert await queue.purge_dead() == 7, "purge_dead missed dead rows"
        await _assert_totals(store, queue, (1, 8, 0), "a purge")
        await again.enqueue(b"twice")
        assert await (await _claim(again)).retry(delay_s=0) is True, "retry refused"
        await _assert_totals(store, again, (0, 0, 0), "a retry below budget")
        await _assert_state(again, (await _claim(again)).id, "processing", "a retried job")


@_check
async def d27_stats_count_each_queues_cancelled_jobs(harness: EngineHarness) -> None:
    """D27: a queue's ``cancelled_total`` counts its live jobs deleted by ``cancel``,
    pending or processing; a refused cancel (dead, unknown or another queue's job)
    counts nothing."""
    async with harness.open_store() as store:
        queue = store.queue("count-cancelled")
        other = store.queue("count-cancelled-other")
        pending, processing, dead = await queue.enqueue_many([b"p", b"c", b"d"])
        assert await queue.cancel(pending) is True, "cancel of a pending job refused"
        await _assert_totals(store, queue, (0, 0, 1), "a pending job's cancel")
        await _claim_id(queue, processing)
        assert await queue.cancel(processing) is True, "cancel of a processing job refused"
        await _assert_totals(store, queue, (0, 0, 2), "a processing job's cancel")
        assert await (await _claim_id(queue, dead)).fail() is True, "fail refused"
        assert await queue.cancel(dead) is False, "a dead job was cancelled"
        assert await queue.cancel(10**12) is False, "an unknown job was cancelled"
        theirs = await other.enqueue(b"theirs")
        assert await queue.cancel(theirs) is False, "another queue's job was cancelled"
        await _assert_totals(store, queue, (0, 1, 2), "refused cancels")
        await _assert_totals(store, other, (0, 0, 0), "cancels in another queue")


@_check
async def d27_stats_list_queues_with_counted_jobs_even_without_rows(
    harness: EngineHarness,
) -> None:
    """D27: ``store.stats()`` lists a queue whose jobs all finished (no rows left) with
    its counters; a queue that never counted anything and has no rows is listed only
    when asked for, with zeros. ``finished_total`` is acked plus dead-lettered."""
    async with harness.open_store() as store:
        drained = store.queue("count-drained")
        waiting = store.queue("count-waiting")
        first, second = await drained.enqueue_many([b"ok", b"bad"])
        assert await (await _claim_id(drained, first)).ack() is True, "ack refused"
        assert await (await _claim_id(drained, second)).fail() is True, "fail refused"
        assert await drained.purge_dead() == 1, "purge_dead missed the dead row"
        await waiting.enqueue(b"later", delay_s=60)
        stats = await store.stats()
        listed = [
            (e.queue, e.live, e.dead, e.acked_total, e.dead_lettered_total) for e in stats.queues
        ]
        assert listed == [("count-drained", 0, 0, 1, 1), ("count-waiting", 1, 0, 0, 0)], (
            f"stats() listed {listed}"
        )
        entry = stats.queue("count-drained")
        assert entry is not None, "stats().queue('count-drained') is None"
        assert entry.finished_total == 2, f"finished_total = {entry.finished_total}, expected 2"
        (never,) = (await store.stats("count-never")).queues
        got = (never.queue, never.acked_total, never.dead_lettered_total, never.cancelled_total)
        assert got == ("count-never", 0, 0, 0), f"stats('count-never') = {never!r}"


# -- D30 job headers ---------------------------------------------------------------------

#: Headers that an engine could mangle: non-ASCII, empty values, JSON and SQL look-alikes,
#: and names whose order differs by length and by code point.
_TRICKY_HEADERS: Final = {
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "b": "",
    "a-much-longer-name": 'quote " backslash \\ newline \n tab \t',
    "Zürich": "日本語 ✓ 🚀",
    "json": '{"not": "an object"}',
    "sql": "'); DROP TABLE jobs; --",
    "A": "upper",
}


def _assert_headers(job: Job, want: dict[str, str], what: str) -> None:
    assert isinstance(job.headers, Headers), (
        f"{what}: headers is a {type(job.headers).__name__}, expected Headers"
    )
    assert dict(job.headers) == want, f"{what}: headers are {dict(job.headers)!r}, not {want!r}"
    assert list(job.headers) == sorted(want), (
        f"{what}: headers iterate as {list(job.headers)!r}, expected key order {sorted(want)!r}"
    )


@_check
async def d30_headers_are_kept_for_the_jobs_whole_life(harness: EngineHarness) -> None:
    """D30: the headers given to ``enqueue`` are shown, in key order, by ``get_job``, the
    claim, a retried and a dead row, a redriven row and an expired row; a job enqueued
    without headers has none; neither ``repr`` of the job nor of its handle shows them."""
    want = dict(_TRICKY_HEADERS)
    async with harness.open_store() as store:
        queue = store.queue("headers", QueueOpts(max_attempts=2, expires_in_s=100))
        job_id = await queue.enqueue(b"p", headers=want)
        plain = await queue.enqueue(b"plain")
        _assert_headers(await _get(queue, job_id), want, "the pending row")
        _assert_headers(await _get(queue, plain), {}, "a row enqueued without headers")
        found = await store.get_job(job_id)
        assert found is not None, "store.get_job found no row"
        _assert_headers(found, want, "store.get_job")
        handle = await _claim_id(queue, job_id)
        _assert_headers(handle.job, want, "the claimed job")
        for what, text in [("repr(Job)", repr(handle.job)), ("repr(JobHandle)", repr(handle))]:
            assert "0af7651916cd43dd" not in text, f"{what} shows a header's value: {text}"
        assert await handle.retry("again", delay_s=0) is True, "retry was refused"
        _assert_headers(await _get(queue, job_id), want, "the retried row")
        handle = await _claim_id(queue, job_id)
        assert await handle.fail("fatal") is True, "fail was refused"
        _assert_headers(await _get(queue, job_id), want, "the dead row")
        listed = await queue.list_jobs("dead")
        _assert_headers(listed[0], want, "list_jobs('dead')")
        assert await queue.requeue_dead([job_id]) == 1, "requeue_dead moved nothing"
        _assert_headers(await _get(queue, job_id), want, "the redriven row")
        claims = {handle.id: handle.job for handle in await queue.claim_batch("w", 2)}
        assert set(claims) == {job_id, plain}, f"claimed {sorted(claims)}, not {job_id}, {plain}"
        _assert_headers(claims[job_id], want, "the claimed redriven row")
        _assert_headers(claims[plain], {}, "a claim without headers")
        await harness.advance(100 + INSTANT_S)
        await queue.sweep_expired()
        expired = await _assert_state(queue, job_id, "dead", "an expired row")
        _assert_headers(expired, want, "the expired row")
        assert await queue.requeue_dead(all=True) >= 1, "requeue_dead(all=True) moved nothing"
        _assert_headers(await _get(queue, job_id), want, "the row redriven with all=True")


@_check
async def d30_every_way_to_enqueue_takes_headers(harness: EngineHarness) -> None:
    """D30: ``enqueue_many`` gives every job the same headers, a transaction keeps each
    enqueue's own headers, and a claim batch shows each job's own headers."""
    async with harness.open_store() as store:
        queue = store.queue("headers-ways")
        many = await queue.enqueue_many([b"1", b"2"], headers={"k": "many"})
        async with store.transaction() as tx:
            first = await tx.enqueue(queue, b"3", headers={"k": "tx-1"})
            second = await tx.enqueue("headers-ways", b"4", headers={"k": "tx-2", "x": ""})
            third = await tx.enqueue(queue, b"5")
        expected = {
            many[0]: {"k": "many"},
            many[1]: {"k": "many"},
            first: {"k": "tx-1"},
            second: {"k": "tx-2", "x": ""},
            third: {},
        }
        handles = await queue.claim_batch("w", 10)
        assert sorted(h.id for h in handles) == sorted(expected), (
            f"claimed {[h.id for h in handles]}, expected {sorted(expected)}"
        )
        for handle in handles:
            _assert_headers(handle.job, expected[handle.id], f"claimed job {handle.id}")


@_check
async def d30_headers_are_validated_without_effect(harness: EngineHarness) -> None:
    """D30: headers must be a mapping of at most 64 non-empty str names (at most 256
    characters) to str values, storable (no NUL, no lone surrogate), 16 KiB in all;
    anything else is an InvalidArgument that enqueues nothing and never shows a value."""
    secret = "SECRET-HEADER-9c1e"
    async with harness.open_store() as store:
        queue = store.queue("headers-bad")
        bad: list[tuple[str, object]] = [
            ("a list of pairs", [("k", "v")]),
            ("a str", "k=v"),
            ("a non-str name", {1: secret}),
            ("an empty name", {"": secret}),
            ("a name of 257 characters", {"n" * 257: secret}),
            ("a NUL in a name", {"a\x00b": secret}),
            ("a bytes value", {"k": secret.encode()}),
            ("an int value", {"k": 7}),
            ("a None value", {"k": None}),
            ("a NUL in a value", {"k": secret + "\x00"}),
            ("a lone surrogate in a value", {"k": secret + "\ud800"}),
            ("65 entries", {f"h{i}": secret for i in range(65)}),
            ("16 KiB and one byte", {"k": secret + "v" * (16384 - len(secret))}),
        ]
        for what, headers in bad:
            calls: list[tuple[str, Callable[..., Awaitable[object]], object]] = [
                ("enqueue", queue.enqueue, b"x"),
                ("enqueue_many", queue.enqueue_many, [b"x", b"y"]),
            ]
            for name, call, payload in calls:
                exc = await _raises(
                    InvalidArgument, f"{name} with {what}", call, payload, headers=_any(headers)
                )
                assert secret not in f"{exc} {exc!r}", (
                    f"the InvalidArgument of {name} with {what} shows the value: {exc}"
                )
            async with store.transaction() as tx:
                await _raises(
                    InvalidArgument,
                    f"tx.enqueue with {what}",
                    tx.enqueue,
                    queue,
                    b"x",
                    headers=_any(headers),
                )
        assert await queue.claim_one("w") is None, "a rejected enqueue left a row"
        limits = {f"h{i:02}": "" for i in range(63)}
        limits["n" * 256] = "v" * (16384 - 256 - sum(len(name) for name in limits))
        job_id = await queue.enqueue(b"x", headers=limits)
        _assert_headers(await _get(queue, job_id), limits, "headers at every limit")


#: Every check, in contract order, then the checks of decisions where the contract is
#: silent (``d22_...``: docs/dev/decisions-foundation.md). Their ``__name__`` is the
#: check's name.
CONFORMANCE_CHECKS: Final[tuple[Check, ...]] = (
    q1_queue_names_accept_1_to_63_allowed_characters,
    q1_queue_names_reject_invalid_and_reserved_names,
    q1_queue_handle_carries_its_opts_and_defaults,
    q1_queue_opts_reject_invalid_values,
    q1_queue_opts_accept_boundary_values,
    q1_rows_keep_the_stamps_of_the_handle_that_enqueued_them,
    q2_enqueue_without_delay_or_run_at_is_ready_now,
    q2_delay_wins_over_run_at,
    q2_negative_delay_makes_the_job_ready_now,
    q2_run_at_is_stored_as_given,
    q2_run_at_must_be_timezone_aware,
    q2_expires_at_is_relative_to_enqueue_time,
    q2_max_attempts_override_is_the_only_per_job_stamp,
    q2_payload_round_trips_byte_for_byte,
    q2_payload_must_be_bytes_within_the_maximum_size,
    q2_enqueue_rejects_invalid_options_without_effect,
    q2_priority_accepts_the_int32_range,
    q2_ids_increase_in_enqueue_order,
    q2_enqueue_many_is_atomic_with_one_clock_read,
    q2_enqueue_wakes_its_queue,
    q3_claim_order_is_priority_then_run_at_then_id,
    q3_reclaimable_rows_take_their_place_in_the_order,
    q3_claim_batch_takes_the_best_n,
    q3_claim_batch_with_n_at_most_zero_has_no_effect,
    q3_claim_batch_n_must_be_an_int,
    q3_worker_id_must_be_a_non_empty_str,
    q3_claim_sets_the_claim_fields,
    q3_delayed_rows_are_not_claimable_until_due,
    q3_expired_rows_are_never_claimed,
    q3_reclaim_after_the_deadline_consumes_an_attempt,
    q3_reclaimed_holder_is_refused_and_the_row_untouched,
    q3_pre_claim_sweep_dead_letters_lapsed_claims_at_budget,
    q3_concurrent_claims_hand_out_each_job_exactly_once,
    q4_heartbeat_is_an_absolute_reset,
    q4_heartbeat_defaults_to_the_rows_visibility_timeout,
    q4_heartbeat_rejects_invalid_extend,
    q4_late_heartbeat_is_refused,
    q4_claim_is_valid_at_the_deadline_instant,
    q4_claim_lapses_one_instant_after_the_deadline,
    q4_ack_deletes_the_row,
    q4_retry_at_budget_dead_letters,
    q4_retry_below_budget_with_an_explicit_delay,
    q4_retry_and_fail_reject_invalid_arguments_without_effect,
    q4_fail_dead_letters_now,
    q4_ack_retry_fail_are_one_shot,
    q4_heartbeat_does_not_consume_the_handle,
    q4_dead_letter_moves_are_atomic,
    q4_ack_handles_acks_valid_claims_in_one_call_and_refuses_stale_ones,
    q4_ack_handles_rejects_foreign_consumed_and_duplicate_handles_without_effect,
    q4_ack_handles_and_claim_acks_valid_claims_then_claims_the_best_n,
    q4_ack_handles_and_claim_claims_after_the_acks_took_effect,
    q4_ack_handles_and_claim_runs_the_pre_claim_sweep_like_claim_batch,
    q4_ack_handles_and_claim_rejects_bad_arguments_without_effect,
    q4_heartbeat_handles_renews_valid_claims_and_refuses_stale_ones,
    q4_retry_handles_retries_valid_claims_and_refuses_stale_ones,
    q4_retry_handles_dead_letters_claims_on_their_last_attempt,
    q4_fail_handles_dead_letters_valid_claims_and_refuses_stale_ones,
    q4_retry_and_fail_handles_reject_bad_items_without_effect,
    q5_backoff_delay_is_within_the_equal_jitter_range,
    q5_backoff_is_capped_at_one_hour,
    q5_backoff_base_zero_retries_at_once,
    q5_backoff_below_one_second_waits_one_second,
    q5_backoff_draws_come_from_the_injected_rng,
    q6_ack_batch_deletes_only_valid_claims_of_this_queue,
    q6_ack_batch_counts_a_claim_at_its_deadline_instant,
    q6_ack_batch_of_nothing_returns_zero,
    q7_cancel_deletes_a_pending_row,
    q7_cancel_deletes_a_processing_row_and_refuses_its_holder,
    q7_cancel_does_not_touch_dead_unknown_or_other_queue_rows,
    q8_get_job_shows_every_field,
    q8_rows_of_other_queues_are_invisible,
    q8_timestamps_are_aware_utc,
    q8_run_at_given_in_another_zone_is_shown_in_utc,
    q9_sweep_dead_letters_expired_pending_and_processing_rows,
    q9_retention_none_keeps_dead_rows_forever,
    q9_retention_zero_purges_dead_rows_after_their_death_instant,
    q9_retention_purges_dead_rows_after_the_retention,
    q9_sweep_is_scoped_to_its_queue,
    q9_retention_is_that_of_the_sweeping_handle,
    q10_transaction_rows_appear_and_wake_only_after_commit,
    q10_transaction_rolls_back_on_exception,
    q10_transaction_stamps_handle_opts_or_the_defaults,
    q10_transaction_validates_arguments_without_effect,
    q10_finished_transaction_is_consumed,
    q11_every_operation_after_close_raises_store_closed,
    q11_leaving_the_store_block_closes_everything,
    q11_a_transaction_open_at_close_raises_store_closed,
    q11_a_blocked_wake_listener_wakes_up_with_store_closed,
    q11_closing_twice_is_harmless,
    q11_store_closed_is_reported_before_other_errors,
    q12_errors_form_one_hierarchy,
    q12_messages_name_the_parameter_and_the_value,
    q12_messages_never_contain_the_payload,
    q12_bad_input_has_no_partial_effect,
    d22_stats_counts_each_queue_by_state_at_one_instant,
    d23_ids_issued_minus_live_and_dead_counts_the_rows_gone,
    d24_requeue_dead_moves_listed_dead_rows_back_to_pending_with_attempts_reset,
    d24_requeue_dead_all_redrives_every_dead_row_of_the_queue_only,
    d24_requeue_dead_restarts_the_time_to_live,
    d24_requeue_dead_rejects_bad_arguments_without_effect,
    d25_purge_dead_deletes_dead_rows_older_than_the_limit,
    d29_purge_dead_dry_run_counts_what_purge_would_delete_and_deletes_nothing,
    d26_store_get_job_finds_a_row_by_id_in_any_queue,
    d26_list_jobs_pages_through_one_state_by_id,
    d27_stats_count_each_queues_acked_jobs,
    d27_stats_count_each_queues_dead_letter_moves,
    d27_stats_count_each_queues_cancelled_jobs,
    d27_stats_list_queues_with_counted_jobs_even_without_rows,
    d30_headers_are_kept_for_the_jobs_whole_life,
    d30_every_way_to_enqueue_takes_headers,
    d30_headers_are_validated_without_effect,
)


async def check_conformance(harness: EngineHarness, *, only: Iterable[str] | None = None) -> None:
    """Run the conformance suite against one engine and report every failure at once.

    Example::

        await check_conformance(MemoryHarness())

    Args:
        harness: Opens fresh stores of the engine under test and moves its clock.
        only: Names of the checks to run (see :data:`CONFORMANCE_CHECKS`); default all.

    Raises:
        AssertionError: one or more checks failed; the message lists each failing check's
            name with its reason.
        ValueError: ``only`` names a check that does not exist.
    """
    checks = _select(only)
    failures: list[str] = []
    for check in checks:
        try:
            await check(harness)
        except AssertionError as exc:
            failures.append(f"{check.__name__}: {exc}")
        except Exception as exc:
            leaves = _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
            described = "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves)
            failures.append(f"{check.__name__}: unexpected {described}")
    if failures:
        header = (
            f"engine {harness.name!r} failed {len(failures)} of {len(checks)} conformance checks:"
        )
        raise AssertionError("\n".join([header, *(f"- {f}" for f in failures)]))


def _select(only: Iterable[str] | None) -> list[Check]:
    if only is None:
        return list(CONFORMANCE_CHECKS)
    if isinstance(only, str):
        raise ValueError(f"only must be an iterable of check names, not the str {only!r}")
    by_name = {check.__name__: check for check in CONFORMANCE_CHECKS}
    wanted = list(dict.fromkeys(only))
    unknown = [name for name in wanted if name not in by_name]
    if unknown:
        raise ValueError(f"only names unknown conformance checks: {unknown}")
    return [by_name[name] for name in wanted]
