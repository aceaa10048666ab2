"""D30 (a decision where the contract is silent): job headers, metadata kept beside the
payload for the job's whole life."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ... import Headers, InvalidArgument, Job, QueueOpts
from ._helpers import INSTANT_S, _any, _assert_state, _check, _claim_id, _get, _raises

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._harness import EngineHarness


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
        expected: dict[int, dict[str, str]] = {
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
