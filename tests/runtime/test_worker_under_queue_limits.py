"""Q18.7 and Q18.9 under a real Worker: with both a global limit and a rate limit, a
worker whose handlers are shorter than a token's interval keeps to the rate instead of
stalling until its re-poll.

The bug this pins: at ``max_running`` the worker's lookup of the queue's next due time
(R11) answered "the earliest lease lapse", seconds away. The acks that then freed the
slots woke the queue, but their claims were throttled by the rate, and a short claim
looks the due time up again only when the known one has passed: the worker slept until
its re-poll (5 s here). Slot-freeing wakes now say "due now" (Q18.7), so the next short
claim looks the queue up again and finds the next token.

The memory engine runs on trio's ``MockClock(autojump_threshold=0)`` (through
:class:`TrioClock`), so the handlers' 20 ms and the rate are exact and nothing sleeps for
real; the PostgreSQL variant runs in real time, about 2 s.
"""

from __future__ import annotations

import itertools
import secrets

import pytest
import trio

from alkstore_trio import Worker, open_store
from alkstore_trio.testing import TrioClock

JOBS, MAX_RUNNING, RATE, BURST, POLL_S = 40, 3, 20.0, 5, 5.0


async def _drain_under_both_limits(store) -> list[float]:
    queue = store.queue("api")
    await queue.set_limits(max_running=MAX_RUNNING, rate_per_s=RATE, burst=BURST)
    starts: list[float] = []
    done = trio.Event()

    async def handle(job):
        starts.append(trio.current_time())
        await trio.sleep(0.02)  # shorter than a token's 50 ms
        if len(starts) == JOBS:
            done.set()

    worker = Worker(store, {queue: handle}, concurrency=20, poll_interval_s=POLL_S)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await queue.enqueue_many([b"call-%d" % i for i in range(JOBS)])
        with trio.fail_after(30):
            await done.wait()
        worker.stop()
    return starts


def _assert_keeps_the_rate(starts: list[float]) -> None:
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # Never a stall of a re-poll interval: the longest gap is about one token (50 ms).
    assert max(gaps) < POLL_S / 10, f"a {max(gaps):.2f} s stall between starts"
    took = starts[-1] - starts[0]
    # The backlog drains at the rate: (40 - 5) tokens at 20/s, 1.75 s (within 15 %).
    expected = (JOBS - BURST) / RATE
    assert expected * 0.85 <= took <= expected * 1.15, took


async def test_q18_7_q18_9_a_worker_under_both_limits_keeps_the_rate(autojump_clock):
    async with open_store("memory://", clock=TrioClock()) as store:
        starts = await _drain_under_both_limits(store)
    _assert_keeps_the_rate(starts)


@pytest.fixture
def pg_schema(pg_dsn):
    psycopg = pytest.importorskip("psycopg")
    from psycopg import sql

    name = "t_qlimits_" + secrets.token_hex(5)
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.mark.xdist_group("heavy")  # real time: a rate within 15 %
async def test_q18_7_q18_9_a_worker_under_both_limits_keeps_the_rate_on_postgresql(
    pg_dsn, pg_schema
):
    async with open_store(pg_dsn, schema=pg_schema, migrate="apply") as store:
        starts = await _drain_under_both_limits(store)
    _assert_keeps_the_rate(starts)
