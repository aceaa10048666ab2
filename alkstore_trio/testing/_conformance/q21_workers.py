"""Q21 the worker registry: ``store.beat_worker`` writes a worker's row on the engine's
clock (start, beat, stop), ``store.list_workers`` reads the rows with their state, and
starts and beats purge rows unheard of for a day, a bounded batch at a time."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from ... import InvalidArgument, WorkerRegistration
from ..._core._workers import WORKER_PURGE_AFTER_S, WORKER_PURGE_BATCH
from ._helpers import _check, _raises

if TYPE_CHECKING:
    from .._harness import EngineHarness


def _reg(worker_id: str = "host-a:41:beef", **fields: object) -> WorkerRegistration:
    values: dict[str, object] = {
        "host": "host-a",
        "pid": 41,
        "queues": ("emails", "reports"),
        "concurrency": 10,
        "version": "1.2.3",
    }
    values.update(fields)
    return WorkerRegistration(worker_id, **values)  # type: ignore[arg-type]


@_check
async def q21_a_start_registers_a_running_row_on_the_engines_clock(
    harness: EngineHarness,
) -> None:
    """Q21.1/Q21.2: a start writes the registration with started_at = heartbeat_at = now,
    not stopped; the listing reads it running, with the clock of the read."""
    async with harness.open_store() as store:
        assert await store.list_workers() == [], "a new store lists workers"
        start = await harness.now()
        await store.beat_worker(_reg(), "start")
        await harness.advance(2.5)
        (row,) = await store.list_workers()
        assert (row.worker_id, row.host, row.pid, row.queues, row.concurrency, row.version) == (
            "host-a:41:beef",
            "host-a",
            41,
            ("emails", "reports"),
            10,
            "1.2.3",
        ), row
        assert (row.started_at, row.heartbeat_at, row.stopped_at) == (start, start, None), row
        assert row.state == "running", row
        assert row.now == start + timedelta(seconds=2.5), row
        assert row.heartbeat_age_s == 2.5, row.heartbeat_age_s
        # A scheduler-only worker: no queues, no slots.
        await store.beat_worker(_reg("sched", queues=(), concurrency=0, version=""), "start")
        rows = {r.worker_id: r for r in await store.list_workers()}
        assert (rows["sched"].queues, rows["sched"].concurrency, rows["sched"].version) == (
            (),
            0,
            "",
        ), rows["sched"]


@_check
async def q21_beats_stamp_the_heartbeat_and_a_start_starts_afresh(harness: EngineHarness) -> None:
    """Q21.2: a beat moves heartbeat_at to now and keeps started_at (rewriting the other
    fields); a start again (the same id restarted) resets started_at."""
    async with harness.open_store() as store:
        start = await harness.now()
        await store.beat_worker(_reg(), "start")
        await harness.advance(15)
        await store.beat_worker(_reg(pid=42, queues=("emails",)), "beat")
        (row,) = await store.list_workers()
        assert (row.started_at, row.heartbeat_at) == (start, start + timedelta(seconds=15)), row
        assert (row.pid, row.queues) == (42, ("emails",)), row
        await harness.advance(15)
        await store.beat_worker(_reg(), "start")
        (row,) = await store.list_workers()
        again = start + timedelta(seconds=30)
        assert (row.started_at, row.heartbeat_at) == (again, again), row


@_check
async def q21_a_stop_marks_the_row_stopped_and_a_missing_row_stays_missing(
    harness: EngineHarness,
) -> None:
    """Q21.2/Q21.4: a stop stamps heartbeat_at and stopped_at; the row reads stopped
    however old; a stop of an unknown id writes nothing; a beat after a stop clears it."""
    async with harness.open_store() as store:
        await store.beat_worker(_reg(), "start")
        await harness.advance(3)
        stopped = await harness.now()
        await store.beat_worker(_reg(), "stop")
        await store.beat_worker(_reg("never-started"), "stop")
        await harness.advance(3600)
        (row,) = await store.list_workers()
        assert (row.worker_id, row.state) == ("host-a:41:beef", "stopped"), row
        assert (row.heartbeat_at, row.stopped_at) == (stopped, stopped), row
        await store.beat_worker(_reg(), "beat")
        (row,) = await store.list_workers()
        assert (row.state, row.stopped_at) == ("running", None), row


@_check
async def q21_a_silent_row_reads_gone_after_gone_after_s(harness: EngineHarness) -> None:
    """Q21.4: a row not stopped reads gone once its beat is more than gone_after_s old
    (default 60 s): not at exactly 60 s, at 60.001 s."""
    async with harness.open_store() as store:
        await store.beat_worker(_reg(), "start")
        await harness.advance(60)
        (row,) = await store.list_workers()
        assert row.state == "running", f"at exactly 60 s the row read {row.state}"
        await harness.advance(0.001)
        (row,) = await store.list_workers()
        assert row.state == "gone", f"past 60 s the row read {row.state}"
        (row,) = await store.list_workers(gone_after_s=3600)
        assert row.state == "running", f"with gone_after_s=3600 the row read {row.state}"


@_check
async def q21_the_listing_puts_the_latest_beat_first_and_takes_limit(
    harness: EngineHarness,
) -> None:
    """Q21.4: the latest heartbeat first, ties by worker_id (code point order), at most
    ``limit`` rows."""
    async with harness.open_store() as store:
        await store.beat_worker(_reg("old"), "start")
        await harness.advance(1)
        for worker_id in ("b", "B", "a"):
            await store.beat_worker(_reg(worker_id), "start")
        ids = [row.worker_id for row in await store.list_workers()]
        assert ids == ["B", "a", "b", "old"], ids
        ids = [row.worker_id for row in await store.list_workers(limit=2)]
        assert ids == ["B", "a"], ids


@_check
async def q21_starts_and_beats_purge_rows_unheard_of_for_a_day_in_batches(
    harness: EngineHarness,
) -> None:
    """Q21.4: a row whose beat is more than a day old is deleted by the next start or
    beat of another worker, at most WORKER_PURGE_BATCH rows a write, oldest first; a row
    exactly a day old stays; a purged worker's next beat makes its row again."""
    async with harness.open_store() as store:
        count = WORKER_PURGE_BATCH + 2
        first = await harness.now()
        for n in range(count):
            await store.beat_worker(_reg(f"w{n:04d}"), "start")
            await harness.advance(0.001)
        await store.beat_worker(_reg("w-stopped"), "stop")  # nothing: no row
        day_later = first + timedelta(seconds=WORKER_PURGE_AFTER_S)
        await harness.advance((day_later - await harness.now()).total_seconds())
        # w0000 is now a day old (not more), the others younger.
        await store.beat_worker(_reg("fresh"), "start")
        assert len(await store.list_workers()) == count + 1, "a row a day old was purged"
        await harness.advance(1)
        await store.beat_worker(_reg("fresh"), "beat")
        left = [row.worker_id for row in await store.list_workers()]
        assert left == ["fresh", f"w{count - 1:04d}", f"w{count - 2:04d}"], left
        await store.beat_worker(_reg("fresh"), "beat")
        left = [row.worker_id for row in await store.list_workers()]
        assert left == ["fresh"], left
        now = await harness.now()
        await store.beat_worker(_reg("w0000"), "beat")
        row = next(r for r in await store.list_workers() if r.worker_id == "w0000")
        assert (row.started_at, row.heartbeat_at, row.state) == (now, now, "running"), row


