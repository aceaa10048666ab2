"""The dispatcher (R2): the one task of a worker that sends statements about claims.

Why it is an object of its own. :class:`~._worker.Worker` is the public face: its
arguments, its lifecycle (``run``, ``stop``), its supervision tree (R1), its events and
statistics. The dispatcher owns the claims in flight — a restart could not rebuild them,
so it runs as the body of the supervisor's block rather than under it — and everything
said to the store about them: the claims (sized by the :class:`~._book.ClaimBook`), the
outcomes and heartbeats coalesced per queue and kind, and the graceful stop (R7). It
receives every other actor's messages on one trio memory channel, so a heartbeat refusal
and a handler's outcome can never both act on a job.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Final

import trio

from .._errors import EngineError
from ._actors import (
    Aborted,
    CancelCheck,
    Claimed,
    Finished,
    HeartbeatRequest,
    HeartbeatsDue,
    Message,
    Tick,
    TimerRequest,
    Wake,
    coalesced,
)
from ._book import ClaimBook, ClaimState, Outcome, Verdict
from ._book import heartbeat_groups as _heartbeat_groups
from ._due import DueTimes
from ._events import describe as _describe

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from .._core import Job
    from .._store import JobHandle, Queue
    from ._book import Claim
    from ._events import Reporter
    from ._jobs import JobActors
    from ._worker import Handler

#: How long the shielded finalization may spend releasing jobs after the grace period.
_FINALIZE_TIMEOUT_S: Final = 30.0
#: Backoff between attempts to apply an outcome while stopping (capped).
_FINALIZE_RETRY_S: Final = (0.1, 2.0)


class Dispatcher:
    """A worker's dispatcher: claims, outcomes, heartbeats and the graceful stop.

    Args:
        book: The worker's claim book (it decides; the dispatcher carries it out).
        queues: The served queues by name.
        handlers: The handlers by queue name.
        worker_id: The id claims are made under.
        actors: The worker's job and heartbeat actors.
        reporter: The worker's log and event reporter.
        counts: The worker's counters (``engine_errors`` is counted here).
        shutdown_grace_s: R7: seconds running handlers may still finish on a stop.
    """

    def __init__(
        self,
        book: ClaimBook,
        queues: Mapping[str, Queue],
        handlers: Mapping[str, Handler],
        *,
        worker_id: str,
        actors: JobActors,
        reporter: Reporter,
        counts: dict[str, int],
        shutdown_grace_s: float,
    ) -> None:
        self._book = book
        self._queue_by_name = queues
        self._handlers = handlers
        self._worker_id = worker_id
        self._actors = actors
        self._log = reporter.log
        self._wants = reporter.wants
        self._counts = counts
        self._shutdown_grace_s = shutdown_grace_s
        self._due = DueTimes(book, queues, self.engine_error)
        self._jobs: trio.Nursery | None = None
        self._inbox: trio.MemorySendChannel[Message] | None = None
        self._timer_inbox: trio.MemorySendChannel[TimerRequest] | None = None
        #: ``stop(grace_s=...)`` caps the grace at this trio time; the running grace scope.
        self._grace_deadline = math.inf
        self._grace_scope: trio.CancelScope | None = None

    def open(
        self,
        jobs: trio.Nursery,
        inbox: trio.MemorySendChannel[Message],
        timer: trio.MemorySendChannel[TimerRequest],
    ) -> None:
        """The worker runs: job actors live in ``jobs``; ``inbox`` is the dispatcher's
        own inbox (for pipelined claims' answers), ``timer`` the timer actor's."""
        self._jobs, self._inbox, self._timer_inbox = jobs, inbox, timer
        self._due.timer = timer

    def shorten_grace(self, deadline: float) -> None:
        """R-D3: ``stop(grace_s=...)``: the grace ends by trio time ``deadline`` at the
        latest (also when it is running already)."""
        self._grace_deadline = min(self._grace_deadline, deadline)
        if self._grace_scope is not None:
            self._grace_scope.deadline = min(self._grace_scope.deadline, deadline)

    async def dispatch(self, inbox: trio.MemoryReceiveChannel[Message]) -> None:
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
            self.engine_error("claim", None, message.error, queue=message.queue)
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
            await self._check_cancels()  # R15's safety net, on the re-poll (R4)
        elif isinstance(message, CancelCheck):
            await self._check_cancels()
        elif isinstance(message, Aborted):
            await self._apply_outcomes(list(message.claims))
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
                    self.engine_error("claim", None, exc, queue=name)
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
            handles = [claim.handle for claim in claims]
            if any(claim.progress is not None for claim in claims):
                results = await self._heartbeat_progress(queue, claims, handles)
            else:
                results = await queue.heartbeat_handles(handles)
        except EngineError as exc:
            for claim in claims:
                self.engine_error("heartbeat", claim.handle.job, exc)
            return
        refused = []
        for claim, renewed in zip(claims, results, strict=True):
            if renewed:
                deadline = self._book.renewed(claim, sent_at)
                if deadline is not None:
                    claim.scope.deadline = deadline
                self._log(logging.DEBUG, "heartbeat", claim.handle.job, "renewed the claim")
            else:
                refused.append(claim)
        if refused:
            # R15: a refused renewal may be a cancel whose announcement was lost: those
            # claims are aborted (settled as cancelled once stopped), the others lost.
            aborted = await self._abort_cancelling(queue, refused)
            for claim in refused:
                if claim not in aborted:
                    self._lose(claim, "heartbeat refused")

    @staticmethod
    async def _heartbeat_progress(
        queue: Queue, claims: list[Claim], handles: list[JobHandle]
    ) -> list[bool]:
        """Q19.7: the renewal carries the claims' progress news (one statement, no round
        trip of its own); news reported meanwhile waits for the next heartbeat."""
        news = [claim.progress for claim in claims]
        results = await queue.heartbeat_handles(handles, progress=news)
        for claim, sent in zip(claims, news, strict=True):
            if claim.progress is sent:
                claim.progress = None
        return results

    async def _check_cancels(self) -> None:
        """R15's safety net for a lost announcement: one ``cancelling_among`` read per
        queue for the claims held whose handlers run or have yet to start."""
        for name, claims in self._book.abortable().items():
            await self._abort_cancelling(self._queue_by_name[name], claims)

    async def _abort_cancelling(self, queue: Queue, claims: list[Claim]) -> set[Claim]:
        """R15: ask the store which of these claims' jobs are cancelling; those are
        aborted (their scopes cancelled), as if their announcement had arrived."""
        try:
            cancelling = await queue.cancelling_among([claim.handle.id for claim in claims])
        except EngineError as exc:
            self.engine_error("cancelling_among", None, exc, queue=queue.name)
            return set()
        if not cancelling:
            return set()
        aborted, unstarted = self._book.cancel_requested(cancelling, trio.current_time())
        for claim in aborted:
            claim.scope.cancel()
        if unstarted:
            await self._apply_outcomes(unstarted)
        found = set(cancelling)
        return {claim for claim in claims if claim.handle.id in found}

    def _lose(self, claim: Claim, why: str) -> None:
        """A refusal: the book marks the claim lost; its handler is cancelled."""
        if self._book.refused(claim):
            self._log_lost(claim, why)
        elif claim.in_tx or claim.state is ClaimState.COMMITTING:
            return  # R16: completed in its transaction, or the commit decides
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
        """Send the due outcome statements of these claims, one per queue and kind (R7: a
        stopped worker's releases give the attempt back, Q19.8). On an engine error they
        stay due, to be sent again on the next tick (R8)."""
        groups = self._book.settle_groups(claims)
        if not groups:
            await trio.lowlevel.checkpoint()
        for (queue_name, kind), group in groups.items():
            queue = self._queue_by_name[queue_name]
            outcomes = [_outcome(claim) for claim in group]
            try:
                if kind == "ack":
                    results = await self._ack_and_claim(queue, group)
                elif kind == "cancelled":
                    results = await queue.settle_cancelled([c.handle for c in group])
                elif kind == "release":
                    results = await queue.release_handles(
                        [c.handle for c in group], outcomes[0].error
                    )
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
                    self.engine_error(kind, claim.handle.job, exc)
                continue
            if all(results):  # the usual case: no refusal, nothing more to ask
                for claim in group:
                    self._settle(claim, True)
                continue
            cancelled = await self._settle_refused(queue, kind, group, results)
            for claim, done in zip(group, results, strict=True):
                self._settle(claim, done, cancelled=claim in cancelled)

    async def _settle_refused(
        self, queue: Queue, kind: str, group: list[Claim], results: list[bool]
    ) -> set[Claim]:
        """R15: an ack, retry or fail refused because the job was cancelled meanwhile
        (its handler ended before the announcement came, or it was lost): one
        ``settle_cancelled`` for the refused claims of the statement (only when one was
        refused); the claims it settled."""
        refused = [claim for claim, done in zip(group, results, strict=True) if not done]
        if kind == "cancelled" or not refused:
            return set()
        try:
            settled = await queue.settle_cancelled([claim.handle for claim in refused])
        except EngineError as exc:
            self.engine_error("settle_cancelled", None, exc, queue=queue.name)
            return set()
        return {claim for claim, done in zip(refused, settled, strict=True) if done}

    async def _ack_and_claim(self, queue: Queue, group: list[Claim]) -> list[bool]:
        """Ack these claims' jobs; if the book says so (the queue is woken and slots will
        be free), claim its fair share in the same statement (``ack_handles_and_claim``,
        D21: one round trip per cycle when draining) and start their job actors."""
        handles = [claim.handle for claim in group]
        # Q19.1: the results of kept jobs go with the ack (None: no result in the group).
        results_of = None
        for claim in group:  # a loop, no call per claim: this runs for every job
            outcome = claim.outcome
            if outcome is not None and outcome.result is not None:
                results_of = [_outcome(each).result for each in group]
                break
        n = self._book.fused_claim_size(queue.name, len(group))
        if n == 0:
            if results_of is None:
                return await queue.ack_handles(handles)
            return await queue.ack_handles(handles, results_of)
        sent_at = trio.current_time()
        try:
            if results_of is None:
                results, claimed = await queue.ack_handles_and_claim(handles, self._worker_id, n)
            else:
                results, claimed = await queue.ack_handles_and_claim(
                    handles, self._worker_id, n, results_of
                )
        except EngineError:
            # R8: try the claim again on the next wake or tick, like a failed claim.
            self._book.claim_failed(queue.name)
            raise
        self._start_jobs(queue.name, claimed, n, sent_at)
        return results

    def _settle(self, claim: Claim, done: bool, *, cancelled: bool = False) -> None:
        """Account for an applied outcome (``done`` is the engine's answer; ``cancelled``:
        it was refused, and the job then settled as cancelled, R15)."""
        outcome = _outcome(claim)
        result = self._book.settled(claim, done, cancelled=cancelled)
        job = claim.handle.job
        if result == "ack":
            if self._wants(logging.INFO):
                self._log(logging.INFO, "ack", job, "acked")
            return
        if result == "cancelled":
            latency = (
                None
                if claim.aborted_at is None or claim.ended_at is None
                else max(0.0, claim.ended_at - claim.aborted_at)
            )
            self._log(logging.INFO, "cancelled", job, "cancelled", latency_s=latency)
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

    async def finalize(self, inbox: trio.MemoryReceiveChannel[Message]) -> None:
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

    def engine_error(
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
