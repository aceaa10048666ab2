"""Q19.4 in the engine-vs-model machine: ``queue.wait`` agrees with the model on which
jobs are final. The model's final states are written here, apart from the library's
(``alkstore_trio._core.FINAL_STATES``), so that the two are compared, not shared. For each
id the model reads as final in a queue, the engine's wait returns at once with the
model's row; for each id the model has no row of in that queue, it raises ``JobGone``;
for a few ids the model reads as live, it has not returned once every task is blocked
(it is then cancelled: a wait is a pure read, so nothing else is to be compared)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import trio
import trio.testing

from ..._errors import JobGone

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ..._core import Job
    from ..._store import Queue

#: The model's final states (Q19.4): its rows in these states never change again.
MODEL_FINAL_STATES: Final = frozenset({"completed", "cancelled", "dead"})
#: Real seconds a wait for a job the model says is final may take: it needs one read.
_FINAL_WAIT_S: Final = 10.0
#: How many live jobs' waits an inspection tries (each costs a short real-time pause).
_LIVE_WAITS: Final = 3


async def agree_on_waits(
    queue: Queue,
    model_job: Callable[[int], Job | None],
    ids: Iterable[int],
    what: str,
    agree: Callable[[str, object, object], None],
) -> None:
    """Wait on the jobs of ``queue`` with these ids (see the module docstring)."""
    live = 0
    for job_id in ids:
        want = model_job(job_id)
        label = f"{what}: wait({queue.name!r}, {job_id})"
        if want is not None and want.state not in MODEL_FINAL_STATES:
            if live < _LIVE_WAITS:
                live += 1
                agree(label, await _returned_early(queue, job_id), None)
            continue
        got: Job | str
        with trio.move_on_after(_FINAL_WAIT_S) as scope:
            try:
                got = await queue.wait(job_id, poll_interval_s=3600)
            except JobGone:
                got = "JobGone"
        if scope.cancelled_caught:
            got = f"no return within {_FINAL_WAIT_S:g} s"
        agree(label, got, "JobGone" if want is None else want)


async def _returned_early(queue: Queue, job_id: int) -> Job | str | None:
    """What a wait on a live job returned before every task was blocked (``None``:
    nothing, as it should)."""
    got: list[Job | str] = []

    async def waiter() -> None:
        try:
            got.append(await queue.wait(job_id, poll_interval_s=3600))
        except JobGone:
            got.append("JobGone")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked(0.002)
        nursery.cancel_scope.cancel()
    return got[0] if got else None
