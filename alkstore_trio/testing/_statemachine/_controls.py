"""Q18 steps of the engine-vs-model machine: pausing and resuming a queue.

A paused queue's claims must agree with the model's, which hands out nothing (the
invariant "no claim returns a job of a paused queue" is the claim steps' agreement); the
step itself checks that the engine's stats show the same paused state as the model's.
"""

from __future__ import annotations

from dataclasses import dataclass

import hypothesis.strategies as st

from ._steps import _Step

#: Resumes are drawn twice as often as pauses, so queues are paused a third of the time
#: and the other steps still meet open queues.
PAUSED_CHOICES = st.sampled_from((True, False, False))


@dataclass(frozen=True, repr=False)
class SetPaused(_Step):
    """``queue.pause()`` (``paused``) or ``queue.resume()`` (Q18)."""

    queue: str
    paused: bool = True
