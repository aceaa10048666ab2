"""Wakes: how a claim loop blocks until work may be there, instead of polling.

A wake says "this queue may have new work" and, when the work is a delayed job, in how
many seconds it is due (R11); it may be lost (the row is the truth, so a claim loop keeps
a re-poll timer as a safety net). An engine
publishes wakes into a :class:`WakeHub`; a claim loop subscribes with a
:class:`WakeListener`, which *latches*: a wake that arrives while the loop is busy
claiming is kept until the next :meth:`WakeListener.wait`, so no wake falls between
"claimed nothing" and "started waiting".

The same channel carries Q19.5's cancel announcements: "job 17 of this queue is being
cancelled; whoever holds it, stop" (on PostgreSQL the payload ``cancel:17``). They are
latched the same way and handed out by :meth:`WakeListener.take_cancels`; like wakes,
they may be lost, which :meth:`WakeListener.take_resync` tells a listener about.

Q19.4's *done* announcements ("job 17 of this queue reached a final state") reach a
:class:`DoneListener`, subscribed to some ids of one queue; it latches like a wake
listener, so an announcement between a waiter's read and its wait is kept.
"""

from __future__ import annotations

import math
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, final

import trio

from .._core import _validate as v
from .._errors import StoreClosed

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable


@final
class WakeListener:
    """A subscription to the wakes of some queues, made by
    :meth:`Store.open_wake_listener`. Not constructed directly.

    Wakes arriving between two calls of :meth:`wait` are collected, so the usual loop
    (claim until nothing is left, then wait) never misses one.
    """

    def __init__(self, queues: frozenset[str]) -> None:
        self._queues = queues
        self._pending: set[str] = set()
        # R11: per queue, the earliest trio time a job announced as delayed is due (by
        # the wakes since the previous wait), and those handed out by the last wait.
        self._due: dict[str, float] = {}
        self._taken_due: dict[str, float] = {}
        # Q19.5: the job ids announced as cancelling since the last take_cancels, and
        # whether announcements may have been lost since the last take_resync.
        self._cancels: set[int] = set()
        self._resync = False
        self._event = trio.Event()
        self._closed = False

    @property
    def queues(self) -> frozenset[str]:
        """The queue names this listener is subscribed to."""
        return self._queues

    async def wait(self, timeout_s: float | None = None) -> frozenset[str]:
        """Wait until at least one subscribed queue was woken, or ``timeout_s`` passed.

        Args:
            timeout_s: Seconds to wait at most (>= 0), or ``None`` to wait indefinitely.

        Returns:
            The names of the queues woken since the previous call (possibly woken before
            this call began), or an empty set when the timeout passed first. A cancel
            announcement (Q19.5) also ends the wait, possibly with no queue woken: see
            :meth:`take_cancels`.

        Raises:
            StoreClosed: the store was closed (also while waiting).
            InvalidArgument: ``timeout_s`` is not a finite number >= 0 or ``None``.
        """
        if self._closed:
            raise StoreClosed("the store of this wake listener is closed")
        timeout = (
            math.inf if timeout_s is None else v.check_duration("timeout_s", timeout_s, min_s=0)
        )
        if self._pending or self._cancels or self._resync:
            await trio.lowlevel.checkpoint()
        else:
            with trio.move_on_after(timeout):
                await self._event.wait()
        if self._closed:
            raise StoreClosed("the store of this wake listener is closed")
        woken = frozenset(self._pending)
        self._pending.clear()
        self._taken_due, self._due = self._due, {}
        self._event = trio.Event()
        return woken

    def take_due(self) -> dict[str, float]:
        """R11: the due times announced by the wakes that the last :meth:`wait` returned.

        A wake for a delayed job (enqueued with a delay or a future ``run_at``, or
        rescheduled to one) says when it is due. This maps each such queue to the
        earliest of those times, in trio's clock (:func:`trio.current_time`: the delay
        the engine announced, counted from when the wake arrived, so the worker's wall
        clock plays no part). A claim loop that keeps a timer per queue wakes itself
        then instead of waiting for its re-poll. Each call hands the times out once.

        Example::

            woken = await listener.wait()
            for queue, at in listener.take_due().items():
                ...  # claim from ``queue`` again at trio time ``at``
        """
        due, self._taken_due = self._taken_due, {}
        return due

    def take_cancels(self) -> frozenset[int]:
        """Q19.5: the ids of the jobs announced as cancelling since the previous call
        (``queue.cancel`` was called while they were processing). A worker holding one
        of them stops its handler; everyone else ignores the id. Each id is handed out
        once per announcement."""
        cancels = frozenset(self._cancels)
        self._cancels.clear()
        return cancels

    def take_resync(self) -> bool:
        """Q19.5: True, once, when announcements may have been lost since the previous
        call (the engine's listener reconnected): a worker then asks the store which of
        its claims are cancelling (``Queue.cancelling_among``)."""
        resync, self._resync = self._resync, False
        return resync

    def _deliver_cancel(self, job_id: int) -> None:
        self._cancels.add(job_id)
        self._event.set()

    def _deliver_resync(self) -> None:
        self._resync = True
        self._event.set()

    def _deliver(self, queue: str, due_in_s: float | None = None) -> None:
        self._pending.add(queue)
        if due_in_s is not None:
            at = trio.current_time() + due_in_s
            self._due[queue] = min(at, self._due.get(queue, at))
        self._event.set()

    def _close(self) -> None:
        self._closed = True
        self._event.set()


