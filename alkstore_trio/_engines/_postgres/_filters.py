"""D26.1 on PostgreSQL: the filtered listings (``list_*_by_key``, ``list_*_by_header``
in queries.sql), their parameters and the page cut from their rows, as
:func:`~alkstore_trio._core._filters.filtered_page` cuts it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._core import _validate as v
from ..._core._filters import HEADER_SCAN_ROWS, JobPage
from . import _rows

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..._core import JobState

    Run = Callable[[str, dict[str, object]], Awaitable[list[tuple[Any, ...]]]]

#: The table each state is listed from: its statements are ``list_<table>_by_...``.
_TABLE = {"dead": "dead", "completed": "completed", "cancelled": "completed"}


async def find_jobs(
    run: Run,
    queue: str,
    state: JobState,
    limit: int,
    after_id: int | None,
    key: str | None,
    header: tuple[str, str] | None,
) -> JobPage:
    """D26.1: one statement, then the page: full at ``limit`` matches, cut when a
    header filter examined its whole window without filling it."""
    window = limit if header is None else HEADER_SCAN_ROWS
    name, value = (None, None) if header is None else header
    params: dict[str, object] = {
        "queue": queue,
        "state": state,
        # No id is below the int64 minimum: it stands for "from the first".
        "after_id": -v.JOB_ID_MAX - 1 if after_id is None else after_id,
        "limit": limit,
        "window": window,
        "key": key,
        "name": name,
        "value": value,
    }
    filtered_by = "key" if key is not None else "header"
    rows = await run(f"list_{_TABLE.get(state, 'live')}_by_{filtered_by}", params)
    jobs = [_rows.kept_job(row) for row in rows if row[0] is not None]
    examined, last_id = (int(rows[0][25]), rows[0][26]) if rows else (0, 0)
    if len(jobs) == limit:
        return JobPage(jobs, jobs[-1].id, None)
    if header is not None and examined == window:
        last = int(last_id)
        return JobPage(jobs, last, last)
    return JobPage(jobs, None, None)
