"""Q1 queue handles and options: queue names, ``QueueOpts`` validation, and the stamps
a handle writes onto every row it enqueues (D8 for durations)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ... import InvalidArgument, QueueOpts
from ._helpers import _after, _any, _check, _claim, _claim_id, _get, _raises

if TYPE_CHECKING:
    from .._harness import EngineHarness


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
