"""The worker: claims jobs from a store and runs their handlers (rules R1-R10).

Why it is shaped this way. Every change of a job's state (claim, heartbeat, ack, retry,
fail) goes through one task, the *dispatcher*, which receives everything else as messages
on one trio memory channel. One owner means no two tasks ever race on the same claim: a
heartbeat refusal and a handler's outcome cannot both act on a job, the free-slot count is
exact, and the dispatcher coalesces the acks waiting in its inbox into one statement per
queue (``Queue.ack_handles``, fenced per job by its claim token; decision D18), and the
due heartbeats waiting there likewise (``Queue.heartbeat_handles``; D19). Everything else
is an *actor* that only sends messages:

- the **listener** (R3) forwards the store's wakes;
- the **re-poll timer** (R4) ticks every ``poll_interval_s`` and when a delayed job the
  dispatcher knows of becomes due;
- the **sweeper** (R10) runs ``sweep_expired`` on a cadence (it changes no claimed job);
- one **job actor** per claim (R5) runs the handler in its own cancel scope and reports
  the outcome, with a **heartbeat actor** beside it (R6) asking the dispatcher to renew
  the claim.

The three long-lived actors run under :func:`open_supervisor` (one-for-one restarts, R1);
their inboxes are created by :meth:`Worker.run` and outlive restarts. The dispatcher is
the body of the supervisor's block: it owns the claims in flight, which a restart could
not rebuild.

Job actors are *shielded* from outside cancellation: only the dispatcher cancels them,
through each one's own cancel scope (lease lost, or the shutdown grace ran out). That is
what lets a cancelled :meth:`Worker.run` still give running handlers their
``shutdown_grace_s`` and release the rest (R7) instead of abandoning them mid-flight.

Time is trio's clock, so tests drive every interval with :class:`trio.testing.MockClock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeGuard, final

import trio

from .._core import _validate as v
from .._errors import EngineError, InvalidArgument
from .._store import Queue, Store
from .._util import is_async_callable, lone_exception
from ._asyncio import open_loop_if_needed
from ._outcomes import Fail, Retry
from ._supervisor import open_supervisor

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping

    from .._core import Job
    from .._store import JobHandle
    from ._supervisor import Supervisor

#: A job handler: ``async def handler(job: Job) -> None``.
Handler: TypeAlias = "Callable[[Job], Awaitable[None]]"

logger = logging.getLogger("alkstore_trio.worker")

#: The most characters of error text stored on a job (the contract's limit).
ERROR_MAX_CHARS: Final = v.ERROR_MAX_CHARS
#: The ``last_error`` of jobs released by a stopping worker.
WORKER_STOPPED: Final = "worker stopped"
#: The ``last_error`` of a job given back because its handler was stopped at the lease's
#: deadline (no renewal got through in time) and a late renewal then showed the claim
#: was still held.
LEASE_UNCERTAIN: Final = "handler stopped: the claim could not be renewed in time"
#: How long the shielded finalization may spend releasing jobs after the grace period.
_FINALIZE_TIMEOUT_S: Final = 30.0
#: Backoff between attempts to apply an outcome while stopping (capped).
_FINALIZE_RETRY_S: Final = (0.1, 2.0)


@dataclass(frozen=True, slots=True)
class WorkerStatistics:
    """A snapshot of a worker's counters, returned by :meth:`Worker.statistics`.

    Attributes:
        worker_id: The worker's id (``claimed_by`` on the rows it claims).
        claimed: Jobs claimed.
        acked: Jobs acked (their handler returned).
        retried: Jobs given back to run again (``Retry``, an exception, a timeout).
        dead_lettered: Jobs moved to dead by this worker (``Fail``, or a retry on the
            job's last allowed attempt).
        released: Jobs handed back (``"worker stopped"``) because the worker stopped while
            their handler ran; a release on the job's last attempt dead-letters the job
            and counts in ``dead_lettered`` instead.
        lease_lost: Claims found lost (a refused heartbeat, ack, retry or fail): the
            handler was cancelled or its outcome discarded.
        in_flight: Claims held now (handler running, or its outcome not yet applied).
        handler_errors: Handlers that raised an exception other than ``Retry``/``Fail``.
        timed_out: Handlers cancelled by ``job_timeout_s``.
        engine_errors: Store operations that failed with ``EngineError`` (retried later).
        events_dropped: Events not delivered to a full :meth:`Worker.events` stream.
        started: Handlers started.
        finished: Handlers finished (returned, raised or were cancelled).
        claim_to_start_total_s: Seconds from claims to their handlers' starts, summed.
        claim_to_start_mean_s: Its mean over ``started`` (0 when none).
        run_time_total_s: Seconds handlers ran, summed over ``finished``.
        run_time_mean_s: Its mean over ``finished`` (0 when none).
    """

    worker_id: str
    claimed: int
    acked: int
    retried: int
    dead_lettered: int
    released: int
    lease_lost: int
    in_flight: int
    handler_errors: int
    timed_out: int
    engine_errors: int
    events_dropped: int
    started: int
    finished: int
    claim_to_start_total_s: float
    claim_to_start_mean_s: float
    run_time_total_s: float
    run_time_mean_s: float


#: The kinds of :class:`WorkerEvent`, in the order a job meets them (R9).
EVENT_KINDS: Final = frozenset(
    {
        "worker_start",  # run() started its actors (job None)
        "claim",  # a job was claimed
        "start",  # its handler started
        "heartbeat",  # its claim was renewed
        "finish",  # its handler returned, raised or was cancelled
        "timeout",  # its handler ran past job_timeout_s (a retry follows)
        "handler_error",  # its handler raised an exception (a retry follows)
        "ack",  # acked
        "retry",  # given back to run again (error, delay_s)
        "release",  # given back because the worker stopped
        "dead",  # dead-lettered (error)
        "lease_lost",  # the claim was found lost; the handler was cancelled
        "engine_error",  # a store operation failed; it is tried again (job may be None)
        "sweep",  # sweep_expired removed rows (job None; message says how many)
        "sweep_failed",  # sweep_expired failed (job None)
        "draining",  # stopping: waiting for running handlers (job None)
        "finalize_incomplete",  # stopping: some claims could not be finalized (job None)
        "worker_stop",  # run() is returning (job None); the stream ends after it
    }
)


@dataclass(frozen=True, slots=True)
class WorkerEvent:
    """One thing that happened in a worker, as seen on :meth:`Worker.events` (R9).

    Attributes:
        kind: One of :data:`EVENT_KINDS` (e.g. ``"claim"``, ``"ack"``, ``"lease_lost"``).
        worker_id: The worker's id.
        at: ``trio.current_time()`` when it happened (for durations).
        wall_time: ``time.time()`` when it happened (to line events up across processes).
        job: The job as claimed (its ``attempts`` is this claim's token), or ``None`` for
            worker-level events. It includes the payload: events stay in the process.
        queue: The queue concerned, if any.
        message: The same human-readable line as the log record (without the worker and
            job prefix); never contains the payload.
        error: The error text stored with a retry, release or dead-letter, or the error
            of a timeout, handler error or engine error.
        delay_s: The retry delay the handler asked for (``None``: the queue's backoff).
    """

    kind: str
    worker_id: str
    at: float
    wall_time: float
    job: Job | None
    queue: str | None
    message: str
    error: str | None = None
    delay_s: float | None = None

    @property
    def job_id(self) -> int | None:
        """The job's id, or ``None``."""
        return None if self.job is None else self.job.id

    @property
    def attempt(self) -> int | None:
        """The claim's attempt number (its token), or ``None``."""
        return None if self.job is None else self.job.attempts


# --- messages to the dispatcher ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Wake:
    queues: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Tick:
    pass


@dataclass(frozen=True, slots=True)
class _Stop:
    pass


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What a job actor reports. ``kind`` is ``"ack"``, ``"retry"``, ``"fail"``,
    ``"cancelled"`` (the dispatcher cancelled it: lease lost or shutdown; the dispatcher
    turns a ``"cancelled"`` of a claim it still holds into ``"release"``) or ``"lapsed"``
    (the claim's lease ran out with no renewal getting through: the handler was
    cancelled at the lease's deadline)."""

    slot: _Slot
    kind: str
    error: str | None = None
    delay_s: float | None = None


@dataclass(frozen=True, slots=True)
class _HeartbeatRequest:
    slot: _Slot
    done: trio.Event


@dataclass(frozen=True, slots=True)
class _HeartbeatsDue:
    """From the timer: these claims have run for one heartbeat interval; start their
    heartbeat actors (those still running)."""

    slots: tuple[_Slot, ...]


_Message: TypeAlias = "_Wake | _Tick | _Stop | _Outcome | _HeartbeatRequest | _HeartbeatsDue"
#: What the dispatcher asks the timer for: a tick at a trio time (a delayed job becomes
#: due), or a :class:`_HeartbeatsDue` message at a trio time.
_TimerRequest: TypeAlias = "tuple[float, _HeartbeatsDue | None]"


def _coalesced(message: _Message) -> TypeGuard[_Outcome | _HeartbeatRequest]:
    """R2: the messages the dispatcher batches per queue: outcomes and heartbeats."""
    return isinstance(message, _Outcome | _HeartbeatRequest)


@dataclass(eq=False, slots=True)
class _Slot:
    """One claim in flight, owned by the dispatcher (job actors only read it)."""

    handle: JobHandle
    handler: Handler
    claimed_at: float
    heartbeat_interval_s: float
    #: Shielded: outside cancellation never reaches a handler; only the dispatcher's
    #: ``scope.cancel()`` does, or the scope's deadline: when the claim's lease runs out
    #: (trio time when the claim or last renewal was *sent* + the visibility timeout, so
    #: never later than the store's deadline), pushed on by each renewal.
    scope: trio.CancelScope
    #: The heartbeat actor's scope, once the dispatcher started it (shielded likewise).
    heartbeat_scope: trio.CancelScope | None = None
    #: Trio time by which the lease surely ends (the scope's deadline while it runs).
    lease_until: float = math.inf
    #: The job actor has left ``scope`` (setting its deadline then would be pointless).
    finished: bool = False
    lost: bool = False
    #: The dispatcher cancelled the scope (lease lost, grace over), as opposed to the
    #: lease deadline.
    cancel_requested: bool = False
    reported: bool = False
    pending: _Outcome | None = None


@final
class Worker:
    """Claims jobs from a store's queues and runs a handler for each (rules R1-R10).

    Example::

        async def send_email(job: Job) -> None:
            ...  # return: ack; raise Retry(...) / Fail(...) to choose otherwise

        worker = Worker(store, {"emails": send_email}, concurrency=20)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            ...
            worker.stop()

    Args:
        store: The store to work on (any engine).
        handlers: Maps queue names or :class:`~alkstore_trio.Queue` handles of ``store``
            to ``async def handler(job) -> None``. A handle's options apply to the
            worker's sweeps; a name gets ``store.queue(name)``.
        concurrency: The most handlers running at once (>= 1).
        worker_id: Stored as ``claimed_by``; default ``"{hostname}:{pid}:{random}"``.
        poll_interval_s: Seconds between re-polls, the safety net for lost wakes (> 0).
        heartbeat_interval_s: Seconds between claim renewals (> 0); default a third of
            each job's ``visibility_timeout_s``.
        job_timeout_s: Seconds a handler may run before it is cancelled and its job
            retried (> 0), or ``None`` for no limit.
        shutdown_grace_s: On stop, seconds running handlers may still finish (>= 0)
            before they are cancelled and their jobs released.
        claim_batch_max: The most jobs one claim asks for (>= 1).
        sweep_interval_s: Seconds between ``sweep_expired`` runs per queue (> 0).
        max_restarts: Restarts of the long-lived actors allowed within
            ``restart_window_s`` before the worker fails (>= 0).
        restart_window_s: The sliding window of ``max_restarts`` (> 0).

    Raises:
        InvalidArgument: An argument is invalid (nothing was started).
    """

    def __init__(
        self,
        store: Store,
        handlers: Mapping[str | Queue, Handler],
        *,
        concurrency: int = 10,
        worker_id: str | None = None,
        poll_interval_s: float = 5.0,
        heartbeat_interval_s: float | None = None,
        job_timeout_s: float | None = None,
        shutdown_grace_s: float = 30.0,
        claim_batch_max: int = 100,
        sweep_interval_s: float = 60.0,
        max_restarts: int = 3,
        restart_window_s: float = 60.0,
    ) -> None:
        self._store = store
        self._concurrency = _check_count("concurrency", concurrency, minimum=1)
        self._claim_batch_max = _check_count("claim_batch_max", claim_batch_max, minimum=1)
        self._max_restarts = _check_count("max_restarts", max_restarts, minimum=0)
        self._poll_interval_s = _positive("poll_interval_s", poll_interval_s)
        self._sweep_interval_s = _positive("sweep_interval_s", sweep_interval_s)
        self._restart_window_s = _positive("restart_window_s", restart_window_s)
        self._heartbeat_interval_s = (
            None
            if heartbeat_interval_s is None
            else _positive("heartbeat_interval_s", heartbeat_interval_s)
        )
        self._job_timeout_s = (
            None if job_timeout_s is None else _positive("job_timeout_s", job_timeout_s)
        )
        self._shutdown_grace_s = v.check_duration("shutdown_grace_s", shutdown_grace_s, min_s=0)
        if worker_id is None:
            worker_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
            worker_id = worker_id[-v.WORKER_ID_MAX_CHARS :]
        self._worker_id = v.check_worker_id(worker_id)
        self._queues, self._handlers = _check_handlers(store, handlers)
        self._queue_by_name = {queue.name: queue for queue in self._queues}

        self._started = False
        self._supervisor: Supervisor | None = None
        self._stop_requested = False
        #: ``stop(grace_s=...)`` caps the grace at this trio time; the running grace scope.
        self._grace_deadline = math.inf
        self._grace_scope: trio.CancelScope | None = None
        self._subscribers: list[trio.MemorySendChannel[WorkerEvent]] = []
        #: The timer actor's pending timers: (trio time, sequence, message or None: tick).
        self._timers: list[tuple[float, int, _HeartbeatsDue | None]] = []
        self._jobs: trio.Nursery | None = None
        self._timer_seq = 0
        self._finished = False
        self._inbox: trio.MemorySendChannel[_Message] | None = None
        self._timer_inbox: trio.MemorySendChannel[_TimerRequest] | None = None
        self._slots: set[_Slot] = set()
        self._dirty: set[str] = set()
        self._rotation = 0
        self._counts: dict[str, int] = dict.fromkeys(
            (
                "claimed",
                "acked",
                "retried",
                "dead_lettered",
                "released",
                "lease_lost",
                "handler_errors",
                "timed_out",
                "engine_errors",
                "events_dropped",
                "started",
                "finished",
            ),
            0,
        )
        self._claim_to_start_total_s = 0.0
        self._run_time_total_s = 0.0

    def __repr__(self) -> str:
        names = ", ".join(q.name for q in self._queues)
        return f"<Worker {self._worker_id!r} on [{names}]>"

    @property
    def worker_id(self) -> str:
        """The id this worker claims under (``claimed_by``)."""
        return self._worker_id

    @property
    def queues(self) -> tuple[Queue, ...]:
        """The queues this worker serves, in the order of ``handlers``."""
        return self._queues

    def statistics(self) -> WorkerStatistics:
        """A frozen snapshot of the counters and timing figures (see
        :class:`WorkerStatistics`)."""
        c = self._counts
        return WorkerStatistics(
            worker_id=self._worker_id,
            claimed=c["claimed"],
            acked=c["acked"],
            retried=c["retried"],
            dead_lettered=c["dead_lettered"],
            released=c["released"],
            lease_lost=c["lease_lost"],
            in_flight=len(self._slots),
            handler_errors=c["handler_errors"],
            timed_out=c["timed_out"],
            engine_errors=c["engine_errors"],
            events_dropped=c["events_dropped"],
            started=c["started"],
            finished=c["finished"],
            claim_to_start_total_s=self._claim_to_start_total_s,
            claim_to_start_mean_s=(
                self._claim_to_start_total_s / c["started"] if c["started"] else 0.0
            ),
            run_time_total_s=self._run_time_total_s,
            run_time_mean_s=self._run_time_total_s / c["finished"] if c["finished"] else 0.0,
        )

    @contextlib.contextmanager
    def events(
        self, *, buffer: int | None = 1000
    ) -> Iterator[trio.MemoryReceiveChannel[WorkerEvent]]:
        """Subscribe to the worker's events (R9): a channel of :class:`WorkerEvent`, one
        per transition, that ends after the ``"worker_stop"`` event.

        Example::

            with worker.events() as events:
                async for event in events:
                    print(event.kind, event.job_id, event.message)

        Subscribe before :meth:`run` to see every event; a subscription made after the
        worker finished ends at once. Any number of subscribers may listen. Publishing
        never blocks the worker: when a subscriber's buffer is full, the event is
        dropped for it and counted in ``statistics().events_dropped``.

        Args:
            buffer: The most events held for this subscriber (>= 1), or ``None`` for no
                limit (for recorders that must see every event; mind the memory).

        Raises:
            InvalidArgument: ``buffer`` is invalid.
        """
        size = math.inf if buffer is None else _check_count("buffer", buffer, minimum=1)
        send, receive = trio.open_memory_channel[WorkerEvent](size)
        if self._finished:
            send.close()
        else:
            self._subscribers.append(send)
        try:
            with receive:
                yield receive
        finally:
            if send in self._subscribers:
                self._subscribers.remove(send)
            send.close()

    def stop(self, *, grace_s: float | None = None) -> None:
        """Ask the worker to stop gracefully (R7). Never blocks; calling it again, or
        before :meth:`run`, is harmless (a worker stopped before it runs returns at once
        from :meth:`run` after starting).

        The worker stops claiming, lets running handlers finish for up to
        ``shutdown_grace_s``, cancels the rest and releases their jobs
        (``retry(error="worker stopped", delay_s=0)``), closes its listener and returns
        from :meth:`run`.

        Args:
            grace_s: Allow running handlers at most this many seconds from now (>= 0)
                instead of ``shutdown_grace_s``. It only ever shortens the grace: a second
                ``stop(grace_s=0)`` (the CLI's second Ctrl-C) cancels the running
                handlers at once and releases their jobs.

        Raises:
            InvalidArgument: ``grace_s`` is not a duration >= 0.
        """
        if grace_s is not None:
            grace_s = v.check_duration("grace_s", grace_s, min_s=0)
            deadline = trio.current_time() + grace_s
            self._grace_deadline = min(self._grace_deadline, deadline)
            if self._grace_scope is not None:
                self._grace_scope.deadline = min(self._grace_scope.deadline, deadline)
        if self._stop_requested:
            return
        self._stop_requested = True
        if self._inbox is not None:
            self._inbox.send_nowait(_Stop())

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the worker until :meth:`stop` or cancellation; usable with
        ``nursery.start(worker.run)``, which returns once the worker listens for wakes.

        A worker runs once: make a new one to run again.

        Raises:
            RuntimeError: The worker already ran.
            SupervisorEscalated: A long-lived actor (listener, timer, sweeper) crashed more
                than ``max_restarts`` times within ``restart_window_s``; the claimed jobs
                were released first.
            StoreClosed: The store was closed under the worker.
        """
        if self._started:
            raise RuntimeError("this Worker already ran; create a new Worker to run again")
        self._started = True
        inbox_send, inbox = trio.open_memory_channel[_Message](math.inf)
        timer_send, timer_inbox = trio.open_memory_channel[_TimerRequest](math.inf)
        self._inbox, self._timer_inbox = inbox_send, timer_send
        if self._stop_requested:
            inbox_send.send_nowait(_Stop())
        self._log(logging.INFO, "worker_start", None, "starting")
        failure: BaseException | None = None
        try:
            async with open_loop_if_needed(self._handlers.values()), trio.open_nursery() as jobs:
                self._jobs = jobs
                try:
                    async with open_supervisor(
                        name=f"worker {self._worker_id}",
                        max_restarts=self._max_restarts,
                        restart_window_s=self._restart_window_s,
                        restart_delay_s=0.5,
                        restart_delay_max_s=max(0.5, min(30.0, self._poll_interval_s)),
                    ) as supervisor:
                        self._supervisor = supervisor
                        await supervisor.start(self._listener_actor, inbox_send, name="listener")
                        await supervisor.start(
                            self._timer_actor, inbox_send, timer_inbox, name="timer"
                        )
                        await supervisor.start(self._sweep_actor, name="sweeper")
                        task_status.started()
                        await self._dispatch(inbox)
                finally:
                    await self._finalize(inbox)
        except BaseExceptionGroup as group:
            failure = lone_exception(group)
        finally:
            self._log(logging.INFO, "worker_stop", None, "stopped")
            self._finished = True
            for send in self._subscribers:
                send.close()
            self._subscribers.clear()
        if failure is not None:
            raise failure

    # --- long-lived actors -----------------------------------------------------------

    async def _listener_actor(
        self, inbox: trio.MemorySendChannel[_Message], *, task_status: trio.TaskStatus[None]
    ) -> None:
        """R3: forward every wake of the served queues to the dispatcher. After each
        (re)start it sends a wake for all queues: wakes sent while it was gone are lost."""
        async with self._store.open_wake_listener(self._queues) as listener:
            task_status.started()
            await inbox.send(_Wake(frozenset(q.name for q in self._queues)))
            while True:
                woken = await listener.wait()
                if woken:
                    await inbox.send(_Wake(woken))

    async def _timer_actor(
        self,
        inbox: trio.MemorySendChannel[_Message],
        requests: trio.MemoryReceiveChannel[_TimerRequest],
        *,
        task_status: trio.TaskStatus[None],
    ) -> None:
        """R4: tick every ``poll_interval_s`` and when a delayed job the dispatcher told it
        about becomes due; and tell the dispatcher when claims have run for one heartbeat
        interval (R6). Its pending timers live on the worker, so a restart loses none."""
        task_status.started()
        heap = self._timers
        next_tick = trio.current_time() + self._poll_interval_s
        while True:
            with trio.move_on_at(min(next_tick, heap[0][0]) if heap else next_tick):
                at, message = await requests.receive()
                self._timer_seq += 1
                heapq.heappush(heap, (at, self._timer_seq, message))
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
                next_tick = now + self._poll_interval_s
            if tick:
                await inbox.send(_Tick())

    async def _sweep_actor(self, *, task_status: trio.TaskStatus[None]) -> None:
        """R10: ``sweep_expired`` on every served queue, now and every
        ``sweep_interval_s``. A failing sweep is logged and tried again next time."""
        task_status.started()
        while True:
            for queue in self._queues:
                try:
                    result = await queue.sweep_expired()
                except Exception as exc:
                    self._counts["engine_errors"] += isinstance(exc, EngineError)
                    self._log(
                        logging.WARNING,
                        "sweep_failed",
                        None,
                        "sweep of queue %r failed (%s: %s); next try in %gs",
                        queue.name,
                        type(exc).__name__,
                        exc,
                        self._sweep_interval_s,
                        queue=queue.name,
                        error=_describe(exc),
                    )
                else:
                    if result.expired or result.purged:
                        self._log(
                            logging.INFO,
                            "sweep",
                            None,
                            "swept queue %r: %d expired, %d purged",
                            queue.name,
                            result.expired,
                            result.purged,
                            queue=queue.name,
                        )
            await trio.sleep(self._sweep_interval_s)

    # --- the dispatcher --------------------------------------------------------------

    async def _dispatch(self, inbox: trio.MemoryReceiveChannel[_Message]) -> None:
        """R2: the only task changing job state. Runs until a stop is requested."""
        self._dirty = {q.name for q in self._queues}
        while not self._stop_requested:
            await self._claim()
            message = await inbox.receive()
            await self._handle(message, inbox)

    async def _handle(self, message: _Message, inbox: trio.MemoryReceiveChannel[_Message]) -> None:
        if _coalesced(message):
            await self._apply_coalesced(message, inbox)
        elif isinstance(message, _Wake):
            self._dirty |= message.queues
        elif isinstance(message, _Tick):
            self._dirty = {q.name for q in self._queues}
            await self._apply_pending()
        elif isinstance(message, _HeartbeatsDue):
            await self._start_heartbeats(message.slots)
        # _Stop: the loops check self._stop_requested

    async def _claim(self) -> None:
        """Claim ``min(free slots, claim_batch_max)`` per woken queue, round-robin, and
        start a job actor per claim. A queue stays woken while its claims come back full
        (drain); a short claim means it is empty for now."""
        queues = self._queues
        while not self._stop_requested and self._dirty:
            free = self._concurrency - len(self._slots)
            if free <= 0:
                return
            start = self._rotation % len(queues)
            self._rotation += 1
            for queue in queues[start:] + queues[:start]:
                free = self._concurrency - len(self._slots)
                if free <= 0 or self._stop_requested:
                    return
                if queue.name not in self._dirty:
                    continue
                n = min(free, self._claim_batch_max)
                sent_at = trio.current_time()
                try:
                    handles = await queue.claim_batch(self._worker_id, n)
                except EngineError as exc:
                    # R8: try again on the next wake or tick (the cap of the backoff).
                    self._dirty.discard(queue.name)
                    self._engine_error("claim", None, exc, queue=queue.name)
                    continue
                self._start_jobs(queue.name, handles, n, sent_at)

    def _start_jobs(
        self, queue_name: str, handles: list[JobHandle], asked: int, sent_at: float
    ) -> None:
        """Start a job actor per claimed handle (``asked`` were asked for: a short claim
        means the queue is empty for now, so it is no longer woken; the claim was sent at
        trio time ``sent_at``)."""
        if len(handles) < asked:
            self._dirty.discard(queue_name)
        if not handles:
            return
        assert self._jobs is not None
        assert self._timer_inbox is not None
        now = trio.current_time()
        handler = self._handlers[queue_name]
        heartbeats: dict[float, list[_Slot]] = {}
        for handle in handles:
            job = handle.job
            interval = self._heartbeat_interval_s or job.visibility_timeout_s / 3
            lease_until = sent_at + job.visibility_timeout_s
            slot = _Slot(
                handle=handle,
                handler=handler,
                claimed_at=now,
                heartbeat_interval_s=interval,
                scope=trio.CancelScope(shield=True, deadline=lease_until),
                lease_until=lease_until,
            )
            self._slots.add(slot)
            heartbeats.setdefault(interval, []).append(slot)
            self._counts["claimed"] += 1
            if self._wants(logging.DEBUG):
                self._log(logging.DEBUG, "claim", job, "claimed job %d", job.id)
            self._jobs.start_soon(self._job_actor, slot, name=f"job {job.queue}/{job.id}")
        # R6: a claim's heartbeat actor starts once its handler has run for one interval
        # (most handlers finish sooner and never need one).
        for interval, due in heartbeats.items():
            self._timer_inbox.send_nowait((now + interval, _HeartbeatsDue(tuple(due))))

    async def _start_heartbeats(self, slots: tuple[_Slot, ...]) -> None:
        """R6: these claims' handlers have run for one heartbeat interval: renew the
        claims of those still running (one statement per queue), and start a heartbeat
        actor beside each to renew it from now on."""
        assert self._jobs is not None
        await self._renew(slots)
        for slot in slots:
            if slot in self._slots and not (slot.finished or slot.reported or slot.lost):
                slot.heartbeat_scope = trio.CancelScope(shield=True)
                job = slot.handle.job
                self._jobs.start_soon(
                    self._heartbeat_actor, slot, name=f"heartbeat {job.queue}/{job.id}"
                )

    async def _heartbeat_group(self, queue_name: str, slots: list[_Slot]) -> None:
        """R6: renew one queue's claims in one statement; a refusal cancels that job
        actor at once. On an engine error the claims are left as they are (the next
        heartbeat tries again, R8)."""
        queue = self._queue_by_name[queue_name]
        sent_at = trio.current_time()
        try:
            results = await queue.heartbeat_handles([slot.handle for slot in slots])
        except EngineError as exc:
            for slot in slots:
                self._engine_error("heartbeat", slot.handle.job, exc)
            return
        for slot, renewed in zip(slots, results, strict=True):
            if renewed:
                # The lease now runs until (at the latest) sent_at + visibility timeout.
                slot.lease_until = sent_at + slot.handle.job.visibility_timeout_s
                if not slot.finished:
                    slot.scope.deadline = slot.lease_until
                self._log(logging.DEBUG, "heartbeat", slot.handle.job, "renewed the claim")
            else:
                self._lose(slot, "heartbeat refused")

    def _lose(self, slot: _Slot, why: str) -> None:
        if not slot.lost:
            slot.lost = True
            self._counts["lease_lost"] += 1
            self._log(
                logging.WARNING,
                "lease_lost",
                slot.handle.job,
                "lost the claim (%s); the handler is cancelled and its outcome discarded",
                why,
            )
        _cancel(slot)

    async def _apply_coalesced(
        self, first: _Outcome | _HeartbeatRequest, inbox: trio.MemoryReceiveChannel[_Message]
    ) -> None:
        """R2 coalescing: take every message already waiting in the inbox; apply all the
        outcomes among them with one statement per queue and kind (``ack_handles``,
        ``retry_handles``, ``fail_handles``), then renew all the due heartbeats among
        them with one ``heartbeat_handles`` statement per queue (each still fenced by its
        claim token), then handle the other messages in order. With an empty inbox this
        is a lone outcome or heartbeat, applied at once (latency first)."""
        taken: list[_Outcome | _HeartbeatRequest] = [first]
        others: list[_Message] = []
        while True:
            try:
                message = inbox.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
            if _coalesced(message):
                taken.append(message)
            else:
                others.append(message)
        requests = [m for m in taken if isinstance(m, _HeartbeatRequest)]
        try:
            await self._apply_outcomes([m for m in taken if isinstance(m, _Outcome)])
            await self._renew([request.slot for request in requests])
        finally:
            for request in requests:
                request.done.set()
        for message in others:
            await self._handle(message, inbox)

    async def _apply_outcomes(self, outcomes: list[_Outcome]) -> None:
        """Apply these job actors' outcomes, one statement per queue and kind. The
        outcome of a claim found lost is discarded; a ``"cancelled"`` one (the grace ran
        out) becomes a release."""
        for outcome in outcomes:
            slot = outcome.slot
            slot.reported = True
            if slot.lost:
                self._slots.discard(slot)
                continue
            if outcome.kind == "lapsed":
                if slot.lease_until > trio.current_time():
                    # A renewal sent before the deadline was accepted after the handler
                    # had been stopped: the claim is still ours, so give the job back
                    # now rather than leave an unused lease for a visibility timeout.
                    outcome = _Outcome(slot, "release", LEASE_UNCERTAIN, 0.0)
                else:
                    # R6/R8: no renewal got through before the lease ran out (the store
                    # was unreachable); another worker may hold the job now.
                    self._lose(slot, "its lease ran out: no renewal got through in time")
                    self._slots.discard(slot)
                    continue
            if outcome.kind == "cancelled":
                # The dispatcher cancelled the job actor: the lease was lost (handled
                # above) or the worker is stopping and the grace period ran out.
                outcome = _Outcome(slot, "release", WORKER_STOPPED, 0.0)
            slot.pending = outcome
        await self._apply_groups([outcome.slot for outcome in outcomes])

    async def _apply_pending(self) -> None:
        """Apply again the outcomes whose application failed (R8)."""
        await self._apply_groups(list(self._slots))

    async def _apply_groups(self, slots: list[_Slot]) -> None:
        """Apply the pending outcomes of these slots, one statement per queue and kind
        (a release is a retry). On an engine error they stay pending, to be applied again
        on the next tick (R8)."""
        groups: dict[tuple[str, str], list[_Slot]] = {}
        for slot in slots:
            if slot.pending is not None and slot in self._slots:
                kind = "retry" if slot.pending.kind == "release" else slot.pending.kind
                groups.setdefault((slot.handle.job.queue, kind), []).append(slot)
        if not groups:
            await trio.lowlevel.checkpoint()
        for (queue_name, kind), group in groups.items():
            queue = self._queue_by_name[queue_name]
            try:
                if kind == "ack":
                    results = await self._ack_and_claim(queue, group)
                elif kind == "fail":
                    results = await queue.fail_handles(
                        [(slot.handle, _pending(slot).error) for slot in group]
                    )
                else:
                    results = await queue.retry_handles(
                        [
                            (slot.handle, _pending(slot).error, _pending(slot).delay_s)
                            for slot in group
                        ]
                    )
            except EngineError as exc:
                for slot in group:
                    self._engine_error(kind, slot.handle.job, exc)
                continue
            for slot, done in zip(group, results, strict=True):
                job = slot.handle.job
                self._settle(slot, _pending(slot), done, at_budget=job.attempts >= job.max_attempts)

    async def _ack_and_claim(self, queue: Queue, group: list[_Slot]) -> list[bool]:
        """Ack these slots' jobs; if the queue is woken and slots will be free, claim its
        fair share of them in the same statement (``ack_handles_and_claim``, D21: one
        round trip per cycle when draining) and start their job actors."""
        handles = [slot.handle for slot in group]
        free = self._concurrency - len(self._slots) + len(group)
        if self._stop_requested or queue.name not in self._dirty or free <= 0:
            return await queue.ack_handles(handles)
        # Share the freed slots among the woken queues, so a queue with a deep backlog
        # cannot starve the others (the rest is claimed round robin by _claim).
        n = min(-(-free // len(self._dirty)), self._claim_batch_max)
        sent_at = trio.current_time()
        try:
            results, claimed = await queue.ack_handles_and_claim(handles, self._worker_id, n)
        except EngineError:
            # R8: try the claim again on the next wake or tick, like a failed claim.
            self._dirty.discard(queue.name)
            raise
        self._start_jobs(queue.name, claimed, n, sent_at)
        return results

    async def _renew(self, slots: Iterable[_Slot]) -> None:
        """Renew these claims with one ``heartbeat_handles`` statement per queue. Claims
        already settled, lost or reported are skipped (their handles may be consumed)."""
        groups: dict[str, list[_Slot]] = {}
        for slot in slots:
            if slot not in self._slots or slot.lost or slot.reported:
                continue
            group = groups.setdefault(slot.handle.job.queue, [])
            if slot not in group:
                group.append(slot)
        if not groups:
            await trio.lowlevel.checkpoint()
        for name, slots in groups.items():
            await self._heartbeat_group(name, slots)

    def _settle(self, slot: _Slot, outcome: _Outcome, done: bool, *, at_budget: bool) -> None:
        """Account for an applied outcome: ``done`` is the engine's answer."""
        job = slot.handle.job
        self._slots.discard(slot)
        slot.pending = None
        if not done:
            self._lose(slot, f"{outcome.kind} refused")
            return
        if outcome.kind == "ack":
            self._counts["acked"] += 1
            if self._wants(logging.INFO):
                self._log(logging.INFO, "ack", job, "acked")
        elif outcome.kind == "fail" or at_budget:
            self._counts["dead_lettered"] += 1
            self._log(
                logging.WARNING,
                "dead",
                job,
                "dead-lettered (%s)",
                outcome.error or outcome.kind,
                error=outcome.error,
            )
        elif outcome.kind == "release":
            self._counts["released"] += 1
            self._log(
                logging.INFO, "release", job, "released (%s)", outcome.error, error=outcome.error
            )
        else:
            self._counts["retried"] += 1
            self._log(
                logging.INFO,
                "retry",
                job,
                "retried (%s)",
                outcome.error,
                error=outcome.error,
                delay_s=outcome.delay_s,
            )
        if outcome.kind in ("retry", "release") and not at_budget and outcome.delay_s is not None:
            assert self._timer_inbox is not None
            self._timer_inbox.send_nowait((trio.current_time() + outcome.delay_s, None))

    # --- job actors ------------------------------------------------------------------

    async def _job_actor(self, slot: _Slot) -> None:
        """R5: run the handler in the slot's own (shielded) cancel scope and report the
        outcome to the dispatcher; its heartbeat actor (if one was started) stops with
        it. Never raises an :class:`Exception`; ``Cancelled`` only reaches it through
        ``slot.scope``."""
        assert self._inbox is not None
        outcome: _Outcome | None = None
        try:
            with slot.scope:
                outcome = await self._run_handler(slot)
        finally:
            slot.finished = True
            if slot.heartbeat_scope is not None:
                slot.heartbeat_scope.cancel()
            if outcome is None:
                # Cancelled (by the dispatcher, or by the lease deadline), or a
                # BaseException (KeyboardInterrupt) escaped the handler: the dispatcher
                # must learn that this claim is to be released or is lost.
                lapsed = slot.scope.cancelled_caught and not slot.cancel_requested
                outcome = _Outcome(slot, "lapsed" if lapsed else "cancelled")
            self._inbox.send_nowait(outcome)

    async def _run_handler(self, slot: _Slot) -> _Outcome:
        job = slot.handle.job
        start = trio.current_time()
        self._counts["started"] += 1
        self._claim_to_start_total_s += start - slot.claimed_at
        if self._wants(logging.DEBUG):
            self._log(logging.DEBUG, "start", job, "handler started")
        try:
            if self._job_timeout_s is None:
                await slot.handler(job)
                return _Outcome(slot, "ack")
            with trio.move_on_after(self._job_timeout_s) as timeout:
                await slot.handler(job)
            if timeout.cancelled_caught:
                self._counts["timed_out"] += 1
                error = f"job timed out after {self._job_timeout_s:g}s (job_timeout_s)"
                self._log(logging.WARNING, "timeout", job, "%s", error, error=error)
                return _Outcome(slot, "retry", error)
            return _Outcome(slot, "ack")
        except Retry as retry:
            return _Outcome(slot, "retry", _error_text(retry.error), retry.delay_s)
        except Fail as fail:
            return _Outcome(slot, "fail", _error_text(fail.error))
        except (Exception, asyncio.CancelledError) as exc:
            # asyncio.CancelledError is a BaseException, but when a handler raises one of
            # its own (trio never does) it is the handler's failure, not a cancellation.
            self._counts["handler_errors"] += 1
            error = _describe(exc)
            self._log(
                logging.WARNING,
                "handler_error",
                job,
                "handler raised %s",
                type(exc).__name__,
                error=error,
                exc_info=exc,
            )
            return _Outcome(slot, "retry", error)
        finally:
            self._counts["finished"] += 1
            run_time = trio.current_time() - start
            self._run_time_total_s += run_time
            if self._wants(logging.DEBUG):
                self._log(logging.DEBUG, "finish", job, "handler finished after %.3fs", run_time)

    async def _heartbeat_actor(self, slot: _Slot) -> None:
        """R6: started by the dispatcher once the handler has run for one
        ``heartbeat_interval_s`` (and the claim renewed): every interval from then on,
        ask the dispatcher to renew the claim and wait for it to have done so. Stopped
        through ``slot.heartbeat_scope`` when the job actor ends."""
        assert self._inbox is not None
        assert slot.heartbeat_scope is not None
        with slot.heartbeat_scope:
            while True:
                await trio.sleep(slot.heartbeat_interval_s)
                done = trio.Event()
                self._inbox.send_nowait(_HeartbeatRequest(slot, done))
                await done.wait()

    # --- graceful stop ---------------------------------------------------------------

    async def _finalize(self, inbox: trio.MemoryReceiveChannel[_Message]) -> None:
        """R7: stop claiming, give running handlers ``shutdown_grace_s``, cancel the rest,
        and apply every outcome (releasing the cancelled jobs). Shielded, and bounded."""
        self._stop_requested = True
        with trio.CancelScope(shield=True) as shield:
            shield.deadline = trio.current_time() + self._shutdown_grace_s + _FINALIZE_TIMEOUT_S
            try:
                if self._slots:
                    self._log(
                        logging.INFO,
                        "draining",
                        None,
                        "stopping: waiting up to %gs for %d running handlers",
                        self._shutdown_grace_s,
                        len(self._slots),
                    )
                grace_deadline = min(
                    trio.current_time() + self._shutdown_grace_s, self._grace_deadline
                )
                with trio.move_on_at(grace_deadline) as self._grace_scope:
                    await self._serve_until_idle(inbox)
                for slot in self._slots:
                    if not slot.reported:
                        _cancel(slot)
                await self._serve_until_idle(inbox)
            finally:
                for slot in self._slots:
                    _cancel(slot)
        if self._slots:
            self._log(
                logging.ERROR,
                "finalize_incomplete",
                None,
                "%d claims could not be finalized in time; their leases will lapse and other "
                "workers will reclaim them",
                len(self._slots),
            )

    async def _serve_until_idle(self, inbox: trio.MemoryReceiveChannel[_Message]) -> None:
        """Handle messages (no claiming) until no claim is in flight. Outcomes whose
        application failed are retried with capped backoff."""
        delay = _FINALIZE_RETRY_S[0]
        while self._slots:
            if all(slot.reported for slot in self._slots):
                # Only outcomes that failed to apply are left.
                await trio.sleep(delay)
                delay = min(delay * 2, _FINALIZE_RETRY_S[1])
                await self._apply_pending()
                continue
            await self._handle(await inbox.receive(), inbox)

    # --- logging ---------------------------------------------------------------------

    def _engine_error(
        self, operation: str, job: Job | None, exc: EngineError, *, queue: str | None = None
    ) -> None:
        self._counts["engine_errors"] += 1
        self._log(
            logging.WARNING,
            "engine_error",
            job,
            "%s failed (%s: %s); will try again",
            operation,
            type(exc).__name__,
            exc,
            queue=queue,
            error=_describe(exc),
        )

    def _wants(self, level: int) -> bool:
        """Whether a record at ``level`` would go anywhere (a logger or an event stream):
        the per-job records skip building their arguments when not (the hot path)."""
        return bool(self._subscribers) or logger.isEnabledFor(level)

    def _log(
        self,
        level: int,
        event: str,
        job: Job | None,
        message: str,
        *args: object,
        queue: str | None = None,
        error: str | None = None,
        delay_s: float | None = None,
        exc_info: BaseException | None = None,
    ) -> None:
        """Log one transition with the structured fields and publish it on the event
        streams (R9); never the payload."""
        if job is not None:
            queue = job.queue
        if logger.isEnabledFor(level):
            prefix_args: tuple[object, ...]
            if job is None:
                prefix, prefix_args = "worker %s: ", (self._worker_id,)
                fields = _fields(self._worker_id, event, queue=queue)
            else:
                prefix = "worker %s: job %s/%d attempt %d: "
                prefix_args = (self._worker_id, job.queue, job.id, job.attempts)
                fields = _fields(
                    self._worker_id, event, job_id=job.id, queue=job.queue, attempt=job.attempts
                )
            logger.log(
                level, prefix + message, *prefix_args, *args, exc_info=exc_info, extra=fields
            )
        if self._subscribers:
            self._publish(
                WorkerEvent(
                    kind=event,
                    worker_id=self._worker_id,
                    at=trio.current_time(),
                    wall_time=time.time(),
                    job=job,
                    queue=queue,
                    message=message % args if args else message,
                    error=error,
                    delay_s=delay_s,
                )
            )

    def _publish(self, event: WorkerEvent) -> None:
        """Hand ``event`` to every subscriber without blocking (full buffers drop it)."""
        for send in list(self._subscribers):
            try:
                send.send_nowait(event)
            except trio.WouldBlock:
                self._counts["events_dropped"] += 1
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._subscribers.remove(send)


def _fields(
    worker_id: str,
    event: str,
    *,
    job_id: int | None = None,
    queue: str | None = None,
    attempt: int | None = None,
) -> dict[str, Any]:
    return {
        "event": event,
        "job_id": job_id,
        "queue": queue,
        "attempt": attempt,
        "worker_id": worker_id,
    }


def _cancel(slot: _Slot) -> None:
    """The dispatcher cancels a job actor (lease lost, or the grace is over)."""
    slot.cancel_requested = True
    slot.scope.cancel()


def _pending(slot: _Slot) -> _Outcome:
    """The slot's outcome waiting to be applied."""
    assert slot.pending is not None
    return slot.pending


def _error_text(text: object) -> str | None:
    """Make any error text storable: a str without NUL or lone surrogates, at most
    ``ERROR_MAX_CHARS`` characters."""
    if text is None:
        return None
    if not isinstance(text, str):
        text = repr(text)
    text = text.replace("\x00", "\\x00")
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > ERROR_MAX_CHARS:
        marker = "... [truncated]"
        text = text[: ERROR_MAX_CHARS - len(marker)] + marker
    return text


def _describe(exc: BaseException) -> str:
    """``"TypeName: message"`` for ``last_error``, even if ``str(exc)`` fails."""
    try:
        message = str(exc)
    except Exception:
        message = "<str() failed>"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    result = _error_text(text)
    assert result is not None
    return result


def _check_count(param: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgument(f"{param} must be an int >= {minimum}; got {value!r}")
    return value


def _positive(param: str, value: object) -> float:
    return v.check_duration(param, value, min_s=0, min_inclusive=False)


def _check_handlers(
    store: Store, handlers: Mapping[str | Queue, Handler]
) -> tuple[tuple[Queue, ...], dict[str, Handler]]:
    if not isinstance(store, Store):
        raise InvalidArgument(f"store must be a Store; got {type(store).__name__}")
    if not hasattr(handlers, "items") or isinstance(handlers, str | bytes):
        raise InvalidArgument(
            f"handlers must map queue names or Queue handles to async handlers; got "
            f"{type(handlers).__name__}"
        )
    queues: list[Queue] = []
    by_name: dict[str, Handler] = {}
    for key, handler in handlers.items():
        if isinstance(key, Queue):
            if key._store is not store:
                raise InvalidArgument(f"queue handle {key.name!r} belongs to another store")
            queue = key
        elif isinstance(key, str):
            queue = store.queue(key)
        else:
            raise InvalidArgument(
                f"handlers keys must be queue names or Queue handles; got {type(key).__name__}"
            )
        if queue.name in by_name:
            raise InvalidArgument(f"handlers names queue {queue.name!r} twice; name it once")
        if not is_async_callable(handler):
            raise InvalidArgument(
                f"the handler of queue {queue.name!r} must be an async function (async def "
                f"handler(job)), a functools.partial of one or an object with an async "
                f"__call__; got {type(handler).__name__}"
            )
        queues.append(queue)
        by_name[queue.name] = handler
    if not queues:
        raise InvalidArgument("handlers must name at least one queue; got none")
    return tuple(queues), by_name
