"""D26.1: filtered job listings, by key and by header, a bounded page at a time.

The rule in executable form: the checks of ``Queue.find_jobs``'s filters, the page it
returns (:class:`JobPage`) and :func:`filtered_page`, which cuts one page out of the
candidate rows in id order. The in-memory engine and the reference model both call it;
the PostgreSQL statements (``list_*_by_key``, ``list_*_by_header`` in queries.sql) are
checked against it by the conformance suite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, NamedTuple

from .._errors import InvalidArgument
from . import _validate as v

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._records import Job

#: D26.1: the most rows one header-filtered request examines (after the key filter, if
#: any). When a request examined this many rows without filling its page, the page says
#: where it stopped (:attr:`JobPage.searched_to_id`) and the caller goes on from there.
HEADER_SCAN_ROWS: Final = 10_000


class JobPage(NamedTuple):
    """One page of :meth:`Queue.find_jobs` (D26.1).

    Attributes:
        jobs: The matching jobs, ids ascending, at most ``limit`` of them.
        next_after_id: Where the next page starts: pass it as ``after_id``. ``None``
            when this request saw the end of the listing (there is nothing more).
        searched_to_id: Set only when a header filter stopped at its bound
            (:data:`HEADER_SCAN_ROWS` rows examined) before the page was full: the last
            id examined (equal to ``next_after_id``). Rows above it are not searched
            yet, so a short page does not mean the end.
    """

    jobs: list[Job]
    next_after_id: int | None
    searched_to_id: int | None


def check_key(value: object) -> str | None:
    """D26.1: ``key`` is ``None`` or a key as Q15 and Q18.8 check them (1-256 characters,
    no NUL, no lone surrogate); the message never shows it."""
    return None if value is None else v.check_unique_key(value, "key")


def check_header(value: object) -> tuple[str, str] | None:
    """D26.1: ``header`` is ``None`` or a ``(name, value)`` pair of str: a name as D30
    checks header names (1-256 characters), a value as D30 checks header values (empty
    allowed, at most the 16 KiB of all headers, no NUL, no lone surrogate). The message
    never shows the value."""
    if value is None:
        return None
    if not isinstance(value, tuple) or len(value) != 2:
        shown = f"a {len(value)}-tuple" if isinstance(value, tuple) else f"a {type(value).__name__}"
        raise InvalidArgument(f"header must be a (name, value) tuple of str or None; got {shown}")
    name, text = value
    if not isinstance(name, str) or not name:
        raise InvalidArgument("header name must be a non-empty str")
    v._check_storable("header name", name, max_chars=v.HEADER_NAME_MAX_CHARS)
    if not isinstance(text, str):
        raise InvalidArgument(f"header value must be a str; got a {type(text).__name__}")
    if len(text.encode("utf-8", "surrogatepass")) > v.HEADERS_MAX_BYTES:
        raise InvalidArgument(f"header value must be at most {v.HEADERS_MAX_BYTES} bytes (UTF-8)")
    v._check_storable("header value", text, max_chars=None, echo=False)
    return name, text


def matches_key(job: Job, key: str) -> bool:
    """D26.1: exact equality with the job's unique key (Q15) or concurrency key (Q18.8)."""
    return job.unique_key == key or job.concurrency_key == key


def filtered_page(
    rows: Iterable[Job], key: str | None, header: tuple[str, str] | None, limit: int
) -> JobPage:
    """D26.1: the page out of ``rows`` (the queue's rows in the state above ``after_id``,
    ids ascending): the first ``limit`` rows matching ``key`` and ``header``, where a
    header filter examines at most :data:`HEADER_SCAN_ROWS` of the rows that match
    ``key``."""
    found: list[Job] = []
    examined = 0
    for job in rows:
        if key is not None and not matches_key(job, key):
            continue
        examined += 1
        if header is None or job.headers.get(header[0]) == header[1]:
            found.append(job)
            if len(found) == limit:
                return JobPage(found, job.id, None)
        if header is not None and examined == HEADER_SCAN_ROWS:
            return JobPage(found, job.id, job.id)
    return JobPage(found, None, None)
