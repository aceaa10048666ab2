"""Q15 on PostgreSQL: the enqueue of jobs with a unique key.

Keyless enqueues never come here: they stay one autocommit statement (``enqueue_one``,
``enqueue_many``). A call with at least one key runs as one transaction (the caller's,
for ``tx.enqueue``):

1. ``lock_unique_keys`` takes a transaction-level advisory lock per (schema, queue, key),
   in hash order, held until the commit. Two enqueues of one key are serialized by it,
   whether they come from tasks, processes or transactions.
2. One ``enqueue_unique`` statement per keyed job (keyless runs in between take the usual
   statements). Its snapshot is taken after the lock, so it sees every job and window
   the key's previous holders committed: a live job with the key, or an open
   ``unique_for_s`` window, makes it create nothing and return that id.

Why a lock rather than ``INSERT … ON CONFLICT`` alone: the partial unique index
``jobs_unique_key_idx`` makes a second live row impossible (it is the guarantee, and it
also stops a redrive), but a statement whose insert waited for a concurrent transaction's
row cannot read that row (its snapshot predates the commit), and the window's check and
write would race the same way. Under the lock both are exact, at the price of a
transaction for keyed enqueues only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ..._core import Enqueued
from ..._errors import EngineError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..._core import EnqueueSpec
    from . import _driver
    from ._backend import PostgresEngine

#: How many times ``enqueue_unique`` runs again after a redrive won the race to the index.
_ATTEMPTS: Final = 100


def has_keys(specs: Sequence[EnqueueSpec]) -> bool:
    """Whether any spec has a unique key (the keyed path is needed)."""
    return any(spec.unique_key is not None for spec in specs)


async def enqueue_keyed(
    engine: PostgresEngine, conn: _driver.Connection, specs: Sequence[EnqueueSpec]
) -> list[Enqueued]:
    """Q2/Q15: enqueue ``specs`` (some keyed) in the transaction open on ``conn``."""
    schema = engine.schema
    locks = sorted(
        {f"{schema}/{spec.queue}/{spec.unique_key}" for spec in specs if spec.unique_key}
    )
    await conn.execute(engine._q["lock_unique_keys"], {"locks": locks})
    out: list[Enqueued] = []
    for group in _runs(specs):
        first = group[0]
        if first.unique_key is None:
            rows = await conn.execute(*engine._enqueue_statement(group))
            out.extend(Enqueued(row[0]) for row in rows)
        else:
            out.append(await _enqueue_one_keyed(engine, conn, first))
    return out


async def _enqueue_one_keyed(
    engine: PostgresEngine, conn: _driver.Connection, spec: EnqueueSpec
) -> Enqueued:
    _, params = engine._enqueue_statement([spec])
    params["unique_key"] = spec.unique_key
    params["unique_for_s"] = spec.unique_for_s
    statement = engine._q["enqueue_unique"]
    for _ in range(_ATTEMPTS):
        rows: list[tuple[Any, ...]] = await conn.execute(statement, params)
        if rows:
            ((job_id, created),) = rows
            return Enqueued(job_id) if created else Enqueued.existing(job_id)
    raise EngineError("enqueue with a unique_key kept losing the key to redrives; retry it")


def _runs(specs: Sequence[EnqueueSpec]) -> list[list[EnqueueSpec]]:
    """Each keyed spec alone, in order, with the keyless specs between them in runs that
    share their options (one statement each, as the keyless path groups them)."""
    from ._params import _same_options

    runs: list[list[EnqueueSpec]] = []
    for spec in specs:
        previous = runs[-1][0] if runs else None
        if (
            previous is not None
            and spec.unique_key is None
            and previous.unique_key is None
            and _same_options(previous, spec)
        ):
            runs[-1].append(spec)
        else:
            runs.append([spec])
    return runs
