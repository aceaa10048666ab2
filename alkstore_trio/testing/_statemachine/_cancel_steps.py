"""Q19.5's steps of the engine-vs-model machine (``cancel`` itself is a row step):
``queue.settle_cancelled(handles)`` over handles of one queue, consumed or not, and
``queue.cancelling_among(ids)``, with how they are drawn and applied."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import hypothesis.strategies as st

from ._steps import _Step

if TYPE_CHECKING:
    from datetime import datetime

    from ..._core import Job
    from ._run import _Run


@dataclass(frozen=True, repr=False)
class SettleCancelled(_Step):
    """``queue.settle_cancelled(handles)`` over distinct handles (one per job) of that
    queue, consumed or not: the holder of a cancelled claim stopped."""

    queue: str
    handles: tuple[str, ...] = ()


@dataclass(frozen=True, repr=False)
class CancellingAmong(_Step):
    """``queue.cancelling_among(ids)``."""

    queue: str
    ids: tuple[int, ...] = ()


def draw_q19_5_step(draw: st.DrawFn, run: _Run, queue: str) -> _Step:
    """A settle over handles of the queue (most often), or a cancelling_among read."""
    name = run.queues[queue].name
    read: bool = draw(st.booleans())
    if read:
        ids = [job.id for job in run.model.jobs() if job.queue == name]
        pool = st.sampled_from([*ids, *run._id_pool()])
        return CancellingAmong(queue, tuple(draw(pool) for _ in range(draw(st.integers(0, 3)))))
    slots = run.slots
    mine = [s.label for s in slots.values() if not s.crashed and s.handle.job.queue == name]
    chosen: list[str] = (
        draw(st.lists(st.sampled_from(mine), unique_by=lambda label: slots[label].handle.id))
        if mine
        else []
    )
    return SettleCancelled(queue, tuple(chosen))


def _agree(what: str, engine: object, model: object) -> None:
    from ._run import _agree as agree  # _run imports this module: imported when used

    agree(what, engine, model)


def _token(job: Job) -> int:
    from ._run import _token as token  # as _agree

    return token(job)


async def apply_settle_cancelled(run: _Run, step: SettleCancelled, now: datetime) -> object:
    queue = run.queues[step.queue]
    slots = [run.slots[label] for label in step.handles]
    for slot in slots:
        slot.consumed = True
    got = await queue.settle_cancelled([slot.handle for slot in slots])
    claims = [(slot.handle.job.id, _token(slot.handle.job)) for slot in slots]
    settled = run.model.settle_cancelled(queue.name, claims, now=now)
    _agree(f"{step}: results", got, [job_id in settled for job_id, _ in claims])
    return got


async def apply_cancelling_among(run: _Run, step: CancellingAmong, now: datetime) -> object:
    del now
    queue = run.queues[step.queue]
    got = await queue.cancelling_among(list(step.ids))
    _agree(f"{step}: result", got, run.model.cancelling_among(queue.name, step.ids))
    return got
