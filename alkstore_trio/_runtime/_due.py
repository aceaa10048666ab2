"""R11: the worker knows when its queues' delayed jobs are due, and wakes for them.

Why. A delayed or retried job used to be found by the re-poll (R4) only, up to
``poll_interval_s`` after it was due. Now the worker learns each due time where it
appears and asks the timer actor for a wake of that queue at that time:

- from the **wakes**: an enqueue or a reschedule of a delayed job announces in how many
  seconds it is due (on the store's clock, counted by the worker on its own monotonic
  clock from when the wake arrived, so no wall clocks are compared);
- from the **claims**: a claim that comes back short (the queue is drained of ready jobs)
  is followed by one lookup of the queue's next due time (``Queue.next_due_in_s``),
  unless a later one is known already. A burn-down's claims are full and an idle
  worker's due times are known, so the lookup is rare: at the start, after a due time
  passed, and once per queue after each re-poll (which forgets what it knew, the safety
  net for a lost wake);
- from **its own retries**: an explicit delay is known; a backoff delay (drawn in the
  store, D2) is looked up after the retry.

The decisions are the claim book's (:meth:`~._book.ClaimBook.announced`,
:meth:`~._book.ClaimBook.looked_up`); this object carries them out for the dispatcher.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import trio

from .._errors import EngineError
from ._actors import Wake

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._core import Job
    from .._store import Queue
    from ._actors import TimerRequest
    from ._book import ClaimBook


class DueTimes:
    """The dispatcher's side of R11: due times in, timer requests and lookups out.

    Args:
        book: The worker's claim book (it decides).
        queues: The served queues by name.
        engine_error: Logs and counts an engine error (the worker's).
    """

    def __init__(
        self,
        book: ClaimBook,
        queues: Mapping[str, Queue],
        engine_error: Callable[[str, Job | None, EngineError], None],
    ) -> None:
        self._book = book
        self._queues = queues
        self._engine_error = engine_error
        #: The timer actor's inbox (set when the worker runs).
        self.timer: trio.MemorySendChannel[TimerRequest] | None = None

    def _wake_at(self, queue: str, at: float) -> None:
        assert self.timer is not None
        self.timer.send_nowait((at, Wake(frozenset((queue,)))))

    def on_wake(self, message: Wake) -> None:
        """A wake (from the listener, or the timer's for a due time): the queues are
        woken; each announced due time earlier than the known one gets a timer wake."""
        book = self._book
        book.wake(message.queues)
        if message.due:
            now = trio.current_time()
            for queue, at in message.due.items():
                if queue in self._queues and book.announced(queue, at, now):
                    self._wake_at(queue, at)

    def retried(self, queue: str, delay_s: float | None) -> None:
        """This worker gave a job of ``queue`` back with ``delay_s`` (``None``: the
        store's backoff, to be looked up)."""
        if delay_s is None:
            self._book.retried_unknown(queue)
            return
        at = trio.current_time() + delay_s
        if self._book.announced(queue, at, trio.current_time()):
            self._wake_at(queue, at)

    async def look_up(self) -> None:
        """Ask each queue the book wants looked up for its next due time (one
        ``next_due_in_s`` read each), and wake it then. A failed read leaves the time
        unknown (tried again after the next short claim or tick, R8). With nothing to
        look up (the usual case) it returns at once, without a checkpoint: it runs once
        per turn of the dispatcher's loop."""
        book = self._book
        while book.lookups and not book.stopping:
            name = book.lookups.pop()
            sent_at = trio.current_time()
            try:
                seconds = await self._queues[name].next_due_in_s()
            except EngineError as exc:
                book.lookup_failed(name)
                self._engine_error("next_due_in_s", None, exc)
                continue
            # Counted from the answer's arrival: never early by the round trip.
            at = math.inf if seconds is None else trio.current_time() + seconds
            if book.looked_up(name, at, sent_at):
                self._wake_at(name, at)
