"""What a worker tells the world (R9): its statistics, its event stream and its log.

:class:`Reporter` turns each transition into one log record on ``alkstore_trio.worker``
(structured fields, never the payload) and one :class:`WorkerEvent` for every subscriber
of :meth:`Worker.events`; publishing never blocks (R-D4). The per-job records are built
only when someone listens (:meth:`Reporter.wants`): on the hot path a record that goes
nowhere costs one check.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import trio

from .._core import _validate as v

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._core import Job
    from ._jobs import JobActors

logger = logging.getLogger("alkstore_trio.worker")

#: The most characters of error text stored on a job (the contract's limit).
ERROR_MAX_CHARS: Final = v.ERROR_MAX_CHARS


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
        released: Jobs handed back because the worker stopped while their handler ran or
            before it started (``"worker stopped"``: Q19.8's release, the attempt given
            back, never a dead-letter), or because a lease was uncertain (a retry with
            delay 0, which on the job's last attempt dead-letters it and counts in
            ``dead_lettered`` instead).
        lease_lost: Claims found lost (a refused heartbeat, ack, retry or fail): the
            handler was cancelled or its outcome discarded.
        cancelled: R15: jobs cancelled in the store (``queue.cancel``) while this worker
            held them, settled as cancelled once their handler stopped.
        in_flight: Claims held now (handler running, or its outcome not yet applied).
        handler_errors: Handlers that raised an exception other than ``Retry``/``Fail``,
            or returned something other than bytes or ``None`` (Q19.1).
        timed_out: Handlers cancelled by ``job_timeout_s`` (or ``queue_job_timeout_s``),
            or by a typed task's own ``timeout_s`` (T5).
        engine_errors: Store operations that failed with ``EngineError`` (retried later).
        events_dropped: Events not delivered to a full :meth:`Worker.events` stream.
        started: Handlers started.
        finished: Handlers finished (returned, raised or were cancelled).
        claim_to_start_total_s: Seconds from claims to their handlers' starts, summed.
        claim_to_start_mean_s: Its mean over ``started`` (0 when none).
        run_time_total_s: Seconds handlers ran, summed over ``finished``.
        run_time_mean_s: Its mean over ``finished`` (0 when none).
        results_discarded: Q19.1: results returned by handlers of jobs that are not kept
            (``keep_completed_s=None``), so discarded with the ack.
        completed_in_tx: R16: jobs completed in their handler's transaction (Q19.6:
            ``current_job().transaction()``); counted in ``acked`` too.
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
    results_discarded: int = 0
    cancelled: int = 0
    completed_in_tx: int = 0


def statistics_of(
    worker_id: str,
    book_counts: Mapping[str, int],
    actors: JobActors,
    *,
    in_flight: int,
    engine_errors: int,
    events_dropped: int,
) -> WorkerStatistics:
    """A :class:`WorkerStatistics` snapshot from the claim book's and the job actors'
    counters."""
    c = actors.counts
    claim_to_start_total_s = actors.claim_to_start_total_s
    run_time_total_s = actors.run_time_total_s
    return WorkerStatistics(
        worker_id=worker_id,
        claimed=book_counts["claimed"],
        acked=book_counts["acked"],
        retried=book_counts["retried"],
        dead_lettered=book_counts["dead_lettered"],
        released=book_counts["released"],
        lease_lost=book_counts["lease_lost"],
        in_flight=in_flight,
        handler_errors=c["handler_errors"],
        timed_out=c["timed_out"],
        engine_errors=engine_errors,
        events_dropped=events_dropped,
        started=c["started"],
        finished=c["finished"],
        claim_to_start_total_s=claim_to_start_total_s,
        claim_to_start_mean_s=claim_to_start_total_s / c["started"] if c["started"] else 0.0,
        run_time_total_s=run_time_total_s,
        run_time_mean_s=run_time_total_s / c["finished"] if c["finished"] else 0.0,
        results_discarded=c["results_discarded"],
        cancelled=book_counts["cancelled"],
        completed_in_tx=book_counts["completed_in_tx"],
    )


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
        "result_discarded",  # Q19.1: its result was discarded (the job is not kept)
        "ack",  # acked
        "completed_in_tx",  # R16: completed in its handler's transaction (Q19.6)
        "retry",  # given back to run again (error, delay_s)
        "release",  # given back because the worker stopped
        "dead",  # dead-lettered (error)
        "lease_lost",  # the claim was found lost; the handler was cancelled
        "cancelled",  # R15: the job was cancelled in the store; its handler stopped
        "engine_error",  # a store operation failed; it is tried again (job may be None)
        "sweep",  # sweep_expired removed rows (job None; message says how many)
        "sweep_failed",  # sweep_expired failed (job None)
        "periodic_fired",  # Q17: a schedule enqueued a job (job None; the message says which)
        "periodic_failed",  # Q17: fire_periodic failed; tried again (job None)
        "worker_beat_failed",  # Q21: writing the worker registry failed; tried again (job None)
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
        job: The job as claimed (its ``claim_token`` names this claim), or ``None`` for
            worker-level events. It includes the payload: events stay in the process.
        queue: The queue concerned, if any.
        message: The same human-readable line as the log record (without the worker and
            job prefix); never contains the payload.
        error: The error text stored with a retry, release or dead-letter, or the error
            of a timeout, handler error or engine error.
        delay_s: The retry delay the handler asked for (``None``: the queue's backoff).
        latency_s: ``"cancelled"`` (R15): seconds from the cancel's announcement reaching
            this worker to its handler's end (``None``: the handler had ended before).
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
    latency_s: float | None = None

    @property
    def job_id(self) -> int | None:
        """The job's id, or ``None``."""
        return None if self.job is None else self.job.id

    @property
    def attempt(self) -> int | None:
        """The claim's attempt number (it repeats after a release), or ``None``."""
        return None if self.job is None else self.job.attempts

    @property
    def claim_token(self) -> int | None:
        """The claim's token (Q19.8: unique per claim of a job), or ``None``."""
        return None if self.job is None else self.job.claim_token


