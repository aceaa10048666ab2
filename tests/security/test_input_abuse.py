"""Input abuse (issue 5 item 10), on the in-memory engine and on PostgreSQL.

Two properties, for every public entry point that takes user input:

- valid input, however odd (empty payloads, every byte value, exactly the size limit,
  names at the length limit, the int32 edges, negative delays, huge batches), round-trips
  exactly;
- invalid input (oversized payloads, wrong types, NaN, infinities, bools where numbers
  are meant, floats where ints are meant, names with quotes, ``;``, NUL, lone surrogates
  or Unicode look-alikes) raises :class:`InvalidArgument` *before anything reaches the
  engine* -- the counted backend saw no call, so no SQL was sent -- and leaves no trace:
  the store's row count and its id sequence are unchanged.

Hypothesis draws the values; the examples run against one store per test (see
``conftest.py``), with modest example counts so the file stays well under a minute.
"""

from __future__ import annotations

import math
import random
import re
from array import array
from datetime import UTC, datetime, timedelta, timezone

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alkstore_trio import InvalidArgument, QueueOpts, Worker, open_store
from alkstore_trio._core import _validate as v

MIB = 1024 * 1024
#: A PostgreSQL URL nothing answers: input accepted by mistake fails with EngineError.
NOWHERE = "postgresql://nobody@127.0.0.1:1/none"
EXAMPLES = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)
FEWER = settings(EXAMPLES, max_examples=15)

# --- strategies ---------------------------------------------------------------------------

QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}")
valid_queue_names = st.from_regex(QUEUE_NAME, fullmatch=True).filter(
    lambda name: not name.startswith("alk_")
)
#: Names a user (or an attacker) might try; none is valid.
HOSTILE_NAMES = [
    "",
    "a" * 64,
    "x" * 1000,
    "q'; DROP TABLE jobs; --",
    'q"',
    "q;",
    "q\x00",
    "\x00",
    "q\ud800",
    "\udfff",
    "ｑueue",  # fullwidth q
    "quеue",  # Cyrillic e
    "queue\u200b",  # zero-width space
    "é",
    "q ue",
    " q",
    "q\n",
    "_q",
    ".q",
    "-q",
    "alk_internal",
    "q/evil",
    "q*",
    "q%s",
    "q@schema@",
]
invalid_queue_names = st.sampled_from(HOSTILE_NAMES) | st.text(max_size=80).filter(
    lambda name: QUEUE_NAME.fullmatch(name) is None or name.startswith("alk_")
)
not_a_str = st.sampled_from([None, 1, 1.5, b"q", bytearray(b"q"), ["q"], object()])

SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
invalid_schema_names = (
    st.sampled_from([*HOSTILE_NAMES, "pg_catalog", "PG_x", "a-b", "a.b", "1abc", "s" * 64])
    | st.text(max_size=80)
).filter(lambda name: SCHEMA_NAME.fullmatch(name) is None or name.lower().startswith("pg_"))

SPECIAL_PAYLOADS = [b"", bytes(range(256)), b"\x00" * 64, b"\xff" * 7, b"'\";--\\", b"\x00" * MIB]
payloads = st.binary(max_size=4096) | st.sampled_from(SPECIAL_PAYLOADS)
bad_numbers = st.sampled_from(
    [math.nan, math.inf, -math.inf, True, False, "1", b"1", [1], object(), 10**400]
)
huge_numbers = st.sampled_from([1e300, -1e300, 10**30, -(10**30), 2**63, 3.2e9 * 1e3])
not_an_int = st.sampled_from([1.0, 0.5, math.nan, math.inf, True, False, "1", None, [1]])
#: Invalid values of enqueue's numeric options (``None`` and floats are fine for delay_s).
BAD_ENQUEUE_NUMBERS = {
    "priority": bad_numbers | huge_numbers | not_an_int | st.sampled_from([2**31, -(2**31) - 1]),
    "max_attempts": bad_numbers
    | huge_numbers
    | st.sampled_from([0, -1, 1.0, 0.5, 2**31, -(2**100)]),
    "delay_s": bad_numbers | huge_numbers | st.sampled_from([v.DURATION_MAX_S + 1]),
}
bad_error_texts = st.sampled_from(
    ["\x00", "err\x00", "\ud800", "x" * (v.ERROR_MAX_CHARS + 1), b"err", 1, ["e"]]
)


