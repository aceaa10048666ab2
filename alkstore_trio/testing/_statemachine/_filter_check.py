"""D26.1 in the state machine: at each inspection, the engine's filtered listings agree
with the model's, page after page, for keys and headers the queue's rows carry (and a
key no row has)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .._model_filters import model_find_jobs

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..._core import JobState
    from ..._store import Queue
    from .._model import ReferenceModel

#: How many distinct keys and header pairs of a state's rows are listed by each.
_FILTERS_PER_STATE: Final = 3


async def agree_on_filters(
    queue: Queue,
    model: ReferenceModel,
    state: JobState,
    limit: int,
    what: str,
    agree: Callable[[str, object, object], None],
) -> None:
    """Walk ``find_jobs`` for some keys and headers of ``state``'s rows, on both."""
    rows = model.list_jobs(queue.name, state, limit=2**63)
    keys = {k for job in rows for k in (job.unique_key, job.concurrency_key) if k is not None}
    pairs = {pair for job in rows for pair in job.headers.items()}
    filters: list[tuple[str | None, tuple[str, str] | None]] = [("no such key", None)]
    filters += [(key, None) for key in sorted(keys)[:_FILTERS_PER_STATE]]
    filters += [(None, pair) for pair in sorted(pairs)[:_FILTERS_PER_STATE]]
    for key, header in filters:
        after: int | None = None
        for _ in range(len(rows) + 2):
            page = await queue.find_jobs(state, key=key, header=header, limit=limit, after_id=after)
            want = model_find_jobs(
                model, queue.name, state, key=key, header=header, limit=limit, after_id=after
            )
            agree(f"{what}: find_jobs({state!r}, after_id={after})", page, want)
            if page.next_after_id is None:
                break
            after = page.next_after_id
