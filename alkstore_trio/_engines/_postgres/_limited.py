"""Q18.7-Q18.11 on PostgreSQL: the claims of a limited queue.

Why a path of its own. A limit is a count over the whole fleet's leases, so a claim must
count them after every earlier claim of the queue committed, and no later claim may
count before it commits. The claims of a limited queue therefore take turns on the lock
of the queue's control row, and count in a *later* statement than the one that took the
lock: in READ COMMITTED a statement keeps the snapshot it started with even when it
waited for a lock, so counting in the locking statement would miss the claim it waited
for and hand out its slot twice. One transaction, on one connection:

1. :data:`LIMIT_BARRIER_SQL`: the jobs table in ROW EXCLUSIVE mode, before the row lock, so a
   pause or a ``set_limits`` (SHARE on jobs, then the control row) never deadlocks with
   a limited claim;
2. ``lock_limits``: the control row, ``FOR UPDATE``;
3. ``ack_claims``, when the claim acks first (``ack_and_claim``), so the claim sees the
   slots the acks freed;
4. ``claim_limited``: count the live leases, refill the bucket, claim at most what the
   limits allow, take the tokens and count the throttles (``claim_per_key`` when the
   queue has a ``max_running_per_key``, Q18.8: the same, with each key's candidates found
   by index and at most its free slots of them);
5. ``wake`` when the acks freed more slots than the claim took back, so idle workers of
   the fleet claim them.

Claims of unlimited queues never come here: they stay one statement, which reads the
control row it reads anyway for the pause and, for a limited queue, hands out nothing
and says so (the engine then comes here, and remembers the queue as limited until a
limited claim finds it unlimited again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ..._core import Job
    from .._protocol import Claim, Completion
    from . import _driver

#: The limited claim's first statement (a LOCK cannot be prepared, so it is not in
#: queries.sql): the jobs table in ROW EXCLUSIVE mode, which the claim's later
#: statements take anyway, taken before the control row's lock.
LIMIT_BARRIER_SQL: Final = "LOCK TABLE @schema@.jobs IN ROW EXCLUSIVE MODE"


async def claim(
    conn: _driver.Connection,
    queries: Mapping[str, str],
    barrier: str,
    queue: str,
    claims: Sequence[Claim] | Sequence[Completion],
    params: dict[str, object],
    job: Callable[[Sequence[Any]], Job],
    ack_name: str = "ack_claims",
) -> tuple[list[int], list[Job], bool]:
    """The limited claim, inside the caller's transaction: the ids acked, the jobs
    claimed, and whether the queue is still limited. ``params`` are the claim's (queue,
    worker_id, n, channel, and the ack arrays when ``claims`` is not empty); ``barrier``
    is :data:`LIMIT_BARRIER_SQL` rendered for the schema; ``ack_name`` is the acks'
    statement (Q19.1: ``complete_claims`` when ``params`` carry results)."""
    await conn.execute(barrier, [])
    rows = await conn.execute(queries["lock_limits"], {"queue": queue})
    limited = bool(rows and rows[0][0])
    statement = queries["claim_per_key" if rows and rows[0][1] else "claim_limited"]
    acked: list[int] = []
    if claims:
        acked = [row[0] for row in await conn.execute(queries[ack_name], params)]
    jobs = [job(row) for row in await conn.execute(statement, params)]
    if limited and len(acked) > len(jobs):
        await conn.execute(queries["wake"], params)
    return acked, jobs, limited


def due_in_s(row: Sequence[Any]) -> float | None:
    """Q18.9 (R11): the limits' columns of a ``next_due`` row as the seconds until a
    limit lets a job out (both the next token and a free slot, when both are needed), or
    ``None``."""
    waits = [float(value) for value in row if value is not None]
    return max(0.0, *waits) if waits else None
