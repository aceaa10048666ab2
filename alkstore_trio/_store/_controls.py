"""The flow controls of a queue handle (Q18): pause, resume and limits, across every
process of the store. :class:`~alkstore_trio.Queue` has them as methods."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core import NO_LIMITS, UNSET, QueueLimits
from .._core._limits import _Unset, check_limit_args, merged_limits, refills

if TYPE_CHECKING:
    from .._engines._protocol import Engine
    from ._store import Store


class QueueControls:
    """Q18's operations on one queue; the queue handle supplies its store, engine and
    name."""

    __slots__ = ()
    _store: Store
    _engine: Engine
    _name: str

    async def pause(self) -> None:
        """Pause this queue across every process of the store (Q18), persistently.

        Once it returns, no claim anywhere (``claim_one``, ``claim_batch``, the claim of
        ``ack_handles_and_claim``, a worker's claims) hands out a job of this queue until
        :meth:`resume`: a claim still in flight when the pause began has finished first.
        Jobs handed out before keep running and can be acked, retried, failed and
        heartbeated; enqueues are still accepted. Pausing a paused queue does nothing.

        Raises:
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        await self._engine.set_paused(self._name, True)

    async def resume(self) -> None:
        """Resume this queue after :meth:`pause` (Q18), and wake its idle workers, so
        they claim at once. Resuming a queue that is not paused only wakes it.

        Raises:
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        await self._engine.set_paused(self._name, False)

    async def set_limits(
        self,
        *,
        max_running: int | _Unset | None = UNSET,
        rate_per_s: float | _Unset | None = UNSET,
        burst: int | _Unset | None = UNSET,
        max_running_per_key: int | _Unset | None = UNSET,
    ) -> QueueLimits:
        """Limit this queue across every process of the store (Q18.7-Q18.9),
        persistently; each argument left out keeps its current value, ``None`` clears it.

        Example::

            # At most 5 jobs running fleet-wide, and at most 10 started a second.
            await store.queue("payments").set_limits(max_running=5, rate_per_s=10)

        Once it returns, every claim anywhere (``claim_one``, ``claim_batch``, the claim of
        ``ack_handles_and_claim``, a worker's claims) obeys the new limits, and the queue
        is woken. Jobs already running keep running.

        Args:
            max_running: At most this many jobs of the queue processing under an
                unexpired lease at once (an int from 1; a lapsed lease stops counting
                when it lapses).
            rate_per_s: Claims hand out at most ``burst + rate_per_s * t`` jobs in any
                window of ``t`` seconds (a number > 0), on the store's clock.
            burst: The token bucket's size (an int from 1; only with a rate). A new rate
                without one gets ``max(1, ceil(rate_per_s))``. A call that gives
                ``rate_per_s`` or ``burst`` starts the bucket full.
            max_running_per_key: Q18.8: at most this many jobs of one
                ``concurrency_key`` processing under an unexpired lease at once (an int
                from 1; jobs without a key are not held back by it). A claim takes from
                each key at most its free slots, its best jobs first, so a key with a
                deep backlog leaves the other keys' jobs claimable.

        Returns:
            The queue's limits from now on.

        Raises:
            InvalidArgument: no argument, or a bad value (nothing changed).
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        check_limit_args(max_running, rate_per_s, burst, max_running_per_key)
        current = await self.limits()
        limits = merged_limits(
            current,
            max_running=max_running,
            rate_per_s=rate_per_s,
            burst=burst,
            max_running_per_key=max_running_per_key,
        )
        await self._engine.set_limits(self._name, limits, refills(rate_per_s, burst))
        return limits

    async def limits(self) -> QueueLimits:
        """This queue's limits (Q18.11): every field ``None`` when it has none.

        Raises:
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        stats = await self._engine.stats(self._name)
        entry = stats.queue(self._name)
        return NO_LIMITS if entry is None or entry.limits is None else entry.limits
