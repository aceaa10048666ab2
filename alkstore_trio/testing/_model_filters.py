"""D26.1 in the reference model: a filtered listing is the model's D26 listing cut by
:func:`~alkstore_trio._core._filters.filtered_page`, the rule in executable form."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core._filters import JobPage, filtered_page

if TYPE_CHECKING:
    from .._core import JobState
    from ._model import ReferenceModel


def model_find_jobs(
    model: ReferenceModel,
    queue: str,
    state: JobState,
    *,
    key: str | None = None,
    header: tuple[str, str] | None = None,
    limit: int = 100,
    after_id: int | None = None,
) -> JobPage:
    """D26.1: this queue's rows in ``state`` above ``after_id`` (every row the model's
    ``list_jobs`` lists), those matching ``key`` and ``header``, one bounded page."""
    rows = model.list_jobs(queue, state, limit=2**63, after_id=after_id)
    return filtered_page(rows, key, header, limit)