# --- helpers ------------------------------------------------------------------------------


def rejected(engine, action, *, match: str | None = None) -> str:
    """Run the sync ``action`` (which calls into trio) and check it raised
    InvalidArgument without any engine call. Returns the message."""
    before = engine.backend.total
    with pytest.raises(InvalidArgument, match=match) as caught:
        action()
    assert engine.backend.total == before, engine.backend.calls
    return str(caught.value)


async def assert_no_trace(engine, queue, rows_before: int, last_id: int) -> None:
    """The store holds as many rows as before, and the next enqueue gets the next id:
    nothing consumed a row or a sequence value."""
    assert await engine.count_rows() == rows_before
    next_id = await queue.enqueue(b"probe")
    assert next_id == last_id + 1
    got = await queue.get_job(next_id)
    assert got is not None
    assert got.payload == b"probe"


# --- payloads ------------------------------------------------------------------------------


async def test_q2_valid_payloads_round_trip_exactly_and_invalid_ones_leave_no_trace(
    engine, hypothesize, figures
):
    queue = engine.store.queue("abuse")
    last_id = await queue.enqueue(b"first")
    rows = await engine.count_rows()
    stored: dict[int, bytes] = {}

    @EXAMPLES
    @given(payload=payloads, kind=st.sampled_from([bytes, bytearray, memoryview]))
    def valid(payload, kind):
        job_id = trio.from_thread.run(queue.enqueue, kind(payload))
        stored[job_id] = payload

    @EXAMPLES
    @given(
        payload=st.sampled_from(
            [b"x" * (MIB + 1), "text", 1, None, ["b"], array("b", [1]), object()]
        )
        | st.text(max_size=20)
    )
    def invalid(payload):
        message = rejected(engine, lambda: trio.from_thread.run(queue.enqueue, payload))
        assert "payload" in message
        assert "xxxxxxxx" not in message  # the payload is never echoed

    n_valid = await hypothesize(valid)
    for job_id, payload in stored.items():
        job = await queue.get_job(job_id)
        assert job is not None
        assert job.payload == payload
        assert type(job.payload) is bytes
    last_id = max(stored)
    rows += len(stored)
    n_invalid = await hypothesize(invalid)
    await assert_no_trace(engine, queue, rows, last_id)
    figures.record(engine=engine.name, valid_inputs=n_valid, invalid_inputs=n_invalid)