@final
class DoneListener:
    """Q19.4: a subscription to the done announcements of some jobs of one queue, made by
    an engine's ``open_done_listener``. Not constructed directly.

    An announcement of one of its ids, or word that announcements may have been lost
    (the engine's listener reconnected), is kept until the next :meth:`wait`.
    """

    def __init__(self, queue: str, job_ids: frozenset[int]) -> None:
        self._queue = queue
        self._ids = job_ids
        self._woken = False
        self._event = trio.Event()
        self._closed = False

    @property
    def queue(self) -> str:
        """The queue whose jobs this listener hears of."""
        return self._queue

    @property
    def job_ids(self) -> frozenset[int]:
        """The job ids this listener hears of."""
        return self._ids

    async def wait(self, timeout_s: float) -> bool:
        """Wait until one of the ids was announced done (since the previous call), or
        announcements may have been lost, or ``timeout_s`` (>= 0) passed.

        Returns:
            ``True`` when woken by an announcement or a resync, ``False`` on the timeout:
            either way the caller reads the job again.

        Raises:
            StoreClosed: the store was closed (also while waiting).
        """
        if self._closed:
            raise StoreClosed("the store of this done listener is closed")
        if self._woken:
            await trio.lowlevel.checkpoint()
        else:
            with trio.move_on_after(timeout_s):
                await self._event.wait()
        if self._closed:
            raise StoreClosed("the store of this done listener is closed")
        woken, self._woken = self._woken, False
        self._event = trio.Event()
        return woken

    def _deliver(self) -> None:
        self._woken = True
        self._event.set()

    def _close(self) -> None:
        self._closed = True
        self._event.set()


class WakeHub:
    """The fan-out from an engine's wake source to its listeners (sync, never blocks)."""

    def __init__(self) -> None:
        self._by_queue: dict[str, set[WakeListener]] = {}
        #: Q19.4: per queue, per job id, the done listeners waiting for it.
        self._done: dict[str, dict[int, set[DoneListener]]] = {}
        self._closed = False

    def subscribed_queues(self) -> frozenset[str]:
        """Every queue some listener is subscribed to."""
        return frozenset(self._by_queue)

    def publish(self, queues: Iterable[str]) -> None:
        """Wake every listener of each of these queues."""
        for queue in queues:
            for listener in self._by_queue.get(queue, ()):
                listener._deliver(queue)

    def publish_due(self, queue: str, due_in_s: float | None) -> None:
        """R11: wake every listener of ``queue`` for a job due in ``due_in_s`` seconds
        (>= 0; 0 is "due now": what a listener knew of the queue's next due time is
        stale, Q18.7), or ready now (``None``: the same as :meth:`publish`)."""
        for listener in self._by_queue.get(queue, ()):
            listener._deliver(queue, due_in_s)

    def publish_cancel(self, queue: str, job_id: int) -> None:
        """Q19.5: tell every listener of ``queue`` that job ``job_id`` is cancelling."""
        for listener in self._by_queue.get(queue, ()):
            listener._deliver_cancel(job_id)

    def subscribed_done_queues(self) -> frozenset[str]:
        """Q19.4: every queue some done listener is subscribed to."""
        return frozenset(self._done)

    def publish_done(self, queue: str, job_ids: Iterable[int]) -> None:
        """Q19.4: these jobs of ``queue`` reached a final state: wake their done
        listeners (and no other)."""
        by_id = self._done.get(queue)
        if by_id is None:
            return
        for job_id in job_ids:
            for listener in by_id.get(job_id, ()):
                listener._deliver()

    def publish_all(self) -> None:
        """Wake every listener on every queue (e.g. after wakes may have been lost), and
        tell each that cancel announcements may have been lost too (Q19.5); wake every
        done listener (Q19.4: its job may have finished unannounced)."""
        self.publish(list(self._by_queue))
        for listeners in self._by_queue.values():
            for listener in listeners:
                listener._deliver_resync()
        for done in self._done_listeners():
            done._deliver()

    def close(self) -> None:
        """Close every listener; waiting ones raise ``StoreClosed``."""
        self._closed = True
        for listeners in self._by_queue.values():
            for listener in listeners:
                listener._close()
        for done in self._done_listeners():
            done._close()

    def _done_listeners(self) -> set[DoneListener]:
        return {done for by_id in self._done.values() for ids in by_id.values() for done in ids}

    @asynccontextmanager
    async def open_done_listener(
        self, queue: str, job_ids: frozenset[int]
    ) -> AsyncIterator[DoneListener]:
        """Q19.4: subscribe to these jobs' done announcements for the ``async with``
        block."""
        if self._closed:
            raise StoreClosed("the store is closed")
        listener = DoneListener(queue, job_ids)
        by_id = self._done.setdefault(queue, {})
        for job_id in job_ids:
            by_id.setdefault(job_id, set()).add(listener)
        try:
            yield listener
        finally:
            for job_id in job_ids:
                listeners = by_id.get(job_id)
                if listeners is not None:
                    listeners.discard(listener)
                    if not listeners:
                        del by_id[job_id]
            if not by_id and self._done.get(queue) is by_id:
                del self._done[queue]

    @asynccontextmanager
    async def open_listener(self, queues: frozenset[str]) -> AsyncIterator[WakeListener]:
        """Subscribe for the duration of the ``async with`` block."""
        if self._closed:
            raise StoreClosed("the store is closed")
        listener = WakeListener(queues)
        for queue in queues:
            self._by_queue.setdefault(queue, set()).add(listener)
        try:
            yield listener
        finally:
            for queue in queues:
                listeners = self._by_queue.get(queue)
                if listeners is not None:
                    listeners.discard(listener)
                    if not listeners:
                        del self._by_queue[queue]
