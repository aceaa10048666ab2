"""Q17.10: ``store.delete_periodic`` deletes one schedule's row (its jobs stay), answers
whether there was one, refuses a bad name without effect, and a schedule still declared
comes back as a new row at its next call."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from ... import InvalidArgument, Periodic
from ._helpers import _check, _raises

if TYPE_CHECKING:
    from .._harness import EngineHarness


@_check
async def q17_10_delete_periodic_deletes_one_row_and_keeps_its_jobs(
    harness: EngineHarness,
) -> None:
    """Q17.10: True for the row deleted (the other row and the fired job stay), False for
    a name with no row."""
    gone, kept = Periodic("gone", "periodic", every_s=10), Periodic("kept", "periodic", every_s=10)
    async with harness.open_store() as store:
        await store.fire_periodic([gone, kept])
        await harness.advance(10)
        (fired, _) = (await store.fire_periodic([gone, kept])).fired
        assert await store.delete_periodic("gone") is True, "the row was not deleted"
        assert [row.name for row in await store.list_periodic()] == ["kept"]
        job = await store.queue("periodic").get_job(fired.job_id)
        assert job is not None, "deleting the row deleted the job it fired"
        assert await store.delete_periodic("gone") is False, "a second delete found a row"
        assert await store.delete_periodic("never") is False, "a missing row was deleted"


@_check
async def q17_10_a_schedule_still_declared_comes_back_as_a_new_row(
    harness: EngineHarness,
) -> None:
    """Q17.10/Q17.3: after the delete, the next call makes the row again: nothing owed,
    the next fire time one period after that call, last_fire_at empty."""
    every = Periodic("every", "periodic", every_s=10)
    async with harness.open_store() as store:
        await store.fire_periodic([every])
        await harness.advance(10)
        assert len((await store.fire_periodic([every])).fired) == 1
        assert await store.delete_periodic("every") is True
        await harness.advance(25)  # two fire times pass with no row
        now = await harness.now()
        tick = await store.fire_periodic([every])
        assert (tick.fired, tick.next_in_s) == ((), 10.0), tick
        (row,) = await store.list_periodic()
        assert (row.next_fire_at, row.last_fire_at) == (now + timedelta(seconds=10), None), row


@_check
async def q17_10_delete_periodic_rejects_a_bad_name_without_effect(
    harness: EngineHarness,
) -> None:
    """Q17.10/Q17.1: a name that is not 1-200 characters of storable text is
    InvalidArgument, and no row is deleted."""
    async with harness.open_store() as store:
        await store.fire_periodic([Periodic("p", "periodic", every_s=10)])
        for bad in ["", "x" * 201, "p\x00", "\ud800", None, 5]:
            await _raises(InvalidArgument, f"name={bad!r}", store.delete_periodic, bad)
        assert [row.name for row in await store.list_periodic()] == ["p"], "a row was deleted"
