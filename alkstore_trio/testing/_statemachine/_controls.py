"""Q18 steps of the engine-vs-model machine: pausing and resuming a queue, and setting
its limits (Q18.7-Q18.9, and Q18.8's per-key limit).

A paused queue's claims must agree with the model's, which hands out nothing (the
invariant "no claim returns a job of a paused queue" is the claim steps' agreement); the
step itself checks that the engine's stats show the same paused state as the model's.
Limits are part of the model's claim: every later claim, ack-and-claim and next-due read
of a limited queue must agree with the model's, which counts the live leases and the
tokens itself; the step checks the merged limits and the stats (limits, throttles).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import hypothesis.strategies as st

from ..._core import UNSET
from ..._core._limits import merged_limits, refills
from ._steps import _Step

if TYPE_CHECKING:
    from datetime import datetime

    from ._run import _Run

#: Resumes are drawn twice as often as pauses, so queues are paused a third of the time
#: and the other steps still meet open queues.
PAUSED_CHOICES = st.sampled_from((True, False, False))


@dataclass(frozen=True, repr=False)
class SetPaused(_Step):
    """``queue.pause()`` (``paused``) or ``queue.resume()`` (Q18)."""

    queue: str
    paused: bool = True


#: ``rate_per_s`` of a :class:`SetLimits` step that leaves the rate as it is.
KEEP: Final = "keep"

_MAX_RUNNING = st.sampled_from((None, 1, 2, 3))
_RATES = st.sampled_from((KEEP, KEEP, None, 0.5, 2.0, 4.0))
_BURSTS = st.sampled_from((None, None, 1, 2, 3))
_PER_KEY = st.sampled_from((KEEP, KEEP, None, 1, 2))


@dataclass(frozen=True, repr=False)
class SetLimits(_Step):
    """``queue.set_limits(max_running=..., rate_per_s=..., burst=...,
    max_running_per_key=...)`` (Q18.7-Q18.9): ``rate_per_s`` is :data:`KEEP` to leave
    the rate (and the burst) out; a burst is given only with a rate; ``max_running``
    and Q18.8's ``max_running_per_key`` are :data:`KEEP` to leave them out."""

    queue: str
    max_running: int | str | None = None
    rate_per_s: float | str | None = KEEP
    burst: int | None = None
    max_running_per_key: int | str | None = KEEP


def draw_control(draw: st.DrawFn, queue: str) -> _Step:
    """A pause or resume (most often), or new limits."""
    if draw(st.integers(0, 2)):
        return SetPaused(queue, paused=draw(PAUSED_CHOICES))
    rate = draw(_RATES)
    burst = draw(_BURSTS) if isinstance(rate, float) else None
    return SetLimits(
        queue,
        max_running=draw(_MAX_RUNNING),
        rate_per_s=rate,
        burst=burst,
        max_running_per_key=draw(_PER_KEY),
    )


def draw_per_key(draw: st.DrawFn, queue: str) -> _Step:
    """Q18.8: a per-key limit (most often a small one), the other limits kept."""
    per_key = draw(st.sampled_from((1, 1, 2, None)))
    return SetLimits(queue, max_running=KEEP, max_running_per_key=per_key)


async def apply_set_limits(run: _Run, step: SetLimits, now: datetime) -> object:
    """Q18.11: set the limits on both (the model merges them as the core does); the
    result and both stats of the queue agree."""
    from ._run import _agree  # _run imports this module: imported when used

    queue = run.queues[step.queue]
    kwargs: dict[str, Any] = {}
    if step.max_running != KEEP:
        kwargs["max_running"] = step.max_running
    if step.rate_per_s != KEEP:
        kwargs["rate_per_s"] = step.rate_per_s
        if step.burst is not None:
            kwargs["burst"] = step.burst
    if step.max_running_per_key != KEEP:
        kwargs["max_running_per_key"] = step.max_running_per_key
    got = await queue.set_limits(**kwargs)
    want = merged_limits(run.model.limits.get(queue.name), **kwargs)
    _agree(f"{step}: result", got, want)
    refill = refills(kwargs.get("rate_per_s", UNSET), kwargs.get("burst", UNSET))
    run.model.set_limits(queue.name, want, refill=refill, now=now)
    stats = await run.store.stats(queue.name)
    _agree(f"{step}: stats", stats, run.model.stats(queue.name, now=now))
    return got
