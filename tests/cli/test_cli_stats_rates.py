"""``alkstore-trio stats --watch`` shows jobs finished per minute per queue (issue 6
item 1, D27): the growth of each queue's counters between two readings, over the time
the database clock moved between them.

The command runs in-process through ``main([...])`` against a throwaway schema whose
clock is frozen (its ``alk_now()`` reads a one-row table, as in the testing harness).
Between two readings the command sleeps; the tests swap the ``trio`` the command module
sees for one whose ``sleep`` does the work of that interval instead (acks, failures,
cancels, enqueues through a store of its own) and moves the frozen clock. Nothing waits
for wall time.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio

from alkstore_trio import Store, StoreStats, open_store
from alkstore_trio._cli import EXIT_OK, main
from alkstore_trio._cli import stats as cli_module
from alkstore_trio._core import QueueStats
from alkstore_trio._engines._postgres import _driver, _sql
from alkstore_trio.testing._postgres import _create_frozen_schema

START = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def frozen(pg_dsn: str, schema: str) -> Callable[[float], Awaitable[None]]:
    """Create the test schema with a frozen clock at :data:`START`; ``await
    advance(seconds)`` moves it."""
    now = [START]

    async def create() -> None:
        admin = await _driver.connect(pg_dsn, connect_timeout_s=5, application_name="alk-t")
        try:
            await _create_frozen_schema(admin, schema, START)
        finally:
            await admin.aclose()

    trio.run(create)

    async def advance(seconds: float) -> None:
        now[0] += timedelta(seconds=seconds)
        admin = await _driver.connect(pg_dsn, connect_timeout_s=5, application_name="alk-t")
        try:
            await admin.execute(
                f"UPDATE {_sql.quote_ident(schema)}.alk_test_clock SET now = %s", [now[0]]
            )
        finally:
            await admin.aclose()

    return advance


@pytest.fixture
def on_store(pg_dsn: str, schema: str, frozen: Any) -> Callable[..., Any]:
    """``on_store(fn)``: run ``await fn(store)`` on the test schema; its result."""

    def run(fn: Callable[[Store], Awaitable[Any]]) -> Any:
        async def main_() -> Any:
            async with open_store(pg_dsn, schema=schema, listen=False) as store:
                return await fn(store)

        return trio.run(main_)

    return run


@pytest.fixture
def cli(pg_dsn: str, schema: str, frozen: Any, monkeypatch: pytest.MonkeyPatch, capsys):
    """``cli(*args, between=None) -> (status, stdout)``: run the command; ``between``
    (an async function of a store on the schema) replaces each sleep between readings."""
    monkeypatch.setenv("ALKSTORE_DSN", pg_dsn)
    monkeypatch.setenv("ALKSTORE_SCHEMA", schema)
    capsys.readouterr()

    def run(*args: str, between: Callable[[Store], Awaitable[None]] | None = None):
        if between is not None:

            class Trio:
                def __getattr__(self, name: str) -> Any:
                    return getattr(trio, name)

                @staticmethod
                async def sleep(seconds: float) -> None:
                    async with open_store(pg_dsn, schema=schema, listen=False) as store:
                        await between(store)

            monkeypatch.setattr(cli_module, "trio", Trio())
        try:
            status = main(list(args))
        finally:
            monkeypatch.setattr(cli_module, "trio", trio)
        out, _ = capsys.readouterr()
        return status, out

    return run


async def _seed(store: Store) -> None:
    await store.queue("emails").enqueue_many([b"e%d" % i for i in range(30)])
    await store.queue("reports").enqueue_many([b"r%d" % i for i in range(10)])


def _one_interval(advance: Callable[[float], Awaitable[None]]):
    """30 s of work: emails acks 12 jobs (one at a time and in batches) and fails 3;
    reports acks 2 and cancels 1; 5 jobs are enqueued."""

    async def work(store: Store) -> None:
        emails, reports = store.queue("emails"), store.queue("reports")
        handles = await emails.claim_batch("w", 15)
        for handle in handles[:4]:
            assert await handle.ack()
        assert await emails.ack_handles(handles[4:8]) == [True] * 4
        assert await emails.ack_batch([h.id for h in handles[8:12]]) == 4
        assert await emails.fail_handles([(h, "boom") for h in handles[12:]]) == [True] * 3
        done, _ = await reports.ack_handles_and_claim(await reports.claim_batch("w", 2), "w", 0)
        assert done == [True, True]
        (pending,) = await reports.list_jobs("pending", limit=1)
        assert await reports.cancel(pending.id)
        await reports.enqueue_many([b"more"] * 5)
        await advance(30)

    return work


def test_issue6_stats_watch_shows_each_queues_jobs_finished_per_minute_as_json(
    cli, on_store, frozen
):
    on_store(_seed)
    status, out = cli("stats", "--watch", "--count", "2", "--json", between=_one_interval(frozen))
    assert status == EXIT_OK
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["finished_per_min"] is None
    assert first["ids_issued_per_min"] is None
    assert {q["queue"]: q["finished_per_min"] for q in first["queues"]} == {
        "emails": None,
        "reports": None,
    }
    assert second["now"] == "2030-01-01T00:00:30Z"
    emails, reports = second["queues"]
    assert (emails["queue"], reports["queue"]) == ("emails", "reports")
    # emails: 12 acked + 3 dead-lettered in 30 s of the database clock.
    assert {k: v for k, v in emails.items() if k.endswith(("_total", "_per_min"))} == {
        "acked_total": 12,
        "dead_lettered_total": 3,
        "cancelled_total": 0,
        "finished_per_min": 30.0,
        "acked_per_min": 24.0,
        "dead_lettered_per_min": 6.0,
        "cancelled_per_min": 0.0,
    }
    # reports: 2 acked, 1 cancelled (not finished).
    assert {k: v for k, v in reports.items() if k.endswith(("_total", "_per_min"))} == {
        "acked_total": 2,
        "dead_lettered_total": 0,
        "cancelled_total": 1,
        "finished_per_min": 4.0,
        "acked_per_min": 4.0,
        "dead_lettered_per_min": 0.0,
        "cancelled_per_min": 2.0,
    }
    assert second["finished_per_min"] == 34.0
    assert second["ids_issued_per_min"] == 10.0  # 5 enqueued in 30 s, across the store


def test_issue6_stats_watch_with_a_queue_shows_that_queues_rate_not_the_stores(
    cli, on_store, frozen
):
    on_store(_seed)
    status, out = cli(
        "stats", "--watch", "--count", "2", "--queue", "reports", between=_one_interval(frozen)
    )
    assert status == EXIT_OK
    first, second = out.strip().split("\n\n")
    assert first.splitlines()[1].split()[-2:] == ["FINISHED/MIN", "DEAD/MIN"]
    assert first.splitlines()[2].split()[-2:] == ["-", "-"]
    assert "measuring…" in first
    lines = second.splitlines()
    assert lines[2].split()[0] == "reports"
    assert lines[2].split()[-2:] == ["4.0", "0.0"]
    assert len(lines) == 4  # header, one queue, the footer
    assert lines[3] == (
        "finished per minute (acked + dead-lettered, queue 'reports'): 4.0; "
        "ids issued per minute (enqueues, store-wide): 10.0"
    )


def test_issue6_stats_lists_a_drained_queue_with_its_totals(cli, on_store):
    async def drain(store: Store) -> None:
        queue = store.queue("drained")
        await queue.enqueue(b"x")
        handle = await queue.claim_one("w")
        assert handle is not None
        assert await handle.ack()

    on_store(drain)
    status, out = cli("stats", "--json")
    assert status == EXIT_OK
    (entry,) = json.loads(out)["queues"]
    assert (entry["queue"], entry["pending_ready"], entry["acked_total"]) == ("drained", 0, 1)
    assert entry["finished_per_min"] is None  # one reading: no rate


# -- the rate arithmetic ---------------------------------------------------------------


def _reading(seconds: float, *queues: tuple[str, int, int, int], issued: int = 0) -> StoreStats:
    return StoreStats(
        now=START + timedelta(seconds=seconds),
        ids_issued=issued,
        queues=tuple(
            QueueStats(
                queue=name,
                pending_ready=0,
                pending_delayed=0,
                processing=0,
                reclaimable=0,
                dead=0,
                oldest_ready_age_s=None,
                acked_total=acked,
                dead_lettered_total=dead,
                cancelled_total=cancelled,
            )
            for name, acked, dead, cancelled in queues
        ),
    )


def test_issue6_a_queue_new_in_the_second_reading_counts_from_zero():
    rates = cli_module._finished_per_min(_reading(0), _reading(120, ("new", 10, 2, 4)))
    assert rates == {"new": {"finished": 6.0, "acked": 5.0, "dead_lettered": 1.0, "cancelled": 2.0}}


def test_issue6_a_counter_that_went_down_shows_no_rate():
    # The schema was dropped and migrated again between the readings.
    before = _reading(0, ("q", 100, 5, 0), issued=500)
    after = _reading(60, ("q", 3, 5, 0), issued=10)
    rates = cli_module._finished_per_min(before, after)
    assert rates == {"q": {"finished": None, "acked": None, "dead_lettered": 0.0, "cancelled": 0.0}}
    assert cli_module._total_finished(rates) is None
    assert cli_module._ids_issued_per_min(before, after) is None


def test_issue6_no_rate_without_a_first_reading_or_when_the_clock_stood_still():
    reading = _reading(0, ("q", 1, 0, 0), issued=1)
    assert cli_module._finished_per_min(None, reading) is None
    assert cli_module._finished_per_min(reading, reading) is None
    assert cli_module._ids_issued_per_min(reading, reading) is None
    assert cli_module._total_finished({}) == 0.0
