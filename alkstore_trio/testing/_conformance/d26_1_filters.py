"""D26.1: ``queue.find_jobs``, the listings filtered by key and by header: exact matches
only (adversarial values included), pages by id, a bounded header scan that says where
it stopped, and bad filters refused before any read."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import InvalidArgument, QueueOpts
from ..._core._filters import HEADER_SCAN_ROWS
from ._helpers import _any, _check, _claim_id, _dead_job, _get, _raises

if TYPE_CHECKING:
    from ... import JobPage, Queue
    from .._harness import EngineHarness

#: Values a naive filter would get wrong: SQL quotes, LIKE wildcards, backslashes, JSON
#: and regex syntax, unicode (no NUL: no engine stores one).
ADVERSARIAL = [
    "it's",
    'say "hi"',
    "100%",
    "a_b",
    "%",
    "_",
    "a\\b",
    "\\",
    '{"a": 1}',
    '"quoted"',
    "null",
    ".*",
    "x' OR '1'='1",
    "日本語 ✓ é",
    "e\u0301",
]


async def _all_pages(queue: Queue, state: str, limit: int, **filters: object) -> list[int]:
    """Every id the filtered listing gives, page after page, following ``next_after_id``."""
    ids: list[int] = []
    after: int | None = None
    for _ in range(1000):
        page: JobPage = await queue.find_jobs(
            _any(state), limit=limit, after_id=after, **_any(filters)
        )
        assert len(page.jobs) <= limit, f"{filters}: {len(page.jobs)} jobs for limit={limit}"
        got = [job.id for job in page.jobs]
        assert got == sorted(got), f"{filters}: ids {got} not ascending"
        assert all(after is None or i > after for i in got), f"{filters}: {got} <= {after}"
        ids += got
        if page.next_after_id is None:
            return ids
        after = page.next_after_id
    raise AssertionError(f"{filters}: the listing never ended")


@_check
async def d26_1_find_jobs_by_key_matches_either_key_exactly(harness: EngineHarness) -> None:
    """D26.1: ``find_jobs(state, key=k)`` lists this queue's rows in the state whose
    ``unique_key`` or ``concurrency_key`` equals ``k`` exactly (no pattern: ``%``, ``_``,
    quotes and backslashes are plain characters), ids ascending, paged by
    ``next_after_id``; other states and queues are not in it."""
    async with harness.open_store() as store:
        queue = store.queue("filtered", QueueOpts(keep_completed_s=600))
        other = store.queue("filtered-other")
        by_key: dict[str, list[int]] = {}
        for i, key in enumerate(ADVERSARIAL):
            unique = await queue.enqueue(b"u%d" % i, unique_key=key, priority=-1)
            grouped = await queue.enqueue_many(
                [b"c1", b"c2"], concurrency_keys=[key, key], priority=-1
            )
            by_key[key] = [unique, *grouped]
            await other.enqueue(b"theirs", unique_key=key)
        both = await queue.enqueue(b"both", unique_key="same", concurrency_key="same")
        for key, ids in by_key.items():
            listed = await _all_pages(queue, "pending", 2, key=key)
            assert listed == ids, f"key={key!r}: listed {listed}, expected {ids}"
        assert await _all_pages(queue, "pending", 5, key="same") == [both], "a row twice"
        for near in ("10", "a", "ab", "a-b", "'", "%%", "日本語", "e", "missing"):
            page = await queue.find_jobs("pending", key=near)
            assert page.jobs == [], f"key={near!r}: {page}"
            assert page.next_after_id is None, f"key={near!r}: {page}"
        first = (await queue.find_jobs("pending", key="100%", limit=1)).jobs[0]
        assert first == await _get(queue, first.id), "a filtered row differs from get_job"
        # The other states, each read from its own rows.
        held = await queue.enqueue(b"held", concurrency_key="k", priority=100)
        await _claim_id(queue, held)
        dead = await queue.enqueue(b"dead", unique_key="k", priority=100)
        assert await (await _claim_id(queue, dead)).fail("boom") is True
        kept = await queue.enqueue(b"kept", concurrency_key="k", priority=100)
        assert await (await _claim_id(queue, kept)).ack(b"result") is True
        await queue.enqueue(b"pending", unique_key="k")
        for state, want in (("processing", [held]), ("dead", [dead]), ("completed", [kept])):
            page = await queue.find_jobs(_any(state), key="k")
            got = [(job.id, job.state) for job in page.jobs]
            assert got == [(want[0], state)], f"{state}, key='k': {got}"
        kept_row = (await queue.find_jobs("completed", key="k")).jobs[0]
        assert kept_row.result == b"result", "the filtered kept row lost its result"
        assert (await queue.find_jobs("cancelled", key="k")).jobs == [], "cancelled listed"


@_check
async def d26_1_find_jobs_by_header_matches_one_value_exactly(harness: EngineHarness) -> None:
    """D26.1: ``find_jobs(state, header=(name, value))`` lists the rows whose header
    ``name`` is exactly ``value`` (an empty value matches only an empty value, never a
    missing header); with ``key`` too, both must match."""
    async with harness.open_store() as store:
        queue = store.queue("by-header")
        ids = {}
        for i, value in enumerate(ADVERSARIAL):
            ids[value] = await queue.enqueue(
                b"%d" % i, headers={"tenant": value, "it's": value}, concurrency_key=f"k{i % 2}"
            )
        empty = await queue.enqueue(b"empty", headers={"tenant": ""})
        await queue.enqueue(b"none")
        await _dead_job(queue, b"dead")
        for i, (value, job_id) in enumerate(ids.items()):
            for name in ("tenant", "it's"):
                page = await queue.find_jobs("pending", header=(name, value))
                got = [job.id for job in page.jobs]
                assert got == [job_id], f"header ({name!r}, {value!r}): {got}, want {job_id}"
                assert page.next_after_id is None, f"{page}"
                assert page.searched_to_id is None, f"{page}"
            both = await queue.find_jobs("pending", key=f"k{i % 2}", header=("tenant", value))
            assert [job.id for job in both.jobs] == [job_id], f"key and header {value!r}"
            other_key = await queue.find_jobs(
                "pending", key=f"k{1 - i % 2}", header=("tenant", value)
            )
            assert other_key.jobs == [], f"key and header {value!r} matched the other key"
        got = [job.id for job in (await queue.find_jobs("pending", header=("tenant", ""))).jobs]
        assert got == [empty], f"header ('tenant', ''): {got}"
        for name, value in (("Tenant", "%"), ("tenant", "10"), ("tenant", "a"), ("x", "")):
            page = await queue.find_jobs("pending", header=(name, value))
            assert page.jobs == [], f"header ({name!r}, {value!r}) matched {page.jobs!r}"
        assert (await queue.find_jobs("dead", header=("tenant", "%"))).jobs == []
        listed = await _all_pages(queue, "pending", 3, header=("it's", "a_b"))
        assert listed == [ids["a_b"]], f"paged header listing: {listed}"


@_check
async def d26_1_a_header_scan_stops_after_its_bound_and_says_where(
    harness: EngineHarness,
) -> None:
    """D26.1: a header filter examines at most ``HEADER_SCAN_ROWS`` rows a call; when it
    examined that many without filling the page, the page is short with
    ``searched_to_id`` = ``next_after_id`` = the last id examined, and the next call goes
    on from there. A full page ends at its last job; the end of the rows gives ``None``."""
    async with harness.open_store() as store:
        queue = store.queue("scan")
        ids: list[int] = []
        for _ in range(HEADER_SCAN_ROWS // 1000):
            ids += await queue.enqueue_many([b"x"] * 1000, headers={"kind": "common"})
        rare = await queue.enqueue(b"rare", headers={"kind": "rare"})
        first = await queue.find_jobs("pending", header=("kind", "rare"))
        assert first.jobs == [], f"found {len(first.jobs)} jobs in the first window"
        last = ids[HEADER_SCAN_ROWS - 1]
        assert (first.searched_to_id, first.next_after_id) == (last, last), f"{first[1:]}"
        second = await queue.find_jobs("pending", header=("kind", "rare"), after_id=last)
        assert [job.id for job in second.jobs] == [rare], f"continued: {second.jobs!r}"
        assert (second.next_after_id, second.searched_to_id) == (None, None), f"{second[1:]}"
        full = await queue.find_jobs("pending", header=("kind", "common"), limit=7)
        assert [job.id for job in full.jobs] == ids[:7], "a common header's first page"
        assert (full.next_after_id, full.searched_to_id) == (ids[6], None), f"{full[1:]}"
        keyed = await queue.enqueue(b"keyed", headers={"kind": "rare"}, concurrency_key="k")
        page = await queue.find_jobs("pending", key="k", header=("kind", "rare"))
        assert [job.id for job in page.jobs] == [keyed], "the key narrows the scan first"
        assert page.searched_to_id is None, "a key with one row was cut"


@_check
async def d26_1_bad_filters_raise_before_any_read(harness: EngineHarness) -> None:
    """D26.1: a key that is not a 1-256 character str (no NUL, no lone surrogate), a
    header that is not a ``(name, value)`` tuple of a 1-256 character name and a value
    of at most 16 KiB (neither with NUL or a lone surrogate), or a bad state, limit or
    after_id (as D26) raise InvalidArgument."""
    async with harness.open_store() as store:
        queue = store.queue("bad-filters")
        await queue.enqueue(b"x", unique_key="k", headers={"h": "v"})
        bad: list[tuple[str, dict[str, object]]] = [
            ("key=1", {"key": 1}),
            ("key=''", {"key": ""}),
            ("key=b'k'", {"key": b"k"}),
            ("key of 257", {"key": "k" * 257}),
            ("key with NUL", {"key": "k\x00"}),
            ("key with a lone surrogate", {"key": "\ud800"}),
            ("header='h=v'", {"header": "h=v"}),
            ("header=['h', 'v']", {"header": ["h", "v"]}),
            ("header=('h',)", {"header": ("h",)}),
            ("header=('h', 'v', 'w')", {"header": ("h", "v", "w")}),
            ("header=('', 'v')", {"header": ("", "v")}),
            ("header=(1, 'v')", {"header": (1, "v")}),
            ("header=('h', 1)", {"header": ("h", 1)}),
            ("header=('h', None)", {"header": ("h", None)}),
            ("header name of 257", {"header": ("h" * 257, "v")}),
            ("header value of 16 KiB + 1", {"header": ("h", "v" * 16385)}),
            ("header value with NUL", {"header": ("h", "v\x00")}),
            ("header name with NUL", {"header": ("h\x00", "v")}),
            ("header value with a lone surrogate", {"header": ("h", "\udc80")}),
            ("limit=0", {"key": "k", "limit": 0}),
            ("limit=1001", {"key": "k", "limit": 1001}),
            ("after_id='1'", {"key": "k", "after_id": "1"}),
        ]
        for what, kwargs in bad:
            await _raises(
                InvalidArgument, f"find_jobs({what})", queue.find_jobs, "pending", **kwargs
            )
        await _raises(InvalidArgument, "find_jobs(state='done')", queue.find_jobs, "done", key="k")
        page = await queue.find_jobs("pending", key="k", header=("h", "v" * 1))
        assert len(page.jobs) == 1, "the store changed after the refused calls"