# --- messages to the dispatcher ------------------------------------------------------


class Reporter:
    """Logs a worker's transitions and publishes them to its event subscribers."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.subscribers: list[trio.MemorySendChannel[WorkerEvent]] = []
        self.events_dropped = 0

    def wants(self, level: int) -> bool:
        """Whether a record at ``level`` would go anywhere (a logger or an event stream):
        the per-job records skip building their arguments when not (the hot path)."""
        return bool(self.subscribers) or logger.isEnabledFor(level)

    def log(
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
        latency_s: float | None = None,
    ) -> None:
        """Log one transition with the structured fields and publish it on the event
        streams (R9); never the payload."""
        if job is not None:
            queue = job.queue
        if logger.isEnabledFor(level):
            prefix_args: tuple[object, ...]
            if job is None:
                prefix, prefix_args = "worker %s: ", (self.worker_id,)
                fields = _fields(self.worker_id, event, queue=queue)
            else:
                prefix = "worker %s: job %s/%d attempt %d: "
                prefix_args = (self.worker_id, job.queue, job.id, job.attempts)
                fields = _fields(
                    self.worker_id, event, job_id=job.id, queue=job.queue, attempt=job.attempts
                )
            logger.log(
                level, prefix + message, *prefix_args, *args, exc_info=exc_info, extra=fields
            )
        if self.subscribers:
            self.publish(
                WorkerEvent(
                    kind=event,
                    worker_id=self.worker_id,
                    at=trio.current_time(),
                    wall_time=time.time(),
                    job=job,
                    queue=queue,
                    message=message % args if args else message,
                    error=error,
                    delay_s=delay_s,
                    latency_s=latency_s,
                )
            )

    def publish(self, event: WorkerEvent) -> None:
        """Hand ``event`` to every subscriber without blocking (full buffers drop it)."""
        for send in list(self.subscribers):
            try:
                send.send_nowait(event)
            except trio.WouldBlock:
                self.events_dropped += 1
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.subscribers.remove(send)

    def close(self) -> None:
        """End every subscriber's stream."""
        for send in self.subscribers:
            send.close()
        self.subscribers.clear()


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


def error_text(text: object) -> str | None:
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


def describe(exc: BaseException) -> str:
    """``"TypeName: message"`` for ``last_error``, even if ``str(exc)`` fails."""
    try:
        message = str(exc)
    except Exception:
        message = "<str() failed>"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    result = error_text(text)
    assert result is not None
    return result
