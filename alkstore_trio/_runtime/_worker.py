"""The worker: claims jobs from a store and runs their handlers (rules R1-R10).

Why it is shaped this way. Every decision about a claim — may its handler start, is its
outcome still ours to send, what a refused renewal or a stop does to it — is made by the
synchronous :class:`~._book.ClaimBook` (no trio, no clock reads, no store: unit-tested
without an event loop). What is left here are thin trio actors that feed the book events
with the time they read and carry out its decisions:

- the **dispatcher** (R2), the only task that sends statements about claims: it receives
  everything else as messages on one trio memory channel, so a heartbeat refusal and a
  handler's outcome can never both act on a job, and it coalesces the outcomes waiting
  in its inbox into one statement per queue and kind (``ack_handles``, ``retry_handles``,
  ``fail_handles``, fenced per job by the claim token: D18, D20), the due heartbeats
  likewise (``heartbeat_handles``; D19);
- the **listener** (R3) forwards the store's wakes;
- the **re-poll timer** (R4) ticks every ``poll_interval_s`` and when a delayed job the
  dispatcher knows of becomes due;
- the **sweeper** (R10) runs ``sweep_expired`` on a cadence (it changes no claimed job);
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
from typing import TYPE_CHECKING, Final, TypeAlias, final

import trio

from .._core import _validate as v
from .._errors import EngineError
from .._util import lone_exception
from ._actors import (
    Claimed,
    Finished,
    HeartbeatRequest,
    HeartbeatsDue,
    Message,
    Stop,
    Tick,
    TimerRequest,
    Timers,
    Wake,
    coalesced,
    serve_sweeps,
    serve_timer,
    serve_wakes,
)
from ._asyncio import open_loop_if_needed
from ._book import LEASE_UNCERTAIN, WORKER_STOPPED, ClaimBook, Outcome, Verdict
from ._book import heartbeat_groups as _heartbeat_groups
from ._checks import check_count, check_handlers, positive
from ._due import DueTimes
from ._events import (
    ERROR_MAX_CHARS,
    EVENT_KINDS,
    Reporter,
    WorkerEvent,
    WorkerStatistics,
    statistics_of,
)
from ._events import describe as _describe
from ._jobs import JobActors
from ._periodic import PeriodicActor
from ._supervisor import open_supervisor

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping

    from .._core import Job, Periodic
    from .._store import JobHandle, Queue, Store
    from ._book import Claim
    from ._supervisor import Supervisor

#: A job handler: ``async def handler(job: Job) -> None``.
Handler: TypeAlias = "Callable[[Job], Awaitable[None]]"

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

#: How long the shielded finalization may spend releasing jobs after the grace period.
_FINALIZE_TIMEOUT_S: Final = 30.0
#: Backoff between attempts to apply an outcome while stopping (capped).
_FINALIZE_RETRY_S: Final = (0.1, 2.0)


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
        prefetch: Claims held beyond ``concurrency`` (>= 0), waiting for a handler to
            finish: the next batch is claimed (with the acks, in one statement) while
            the current one runs, so the database's time overlaps the handlers'. Their
            leases run while they wait (renewed like running claims, and a claim whose
            lease ran out never starts); a stop releases them at once. 0 (the default):
            claim only what can start at once.
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
        prefetch: int = 0,
        periodic: Iterable[Periodic] = (),
    ) -> None:
        self._store, self._periodic = store, PeriodicActor.of(store, periodic)
        concurrency = check_count("concurrency", concurrency, minimum=1)
        claim_batch_max = check_count("claim_batch_max", claim_batch_max, minimum=1)
        self._max_restarts = check_count("max_restarts", max_restarts, minimum=0)
        self._poll_interval_s = positive("poll_interval_s", poll_interval_s)
        self._sweep_interval_s = positive("sweep_interval_s", sweep_interval_s)
        self._restart_window_s = positive("restart_window_s", restart_window_s)
        if heartbeat_interval_s is not None:
            heartbeat_interval_s = positive("heartbeat_interval_s", heartbeat_interval_s)
        self._job_timeout_s = (
            None if job_timeout_s is None else positive("job_timeout_s", job_timeout_s)
        )
        self._shutdown_grace_s = v.check_duration("shutdown_grace_s", shutdown_grace_s, min_s=0)
        if worker_id is None:
            worker_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
            worker_id = worker_id[-v.WORKER_ID_MAX_CHARS :]
        self._worker_id = v.check_worker_id(worker_id)
        self._queues, self._handlers = check_handlers(store, handlers)
        self._queue_by_name = {queue.name: queue for queue in self._queues}
        self._book = ClaimBook(
            self._handlers,
            concurrency=concurrency,
            claim_batch_max=claim_batch_max,
            prefetch=check_count("prefetch", prefetch, minimum=0),
            heartbeat_interval_s=heartbeat_interval_s,
        )
        self._reporter = Reporter(self._worker_id)
        self._log = self._reporter.log
        self._wants = self._reporter.wants
        self._subscribers = self._reporter.subscribers

        self._started = False
        self._supervisor: Supervisor | None = None
        #: ``stop(grace_s=...)`` caps the grace at this trio time; the running grace scope.
        self._grace_deadline = math.inf
        self._grace_scope: trio.CancelScope | None = None
        #: The timer actor's pending timers: (trio time, sequence, message or None: tick).
        self._timers = Timers()
        self._jobs: trio.Nursery | None = None
        self._finished = False
        self._inbox: trio.MemorySendChannel[Message] | None = None
        self._timer_inbox: trio.MemorySendChannel[TimerRequest] | None = None
        self._counts: dict[str, int] = {"engine_errors": 0}
        self._actors = JobActors(self._book, self._reporter, self._job_timeout_s)
        self._due = DueTimes(self._book, self._queue_by_name, self._engine_error)

    def __repr__(self) -> str:
        names = ", ".join(q.name for q in self._queues)
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
        self._inbox, self._timer_inbox = inbox_send, timer_send
        self._due.timer = timer_send
        self._actors.inbox = inbox_send
        if self._book.stopping:
            inbox_send.send_nowait(Stop())
        self._log(logging.INFO, "worker_start", None, "starting")
        failure: BaseException | None = None
        try:
            async with open_loop_if_needed(self._handlers.values()), trio.open_nursery() as jobs:
                self._jobs = jobs
                self._actors.open(jobs, self._book.concurrency)
                try:
                    await self._supervise(inbox_send, inbox, timer_inbox, task_status)
                finally:
                    try:
                        await self._finalize(inbox)
                    finally:
                        self._actors.close()
        except BaseExceptionGroup as group:
            failure = lone_exception(group)
        finally:
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
        """R1: the long-lived actors under the supervisor, the dispatcher as its body."""
        async with open_supervisor(
            name=f"worker {self._worker_id}",
            max_restarts=self._max_restarts,
            restart_window_s=self._restart_window_s,
            restart_delay_s=0.5,
            restart_delay_max_s=max(0.5, min(30.0, self._poll_interval_s)),
        ) as supervisor:
            self._supervisor = supervisor
            await supervisor.start(
                serve_wakes, self._store, self._queues, inbox_send, name="listener"
            )
            await supervisor.start(
                serve_timer,
                self._timers,
                self._poll_interval_s,
                inbox_send,
                timer_inbox,
                name="timer",
            )
            await supervisor.start(
                serve_sweeps,
                self._queues,
                self._sweep_interval_s,
                self._reporter,
                self._counts,
                name="sweeper",
            )
            await self._periodic.start(supervisor, self._reporter, self._counts)
            task_status.started()
            await self._dispatch(inbox)

    # --- the dispatcher --------------------------------------------------------------

    async def _dispatch(self, inbox: trio.MemoryReceiveChannel[Message]) -> None:
        """R2: the only task sending statements about claims. Runs until a stop."""
        book = self._book
        if not book.pipelined:
            while not book.stopping:
                await self._claim()
                await self._due.look_up()  # R11: when the drained queues' next jobs are due
                await self._handle(await inbox.receive(), inbox)
            return
        # Pipelined (prefetch): a claim statement is in flight, on a connection of its
        # own, while the dispatcher goes on applying outcomes; its answer is a message.
        async with trio.open_nursery() as claims:
            while not book.stopping:
                self._send_pipelined_claim(claims)
                await self._due.look_up()
                await self._handle(await inbox.receive(), inbox)

    def _send_pipelined_claim(self, nursery: trio.Nursery) -> None:
        next_claim = self._book.next_pipelined_claim()
        if next_claim is not None:
            nursery.start_soon(self._claim_task, *next_claim)

    async def _claim_task(self, name: str, n: int) -> None:
        """Pipelined: one claim statement; the answer goes to the dispatcher's inbox."""
        assert self._inbox is not None
        sent_at = trio.current_time()
        try:
            handles = await self._queue_by_name[name].claim_batch(self._worker_id, n)
        except EngineError as exc:
            self._inbox.send_nowait(Claimed(name, n, sent_at, None, exc))
        else:
            self._inbox.send_nowait(Claimed(name, n, sent_at, handles))

    async def _on_claimed(self, message: Claimed) -> None:
        book = self._book
        book.claim_answered()
        if message.handles is None:
            assert message.error is not None
            # R8: try again on the next wake or tick (the cap of the backoff).
            book.claim_failed(message.queue)
            self._engine_error("claim", None, message.error, queue=message.queue)
            return
        self._start_jobs(message.queue, message.handles, message.asked, message.sent_at)
        if book.stopping:
            # Answered after the stop: given back at once, never run (R7).
            await self._apply_outcomes(book.release_unstarted())

    async def _handle(self, message: Message, inbox: trio.MemoryReceiveChannel[Message]) -> None:
        if coalesced(message):
            await self._apply_coalesced(message, inbox)
        elif isinstance(message, Wake):
            self._due.on_wake(message)
        elif isinstance(message, Tick):
            await self._apply_groups(self._book.tick())
        elif isinstance(message, HeartbeatsDue):
            await self._start_heartbeats(message.claims)
        elif isinstance(message, Claimed):
            await self._on_claimed(message)
        # Stop: the loops check self._book.stopping

    async def _claim(self) -> None:
        """Claim what the book asks for, per woken queue, round-robin, and start a job
        actor per claim. A queue stays woken while its claims come back full (drain); a
        short claim means it is empty for now."""
        book = self._book
        while book.wants_claim():
            for name in book.claim_round():
                n = book.claim_size(name)
                if n is None:
                    return
                if n == 0:
                    continue
                queue = self._queue_by_name[name]
                sent_at = trio.current_time()
                try:
                    handles = await queue.claim_batch(self._worker_id, n)
                except EngineError as exc:
                    # R8: try again on the next wake or tick (the cap of the backoff).
                    book.claim_failed(name)
                    self._engine_error("claim", None, exc, queue=name)
                    continue
                self._start_jobs(name, handles, n, sent_at)

    def _start_jobs(self, queue: str, handles: list[JobHandle], asked: int, sent_at: float) -> None:
        """Enter the claimed handles in the book (``asked`` were asked for, in a claim sent
        at trio time ``sent_at``) and start a job actor for each."""
        now = trio.current_time()
        claims = self._book.claimed(queue, handles, asked, sent_at=sent_at, now=now)
        if not claims:
            return
        assert self._jobs is not None
        assert self._timer_inbox is not None
        handler = self._handlers[queue]
        debug = self._wants(logging.DEBUG)
        for claim in claims:
            claim.scope = trio.CancelScope(shield=True, deadline=claim.lease_until)
            job = claim.handle.job
            if debug:
                self._log(logging.DEBUG, "claim", job, "claimed job %d", job.id)
            self._actors.dispatch(claim, handler)
        # R6: a claim's heartbeat actor starts once its handler has run for one interval
        # (most handlers finish sooner and never need one).
        for interval, due in _heartbeat_groups(claims).items():
            self._timer_inbox.send_nowait((now + interval, HeartbeatsDue(tuple(due))))

    async def _start_heartbeats(self, claims: tuple[Claim, ...]) -> None:
        """R6: these claims' handlers have run for one heartbeat interval: renew the
        claims of those still running (one statement per queue), and start a heartbeat
        actor beside each to renew it from now on."""
        assert self._jobs is not None
        await self._renew(claims)
        for claim in claims:
            if self._book.needs_heartbeat_actor(claim):
                claim.heartbeat_scope = trio.CancelScope(shield=True)
                job = claim.handle.job
                self._jobs.start_soon(
                    self._actors.run_heartbeat, claim, name=f"heartbeat {job.queue}/{job.id}"
                )

    async def _renew(self, claims: Iterable[Claim]) -> None:
        """Renew the claims the book says are still renewable, one ``heartbeat_handles``
        statement per queue."""
        groups = self._book.renewable(claims)
        if not groups:
            await trio.lowlevel.checkpoint()
        for name, group in groups.items():
            await self._heartbeat_group(name, group)

    async def _heartbeat_group(self, queue_name: str, claims: list[Claim]) -> None:
        """R6: renew one queue's claims in one statement; a refusal cancels that job
        actor at once. On an engine error the claims are left as they are (the next
        heartbeat tries again, R8)."""
        queue = self._queue_by_name[queue_name]
        sent_at = trio.current_time()
        try:
            results = await queue.heartbeat_handles([claim.handle for claim in claims])
        except EngineError as exc:
            for claim in claims:
                self._engine_error("heartbeat", claim.handle.job, exc)
            return
        for claim, renewed in zip(claims, results, strict=True):
            if renewed:
                deadline = self._book.renewed(claim, sent_at)
                if deadline is not None:
                    claim.scope.deadline = deadline
                self._log(logging.DEBUG, "heartbeat", claim.handle.job, "renewed the claim")
            else:
                self._lose(claim, "heartbeat refused")

    def _lose(self, claim: Claim, why: str) -> None:
        """A refusal: the book marks the claim lost; its handler is cancelled."""
        if self._book.refused(claim):
            self._log_lost(claim, why)
        claim.scope.cancel()

    def _log_lost(self, claim: Claim, why: str) -> None:
        self._log(
            logging.WARNING,
            "lease_lost",
            claim.handle.job,
            "lost the claim (%s); the handler is cancelled and its outcome discarded",
            why,
        )

    async def _apply_coalesced(
        self, first: Finished | HeartbeatRequest, inbox: trio.MemoryReceiveChannel[Message]
    ) -> None:
        """R2 coalescing: take every message already waiting in the inbox; apply all the
        outcomes among them with one statement per queue and kind (``ack_handles``,
        ``retry_handles``, ``fail_handles``), then renew all the due heartbeats among
        them with one ``heartbeat_handles`` statement per queue (each still fenced by its
        claim token), then handle the other messages in order. With an empty inbox this
        is a lone outcome or heartbeat, applied at once (latency first)."""
        finished: list[Claim] = []
        requests: list[HeartbeatRequest] = []
        others: list[Message] = []
        message: Message = first
        while True:
            if isinstance(message, Finished):
                finished.extend(self._actors.take_finished())
            elif isinstance(message, HeartbeatRequest):
                requests.append(message)
            else:
                others.append(message)
            try:
                message = inbox.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        try:
            await self._apply_outcomes(finished)
            await self._renew([request.claim for request in requests])
        finally:
            for request in requests:
                request.done.set()
        for message in others:
            await self._handle(message, inbox)

    async def _apply_outcomes(self, claims: list[Claim]) -> None:
        """The book decides each finished claim's outcome (discarded if the claim was
        lost); the due ones go out, one statement per queue and kind."""
        book = self._book
        now = trio.current_time()
        for claim in claims:
            if book.reported(claim, now) is Verdict.LOSE:
                self._log_lost(claim, "its lease ran out: no renewal got through in time")
        await self._apply_groups(claims)

    async def _apply_groups(self, claims: Iterable[Claim]) -> None:
        """Send the due outcome statements of these claims, one per queue and kind (a
        release is a retry). On an engine error they stay due, to be sent again on the
        next tick (R8)."""
        groups = self._book.settle_groups(claims)
        if not groups:
            await trio.lowlevel.checkpoint()
        for (queue_name, kind), group in groups.items():
            queue = self._queue_by_name[queue_name]
            outcomes = [_outcome(claim) for claim in group]
            try:
                if kind == "ack":
                    results = await self._ack_and_claim(queue, group)
                elif kind == "fail":
                    results = await queue.fail_handles(
                        [(c.handle, o.error) for c, o in zip(group, outcomes, strict=True)]
                    )
                else:
                    results = await queue.retry_handles(
                        [
                            (c.handle, o.error, o.delay_s)
                            for c, o in zip(group, outcomes, strict=True)
                        ]
                    )
            except EngineError as exc:
                for claim in group:
                    self._engine_error(kind, claim.handle.job, exc)
                continue
            for claim, done in zip(group, results, strict=True):
                self._settle(claim, done)

    async def _ack_and_claim(self, queue: Queue, group: list[Claim]) -> list[bool]:
        """Ack these claims' jobs; if the book says so (the queue is woken and slots will
        be free), claim its fair share in the same statement (``ack_handles_and_claim``,
        D21: one round trip per cycle when draining) and start their job actors."""
        handles = [claim.handle for claim in group]
        n = self._book.fused_claim_size(queue.name, len(group))
        if n == 0:
            return await queue.ack_handles(handles)
        sent_at = trio.current_time()
        try:
            results, claimed = await queue.ack_handles_and_claim(handles, self._worker_id, n)
        except EngineError:
            # R8: try the claim again on the next wake or tick, like a failed claim.
            self._book.claim_failed(queue.name)
            raise
        self._start_jobs(queue.name, claimed, n, sent_at)
        return results

    def _settle(self, claim: Claim, done: bool) -> None:
        """Account for an applied outcome (``done`` is the engine's answer)."""
        outcome = _outcome(claim)
        result = self._book.settled(claim, done)
        job = claim.handle.job
        if result == "ack":
            if self._wants(logging.INFO):
                self._log(logging.INFO, "ack", job, "acked")
            return
        if result == "lost":
            self._log_lost(claim, f"{outcome.kind} refused")
        elif result == "dead":
            self._log(
                logging.WARNING,
                "dead",
                job,
                "dead-lettered (%s)",
                outcome.error or outcome.kind,
                error=outcome.error,
            )
        elif result == "release":
            self._log(
                logging.INFO, "release", job, "released (%s)", outcome.error, error=outcome.error
            )
        else:
            self._log(
                logging.INFO,
                "retry",
                job,
                "retried (%s)",
                outcome.error,
                error=outcome.error,
                delay_s=outcome.delay_s,
            )
        if result in ("retry", "release"):
            self._due.retried(claim.queue, outcome.delay_s)

    # --- graceful stop ---------------------------------------------------------------

    async def _finalize(self, inbox: trio.MemoryReceiveChannel[Message]) -> None:
        """R7: stop claiming, give running handlers ``shutdown_grace_s``, cancel the rest,
        and apply every outcome (releasing the cancelled jobs). Shielded, and bounded."""
        book = self._book
        book.stop()
        with trio.CancelScope(shield=True) as shield:
            shield.deadline = trio.current_time() + self._shutdown_grace_s + _FINALIZE_TIMEOUT_S
            try:
                if book.claims:
                    self._log(
                        logging.INFO,
                        "draining",
                        None,
                        "stopping: waiting up to %gs for %d running handlers",
                        self._shutdown_grace_s,
                        len(book.claims),
                    )
                # A pipelined claim answered as the dispatcher stopped: enter it first.
                await self._handle_waiting(inbox)
                # R7: what has not started is given back now, not run during the grace.
                unstarted = book.release_unstarted()
                if unstarted:
                    await self._apply_outcomes(unstarted)
                grace_deadline = min(
                    trio.current_time() + self._shutdown_grace_s, self._grace_deadline
                )
                with trio.move_on_at(grace_deadline) as self._grace_scope:
                    await self._serve_until_idle(inbox)
                for claim in book.grace_over():
                    claim.scope.cancel()
                await self._serve_until_idle(inbox)
            finally:
                book.grace_over()
                for claim in book.open_scopes():
                    claim.scope.cancel()
        if book.claims:
            self._log(
                logging.ERROR,
                "finalize_incomplete",
                None,
                "%d claims could not be finalized in time; their leases will lapse and other "
                "workers will reclaim them",
                len(book.claims),
            )

    async def _handle_waiting(self, inbox: trio.MemoryReceiveChannel[Message]) -> None:
        """Handle the messages waiting in the inbox now."""
        while True:
            try:
                message = inbox.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return
            await self._handle(message, inbox)

    async def _serve_until_idle(self, inbox: trio.MemoryReceiveChannel[Message]) -> None:
        """Handle messages (no claiming) until no claim is in flight. Outcomes whose
        application failed are retried with capped backoff."""
        book = self._book
        delay = _FINALIZE_RETRY_S[0]
        while book.claims:
            if book.only_settling():
                # Only outcomes that failed to apply are left.
                await trio.sleep(delay)
                delay = min(delay * 2, _FINALIZE_RETRY_S[1])
                await self._apply_groups(list(book.claims))
                continue
            await self._handle(await inbox.receive(), inbox)

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


def _outcome(claim: Claim) -> Outcome:
    """The claim's outcome waiting to be applied."""
    assert claim.outcome is not None
    return claim.outcome
