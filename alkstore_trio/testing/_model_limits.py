"""The reference model's queue limits (Q18.7-Q18.11), as plainly as the rules read.

Each limited queue keeps its :class:`~alkstore_trio.QueueLimits`, its token bucket
(tokens at ``refilled_at``) and its throttle counts. The model's claim asks
:meth:`ModelLimits.take` how many of its sorted candidates it may hand out; the arithmetic
is the core's (``_core._limits``), the counting of live leases the model's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from .._core import NO_LIMITS, QueueLimits, Throttled
from .._core import _limits as lim

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from datetime import datetime

    from .._core import Job

_J = TypeVar("_J", bound="Job")

# Q18.7/Q18.8: the states whose unexpired lease holds a slot of a limited queue (a
# cancelled handler holds its slot until it stopped, Q19.5).
HOLDING = frozenset({"processing", "cancelling"})


class _Bucket:
    def __init__(self, limits: QueueLimits, now: datetime) -> None:
        self.limits = limits
        self.tokens = float(limits.burst or 0)
        self.refilled_at = now
        self.throttled = Throttled()


class ModelLimits:
    """Every queue's limits in the model."""

    def __init__(self) -> None:
        self._buckets: dict[str, _Bucket] = {}

    def update(self, queue: str, limits: QueueLimits, refill: bool, now: datetime) -> None:
        """Q18.11: new limits; the bucket starts full when ``refill`` or it had no rate,
        else keeps its tokens (refilled to now at the old rate)."""
        bucket = self._buckets.get(queue)
        if bucket is None:
            self._buckets[queue] = _Bucket(limits, now)
            return
        tokens = self._tokens(bucket, now)
        bucket.tokens = float(limits.burst or 0) if refill or tokens is None else tokens
        if limits.burst is not None:
            bucket.tokens = min(bucket.tokens, float(limits.burst))
        bucket.limits = limits
        bucket.refilled_at = now

    def get(self, queue: str) -> QueueLimits:
        bucket = self._buckets.get(queue)
        return NO_LIMITS if bucket is None else bucket.limits

    def limited_queues(self) -> set[str]:
        return {name for name, bucket in self._buckets.items() if bucket.limits.limited}

    def stats(self, queue: str) -> tuple[QueueLimits | None, Throttled]:
        bucket = self._buckets.get(queue)
        if bucket is None:
            return None, Throttled()
        return (bucket.limits if bucket.limits.limited else None), bucket.throttled

    @staticmethod
    def _tokens(bucket: _Bucket, now: datetime) -> float | None:
        if bucket.limits.rate_per_s is None:
            return None
        return lim.tokens_at(bucket.limits, bucket.tokens, bucket.refilled_at, now)

    def pick(
        self, queue: str, candidates: Sequence[_J], by_key: Mapping[str, Sequence[datetime]]
    ) -> list[_J]:
        """Q18.8: the candidates (in claim order) the keys' free slots let a claim take
        (``by_key``: each key's live leases)."""
        live = {key: len(leases) for key, leases in by_key.items()}
        return lim.per_key_pick(self.get(queue), candidates, lambda job: job.concurrency_key, live)

    def take(
        self, queue: str, live: int, n: int, found: int, now: datetime, held: bool = False
    ) -> int:
        """Q18.7/Q18.9/Q18.10: a claim of ``n`` found ``found`` candidates (Q18.8: the
        ones its keys let it take; ``held``: some were held back) with ``live``
        unexpired leases: how many it hands out; their tokens are taken and the
        throttles counted."""
        bucket = self._buckets.get(queue)
        if bucket is None or not bucket.limits.limited:
            return min(n, found)
        tokens = self._tokens(bucket, now)
        taken = min(found, lim.allowance(bucket.limits, live, tokens, n))
        running, rate = lim.throttled_by(bucket.limits, live, tokens, n, found)
        allowed = lim.allowance(bucket.limits, live, tokens, n)
        per_key = lim.per_key_throttled(held, found, allowed)
        old = bucket.throttled
        bucket.throttled = Throttled(
            running=old.running + running, rate=old.rate + rate, per_key=old.per_key + per_key
        )
        if tokens is not None:
            bucket.tokens = tokens - taken
            bucket.refilled_at = now
        return taken

    def key_wait_s(
        self,
        queue: str,
        ready_keys: Sequence[str | None],
        by_key: Mapping[str, Sequence[datetime]],
        now: datetime,
    ) -> float | None:
        """Q18.8: when there are ready jobs (``ready_keys``: their keys) and every one's
        key is full, the seconds until the earliest live lease of those keys lapses."""
        cap = self.get(queue).max_running_per_key
        if cap is None or not ready_keys:
            return None
        if any(key is None or len(by_key.get(key, ())) < cap for key in ready_keys):
            return None
        return (min(min(by_key[key]) for key in ready_keys if key) - now).total_seconds()

    def wait_s(
        self,
        queue: str,
        live: int,
        earliest_lease_s: float | None,
        now: datetime,
        key_lease_s: float | None = None,
    ) -> float | None:
        """Q18.9: with ready jobs, how long until the limits let one out (``None``: now;
        Q18.8's ``key_lease_s``: every ready job's key is full)."""
        bucket = self._buckets.get(queue)
        if bucket is None or not bucket.limits.limited:
            return None
        waits = []
        tokens = self._tokens(bucket, now)
        if tokens is not None and tokens < 1:
            waits.append(lim.seconds_to_token(bucket.limits, tokens))
        cap = bucket.limits.max_running
        if cap is not None and live >= cap and earliest_lease_s is not None:
            waits.append(earliest_lease_s)
        if key_lease_s is not None:
            waits.append(key_lease_s)
        return max(waits) if waits else None


def live_by_key(jobs: Iterable[Job], now: datetime) -> dict[str, list[datetime]]:
    """Q18.8: the deadlines of each concurrency key's unexpired leases among a queue's
    live ``jobs`` (processing or cancelling: a cancelled handler holds its slot until it
    stopped)."""
    keys: dict[str, list[datetime]] = {}
    for job in jobs:
        expires = job.claim_expires_at
        key = job.concurrency_key
        if job.state in HOLDING and expires is not None and now <= expires and key is not None:
            keys.setdefault(key, []).append(expires)
    return keys


def live_leases(jobs: Iterable[Job], now: datetime) -> list[datetime]:
    """Q18.7: the deadlines of the processing and cancelling rows among a queue's live
    ``jobs`` under unexpired leases."""
    return [
        job.claim_expires_at
        for job in jobs
        if job.state in HOLDING and job.claim_expires_at is not None and now <= job.claim_expires_at
    ]
