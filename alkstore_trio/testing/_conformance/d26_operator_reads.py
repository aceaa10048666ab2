"""D26 (a decision where the contract is silent): the operator's reads, ``store.get_job``
by id alone and ``queue.list_jobs`` page by page."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import InvalidArgument, Job
from ._helpers import _any, _assert_utc, _check, _claim_id, _dead_job, _get, _raises

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._harness import EngineHarness


@_check
async def d26_store_get_job_finds_a_row_by_id_in_any_queue(harness: EngineHarness) -> None:
    """D26: ``store.get_job(id)`` returns the row with this id, live or dead, whatever its
    queue (exactly what ``queue.get_job`` of its queue shows), or ``None``; a bad id
    raises InvalidArgument."""
    async with harness.open_store() as store:
        first = store.queue("find-a")
        second = store.queue("find-b")
        live = await first.enqueue(b"live")
        dead = await _dead_job(second, b"dead")
        for queue, job_id in ((first, live), (second, dead)):
            found = await store.get_job(job_id)
            assert found == await queue.get_job(job_id), (
                f"store.get_job({job_id}) = {found!r} differs from {queue.name}.get_job"
            )
            assert found is not None
            _assert_utc(found, f"store.get_job({job_id})")
        assert await store.get_job(10**15) is None, "store.get_job of an unknown id"
        for bad in ("1", 2**63, True, 1.0):
            await _raises(InvalidArgument, f"store.get_job({bad!r})", store.get_job, _any(bad))


@_check
async def d26_list_jobs_pages_through_one_state_by_id(harness: EngineHarness) -> None:
    """D26: ``queue.list_jobs(state, limit=, after_id=)`` returns this queue's rows in
    that state with ids above ``after_id``, ids ascending, at most ``limit``; bad
    arguments raise InvalidArgument."""
    async with harness.open_store() as store:
        queue = store.queue("listing")
        other = store.queue("listing-other")
        pending = await queue.enqueue_many([b"p1", b"p2", b"p3"], priority=-1)
        await other.enqueue(b"theirs")
        held = await queue.enqueue(b"held", priority=5)
        await _claim_id(queue, held)
        dead = await _dead_job(queue, b"dead")
        page = await queue.list_jobs("pending", limit=2)
        assert [job.id for job in page] == pending[:2], f"first page: {[j.id for j in page]}"
        page = await queue.list_jobs("pending", limit=2, after_id=page[-1].id)
        assert [job.id for job in page] == pending[2:], f"second page: {[j.id for j in page]}"
        assert page[0] == await _get(queue, pending[2]), "a listed row differs from get_job"
        listed = [job.id for job in await queue.list_jobs("processing")]
        assert listed == [held], f"processing rows listed: {listed}"
        dead_rows = await queue.list_jobs("dead")
        assert [(j.id, j.state) for j in dead_rows] == [(dead, "dead")], f"dead: {dead_rows!r}"
        bad: list[tuple[str, Callable[[], Awaitable[list[Job]]]]] = [
            ("state='done'", lambda: queue.list_jobs(_any("done"))),
            ("state=None", lambda: queue.list_jobs(_any(None))),
            ("limit=0", lambda: queue.list_jobs("dead", limit=0)),
            ("limit=1001", lambda: queue.list_jobs("dead", limit=1001)),
            ("limit=True", lambda: queue.list_jobs("dead", limit=_any(True))),
            ("after_id='1'", lambda: queue.list_jobs("dead", after_id=_any("1"))),
        ]
        for what, call in bad:
            await _raises(InvalidArgument, f"list_jobs({what})", call)