@_check
async def q21_bad_arguments_are_rejected_without_effect(harness: EngineHarness) -> None:
    """Q21.1/Q21.2/Q21.4: a bad registration, phase, gone_after_s or limit is
    InvalidArgument, and nothing is written."""
    bad_fields: list[dict[str, object]] = [
        {"worker_id": ""},
        {"worker_id": "x" * 201},
        {"worker_id": "a\x00b"},
        {"host": ""},
        {"host": "h" * 256},
        {"pid": -1},
        {"pid": 2**31},
        {"pid": True},
        {"queues": "emails"},
        {"queues": ("emails", "emails")},
        {"queues": ("bad name",)},
        {"queues": ("alk_internal",)},
        {"queues": tuple(f"q{n}" for n in range(1001))},
        {"concurrency": -1},
        {"concurrency": 1.5},
        {"version": "v" * 65},
        {"version": None},
    ]
    for fields in bad_fields:
        worker_id = str(fields.pop("worker_id", "w"))
        await _raises(InvalidArgument, f"WorkerRegistration({fields})", _reg, worker_id, **fields)
    async with harness.open_store() as store:
        await _raises(InvalidArgument, "a str registration", store.beat_worker, "w", "start")
        for phase in ("begin", None, "START"):
            await _raises(InvalidArgument, f"phase={phase!r}", store.beat_worker, _reg(), phase)
        for gone in (0, -1, float("nan"), "60", True):
            await _raises(
                InvalidArgument, f"gone_after_s={gone!r}", store.list_workers, gone_after_s=gone
            )
        for limit in (0, 10001, 1.0, None):
            await _raises(InvalidArgument, f"limit={limit!r}", store.list_workers, limit=limit)
        assert await store.list_workers() == [], "a refused call wrote a row"
