"""Q8 on PostgreSQL: reading one job back without holding a large payload several times.

Why. A job read in one result arrives as text: a bytea is hex, two characters a byte,
held by libpq's result while psycopg decodes it into the bytes of the Job. Reading back
a 100 MiB payload that way peaked at 6x its size in the client. So the reads of one job
(``get_job``, ``find_job``) ask for the results in binary format and send a payload of
more than :data:`PAYLOAD_SLICE_BYTES` apart: the row comes without it (its size in the
last column), and the payload follows in slices of that size, each a statement of its
own, written one after the other into one growing buffer. The peak is then about the
payload's size plus one slice.

The slices need no transaction: a job's payload never changes while its id exists (a
redrive moves the row whole and keeps its id), so slices read by separate statements
make up the payload the row had. A job that leaves meanwhile (acked, cancelled, purged)
has no row for a slice: the read then answers ``None``, as a read a moment later would.

Q19.1: a kept job's result comes the same way (``result_slice``): a kept row never
changes, and one purged between its row and a slice reads as gone.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any, Final

from ._rows import kept_job as _kept_job

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from ..._core import Job

    Execute = Callable[[str, dict[str, object]], Awaitable[list[tuple[Any, ...]]]]

#: A payload up to this size comes in the job's row; a larger one in slices of this size.
PAYLOAD_SLICE_BYTES: Final = 4 * 1024 * 1024


async def read_job(
    execute: Execute, query: str, slice_queries: tuple[str, str], params: dict[str, object]
) -> Job | None:
    """The job the read ``query`` (``get_job`` or ``find_job``) finds, its payload (and,
    Q19.1, a kept row's result) read in slices by ``slice_queries`` (``payload_slice``,
    ``result_slice``) when the row came without it; ``execute`` runs one statement with
    binary results. The row: the job fields, ``completed_at``, the result (or ``None``),
    the result's size, the payload's size, the progress text (Q19.7)."""
    rows = await execute(query, {**params, "inline_max": PAYLOAD_SLICE_BYTES})
    if not rows:
        return None
    row: Sequence[Any] = rows[0]
    job_id, result, result_size, payload_size = row[0], row[23], row[24], row[25]
    payload = row[2]
    if payload is None:
        payload = await _in_slices(execute, slice_queries[0], job_id, payload_size)
    if result is None and result_size is not None:
        result = await _in_slices(execute, slice_queries[1], job_id, result_size)
        if result is None:
            return None  # purged between the row and this slice
    if payload is None:
        return None
    return _kept_job((*row[:2], payload, *row[3:23], result, row[26]))


async def _in_slices(execute: Execute, slice_query: str, job_id: int, size: int) -> bytes | None:
    buffer = io.BytesIO()
    # Sized once, up front: growing by the slices made the buffer move (a copy of all
    # that was read so far) and left freed blocks behind; the peak varied from 1.3x to
    # 2.9x the payload. Writing the last byte first allocates it exactly.
    buffer.seek(size - 1)
    buffer.write(b"\0")
    buffer.seek(0)
    for start in range(1, size + 1, PAYLOAD_SLICE_BYTES):
        params: dict[str, object] = {"id": job_id, "start": start, "len": PAYLOAD_SLICE_BYTES}
        rows = await execute(slice_query, params)
        if not rows:
            return None  # the job left between the row and this slice
        buffer.write(rows[0][0])
    # getvalue() hands out the buffer's own bytes (trimmed in place, not copied).
    return buffer.getvalue()
