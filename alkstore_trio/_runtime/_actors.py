"""The worker's long-lived actors (R3, R4, R10) and the messages its actors send.

Each actor is a trio task that owns its state and only sends messages: to the
dispatcher's inbox (one trio memory channel). They run under the worker's supervisor
(one-for-one restarts, R1), so each takes ``task_status`` and reports when it is ready;
whatever must survive a restart (the timer's pending entries) lives outside them.
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias, TypeGuard

import trio

from .._errors import EngineError
from ._events import describe

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._store import JobHandle, Queue, Store
    from ._book import Claim, ClaimBook
    from ._events import Reporter

# --- messages to the dispatcher ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Wake:
    """From the listener: these queues may have jobs ready; and (R11) ``due``: when
    delayed jobs announced by the wakes are due, per queue (trio time). From the timer:
    a queue's delayed job is due now."""

    queues: frozenset[str]
    due: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Tick:
    """From the timer: re-poll every queue (and send failed outcomes again)."""


@dataclass(frozen=True, slots=True)
class CancelCheck:
    """From the listener (R15): cancel announcements may have been lost (it restarted, or
    the engine's listener reconnected): ask the store which held claims are cancelling."""


@dataclass(frozen=True, slots=True)
class Aborted:
    """From the listener (R15): claims of cancelled jobs whose handlers never started;
    the book finished them, the dispatcher settles them."""

    claims: tuple[Claim, ...]


@dataclass(frozen=True, slots=True)
class Stop:
    """From :meth:`Worker.stop`: stop claiming."""


@dataclass(frozen=True, slots=True)
class Finished:
    """From the job actors: handlers ended; their claims wait in
    :meth:`JobActors.take_finished` (one message per wave, not one per job)."""


@dataclass(frozen=True, slots=True)
class Claimed:
    """From a pipelined claim task: its answer (``handles``), or the error it met."""

    queue: str
    asked: int
    sent_at: float
    handles: list[JobHandle] | None
    error: EngineError | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """From a heartbeat actor: renew this claim, then set ``done``."""

    claim: Claim
    done: trio.Event


@dataclass(frozen=True, slots=True)
class HeartbeatsDue:
    """From the timer: these claims have run for one heartbeat interval; start their
    heartbeat actors (those still running)."""

    claims: tuple[Claim, ...]


Message: TypeAlias = (
    "Wake | Tick | Stop | Finished | Claimed | HeartbeatRequest | HeartbeatsDue | CancelCheck"
    " | Aborted"
)
#: What the dispatcher asks the timer for: a message at a trio time, a :class:`Wake` of a
#: queue whose delayed job becomes due then (R11) or a :class:`HeartbeatsDue`; ``None``
#: for a tick.
TimerRequest: TypeAlias = "tuple[float, HeartbeatsDue | Wake | None]"


def coalesced(message: Message) -> TypeGuard[Finished | HeartbeatRequest]:
    """R2: the messages the dispatcher batches per queue: outcomes and heartbeats."""
    return isinstance(message, Finished | HeartbeatRequest)


# --- the actors ----------------------------------------------------------------------


async def serve_wakes(
    store: Store,
    queues: tuple[Queue, ...],
    inbox: trio.MemorySendChannel[Message],
    book: ClaimBook,
    *,
    task_status: trio.TaskStatus[None],
) -> None:
    """R3: forward every wake of the served queues to the dispatcher. After each
    (re)start it sends a wake for all queues: wakes sent while it was gone are lost.

    R15: a cancel announcement goes to the book directly, not through the dispatcher
    (like a job actor's ``book.start``): the aborted claims' scopes are cancelled in the
    same scheduling round. When announcements may have been lost (a restart of this
    actor, a reconnect of the engine's listener) the dispatcher is asked to look."""
    async with store.open_wake_listener(queues) as listener:
        task_status.started()
        await inbox.send(Wake(frozenset(q.name for q in queues)))
        await inbox.send(CancelCheck())
        while True:
            woken = await listener.wait()
            cancels = listener.take_cancels()
            if cancels:
                aborted, unstarted = book.cancel_requested(cancels, trio.current_time())
                for claim in aborted:
                    claim.scope.cancel()
                if unstarted:
                    await inbox.send(Aborted(tuple(unstarted)))
            if listener.take_resync():
                await inbox.send(CancelCheck())
            if woken:
                # R11: and when the delayed jobs these wakes announced are due.
                await inbox.send(Wake(woken, listener.take_due()))


@dataclass(slots=True)
class Timers:
    """The timer actor's pending entries, kept outside it so a restart loses none:
    (trio time, sequence, message or ``None``: a tick)."""

    heap: list[tuple[float, int, HeartbeatsDue | Wake | None]] = field(default_factory=list)
    seq: int = 0

    def push(self, at: float, message: HeartbeatsDue | Wake | None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, message))


async def serve_timer(
    timers: Timers,
    poll_interval_s: float,
    inbox: trio.MemorySendChannel[Message],
    requests: trio.MemoryReceiveChannel[TimerRequest],
    *,
    task_status: trio.TaskStatus[None],
) -> None:
    """R4: tick every ``poll_interval_s``; R11: wake a queue when a delayed job the
    dispatcher told it about becomes due; and tell the dispatcher when claims have run
    for one heartbeat interval (R6)."""
    task_status.started()
    heap = timers.heap
    next_tick = trio.current_time() + poll_interval_s
    while True:
        with trio.move_on_at(min(next_tick, heap[0][0]) if heap else next_tick):
            at, message = await requests.receive()
            timers.push(at, message)
            continue
        now = trio.current_time()
        tick = False
        while heap and heap[0][0] <= now:
            _, _, message = heapq.heappop(heap)
            if message is None:
                tick = True
            else:
                await inbox.send(message)
        if now >= next_tick:
            tick = True
            next_tick = now + poll_interval_s
        if tick:
            await inbox.send(Tick())


async def serve_sweeps(
    queues: tuple[Queue, ...],
    interval_s: float,
    reporter: Reporter,
    counts: dict[str, int],
    *,
    task_status: trio.TaskStatus[None],
) -> None:
    """R10: ``sweep_expired`` on every served queue, now and every ``interval_s``. A
    failing sweep is logged and tried again next time."""
    task_status.started()
    while True:
        for queue in queues:
            try:
                result = await queue.sweep_expired()
            except Exception as exc:
                counts["engine_errors"] += isinstance(exc, EngineError)
                reporter.log(
                    logging.WARNING,
                    "sweep_failed",
                    None,
                    "sweep of queue %r failed (%s: %s); next try in %gs",
                    queue.name,
                    type(exc).__name__,
                    exc,
                    interval_s,
                    queue=queue.name,
                    error=describe(exc),
                )
            else:
                if any(result):
                    reporter.log(
                        logging.INFO,
                        "sweep",
                        None,
                        "swept queue %r: %d expired, %d purged, %d completed purged, %d cancelled",
                        queue.name,
                        result.expired,
                        result.purged,
                        result.purged_completed,
                        result.cancelled,
                        queue=queue.name,
                    )
        await trio.sleep(interval_s)
