"""The jobs page's filters (issue 17, D26.1): queue, state, key and header, read from the
URL, one page read through ``Queue.find_jobs``, and the links that keep the filters.

An empty field filters nothing (a header filter needs its name; its value may be
empty). A header search stops after ``HEADER_SCAN_ROWS`` jobs: the page then says how
far it searched and links to go on from there. Nothing is counted.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final

from .._core import HEADER_SCAN_ROWS
from .._errors import InvalidArgument

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._core import Job, JobState
    from .._store import Queue

#: Jobs a page of the jobs list shows.
PAGE_SIZE: Final = 50


@dataclass(frozen=True)
class JobsFilter:
    """The filters of one jobs page, as the URL gave them."""

    queue: str
    state: JobState
    key: str
    header: str
    value: str

    @classmethod
    def of(cls, params: Mapping[str, str], queue: str, state: JobState) -> JobsFilter:
        return cls(
            queue, state, params.get("key", ""), params.get("header", ""), params.get("value", "")
        )

    #: D26.1: the most jobs one header search reads.
    scan_rows: ClassVar[int] = HEADER_SCAN_ROWS

    @property
    def filtered(self) -> bool:
        return bool(self.key or self.header)

    def href(self, root: str, after: int | None = None) -> str:
        """The jobs page with these filters (only those given), from ``after``."""
        query: dict[str, str | int] = {"queue": self.queue, "state": self.state}
        if self.key:
            query["key"] = self.key
        if self.header:
            query |= {"header": self.header, "value": self.value}
        if after is not None:
            query["after"] = after
        return f"{root}/jobs?{urllib.parse.urlencode(query)}"


@dataclass(frozen=True)
class JobsPage:
    """One page: its jobs, the next page's start (``None``: no more), and where a header
    search stopped (``None``: it was not cut)."""

    jobs: list[Job]
    next_after: int | None
    searched_to: int | None


async def read_page(queue: Queue, chosen: JobsFilter, after: int | None) -> JobsPage:
    """One more job than the page shows tells whether a next page exists (D26's walk)."""
    if chosen.value and not chosen.header:
        raise InvalidArgument("a header value needs the header's name (the Header field)")
    header = (chosen.header, chosen.value) if chosen.header else None
    page = await queue.find_jobs(
        chosen.state,
        key=chosen.key or None,
        header=header,
        limit=PAGE_SIZE + 1,
        after_id=after,
    )
    jobs = page.jobs[:PAGE_SIZE]
    more = len(page.jobs) > PAGE_SIZE
    return JobsPage(jobs, jobs[-1].id if more else None, page.searched_to_id)
