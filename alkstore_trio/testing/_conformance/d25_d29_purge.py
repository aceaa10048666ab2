"""D25 and D29 (decisions where the contract is silent): ``queue.purge_dead`` and its dry
run; D25.1: purging dead jobs by id."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ... import InvalidArgument
from ._helpers import INSTANT_S, _any, _assert_gone, _assert_state, _check, _dead_job, _raises

if TYPE_CHECKING:
    from .._harness import EngineHarness


@_check
async def d25_purge_dead_deletes_dead_rows_older_than_the_limit(harness: EngineHarness) -> None:
    """D25: ``purge_dead(older_than_s)`` deletes this queue's dead rows with
    ``died_at + older_than_s < now`` (not at the instant, one instant later yes);
    ``purge_dead()`` deletes every one; live rows and other queues are untouched; a bad
    ``older_than_s`` raises InvalidArgument with no effect."""
    async with harness.open_store() as store:
        queue = store.queue("purge")
        other = store.queue("purge-other")
        old = await _dead_job(queue, b"old")
        theirs = await _dead_job(other, b"theirs")
        await harness.advance(10)
        young = await _dead_job(queue, b"young")
        live = await queue.enqueue(b"live")
        for bad in (-1, math.nan, "5", True):
            await _raises(InvalidArgument, f"purge_dead({bad!r})", queue.purge_dead, _any(bad))
        assert await queue.purge_dead(10) == 0, "purged at died_at + older_than_s == now"
        await harness.advance(INSTANT_S)
        assert await queue.purge_dead(10) == 1, "did not purge the row older than 10 s"
        await _assert_gone(queue, old, "a purged dead row")
        await _assert_state(queue, young, "dead", "a younger dead row")
        assert await queue.purge_dead() == 1, "purge_dead() did not purge the rest"
        await _assert_gone(queue, young, "a purged dead row")
        await _assert_state(queue, live, "pending", "a live row after purge_dead")
        await _assert_state(other, theirs, "dead", "another queue's dead row")


@_check
async def d29_purge_dead_dry_run_counts_what_purge_would_delete_and_deletes_nothing(
    harness: EngineHarness,
) -> None:
    """D29: ``purge_dead(older_than_s, dry_run=True)`` returns what the same purge would
    delete now (same boundary: not at ``died_at + older_than_s == now``), of this queue
    only, and deletes nothing; a non-bool ``dry_run`` raises InvalidArgument."""
    async with harness.open_store() as store:
        queue = store.queue("dry")
        other = store.queue("dry-other")
        old = await _dead_job(queue, b"old")
        await _dead_job(other, b"theirs")
        await harness.advance(10)
        young = await _dead_job(queue, b"young")
        await queue.enqueue(b"live")
        for bad in (1, "yes", None):
            await _raises(
                InvalidArgument,
                f"purge_dead(dry_run={bad!r})",
                queue.purge_dead,
                dry_run=_any(bad),
            )
        assert await queue.purge_dead(10, dry_run=True) == 0, "counted at the boundary"
        await harness.advance(INSTANT_S)
        for _ in range(2):  # a dry run changes nothing, so it can be repeated
            assert await queue.purge_dead(10, dry_run=True) == 1, "dry run miscounted"
            assert await queue.purge_dead(dry_run=True) == 2, "dry run of all miscounted"
        await _assert_state(queue, old, "dead", "a dead row after a dry run")
        await _assert_state(queue, young, "dead", "a dead row after a dry run")
        assert await queue.purge_dead(10) == 1, "the purge disagrees with its dry run"
        assert await queue.purge_dead(dry_run=True) == 1, "dry run after a purge"
        assert await other.purge_dead(dry_run=True) == 1, "another queue's count changed"


@_check
async def d25_1_purge_dead_by_ids_deletes_only_those_dead_rows(harness: EngineHarness) -> None:
    """D25.1: ``purge_dead(ids=[...])`` deletes only this queue's dead rows with those
    ids, and counts them; live rows, other queues' dead rows and unknown ids are ignored;
    with ``older_than_s`` both must hold; ``dry_run`` counts the same rows and deletes
    nothing; no ids deletes nothing; bad ids raise InvalidArgument with no effect."""
    async with harness.open_store() as store:
        queue = store.queue("purge-ids")
        other = store.queue("purge-ids-other")
        old = await _dead_job(queue, b"old")
        await harness.advance(10)
        first = await _dead_job(queue, b"first")
        second = await _dead_job(queue, b"second")
        kept = await _dead_job(queue, b"kept")
        theirs = await _dead_job(other, b"theirs")
        live = await queue.enqueue(b"live")
        unknown = max(old, first, second, kept, theirs, live) + 1000
        for bad in ([first, 2**63], [first, "1"], [True], 5, "12", [1.0]):
            await _raises(
                InvalidArgument, f"purge_dead(ids={bad!r})", queue.purge_dead, ids=_any(bad)
            )
        await _assert_state(queue, first, "dead", "a dead row after a refused purge")
        targets = [first, second, theirs, live, unknown]
        assert await queue.purge_dead(ids=targets, dry_run=True) == 2, "dry run miscounted"
        await _assert_state(queue, first, "dead", "a dead row after a dry run")
        assert await queue.purge_dead(ids=[]) == 0, "purge_dead(ids=[]) deleted something"
        assert await queue.purge_dead(ids=targets) == 2, "did not purge exactly the two"
        await _assert_gone(queue, first, "a purged dead row")
        await _assert_gone(queue, second, "a purged dead row")
        await _assert_state(queue, kept, "dead", "a dead row not named")
        await _assert_state(queue, live, "pending", "a live row named by id")
        await _assert_state(other, theirs, "dead", "another queue's dead row named by id")
        assert await queue.purge_dead(10, ids=[old, kept]) == 0, "purged at the instant"
        await harness.advance(INSTANT_S)
        assert await queue.purge_dead(10, ids=[old, kept]) == 1, "older_than_s ignored"
        await _assert_gone(queue, old, "a purged dead row")
        await _assert_state(queue, kept, "dead", "a younger dead row named by id")
