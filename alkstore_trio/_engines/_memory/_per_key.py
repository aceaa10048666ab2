"""Q18.8 in memory: the claim of a queue with ``max_running_per_key``, and the due time
of a limited queue (Q18.9, with Q18.8's wait for a full key).

The pick is the core's rule (:func:`alkstore_trio._core._limits.per_key_pick`): in claim
order, each concurrency key contributes at most its free slots (its best jobs), and
keyless jobs compete as ever. Here it is a walk of the queue's ready heap that sets the
entries of full keys aside and puts them back after the claim, so the claim's cost is
the ready jobs it walks past (all of them when every key is full: the in-memory engine
is for tests and single processes; PostgreSQL's claim finds each key's jobs by index).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from typing import TYPE_CHECKING

from ..._core import _transitions as t

if TYPE_CHECKING:
    from collections.abc import Iterator
    from datetime import datetime

    from ..._core import Job
    from ._table import JobTable, _QueueIndex


def holding(index: _QueueIndex) -> Iterator[tuple[datetime, int, int]]:
    """Q18.7/Q18.8: the lease entries that can hold a limited queue's slot: processing
    and cancelling rows (a cancelled handler holds its slot until it stopped; entries may
    be stale: check the generation)."""
    return itertools.chain(index.leases, index.cancelling)


def live_by_key(table: JobTable, index: _QueueIndex, now: datetime) -> Counter[str]:
    """Q18.8: each key's jobs processing or cancelling under an unexpired lease."""
    gens, live = table._gen, table._live
    return Counter(
        key
        for expires, job_id, gen in holding(index)
        if gens.get(job_id) == gen
        and expires >= now
        and (key := live[job_id].concurrency_key) is not None
    )


def take(
    table: JobTable, index: _QueueIndex, worker_id: str, allowed: int, cap: int, now: datetime
) -> tuple[list[Job], int, bool]:
    """Claim up to ``allowed`` rows in claim order, at most ``cap`` live per key: the
    jobs, how many the pick found (up to one past ``allowed``: Q18.10), and whether a
    job was held back by its key's limit."""
    used = live_by_key(table, index, now)
    ready, gens = index.ready, table._gen
    out: list[Job] = []
    aside: list[tuple[int, datetime, int, int]] = []
    found, held = 0, False
    while ready and found <= allowed:
        entry = ready[0]
        job_id, gen = entry[2], entry[3]
        job = table._live.get(job_id)
        if gens.get(job_id) != gen or job is None or not t.is_claimable(job, now):
            heapq.heappop(ready)
            continue
        key = job.concurrency_key
        if key is not None and used[key] >= cap:
            held = True
            aside.append(heapq.heappop(ready))
            continue
        found += 1
        if found > allowed:
            break
        if key is not None:
            used[key] += 1
        claimed = t.claimed(job, worker_id, now, table.next_token())
        heapq.heappop(ready)
        table._set_live(claimed, now)
        out.append(claimed)
    for entry in aside:
        heapq.heappush(ready, entry)
    return out, found, held


def key_lease_s(table: JobTable, index: _QueueIndex, cap: int, now: datetime) -> float | None:
    """Q18.8 (R11): when every ready job's key is full, the seconds until the earliest
    live lease of those keys lapses; ``None`` when a ready job is not held back (or
    there is none)."""
    used = live_by_key(table, index, now)
    gens, live = table._gen, table._live
    keys: set[str] = set()
    for _, _, job_id, gen in index.ready:
        job = live.get(job_id)
        if gens.get(job_id) != gen or job is None or job.state != "pending":
            continue
        if not t.is_claimable(job, now):
            continue
        if job.concurrency_key is None or used[job.concurrency_key] < cap:
            return None
        keys.add(job.concurrency_key)
    deadlines = [
        expires
        for expires, job_id, gen in holding(index)
        if gens.get(job_id) == gen and expires >= now and live[job_id].concurrency_key in keys
    ]
    return None if not deadlines else (min(deadlines) - now).total_seconds()


def limited_due_in_s(
    table: JobTable, queue: str, index: _QueueIndex, due: float | None, now: datetime
) -> float | None:
    """Q18.9 (R11 for a limited queue): with ready pending jobs waiting on a limit (a
    walk of the ready heap), the time until the limits let one out, if sooner than the
    next delayed job (``due``)."""
    gens, live = table._gen, table._live
    ready = any(
        gens.get(job_id) == gen
        and live[job_id].state == "pending"
        and t.is_claimable(live[job_id], now)
        for _, _, job_id, gen in index.ready
    )
    if not ready:
        return due
    cap = table.limits.get(queue).max_running_per_key
    key_s = None if cap is None else key_lease_s(table, index, cap, now)
    wait = table.limits.due_in_s(
        queue, table._live_leases(index, now), table._earliest_lease_s(index, now), now, key_s
    )
    if wait is None:
        return due
    return wait if due is None else min(due, wait)
