"""The worker: claims jobs from a store and runs their handlers (rules R1-R14).

Why it is shaped this way. Every decision about a claim — may its handler start, is its
outcome still ours to send, what a refused renewal or a stop does to it — is made by the
synchronous :class:`~._book.ClaimBook` (no trio, no clock reads, no store: unit-tested
without an event loop). What is left here are thin trio actors that feed the book events
with the time they read and carry out its decisions:

- the **dispatcher** (R2, :mod:`._dispatcher`), the only task that sends statements
  about claims: it receives everything else as messages on one trio memory channel, so
  a heartbeat refusal and a handler's outcome can never both act on a job, and it
  coalesces the outcomes waiting
  in its inbox into one statement per queue and kind (``ack_handles``, ``retry_handles``,
  ``fail_handles``, fenced per job by the claim token: D18, D20), the due heartbeats
  likewise (``heartbeat_handles``; D19);
- the **listener** (R3) forwards the store's wakes;
- the **re-poll timer** (R4) ticks every ``poll_interval_s`` and when a delayed job the
  dispatcher knows of becomes due;
- the **sweeper** (R10) runs ``sweep_expired`` on a cadence (it changes no claimed job);
- the **registry actor** (Q21.3, :mod:`._registry`) keeps the worker's row in the
  store's worker registry: registered at start, a beat every 15 s, stopped on the way
  out (one statement per interval, never one per job);
- one **job actor** per claim (R5) runs the handler in its own cancel scope — unless the
  book says the claim's lease already ran out (item 5: a worker frozen between a claim
  and the start never runs a stale claim's handler) — and reports the end, with a
  **heartbeat actor** beside it (R6) asking the dispatcher to renew the claim.

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

import contextlib
import logging
import math
import os
import secrets
import socket
from typing import TYPE_CHECKING, TypeAlias, final

import trio

from .._core import _validate as v
from .._util import lone_exception
from ._actors import (
    Message,
    Stop,
    TimerRequest,
    Timers,
    serve_sweeps,
    serve_timer,
    serve_wakes,
)
from ._asyncio import open_loop_if_needed
from ._book import LEASE_UNCERTAIN, WORKER_STOPPED, ClaimBook
from ._checks import (
    check_concurrency,
    check_count,
    check_handlers,
    check_queue_timeouts,
    positive,
    with_handler_schedules,
)
from ._dispatcher import Dispatcher
from ._events import (
    ERROR_MAX_CHARS,
    EVENT_KINDS,
    Reporter,
    WorkerEvent,
    WorkerStatistics,
    statistics_of,
)
from ._jobs import JobActors
from ._periodic import PeriodicActor
from ._registry import RegistryActor
from ._supervisor import open_supervisor

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping

    from .._core import Job, Periodic
    from .._store import Queue, Store
    from ._supervisor import Supervisor

#: A job handler: ``async def handler(job: Job) -> None``.
Handler: TypeAlias = "Callable[[Job], Awaitable[bytes | bytearray | memoryview | None]]"

logger = logging.getLogger("alkstore_trio.worker")

__all__ = [
    "ERROR_MAX_CHARS",
    "EVENT_KINDS",
    "LEASE_UNCERTAIN",
    "WORKER_STOPPED",
    "Handler",
    "Worker",
    "WorkerEvent",
    "WorkerStatistics",
]


@final
class Worker:
    """Claims jobs from a store's queues and runs a handler for each (rules R1-R14).

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
            to ``async def handler(job) -> None``; or a :class:`~alkstore_trio.Tasks`
            registry (its queues, each routed by task name, and its periodic tasks).
            A handle's options apply to the worker's sweeps; a name gets
            ``store.queue(name)``. Empty only with
            ``periodic`` schedules: a scheduler-only worker, which claims nothing (R14).
        concurrency: The most handlers running at once (>= 1); or (R12.5) a mapping of
            every served queue to its own pool size, the total being their sum.
        queue_concurrency: R12: caps for some queues within ``concurrency``: at most
            that many claims of the queue are held (and its handlers run) at once, and
            a queue at its cap never keeps the others from being claimed. Maps served
            queue names or handles to ints from 1 to ``concurrency``.
        worker_id: Stored as ``claimed_by``; default ``"{hostname}:{pid}:{random}"``.
        poll_interval_s: Seconds between re-polls, the safety net for lost wakes (> 0).
        heartbeat_interval_s: Seconds between claim renewals (> 0); default a third of
            each job's ``visibility_timeout_s``.
        job_timeout_s: Seconds a handler may run before it is cancelled and its job
            retried (> 0), or ``None`` for no limit: every queue's default.
        queue_job_timeout_s: R13: per-queue overrides of ``job_timeout_s`` (> 0, or
            ``None`` for no limit on that queue), by served queue name or handle.
        shutdown_grace_s: On stop, seconds running handlers may still finish (>= 0)
            before they are cancelled and their jobs released.
        claim_batch_max: The most jobs one claim asks for (>= 1).
        prefetch: Claims held beyond ``concurrency`` (>= 0), waiting for a handler to
            finish: the next batch is claimed (with the acks, in one statement) while
            the current one runs, so the database's time overlaps the handlers'. Their
            leases run while they wait (renewed like running claims, and a claim whose
            lease ran out never starts); a stop releases them at once. 0 (the default):
            claim only what can start at once. A capped queue's claims stay within its
            cap (R12.4).
        sweep_interval_s: Seconds between ``sweep_expired`` runs per queue (> 0).
        max_restarts: Restarts of the long-lived actors allowed within
            ``restart_window_s`` before the worker fails (>= 0).
        restart_window_s: The sliding window of ``max_restarts`` (> 0).
        periodic: :class:`~alkstore_trio.Periodic` schedules to fire, once per fleet (Q17.8).

    Raises:
        InvalidArgument: An argument is invalid (nothing was started).
    """

    def __init__(
        self,
        store: Store,
        handlers: Mapping[str | Queue, Handler],
        *,
        concurrency: int | Mapping[str | Queue, int] = 10,
        queue_concurrency: Mapping[str | Queue, int] | None = None,
        worker_id: str | None = None,
        poll_interval_s: float = 5.0,
        heartbeat_interval_s: float | None = None,
        job_timeout_s: float | None = None,
        queue_job_timeout_s: Mapping[str | Queue, float | None] | None = None,
        shutdown_grace_s: float = 30.0,
        claim_batch_max: int = 100,
        sweep_interval_s: float = 60.0,
        max_restarts: int = 3,
        restart_window_s: float = 60.0,
        prefetch: int = 0,
        periodic: Iterable[Periodic] = (),
    ) -> None:
        self._store = store
        self._periodic = PeriodicActor.of(store, with_handler_schedules(handlers, periodic))
        self._queues, self._handlers = check_handlers(
            store, handlers, periodic=bool(self._periodic.schedules)
        )
        total, caps = check_concurrency(store, self._handlers, concurrency, queue_concurrency)
        timeouts = check_queue_timeouts(store, self._handlers, queue_job_timeout_s)
        claim_batch_max = check_count("claim_batch_max", claim_batch_max, minimum=1)
        self._max_restarts = check_count("max_restarts", max_restarts, minimum=0)
        self._poll_interval_s = positive("poll_interval_s", poll_interval_s)
        self._sweep_interval_s = positive("sweep_interval_s", sweep_interval_s)
        self._restart_window_s = positive("restart_window_s", restart_window_s)
        if heartbeat_interval_s is not None:
            heartbeat_interval_s = positive("heartbeat_interval_s", heartbeat_interval_s)
        if job_timeout_s is not None:
            job_timeout_s = positive("job_timeout_s", job_timeout_s)
        shutdown_grace_s = v.check_duration("shutdown_grace_s", shutdown_grace_s, min_s=0)
        if worker_id is None:
            worker_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
            worker_id = worker_id[-v.WORKER_ID_MAX_CHARS :]
        self._worker_id = v.check_worker_id(worker_id)
        self._queue_by_name = {queue.name: queue for queue in self._queues}
        self._book = ClaimBook(
            self._handlers,
            concurrency=total,
            claim_batch_max=claim_batch_max,
            prefetch=check_count("prefetch", prefetch, minimum=0),
            heartbeat_interval_s=heartbeat_interval_s,
            queue_concurrency=caps,
        )
        self._reporter = Reporter(self._worker_id)
        self._log = self._reporter.log
        self._wants = self._reporter.wants
        self._subscribers = self._reporter.subscribers

        self._started = False
        self._supervisor: Supervisor | None = None
        #: The timer actor's pending timers: (trio time, sequence, message or None: tick).
        self._timers = Timers()
        self._finished = False
        self._inbox: trio.MemorySendChannel[Message] | None = None
        self._counts: dict[str, int] = {"engine_errors": 0}
        self._registry = RegistryActor.of(store, self, self._book.concurrency)  # Q21
        self._actors = JobActors(
            self._book, self._reporter, job_timeout_s, timeouts, store.max_result_bytes
        )
        self._dispatcher = Dispatcher(
            self._book,
            self._queue_by_name,
            self._handlers,
            worker_id=self._worker_id,
            actors=self._actors,
            reporter=self._reporter,
            counts=self._counts,
            shutdown_grace_s=shutdown_grace_s,
        )

    def __repr__(self) -> str:
        names = ", ".join(q.name for q in self._queues)
        if not names:
            return f"<Worker {self._worker_id!r}: periodic schedules only>"
        return f"<Worker {self._worker_id!r} on [{names}]>"

    @property
    def _stop_requested(self) -> bool:
        return self._book.stopping

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
        return statistics_of(
            self._worker_id,
            self._book.counts,
            self._actors,
            in_flight=len(self._book.claims),
            engine_errors=self._counts["engine_errors"],
            events_dropped=self._reporter.events_dropped,
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
        size = math.inf if buffer is None else check_count("buffer", buffer, minimum=1)
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
        (``release(error="worker stopped")``: ready now, the attempt given back, Q19.8),
        closes its listener and returns
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
            self._dispatcher.shorten_grace(trio.current_time() + grace_s)
        if self._book.stopping:
            return
        self._book.stop()
        if self._inbox is not None:
            self._inbox.send_nowait(Stop())

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
        inbox_send, inbox = trio.open_memory_channel[Message](math.inf)
        timer_send, timer_inbox = trio.open_memory_channel[TimerRequest](math.inf)
        self._inbox = inbox_send
        self._actors.inbox = inbox_send
        if self._book.stopping:
            inbox_send.send_nowait(Stop())
        self._log(logging.INFO, "worker_start", None, "starting")
        failure: BaseException | None = None
        try:
            async with open_loop_if_needed(self._handlers.values()), trio.open_nursery() as jobs:
                self._dispatcher.open(jobs, inbox_send, timer_send)
                self._actors.open(jobs, self._book.concurrency)
                try:
                    await self._supervise(inbox_send, inbox, timer_inbox, task_status)
                finally:
                    try:
                        await self._dispatcher.finalize(inbox)
                    finally:
                        self._actors.close()
        except BaseExceptionGroup as group:
            failure = lone_exception(group)
        finally:
            await self._registry.stop()
            self._log(logging.INFO, "worker_stop", None, "stopped")
            self._finished = True
            self._reporter.close()
        if failure is not None:
            raise failure

    async def _supervise(
        self,
        inbox_send: trio.MemorySendChannel[Message],
        inbox: trio.MemoryReceiveChannel[Message],
        timer_inbox: trio.MemoryReceiveChannel[TimerRequest],
        task_status: trio.TaskStatus[None],
    ) -> None:
        """R1: the long-lived actors under the supervisor, the dispatcher as its body.
        R14: a scheduler-only worker (no queues) runs the periodic actor alone. Q21.3:
        every worker runs the registry actor."""
        async with open_supervisor(
            name=f"worker {self._worker_id}",
            max_restarts=self._max_restarts,
            restart_window_s=self._restart_window_s,
            restart_delay_s=0.5,
            restart_delay_max_s=max(0.5, min(30.0, self._poll_interval_s)),
        ) as supervisor:
            self._supervisor = supervisor
            if self._queues:
                await self._start_queue_actors(supervisor, inbox_send, timer_inbox)
            await self._registry.start(supervisor)
            await self._periodic.start(supervisor, self._reporter, self._counts)
            task_status.started()
            await self._dispatcher.dispatch(inbox)

    async def _start_queue_actors(
        self,
        supervisor: Supervisor,
        inbox_send: trio.MemorySendChannel[Message],
        timer_inbox: trio.MemoryReceiveChannel[TimerRequest],
    ) -> None:
        """The actors of a worker that serves queues: the listener (R3), the re-poll
        timer (R4) and the sweeper (R10)."""
        await supervisor.start(
            serve_wakes, self._store, self._queues, inbox_send, self._book, name="listener"
        )
        await supervisor.start(
            serve_timer, self._timers, self._poll_interval_s, inbox_send, timer_inbox, name="timer"
        )
        await supervisor.start(
            serve_sweeps,
            self._queues,
            self._sweep_interval_s,
            self._reporter,
            self._counts,
            name="sweeper",
        )
