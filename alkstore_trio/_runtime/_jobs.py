"""The job actors (R5) and heartbeat actors (R6) of a worker.

A job actor runs one claim's handler in the claim's own cancel scope, which is shielded
(only the book's decisions, carried out by the dispatcher, cancel it) and carries the
lease's deadline; it asks the book before the handler's first line whether the claim may
still start (item 5: never once the lease ran out by the worker's clock), tells the book
how the handler ended, and wakes the dispatcher with a :class:`~._actors.Finished`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import trio

from ._actors import Finished, HeartbeatRequest
from ._book import ACK, ClaimState, Outcome
from ._events import describe, error_text
from ._outcomes import Fail, Retry

if TYPE_CHECKING:
    from ._actors import Message
    from ._book import Claim, ClaimBook
    from ._events import Reporter
    from ._worker import Handler


class JobActors:
    """Runs job and heartbeat actors for one worker, and counts what its handlers did."""

    def __init__(self, book: ClaimBook, reporter: Reporter, job_timeout_s: float | None) -> None:
        self.book = book
        self.reporter = reporter
        self.job_timeout_s = job_timeout_s
        self.inbox: trio.MemorySendChannel[Message] | None = None
        self.counts: dict[str, int] = dict.fromkeys(
            ("handler_errors", "timed_out", "started", "finished"), 0
        )
        self.claim_to_start_total_s = 0.0
        self.run_time_total_s = 0.0

    async def run_job(self, claim: Claim, handler: Handler) -> None:
        """R5: run the handler in the claim's own (shielded) cancel scope — if the book
        lets it start: never once the lease ran out by this worker's clock — and report
        the end to the dispatcher; its heartbeat actor (if one was started) stops with
        it. Never raises an :class:`Exception`; ``Cancelled`` only reaches it through
        ``claim.scope``."""
        assert self.inbox is not None
        book = self.book
        scope = claim.scope
        result: Outcome | None = None
        try:
            with scope:
                if book.start(claim, trio.current_time()):
                    result = await self._run_handler(claim, handler)
                elif claim.state is ClaimState.LOST:
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
            # Cancelled (by the book's decision, or by the lease deadline), or a
            # BaseException (KeyboardInterrupt) escaped the handler: result is None and
            # the book decides whether the claim is to be released or is lost.
            book.finished(claim, result, deadline_hit=scope.cancelled_caught)
            self.inbox.send_nowait(Finished(claim))

    async def _run_handler(self, claim: Claim, handler: Handler) -> Outcome:
        job = claim.handle.job
        start = trio.current_time()
        self.counts["started"] += 1
        self.claim_to_start_total_s += start - claim.claimed_at
        if self.reporter.wants(logging.DEBUG):
            self.reporter.log(logging.DEBUG, "start", job, "handler started")
        try:
            if self.job_timeout_s is None:
                await handler(job)
                return ACK
            with trio.move_on_after(self.job_timeout_s) as timeout:
                await handler(job)
            if timeout.cancelled_caught:
                self.counts["timed_out"] += 1
                error = f"job timed out after {self.job_timeout_s:g}s (job_timeout_s)"
                self.reporter.log(logging.WARNING, "timeout", job, "%s", error, error=error)
                return Outcome("retry", error)
            return ACK
        except Retry as retry:
            return Outcome("retry", error_text(retry.error), retry.delay_s)
        except Fail as fail:
            return Outcome("fail", error_text(fail.error))
        except (Exception, asyncio.CancelledError) as exc:
            # asyncio.CancelledError is a BaseException, but when a handler raises one of
            # its own (trio never does) it is the handler's failure, not a cancellation.
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
        finally:
            self.counts["finished"] += 1
            run_time = trio.current_time() - start
            self.run_time_total_s += run_time
            if self.reporter.wants(logging.DEBUG):
                self.reporter.log(
                    logging.DEBUG, "finish", job, "handler finished after %.3fs", run_time
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
