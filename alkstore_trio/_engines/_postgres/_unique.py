"""Q15 on PostgreSQL: the enqueue of jobs with a unique key.

Keyless enqueues never come here: they stay one autocommit statement (``enqueue_one``,
``enqueue_many``). A call with at least one key runs as one transaction (the caller's,
for ``tx.enqueue``, or a producer's, :mod:`._producer`):

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

from typing import TYPE_CHECKING, Final

from ..._core import Enqueued
from ..._errors import EngineError
from . import _enqueue

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ..._core import EnqueueSpec
    from ._enqueue import Steps

#: How many times ``enqueue_unique`` runs again after a redrive won the race to the index.
_ATTEMPTS: Final = 100


def has_keys(specs: Sequence[EnqueueSpec]) -> bool:
    """Whether any spec has a unique key (the keyed path is needed)."""
    return any(spec.unique_key is not None for spec in specs)


def lock_texts(schema: str, specs: Sequence[EnqueueSpec]) -> list[str]:
    """The advisory lock texts of the keyed specs: ``schema/queue/key``, the text the
    schema's ``enqueue`` function (migration 10) locks too, so both serialize."""
    return sorted({f"{schema}/{spec.queue}/{spec.unique_key}" for spec in specs if spec.unique_key})


def keyed_steps(
    queries: Mapping[str, str], channel: Callable[[str], str], schema: str,
    specs: Sequence[EnqueueSpec],
) -> Steps[list[Enqueued]]:  # fmt: skip
    """Q2/Q15: enqueue ``specs`` (some keyed) in the transaction open on the connection
    that runs the steps (see :mod:`._enqueue`)."""
    yield queries["lock_unique_keys"], {"locks": lock_texts(schema, specs)}
    out: list[Enqueued] = []
    for group in _runs(specs):
        first = group[0]
        if first.unique_key is None:
            rows = yield _enqueue.statement(queries, channel, group)
            out.extend(Enqueued(row[0]) for row in rows)
        else:
            out.append((yield from _one_keyed(queries, channel, first)))
    return out


def _one_keyed(
    queries: Mapping[str, str], channel: Callable[[str], str], spec: EnqueueSpec
) -> Steps[Enqueued]:
    _, params = _enqueue.statement(queries, channel, [spec])
    params["unique_key"] = spec.unique_key
    params["unique_for_s"] = spec.unique_for_s
    statement = queries["enqueue_unique"]
    for _ in range(_ATTEMPTS):
        rows = yield statement, params
        if rows:
            ((job_id, created),) = rows
            return Enqueued(job_id) if created else Enqueued.existing(job_id)
    raise EngineError("enqueue with a unique_key kept losing the key to redrives; retry it")


def _runs(specs: Sequence[EnqueueSpec]) -> list[list[EnqueueSpec]]:
    """Each keyed spec alone, in order, with the keyless specs between them in runs that
    share their options (one statement each, as the keyless path groups them)."""
    runs: list[list[EnqueueSpec]] = []
    for spec in specs:
        previous = runs[-1][0] if runs else None
        if (
            previous is not None
            and spec.unique_key is None
            and previous.unique_key is None
            and _enqueue.same_options(previous, spec)
        ):
            runs[-1].append(spec)
        else:
            runs.append([spec])
    return runs
