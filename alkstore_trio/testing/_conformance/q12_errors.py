"""Q12 errors: one hierarchy, messages that name the parameter and the value (never the
payload), and no partial effect of bad input."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from ... import (
    AlkstoreError,
    EngineError,
    HandleConsumed,
    InvalidArgument,
    QueueOpts,
    SchemaError,
    StoreClosed,
)
from ._helpers import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    _any,
    _assert_mentions,
    _assert_state,
    _check,
    _claim,
    _claim_id,
    _no_wake,
    _raises,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._harness import EngineHarness


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
