"""``alkstore-trio stats``: each queue's jobs by state at one instant of the database
clock, and with ``--watch`` its finish and dead-letter rates."""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, Final

import trio

from ._args import EXIT_OK, int_in, positive_seconds, queue_name
from ._operator import add_command, operator_store
from ._output import age, iso, say, table
from .queue import limits_json, limits_text

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from .._core import QueueStats, StoreStats

#: Terminal control: cursor home, then clear to the end of the screen.
_HOME_AND_CLEAR: Final = "\x1b[H\x1b[J"


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``stats``."""
    stats = add_command(
        commands,
        env,
        "stats",
        run,
        title="stats",
        help="show each queue's pending, processing and dead jobs (--watch to follow)",
        description=(
            "Per queue: pending jobs ready to run and delayed, processing jobs and how "
            "many of them lapsed (reclaimable), dead jobs, and how long the oldest ready "
            "job has waited, all at one instant of the database clock. With --watch the "
            "table is refreshed every --interval-s seconds (in place on a terminal, as "
            "successive blocks otherwise) with each queue's jobs finished per minute "
            "(acked plus dead-lettered) and dead-lettered per minute, from the queue's "
            "counters in two successive readings. Stop it with Ctrl-C."
        ),
        examples=[
            "alkstore-trio stats",
            "alkstore-trio stats --queue emails --watch --interval-s 5",
            "alkstore-trio stats --json",
        ],
    )
    stats.add_argument("--queue", metavar="Q", type=queue_name, help="only this queue")
    stats.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    stats.add_argument(
        "--interval-s",
        "--interval",
        metavar="S",
        dest="interval_s",
        type=positive_seconds,
        default=2.0,
        help="seconds between readings with --watch (default 2; --interval is the old name)",
    )
    stats.add_argument(
        "--count",
        metavar="N",
        type=int_in(1, 10**9),
        default=None,
        help="with --watch, stop after N readings (default: until Ctrl-C)",
    )
    stats.add_argument(
        "--json", action="store_true", help="print JSON (one object per reading with --watch)"
    )


# -- stats ---------------------------------------------------------------------------


#: The counters ``stats --watch`` shows a rate of (D27), by their JSON name:
#: ``finished`` is acked plus dead-lettered.
_COUNTERS: Final = ("finished", "acked", "dead_lettered", "cancelled")
#: Per queue, each counter's growth per minute (``None``: no rate, see
#: :func:`_finished_per_min`).
_Rates = dict[str, dict[str, float | None]]


def _per_min(before: int, after: int, elapsed_s: float) -> float | None:
    """A counter's growth per minute, or ``None`` when it went down (the schema was
    dropped and created again between the readings)."""
    return None if after < before else (after - before) * 60 / elapsed_s


def _finished_per_min(before: StoreStats | None, after: StoreStats) -> _Rates | None:
    """D27: for each queue of ``after``, how fast its counters grew since ``before``,
    per minute of the database clock. A queue missing from ``before`` had counted
    nothing then (a queue with counts is always listed). ``None`` for the first
    reading, or when the clock did not move."""
    if before is None:
        return None
    elapsed = (after.now - before.now).total_seconds()
    if elapsed <= 0:
        return None
    rates: _Rates = {}
    for entry in after.queues:
        old = before.queue(entry.queue)
        now_counts = (
            entry.finished_total,
            entry.acked_total,
            entry.dead_lettered_total,
            entry.cancelled_total,
        )
        old_counts = (
            (0, 0, 0, 0)
            if old is None
            else (old.finished_total, old.acked_total, old.dead_lettered_total, old.cancelled_total)
        )
        rates[entry.queue] = {
            name: _per_min(was, count, elapsed)
            for name, was, count in zip(_COUNTERS, old_counts, now_counts, strict=True)
        }
    return rates


def _ids_issued_per_min(before: StoreStats | None, after: StoreStats) -> float | None:
    """D23: job ids handed out per minute across the store (enqueues, and ids of
    rolled-back transactions), between two readings."""
    if before is None or after.now <= before.now:
        return None
    return _per_min(before.ids_issued, after.ids_issued, (after.now - before.now).total_seconds())


def _total_finished(rates: _Rates | None) -> float | None:
    """Jobs finished per minute across the queues shown; ``None`` if any has no rate."""
    if rates is None:
        return None
    each = [queue_rates["finished"] for queue_rates in rates.values()]
    return None if None in each else math.fsum(rate or 0.0 for rate in each)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _limits_lines(entries: list[QueueStats]) -> list[str]:
    """Q18.10: one line per queue with limits or throttled claims."""
    return [
        f"limits of {e.queue}: {limits_text(e.limits)}; claims throttled: "
        f"{e.throttled.running} by max running, {e.throttled.rate} by the rate, "
        f"{e.throttled.per_key} by the per-key limit"
        for e in entries
        if e.limits is not None or e.throttled.total
    ]


def _stats_lines(
    stats: StoreStats,
    queue: str | None,
    rates: _Rates | None,
    ids_rate: float | None,
    watch: bool,
) -> list[str]:
    entries = [e for e in stats.queues if queue is None or e.queue == queue]
    lines = [f"alkstore-trio stats at {iso(stats.now)} (database clock)"]
    if not entries:
        lines.append("no jobs in any queue" if queue is None else f"queue {queue!r}: no jobs")
    else:
        header = ["QUEUE", "READY", "DELAYED", "PROCESSING", "RECLAIMABLE", "DEAD", "OLDEST READY"]
        rows = [
            [
                e.queue + (" (paused)" if e.paused else ""),  # Q18
                str(e.pending_ready),
                str(e.pending_delayed),
                str(e.processing),
                str(e.reclaimable),
                str(e.dead),
                age(e.oldest_ready_age_s),
            ]
            for e in entries
        ]
        align = "lrrrrrr"
        if watch:
            header += ["FINISHED/MIN", "DEAD/MIN"]
            for row, e in zip(rows, entries, strict=True):
                queue_rates = {} if rates is None else rates.get(e.queue, {})
                row += [_rate(queue_rates.get("finished")), _rate(queue_rates.get("dead_lettered"))]
            align += "rr"
        lines += table(header, rows, align)
        lines += _limits_lines(entries)
    if watch:
        if rates is None:
            lines.append("finished per minute (acked + dead-lettered): measuring…")
        else:
            scope = f"queue {queue!r}" if queue is not None else "the queues above"
            lines.append(
                f"finished per minute (acked + dead-lettered, {scope}): "
                f"{_rate(_total_finished(rates))}; ids issued per minute (enqueues, "
                f"store-wide): {_rate(ids_rate)}"
            )
    return lines


def _stats_json(
    stats: StoreStats, queue: str | None, rates: _Rates | None, ids_rate: float | None
) -> str:
    entries = [e for e in stats.queues if queue is None or e.queue == queue]

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    def rates_of(name: str) -> dict[str, float | None]:
        found = {} if rates is None else rates.get(name, {})
        return {f"{counter}_per_min": rounded(found.get(counter)) for counter in _COUNTERS}

    return json.dumps(
        {
            "now": iso(stats.now),
            "ids_issued": stats.ids_issued,
            "ids_issued_per_min": rounded(ids_rate),
            "finished_per_min": rounded(_total_finished(rates)),
            "queues": [
                {
                    "queue": e.queue,
                    "paused": e.paused,  # Q18
                    **limits_json(e),  # Q18.10
                    "pending_ready": e.pending_ready,
                    "pending_delayed": e.pending_delayed,
                    "processing": e.processing,
                    "reclaimable": e.reclaimable,
                    "dead": e.dead,
                    "oldest_ready_age_s": e.oldest_ready_age_s,
                    "acked_total": e.acked_total,
                    "dead_lettered_total": e.dead_lettered_total,
                    "cancelled_total": e.cancelled_total,
                    **rates_of(e.queue),
                }
                for e in entries
            ],
        }
    )


async def run(args: argparse.Namespace) -> int:
    queue: str | None = args.queue
    async with operator_store(args) as store:
        if not args.watch:
            stats = await store.stats(queue)
            if args.json:
                say(_stats_json(stats, queue, None, None))
            else:
                for line in _stats_lines(stats, queue, None, None, watch=False):
                    say(line)
            return EXIT_OK
        in_place = sys.stdout.isatty() and not args.json
        before: StoreStats | None = None
        readings = 0
        while True:
            # D27: the queues' own counters give their rates; the id sequence the store's
            # enqueue rate (D23).
            stats = await store.stats(queue)
            rates = _finished_per_min(before, stats)
            ids_rate = _ids_issued_per_min(before, stats)
            if args.json:
                say(_stats_json(stats, queue, rates, ids_rate))
            else:
                lines = _stats_lines(stats, queue, rates, ids_rate, watch=True)
                if in_place:
                    sys.stdout.write(_HOME_AND_CLEAR + "\n".join(lines) + "\n")
                    sys.stdout.flush()
                else:
                    say("\n".join(lines) + "\n")
            readings += 1
            if args.count is not None and readings >= args.count:
                return EXIT_OK
            before = stats
            await trio.sleep(args.interval_s)