async def test_q2_a_payload_of_exactly_the_limit_is_accepted_one_byte_more_is_not(engine, figures):
    queue = engine.store.queue("abuse")
    payload = bytes(range(256)) * (MIB // 256)
    assert len(payload) == MIB
    job_id = await queue.enqueue(payload)
    (handle,) = await queue.claim_batch("w", 1)
    assert handle.job.payload == payload
    assert await handle.ack()
    rows = await engine.count_rows()
    before = engine.backend.total
    with pytest.raises(InvalidArgument, match=f"at most {MIB} bytes"):
        await queue.enqueue(payload + b"\x00")
    with pytest.raises(InvalidArgument, match=f"at most {MIB} bytes"):
        await queue.enqueue_many([b"ok", payload + b"\x00"])
    assert engine.backend.total == before
    await assert_no_trace(engine, queue, rows, job_id)
    figures.record(engine=engine.name, valid_inputs=1, invalid_inputs=2)


# --- headers (D30) -------------------------------------------------------------------------

#: Header names and values a valid enqueue may carry: any storable text, within the limits.
storable_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40
)
valid_headers = st.dictionaries(
    storable_text.filter(bool),
    storable_text | st.sampled_from(["", "'\";--\\", '{"a": 1}']),
    max_size=8,
)
HOSTILE_HEADERS = [
    [("k", "v")],
    "k=v",
    b"k=v",
    {"": "v"},
    {"k": None},
    {"k": b"v"},
    {"k": 1},
    {1: "v"},
    {("k",): "v"},
    {"k\x00": "v"},
    {"k": "v\x00"},
    {"\ud800": "v"},
    {"k": "\udfff"},
    {"n" * (v.HEADER_NAME_MAX_CHARS + 1): "v"},
    {f"h{i}": "" for i in range(v.HEADERS_MAX_COUNT + 1)},
    {"k": "x" * v.HEADERS_MAX_BYTES},
    {"k": "é" * (v.HEADERS_MAX_BYTES // 2)},
]


async def test_d30_valid_headers_round_trip_exactly_and_invalid_ones_leave_no_trace(
    engine, hypothesize, figures
):
    queue = engine.store.queue("abuse")
    last_id = await queue.enqueue(b"first")
    rows = await engine.count_rows()
    stored: dict[int, dict[str, str]] = {}

    @EXAMPLES
    @given(headers=valid_headers)
    def valid(headers):
        job_id = trio.from_thread.run(lambda: queue.enqueue(b"h", headers=headers))
        stored[job_id] = headers

    @EXAMPLES
    @given(headers=st.sampled_from(HOSTILE_HEADERS), many=st.booleans())
    def invalid(headers, many):
        if many:
            action = lambda: trio.from_thread.run(  # noqa: E731
                lambda: queue.enqueue_many([b"a", b"b"], headers=headers)
            )
        else:
            action = lambda: trio.from_thread.run(  # noqa: E731
                lambda: queue.enqueue(b"a", headers=headers)
            )
        message = rejected(engine, action)
        assert "header" in message
        assert "xxxxxxxx" not in message  # values are never echoed
        assert "éééé" not in message

    n_valid = await hypothesize(valid)
    for job_id, headers in stored.items():
        job = await queue.get_job(job_id)
        assert job is not None
        assert dict(job.headers) == headers
        assert list(job.headers) == sorted(headers)
    last_id = max(stored)
    rows += len(stored)
    n_invalid = await hypothesize(invalid)
    await assert_no_trace(engine, queue, rows, last_id)
    figures.record(engine=engine.name, valid_inputs=n_valid, invalid_inputs=n_invalid)


async def test_d30_headers_of_exactly_the_limits_are_accepted_one_more_is_not(engine, figures):
    queue = engine.store.queue("abuse")
    names = {f"h{i:02}": "" for i in range(v.HEADERS_MAX_COUNT - 1)}
    names["n" * v.HEADER_NAME_MAX_CHARS] = ""
    used = sum(len(name) for name in names)
    left = v.HEADERS_MAX_BYTES - used
    at_limit = {**names, "n" * v.HEADER_NAME_MAX_CHARS: "é" * (left // 2) + "x" * (left % 2)}
    assert sum(len(k.encode()) + len(x.encode()) for k, x in at_limit.items()) == (
        v.HEADERS_MAX_BYTES
    )
    job_id = await queue.enqueue(b"x", headers=at_limit)
    (handle,) = await queue.claim_batch("w", 1)
    assert handle.id == job_id
    assert handle.job.headers == at_limit
    assert await handle.ack()
    rows = await engine.count_rows()
    before = engine.backend.total
    one_byte_more = {**at_limit, "h00": "x"}
    with pytest.raises(InvalidArgument, match=f"at most {v.HEADERS_MAX_BYTES} bytes"):
        await queue.enqueue(b"x", headers=one_byte_more)
    one_more = {**at_limit, "extra": ""}
    with pytest.raises(InvalidArgument, match=f"at most {v.HEADERS_MAX_COUNT} entries"):
        await queue.enqueue(b"x", headers=one_more)
    assert engine.backend.total == before
    await assert_no_trace(engine, queue, rows, job_id)
    figures.record(engine=engine.name, valid_inputs=1, invalid_inputs=2)


# --- queue and schema names ----------------------------------------------------------------


async def test_q1_odd_but_valid_queue_names_round_trip_and_hostile_ones_are_rejected(
    engine, hypothesize, figures
):
    store = engine.store
    await store.queue("abuse").enqueue(b"first")
    rows = await engine.count_rows()
    made: dict[int, str] = {}

    @FEWER
    @given(name=valid_queue_names | st.sampled_from(["a" * 63, "Z.9:_-", "0", "alk"]))
    def valid(name):
        queue = store.queue(name)
        made[trio.from_thread.run(queue.enqueue, name.encode())] = name

    @EXAMPLES
    @given(name=invalid_queue_names | not_a_str)
    def invalid(name):
        rejected(engine, lambda: store.queue(name), match="queue name")
        rejected(engine, lambda: store.open_wake_listener([name]))

        async def in_a_transaction():
            async with store.transaction() as tx:
                before = engine.backend.total
                with pytest.raises(InvalidArgument, match="queue name"):
                    await tx.enqueue(name, b"x")
                assert engine.backend.total == before

        trio.from_thread.run(in_a_transaction)

    n_valid = await hypothesize(valid)
    for job_id, name in made.items():
        job = await store.queue(name).get_job(job_id)
        assert job is not None
        assert (job.queue, job.payload) == (name, name.encode())
    rows += len(made)
    n_invalid = await hypothesize(invalid)
    await assert_no_trace(engine, store.queue("abuse"), rows, max(made))
    figures.record(engine=engine.name, valid_inputs=n_valid, invalid_inputs=n_invalid)


@given(schema=invalid_schema_names | not_a_str)
@EXAMPLES
def test_q1_hostile_schema_names_are_rejected_before_connecting(schema, figures):
    # Nothing listens on port 1: had the name been accepted, connecting would fail with
    # an EngineError instead.
    async def main():
        with pytest.raises(InvalidArgument, match="schema"):
            async with open_store(NOWHERE, schema=schema, connect_timeout_s=0.5):
                pass  # pragma: no cover

    trio.run(main)
    figures.record(engine="postgres")
    figures.add(invalid_inputs=1)


# --- numbers --------------------------------------------------------------------------------


async def test_q2_numbers_round_trip_at_their_edges_and_abused_ones_are_rejected(
    engine, hypothesize, figures
):
    queue = engine.store.queue("abuse", QueueOpts(max_attempts=5))
    last_id = await queue.enqueue(b"first")
    rows = await engine.count_rows()
    now = await engine.harness.now()
    accepted: list[tuple[int, int, int]] = []

    @EXAMPLES
    @given(
        priority=st.integers(v.PRIORITY_MIN, v.PRIORITY_MAX)
        | st.sampled_from([v.PRIORITY_MIN, v.PRIORITY_MAX, 0, -1]),
        max_attempts=st.integers(1, v.MAX_ATTEMPTS_MAX) | st.sampled_from([1, v.MAX_ATTEMPTS_MAX]),
    )
    def valid(priority, max_attempts):
        job_id = trio.from_thread.run(
            lambda: queue.enqueue(b"n", priority=priority, max_attempts=max_attempts)
        )
        accepted.append((job_id, priority, max_attempts))

    @EXAMPLES
    @given(data=st.data(), field=st.sampled_from(sorted(BAD_ENQUEUE_NUMBERS)))
    def invalid(data, field):
        value = data.draw(BAD_ENQUEUE_NUMBERS[field], label=field)
        rejected(
            engine,
            lambda: trio.from_thread.run(lambda: queue.enqueue(b"n", **{field: value})),
            match=field,
        )
        rejected(
            engine,
            lambda: trio.from_thread.run(lambda: queue.enqueue_many([b"n"], **{field: value})),
            match=field,
        )

    n_valid = await hypothesize(valid)
    for job_id, priority, max_attempts in accepted:
        job = await queue.get_job(job_id)
        assert job is not None
        assert (job.priority, job.max_attempts) == (priority, max_attempts)
    rows += len(accepted)
    last_id = max(job_id for job_id, _, _ in accepted)

    # Delays: any finite number within 100 years, negative ones included (Q2.1: now).
    for delay, expected in [(-1e9, now), (v.DURATION_MAX_S, None)]:
        job_id = await queue.enqueue(b"d", delay_s=delay)
        job = await queue.get_job(job_id)
        assert job is not None
        if expected is not None:
            assert job.run_at == expected
        else:
            assert job.run_at == now + timedelta(seconds=v.DURATION_MAX_S)
        rows, last_id = rows + 1, job_id
    for delay in (v.DURATION_MAX_S * 1.01, -v.DURATION_MAX_S * 1.01, 10**400, 1e300):
        with pytest.raises(InvalidArgument, match="delay_s"):
            await queue.enqueue(b"d", delay_s=delay)

    n_invalid = await hypothesize(invalid)
    await assert_no_trace(engine, queue, rows, last_id)
    # The hand-picked delays: two valid, four invalid.
    figures.record(engine=engine.name, valid_inputs=n_valid + 2, invalid_inputs=n_invalid + 4)


async def test_q2_run_at_naive_or_not_a_datetime_is_rejected(engine, figures):
    queue = engine.store.queue("abuse")
    await queue.enqueue(b"first")
    rows = await engine.count_rows()
    for bad in (datetime(2030, 1, 1), "2030-01-01T00:00:00Z", 1_900_000_000, 1.5):
        with pytest.raises(InvalidArgument, match="run_at"):
            await queue.enqueue(b"r", run_at=bad)
    far = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    job_id = await queue.enqueue(b"r", run_at=far)
    job = await queue.get_job(job_id)
    assert job is not None
    assert job.run_at == far
    await assert_no_trace(engine, queue, rows + 1, job_id)
    figures.record(engine=engine.name, valid_inputs=1, invalid_inputs=4)


@pytest.mark.parametrize(
    "run_at",
    [
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))),
        datetime.max.replace(tzinfo=timezone(-timedelta(hours=14))),
    ],
    ids=["min+14h", "max-14h"],
)
async def test_q12_run_at_out_of_the_utc_range_is_invalid_argument(run_at, figures):
    async with open_store("memory://") as store:
        with pytest.raises(InvalidArgument, match="run_at"):
            await store.queue("abuse").enqueue(b"r", run_at=run_at)
    figures.record(engine="memory", invalid_inputs=1)


# --- batches ---------------------------------------------------------------------------------


async def test_q2_a_huge_batch_round_trips_and_one_bad_item_rejects_it_all(engine, figures):
    queue = engine.store.queue("abuse")
    rng = random.Random(5)
    batch = [rng.randbytes(rng.randrange(0, 64)) for _ in range(20_000)]
    ids = await queue.enqueue_many(batch)
    assert len(ids) == len(batch)
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    for index in (0, 1, 9_999, 19_999, *rng.sample(range(20_000), 20)):
        job = await queue.get_job(ids[index])
        assert job is not None
        assert job.payload == batch[index]
    handles = await queue.claim_batch("w", 2**100)  # any int: "all there is"
    assert [h.id for h in handles] == ids
    assert await queue.ack_handles(handles) == [True] * len(ids)

    rows = await engine.count_rows()
    before = engine.backend.total
    for bad_item in ("text", None, b"x" * (MIB + 1), 5):
        with pytest.raises(InvalidArgument, match="payload"):
            await queue.enqueue_many([*batch[:1000], bad_item])
    for not_a_batch in (b"bytes", "text", 5, None):
        with pytest.raises(InvalidArgument, match="payloads"):
            await queue.enqueue_many(not_a_batch)
    assert engine.backend.total == before
    await assert_no_trace(engine, queue, rows, ids[-1])
    figures.record(engine=engine.name, valid_inputs=len(batch), invalid_inputs=8)


# --- claims and handle operations -------------------------------------------------------------


async def test_q3_q4_abused_claim_and_handle_arguments_are_rejected_and_leave_the_claim_usable(
    engine, hypothesize, figures
):
    queue = engine.store.queue("abuse", QueueOpts(visibility_timeout_s=60, max_attempts=5))
    job_id = await queue.enqueue(b"job")
    (handle,) = await queue.claim_batch("worker", 1)
    claimed = await queue.get_job(job_id)

    @EXAMPLES
    @given(n=not_an_int | st.sampled_from([2.0, "3", b"1"]))
    def bad_n(n):
        if n is None:
            n = 1.0
        rejected(engine, lambda: trio.from_thread.run(queue.claim_batch, "w", n), match="n ")

    @EXAMPLES
    @given(worker_id=st.sampled_from(["", "\x00", "w\x00", "\ud800", "w" * 201]) | not_a_str)
    def bad_worker(worker_id):
        rejected(
            engine, lambda: trio.from_thread.run(queue.claim_batch, worker_id, 1), match="worker_id"
        )

    @EXAMPLES
    @given(value=bad_numbers | st.sampled_from([0, 0.0, -1, -1e-9, v.DURATION_MAX_S * 2]))
    def bad_extensions(value):
        rejected(engine, lambda: trio.from_thread.run(handle.heartbeat, value), match="extend_s")

    @EXAMPLES
    @given(value=bad_numbers | st.sampled_from([-1, -1e-9, -math.inf, v.DURATION_MAX_S * 2]))
    def bad_delays(value):
        rejected(
            engine,
            lambda: trio.from_thread.run(lambda: handle.retry(delay_s=value)),
            match="delay_s",
        )

    @EXAMPLES
    @given(error=bad_error_texts)
    def bad_errors(error):
        rejected(engine, lambda: trio.from_thread.run(handle.retry, error), match="error")
        rejected(engine, lambda: trio.from_thread.run(handle.fail, error), match="error")

    n_invalid = 0
    for test in (bad_n, bad_worker, bad_extensions, bad_delays, bad_errors):
        n_invalid += await hypothesize(test)
    # n <= 0 claims nothing, before any engine call (Q3's extent guard).
    before = engine.backend.total
    assert await queue.claim_batch("w", 0) == []
    assert await queue.claim_batch("w", -(2**100)) == []
    assert engine.backend.total == before
    # The claim is untouched and still usable: not consumed by the rejected calls.
    assert await queue.get_job(job_id) == claimed
    assert await handle.heartbeat(1e-3)
    assert await handle.retry(error="", delay_s=0)
    job = await queue.get_job(job_id)
    assert job is not None
    assert (job.state, job.last_error) == ("pending", "")
    figures.record(engine=engine.name, invalid_inputs=n_invalid + 2)


async def test_q4_odd_but_valid_error_texts_round_trip(engine, figures):
    queue = engine.store.queue("abuse", QueueOpts(max_attempts=1))
    texts = ["", "'; DROP TABLE jobs; --", "é\u200b\U0001f600", "x" * v.ERROR_MAX_CHARS]
    ids = await queue.enqueue_many([b"e"] * len(texts))
    handles = await queue.claim_batch("w", len(texts))
    for handle, text in zip(handles, texts, strict=True):
        assert await handle.fail(text)
    for job_id, text in zip(ids, texts, strict=True):
        job = await queue.get_job(job_id)
        assert job is not None
        assert (job.state, job.last_error) == ("dead", text)
    figures.record(engine=engine.name, valid_inputs=len(texts))


# --- options --------------------------------------------------------------------------------


BAD_OPTS = {
    "visibility_timeout_s": [0, -1, math.nan, math.inf, True, "5", None, 1e300],
    "max_attempts": [0, -1, 1.0, True, "3", None, 2**31],
    "backoff_base_s": [-1, math.nan, math.inf, True, "5", None, 1e300],
    "expires_in_s": [0, -1, math.nan, math.inf, False, "5", 1e300],
    "dead_letter_retention_s": [-1, math.nan, -math.inf, True, "5"],
}


@pytest.mark.parametrize(
    ("field", "value"), [(f, value) for f, values in BAD_OPTS.items() for value in values]
)
def test_q1_abused_queue_opts_are_rejected(field, value, figures):
    with pytest.raises(InvalidArgument, match=field):
        QueueOpts(**{field: value})
    figures.record(engine="none", invalid_inputs=1)


BAD_STORE_OPTIONS = {
    "max_payload_bytes": [-1, 1.5, True, "1", 2**31, math.nan],
    "pool_size": [0, -1, 1.5, True, "4", 10**6],
    "connect_timeout_s": [0, -1, math.nan, math.inf, True, "1"],
    "migrate": ["drop", "", None, 1, "APPLY"],
    "application_name": ["", "a\x00", "\ud800", "a" * 51, None, 5],
    "schema": ["", "a;b", 'a"b', "pg_x", None],
    "clock": [5, "now", object()],
    "rng": [5, random.SystemRandom, "seed"],
}


#: Checked for PostgreSQL URLs only (the in-memory engine ignores them).
POSTGRES_ONLY = {"pool_size", "connect_timeout_s", "migrate", "application_name", "schema"}


@pytest.mark.parametrize(
    ("url", "option", "value"),
    [
        (url, option, value)
        for url in ("memory://", NOWHERE)
        for option, values in BAD_STORE_OPTIONS.items()
        for value in values
        if url == NOWHERE or option not in POSTGRES_ONLY
    ],
)
async def test_q1_abused_open_store_options_are_rejected_before_connecting(
    url, option, value, figures
):
    kwargs = {option: value}
    if option != "connect_timeout_s":
        kwargs["connect_timeout_s"] = 0.5  # a missed check fails fast (EngineError)
    with pytest.raises(InvalidArgument, match=option):
        async with open_store(url, **kwargs):
            pass  # pragma: no cover
    figures.record(engine="memory" if url == "memory://" else "postgres", invalid_inputs=1)


@pytest.mark.parametrize("url", [None, 5, b"memory://", "", "mysql://x", "memory:/"])
async def test_q1_abused_urls_are_rejected(url, figures):
    with pytest.raises(InvalidArgument, match="url"):
        async with open_store(url):
            pass  # pragma: no cover
    figures.record(engine="none", invalid_inputs=1)


BAD_WORKER_OPTIONS = {
    "concurrency": [0, -1, 1.5, True, "2", None],
    "claim_batch_max": [0, 1.0, False, "1"],
    "max_restarts": [-1, 0.5, True],
    "poll_interval_s": [0, -1, math.nan, math.inf, True, "1", None],
    "sweep_interval_s": [0, math.nan, math.inf, False],
    "restart_window_s": [0, -1, math.inf],
    "heartbeat_interval_s": [0, -1, math.nan, math.inf, True],
    "job_timeout_s": [0, -1, math.nan, math.inf, True],
    "shutdown_grace_s": [-1, math.nan, math.inf, True, None],
    "worker_id": ["", "w\x00", "\ud800", "w" * 201, 5],
}


@pytest.mark.parametrize(
    ("option", "value"),
    [(o, value) for o, values in BAD_WORKER_OPTIONS.items() for value in values],
)
async def test_r1_abused_worker_options_are_rejected_at_construction(
    engine, option, value, figures
):
    async def handler(job):
        pass  # pragma: no cover

    before = engine.backend.total
    with pytest.raises(InvalidArgument, match=option):
        Worker(engine.store, {"abuse": handler}, **{option: value})
    assert engine.backend.total == before
    figures.record(engine=engine.name, invalid_inputs=1)


@pytest.mark.parametrize(
    "handlers",
    [{}, [], "abuse", {"abuse": 5}, {5: print}, {"": print}, {"q;": print}, None],
    ids=["empty", "list", "str", "not-callable", "int-key", "empty-name", "bad-name", "none"],
)
async def test_r1_abused_worker_handlers_are_rejected(engine, handlers, figures):
    before = engine.backend.total
    with pytest.raises(InvalidArgument):
        Worker(engine.store, handlers)
    assert engine.backend.total == before
    figures.record(engine=engine.name, invalid_inputs=1)
