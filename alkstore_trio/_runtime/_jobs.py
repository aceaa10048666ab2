"""The job actors (R5) and heartbeat actors (R6) of a worker.

A job actor runs one claim's handler in the claim's own cancel scope, which is shielded
(only the book's decisions, carried out by the dispatcher, cancel it) and carries the
lease's deadline; it asks the book before the handler's first line whether the claim may
still start (item 5: never once the lease ran out by the worker's clock), tells the book
how the handler ended, and leaves the claim for the dispatcher (one
:class:`~._actors.Finished` message wakes it for every claim finished meanwhile).

Why job actors are long-lived *runners*. Spawning a trio task per job (a coroutine, a
task, its context, its exit through the nursery) cost about as much client CPU as all the
rest of a no-op job's work. So a job actor is a runner task that takes claims from a
memory channel, one after the other, each still in its own cancel scope with its own
lease deadline: only the task is reused. At most ``concurrency`` runners exist (spawned
as the load needs them), which is what bounds the handlers running at once; claims beyond
that (``prefetch``) wait in the channel. A runner's loop is shielded: it ends when the
worker closes the channel, after the graceful stop.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import TYPE_CHECKING, Final

import trio

from .._core import _validate as v
from .._core._validate import DEFAULT_MAX_RESULT_BYTES
from .._errors import ClaimLost, InvalidArgument
from ._actors import Finished, HeartbeatRequest
from ._book import ACK, ClaimState, Outcome
from ._context import _CURRENT
from ._events import describe, error_text
from ._outcomes import Fail, Retry, TimedOut

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._core import Job
    from ._actors import Message
    from ._book import Claim, ClaimBook
    from ._events import Reporter
    from ._worker import Handler

_FINISHED: Final = Finished()
#: States of a claim that did not start but whose end the dispatcher must hear of.
_TO_REPORT = frozenset({ClaimState.CANCELLING, ClaimState.LOST, ClaimState.ABORTING})


class JobActors:
    """Runs job and heartbeat actors for one worker, and counts what its handlers did."""

    def __init__(
        self,
        book: ClaimBook,
        reporter: Reporter,
        job_timeout_s: float | None,
        queue_timeouts: Mapping[str, float | None] | None = None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self.book = book
        #: Q19.1: the store's largest result, and the queues whose discarded result
        #: was logged (once per worker and queue).
        self.max_result_bytes = max_result_bytes
        self.discard_logged: set[str] = set()
        self.reporter = reporter
        self.job_timeout_s = job_timeout_s
        #: R13: per-queue overrides, each with the parameter its timeout error names
        #: (empty: none, and the hot path reads only ``job_timeout_s``).
        self.queue_timeouts: dict[str, tuple[float | None, str]] = {
            queue: (timeout_s, f"queue_job_timeout_s[{queue!r}]")
            for queue, timeout_s in (queue_timeouts or {}).items()
        }
        self.inbox: trio.MemorySendChannel[Message] | None = None
        self.counts: dict[str, int] = dict.fromkeys(
            ("handler_errors", "timed_out", "started", "finished", "results_discarded"), 0
        )
        self.claim_to_start_total_s = 0.0
        self.run_time_total_s = 0.0
        self._nursery: trio.Nursery | None = None
        self._send, self._receive = trio.open_memory_channel[tuple["Claim", "Handler"]](math.inf)
        self._concurrency = 0
        #: Claims whose job actor ended, for the dispatcher; whether it was told.
        self._finished: list[Claim] = []
        self._nudged = False
        #: Runners spawned; those not running a job; claims sent and not yet taken.
        self._runners = self._idle = self._queued = 0

    def open(self, nursery: trio.Nursery, concurrency: int) -> None:
        """Runners will live in ``nursery``, at most ``concurrency`` of them."""
        self._nursery = nursery
        self._concurrency = concurrency

    def close(self) -> None:
        """No more claims: each runner ends once the channel is empty."""
        self._send.close()

    def take_finished(self) -> list[Claim]:
        """The claims whose job actors ended since the last call (for the dispatcher)."""
        finished, self._finished = self._finished, []
        self._nudged = False
        return finished

    def dispatch(self, claim: Claim, handler: Handler) -> None:
        """Hand a claim to a runner (a new one if none is free and the limit allows)."""
        assert self._nursery is not None
        self._send.send_nowait((claim, handler))
        self._queued += 1
        if self._queued > self._idle and self._runners < self._concurrency:
            self._runners += 1
            self._idle += 1
            self._nursery.start_soon(self._serve_runner, name="job runner")

    async def _serve_runner(self) -> None:
        with trio.CancelScope(shield=True):
            while True:
                try:
                    claim, handler = await self._receive.receive()
                except trio.EndOfChannel:
                    return
                self._queued -= 1
                self._idle -= 1
                await self.run_job(claim, handler)
                self._idle += 1

    async def run_job(self, claim: Claim, handler: Handler) -> None:
        """R5: run the handler in the claim's own (shielded) cancel scope — if the book
        lets it start: never once the lease ran out by this worker's clock — and report
        the end to the dispatcher; its heartbeat actor (if one was started) stops with
        it. Never raises an :class:`Exception`; ``Cancelled`` only reaches it through
        ``claim.scope``."""
        assert self.inbox is not None
        book = self.book
        if claim.state is not ClaimState.STARTING and claim.state not in _TO_REPORT:
            return  # released unstarted by a stop: the dispatcher settles it
        scope = claim.scope
        result: Outcome | None = None
        try:
            with scope:
                now = trio.current_time()
                if book.start(claim, now):
                    context = _CURRENT.set((claim, self))  # R16: current_job()
                    try:
                        result = await self._run_handler(claim, handler, now)
                    finally:
                        _CURRENT.reset(context)
                elif claim.state is ClaimState.LOST and now >= claim.lease_until:
                    self.reporter.log(
                        logging.WARNING,
                        "lease_lost",
                        claim.handle.job,
                        "lost the claim (its lease ran out before the handler started); "
                        "the handler was not started",
                    )
        finally:
            if claim.heartbeat_scope is not None:
                claim.heartbeat_scope.cancel()
            if claim.aborted_at is not None:
                claim.ended_at = trio.current_time()  # R15: a cancel's latency ends here
            # Cancelled (by the book's decision, or by the lease deadline), or a
            # BaseException (KeyboardInterrupt) escaped the handler: result is None and
            # the book decides whether the claim is to be released or is lost.
            book.finished(claim, result, deadline_hit=scope.cancelled_caught)
            self._finished.append(claim)
            if not self._nudged:
                self._nudged = True
                self.inbox.send_nowait(_FINISHED)

    async def _run_handler(self, claim: Claim, handler: Handler, start: float) -> Outcome | None:
        job = claim.handle.job
        self.counts["started"] += 1
        self.claim_to_start_total_s += start - claim.claimed_at
        if self.reporter.wants(logging.DEBUG):
            self.reporter.log(logging.DEBUG, "start", job, "handler started")
        timeout_s, param = self.job_timeout_s, "job_timeout_s"
        if self.queue_timeouts:  # R13
            timeout_s, param = self.queue_timeouts.get(claim.queue, (timeout_s, param))
        try:
            if timeout_s is None:
                value = await handler(job)
                if claim.in_tx:
                    return self._after_tx(job, value)
                return ACK if value is None else self._acked(job, value)
            with trio.move_on_after(timeout_s) as timeout:
                value = await handler(job)
            if claim.in_tx:
                return self._after_tx(job, value)
            if timeout.cancelled_caught:
                self.counts["timed_out"] += 1
                error = f"job timed out after {timeout_s:g}s ({param})"
                self.reporter.log(logging.WARNING, "timeout", job, "%s", error, error=error)
                return Outcome("retry", error)
            return ACK if value is None else self._acked(job, value)
        except TimedOut as timed_out:  # T5: a task's own timeout_s is a timeout too
            self.counts["timed_out"] += 1
            text = error_text(timed_out.error)
            self.reporter.log(logging.WARNING, "timeout", job, "%s", text, error=text)
            return Outcome("retry", text, timed_out.delay_s)
        except ClaimLost as exc:
            if claim.state is not ClaimState.RUNNING:
                # R16: its transaction rolled back; the book decides as for a handler
                # that never returned: lost (discarded), cancelled (R15) or, stopping,
                # released (the claim was still ours: nothing committed).
                return None
            return self._raised(job, exc)  # another transaction's: the handler's error
        except Retry as retry:
            return Outcome("retry", error_text(retry.error), retry.delay_s)
        except Fail as fail:
            return Outcome("fail", error_text(fail.error))
        except (Exception, asyncio.CancelledError) as exc:
            # asyncio.CancelledError is a BaseException, but when a handler raises one of
            # its own (trio never does) it is the handler's failure, not a cancellation.
            return self._raised(job, exc)
        finally:
            self.counts["finished"] += 1
            run_time = trio.current_time() - start
            self.run_time_total_s += run_time
            if self.reporter.wants(logging.DEBUG):
                self.reporter.log(
                    logging.DEBUG, "finish", job, "handler finished after %.3fs", run_time
                )

    def _raised(self, job: Job, exc: BaseException) -> Outcome:
        """The handler raised ``exc``: count and log it; the job is retried."""
        self.counts["handler_errors"] += 1
        error = describe(exc)
        self.reporter.log(
            logging.WARNING,
            "handler_error",
            job,
            "handler raised %s",
            type(exc).__name__,
            error=error,
            exc_info=exc,
        )
        return Outcome("retry", error)

    def _after_tx(self, job: Job, value: object) -> Outcome:
        """R16: the handler completed its job in a transaction: its return value is
        ignored (a non-``None`` one is logged: a result belongs in ``tx.set_result``)."""
        if value is not None:
            self.reporter.log(
                logging.WARNING,
                "result_discarded",
                job,
                "the handler returned a value after completing its job in a transaction; "
                "it is ignored (use tx.set_result inside the transaction)",
            )
        return ACK

    def _acked(self, job: Job, value: object) -> Outcome:
        """Q19.1 (R16): the outcome of a handler that returned ``value``: an ack with its
        result (``None``: none). On a kept job, a value that is not bytes-like or
        ``None``, or larger than the store's ``max_result_bytes``, retries the job with
        an error saying so (never truncated, never ignored). A job that is not kept has
        nowhere to put a result, so whatever the handler returned is discarded (counted,
        logged once per worker and queue) and the job is acked: a handler that returned
        ``True`` before results existed does not start retrying its finished work."""
        if value is None:
            return ACK
        if job.keep_completed_s is None:
            self._discarded(job, value)
            return ACK
        try:
            result = v.result_bytes(value, self.max_result_bytes)
        except InvalidArgument as exc:
            self.counts["handler_errors"] += 1
            error = (
                str(exc)
                if isinstance(value, bytes | bytearray | memoryview)
                else f"handler returned a {type(value).__name__}; return bytes or None"
            )
            self.reporter.log(logging.WARNING, "handler_error", job, "%s", error, error=error)
            return Outcome("retry", error)
        return Outcome("ack", result=result)

    def _discarded(self, job: Job, value: object) -> None:
        self.counts["results_discarded"] += 1
        if job.queue in self.discard_logged:
            return
        self.discard_logged.add(job.queue)
        self.reporter.log(
            logging.WARNING,
            "result_discarded",
            job,
            "the handler's return value (a %s) was discarded: the queue's jobs are not kept "
            "(QueueOpts(keep_completed_s=None)); set keep_completed_s to keep results",
            type(value).__name__,
        )

    async def run_heartbeat(self, claim: Claim) -> None:
        """R6: started by the dispatcher once the handler has run for one
        ``heartbeat_interval_s`` (and the claim renewed): every interval from then on,
        ask the dispatcher to renew the claim and wait for it to have done so. Stopped
        through ``claim.heartbeat_scope`` when the job actor ends."""
        assert self.inbox is not None
        with claim.heartbeat_scope:
            while True:
                await trio.sleep(claim.heartbeat_interval_s)
                done = trio.Event()
                self.inbox.send_nowait(HeartbeatRequest(claim, done))
                await done.wait()
