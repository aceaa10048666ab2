"""Job headers on PostgreSQL (D30), beyond the conformance suite: every statement that
writes, moves or returns a job carries its headers, as a ``jsonb`` object.

- Every dead-letter move copies them into ``dead_jobs`` (``fail``, ``retry`` at budget,
  their batch forms, the pre-claim sweep of ``claim`` and of ``ack_handles_and_claim``,
  the expiry sweep), and both redrives copy them back.
- Hard values survive byte for byte (non-ASCII, empty, quotes and backslashes, JSON and
  SQL look-alikes), and come back in key order although ``jsonb`` keeps its keys ordered
  by length first.
- A job without headers is stored as ``'{}'`` and comes back as the one shared
  ``NO_HEADERS`` (the statements send it as NULL: the claim path parses no JSON).
- Enqueues with different headers never share a statement.

Each test works in a throwaway schema with a frozen clock
(:class:`alkstore_trio.testing._postgres.PostgresHarness`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from alkstore_trio import Headers, Job, QueueOpts, Store
from alkstore_trio._core import NO_HEADERS, EnqueueSpec
from alkstore_trio._engines._postgres import _backend, _enqueue, _sql
from alkstore_trio.testing._postgres import PostgresHarness

#: Values PostgreSQL or the JSON on the way could mangle, under names whose ``jsonb``
#: order (shorter first, then by bytes) differs from their key order.
HARD = {
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "z": "",
    "Aa": "ünïcødé ✓ 日本語 🚀 \u2028",
    "é": "quote \" apostrophe ' backslash \\ \\u0041 newline \n tab \t",
    "json": '{"looks": ["like", "json"], "n": null}',
    "sql": "'); DROP TABLE jobs; --",
    "B": "\\x00 is not a NUL",
}


@pytest.fixture
def harness(pg_dsn: str) -> PostgresHarness:
    return PostgresHarness(pg_dsn)


@pytest.fixture
async def store(harness: PostgresHarness) -> AsyncIterator[Store]:
    async with harness.open_store() as opened:
        yield opened


def schema_of(store: Store) -> str:
    backend = store._engine
    assert isinstance(backend, _backend.PostgresEngine)
    return _sql.quote_ident(backend._schema)


def assert_headers(job: Job | None, want: dict[str, str]) -> None:
    assert job is not None
    if want:
        assert isinstance(job.headers, Headers)
        assert dict(job.headers) == want
        assert list(job.headers) == sorted(want)
    else:
        assert job.headers is NO_HEADERS


async def test_d30_hard_headers_round_trip_and_come_back_in_key_order(store: Store):
    queue = store.queue("hard")
    job_id = await queue.enqueue(b"p", headers=HARD)
    async with store.transaction() as tx:
        stored = await tx.fetch(
            f"SELECT headers, (SELECT array_agg(k) FROM jsonb_object_keys(headers) AS k) "
            f"FROM {schema_of(store)}.jobs WHERE id = %s",
            [job_id],
        )
    ((value, jsonb_order),) = stored
    assert value == HARD  # a jsonb object of str values, byte for byte
    # jsonb keeps shorter keys first: not the key order the job shows.
    assert jsonb_order == sorted(HARD, key=lambda k: (len(k.encode()), k.encode()))
    assert jsonb_order != sorted(HARD)
    assert_headers(await queue.get_job(job_id), HARD)
    assert_headers(await store.get_job(job_id), HARD)
    (listed,) = await queue.list_jobs("pending")
    assert_headers(listed, HARD)
    (handle,) = await queue.claim_batch("w", 5)
    assert_headers(handle.job, HARD)
    (processing,) = await queue.list_jobs("processing")
    assert_headers(processing, HARD)


async def test_d30_jobs_without_headers_store_an_empty_object_and_share_no_headers(
    store: Store,
):
    queue = store.queue("plain", QueueOpts(max_attempts=1))
    job_id = await queue.enqueue(b"p")
    (many,) = await queue.enqueue_many([b"m"])
    async with store.transaction() as tx:
        in_tx = await tx.enqueue(queue, b"t", headers={})
        rows = await tx.fetch(
            f"SELECT id, headers = '{{}}'::jsonb FROM {schema_of(store)}.jobs ORDER BY id"
        )
    assert rows == [(job_id, True), (many, True), (in_tx, True)]
    for read in (queue.get_job, store.get_job):
        assert_headers(await read(job_id), {})
    claimed = await queue.claim_batch("w", 1)
    acked, fused = await queue.ack_handles_and_claim(claimed, "w", 5)
    assert acked == [True]
    for handle in fused:
        assert_headers(handle.job, {})
    assert await queue.fail_handles([(handle, None) for handle in fused]) == [True, True]
    for dead in await queue.list_jobs("dead"):
        assert_headers(dead, {})


async def test_d30_every_dead_letter_move_and_redrive_keeps_the_headers(
    harness: PostgresHarness, store: Store
):
    # One job per way into dead_jobs, each with its own headers; then both redrives.
    queue = store.queue("moves", QueueOpts(max_attempts=1, visibility_timeout_s=10))
    kinds = ["fail", "retry", "fail_handles", "retry_handles", "claim sweep", "fused sweep"]
    ids: dict[str, int] = {}
    for kind in kinds:
        ids[kind] = await queue.enqueue(kind.encode(), headers={**HARD, "kind": kind})
    handles = {h.job.headers["kind"]: h for h in await queue.claim_batch("w", len(kinds))}
    assert await handles["fail"].fail("no")
    assert await handles["retry"].retry("at budget")
    assert await queue.fail_handles([(handles["fail_handles"], "no")]) == [True]
    assert await queue.retry_handles([(handles["retry_handles"], "at budget", None)]) == [True]
    # The other two leases lapse at their budget: the next claims sweep them.
    await harness.advance(11)
    assert await queue.claim_batch("w", 1) == []  # sweeps both
    expiring = store.queue("moves-expiry", QueueOpts(expires_in_s=5))
    ids["expiry sweep"] = await expiring.enqueue(b"e", headers={**HARD, "kind": "expiry sweep"})
    await harness.advance(6)
    assert (await expiring.sweep_expired()).expired == 1

    dead = {job.id: job for job in await queue.list_jobs("dead")}
    dead.update({job.id: job for job in await expiring.list_jobs("dead")})
    assert set(dead) == set(ids.values())
    for kind, job_id in ids.items():
        assert dead[job_id].state == "dead"
        assert_headers(dead[job_id], {**HARD, "kind": kind})
        assert_headers(await store.get_job(job_id), {**HARD, "kind": kind})

    assert await queue.requeue_dead([ids["fail"], ids["retry"]]) == 2
    assert await queue.requeue_dead(all=True) == len(kinds) - 2
    assert await expiring.requeue_dead(all=True) == 1
    for kind, job_id in ids.items():
        live = await store.get_job(job_id)
        assert live is not None
        assert live.state == "pending"
        assert_headers(live, {**HARD, "kind": kind})
    claimed = await queue.claim_batch("w", len(kinds))
    assert {h.id: h.job.headers["kind"] for h in claimed} == {ids[kind]: kind for kind in kinds}


async def test_d30_the_fused_claim_sweeps_with_headers_and_returns_them(
    harness: PostgresHarness, store: Store
):
    # ack_handles_and_claim's own pre-claim sweep and claim (not the plain claim's): of
    # two claims, one is kept valid by a heartbeat while the other lapses at its budget.
    queue = store.queue("fused", QueueOpts(max_attempts=1, visibility_timeout_s=10))
    spent = await queue.enqueue(b"s", headers={"kind": "spent"})
    kept = await queue.enqueue(b"k", headers={"kind": "kept"})
    lapsing, current = await queue.claim_batch("w", 2)
    assert (lapsing.id, current.id) == (spent, kept)
    await harness.advance(5)
    assert await current.heartbeat()
    await harness.advance(6)
    fresh = await queue.enqueue_many([b"1", b"2"], headers={"kind": "fresh"})
    acked, claimed = await queue.ack_handles_and_claim([current], "w", 5)
    assert acked == [True]
    assert [(h.id, dict(h.job.headers)) for h in claimed] == [
        (job_id, {"kind": "fresh"}) for job_id in fresh
    ]
    (dead,) = await queue.list_jobs("dead")
    assert dead.id == spent
    assert_headers(dead, {"kind": "spent"})
    assert (await store.stats("fused")).queues[0].dead_lettered_total == 1


async def test_d30_enqueues_with_different_headers_are_separate_statements(store: Store):
    # One backend call with specs whose headers differ (as a caller of the engine
    # protocol may make): split into runs that share everything, headers included.
    def specs(headers: dict[str, str] | None, *payloads: bytes) -> list[EnqueueSpec]:
        return store._specs("split", QueueOpts(), list(payloads), 0, None, None, None, headers)

    batch = [
        *specs({"k": "1"}, b"a", b"b"),
        *specs({"k": "2"}, b"c"),
        *specs(None, b"d"),
        *specs({"k": "1"}, b"e"),
    ]
    assert [len(group) for group in _enqueue.groups(batch)] == [2, 1, 1, 1]
    ids = await store._engine.enqueue(batch)
    got = [await store.queue("split").get_job(job_id) for job_id in ids]
    assert [dict(job.headers) for job in got if job is not None] == [
        {"k": "1"}, {"k": "1"}, {"k": "2"}, {}, {"k": "1"},
    ]  # fmt: skip


def test_d30_headers_are_sent_as_json_text():
    # An untyped str parameter the statement casts to jsonb: '{}' for none (no JSON
    # encoding on the usual path), else ASCII JSON whatever the connection's encoding.
    assert _enqueue.headers_json(NO_HEADERS) == "{}"
    text = _enqueue.headers_json(Headers({"b": "é", "a": '"'}))
    assert text == '{"a": "\\"", "b": "\\u00e9"}'
    assert text.isascii()
