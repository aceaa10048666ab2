"""Q18.7-Q18.11 in memory: each limited queue's limits, token bucket and throttle counts.

The table asks :class:`LimitBook` what a claim may hand out (:meth:`LimitBook.allowance`)
and tells it what the claim did (:meth:`LimitBook.claimed`), inside the claim's one
transition, so the limits hold across every task of the store as PostgreSQL's hold
across the fleet. The arithmetic is the core's (``_core._limits``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._core import NO_LIMITS, QueueLimits, Throttled
from ..._core import _limits as lim

if TYPE_CHECKING:
    from datetime import datetime


class _State:
    __slots__ = ("limits", "per_key", "rate", "refilled_at", "running", "tokens")

    def __init__(self, limits: QueueLimits, now: datetime) -> None:
        self.limits = limits
        self.tokens = float(limits.burst or 0)
        self.refilled_at = now
        self.running = 0
        self.rate = 0
        self.per_key = 0


class LimitBook:
    """The limits of every queue of one in-memory store, for the store's life."""

    def __init__(self) -> None:
        self._queues: dict[str, _State] = {}

    def set(self, queue: str, limits: QueueLimits, refill: bool, now: datetime) -> None:
        """Q18.11: the queue's new limits; ``refill`` starts its bucket full (Q18.9)."""
        state = self._queues.get(queue)
        if state is None:
            self._queues[queue] = _State(limits, now)
            return
        if limits.rate_per_s is not None and state.limits.rate_per_s is not None and not refill:
            state.tokens = self._tokens(state, now)
        else:
            state.tokens = float(limits.burst or 0)
        state.limits = limits
        state.refilled_at = now

    def get(self, queue: str) -> QueueLimits:
        state = self._queues.get(queue)
        return NO_LIMITS if state is None else state.limits

    def limited(self, queue: str) -> bool:
        state = self._queues.get(queue)
        return state is not None and state.limits.limited

    def listed(self) -> list[str]:
        """Q18.10: the queues that have limits (stats lists them)."""
        return [name for name, state in self._queues.items() if state.limits.limited]

    def stats(self, queue: str) -> tuple[QueueLimits | None, Throttled]:
        """The queue's limits (``None``: none) and throttle counts, for QueueStats."""
        state = self._queues.get(queue)
        if state is None:
            return None, lim.NOT_THROTTLED
        limits = state.limits if state.limits.limited else None
        return limits, Throttled(running=state.running, rate=state.rate, per_key=state.per_key)

    def _tokens(self, state: _State, now: datetime) -> float:
        return lim.tokens_at(state.limits, state.tokens, state.refilled_at, now)

    def _bucket(self, state: _State, now: datetime) -> float | None:
        return None if state.limits.rate_per_s is None else self._tokens(state, now)

    def allowance(self, queue: str, live: int, n: int, now: datetime) -> int:
        """Q18.7/Q18.9: how many of ``n`` a claim of this limited queue may hand out
        with ``live`` unexpired leases."""
        state = self._queues[queue]
        return lim.allowance(state.limits, live, self._bucket(state, now), n)

    def claimed(
        self, queue: str, live: int, n: int, found: int, taken: int, now: datetime, held: bool
    ) -> None:
        """A claim of ``n`` found ``found`` claimable rows (up to one past its
        allowance; Q18.8: those its keys' slots let it take) and handed out ``taken``,
        ``held`` jobs back by their keys' limit: take their tokens, count the throttles."""
        state = self._queues[queue]
        tokens = self._bucket(state, now)
        running, rate = lim.throttled_by(state.limits, live, tokens, n, found)
        state.running += running
        state.rate += rate
        allowed = lim.allowance(state.limits, live, tokens, n)
        state.per_key += lim.per_key_throttled(held, found, allowed)
        if tokens is not None:
            state.tokens = tokens - taken
            state.refilled_at = now

    def due_in_s(
        self,
        queue: str,
        live: int,
        lease_s: float | None,
        now: datetime,
        key_lease_s: float | None = None,
    ) -> float | None:
        """Q18.9/R11: for a limited queue with claimable jobs, how long until a claim
        can hand one out: the next token when the bucket is empty, the earliest lease's
        expiry (``lease_s``) when every slot is taken, Q18.8's ``key_lease_s`` when every
        ready job's key is full; ``None`` when one could now."""
        state = self._queues[queue]
        limits = state.limits
        waits: list[float] = []
        tokens = self._bucket(state, now)
        if tokens is not None and tokens < 1:
            waits.append(lim.seconds_to_token(limits, tokens))
        if limits.max_running is not None and live >= limits.max_running and lease_s is not None:
            waits.append(lease_s)
        if key_lease_s is not None:
            waits.append(key_lease_s)
        return max(waits) if waits else None
