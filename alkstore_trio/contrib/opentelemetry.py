"""OpenTelemetry tracing for workers: a span per job run, linked to the trace that
enqueued the job (``pip install 'alkstore_trio[opentelemetry]'``).

Example::

    from alkstore_trio.contrib.opentelemetry import JobTracing, trace_headers

    # Producer: carry the current trace context in the job's headers.
    await emails.enqueue(payload, headers=trace_headers())

    # Worker: a span per run; the handler's own spans (database, HTTP...) are children
    # of the run's span.
    tracing = JobTracing()
    worker = Worker(store, {"emails": tracing.handler(send_email)})
    async with trio.open_nursery() as nursery:
        await nursery.start(tracing.run, worker)
        await nursery.start(worker.run)

Where the spans come from. A job's outcome is only known after its handler returned: the
worker applies it (an ack can still be refused, and a refused one is a lost lease), and
says so on its event stream (rule R9). So :meth:`JobTracing.run` owns the spans: it reads
the worker's events, opens a span at each run's ``start``, sets the outcome when the
``ack``, ``retry``, ``dead``, ``release``, ``lease_lost`` or ``cancelled`` event arrives
and ends the span at the run's ``finish``. Its duration is measured on trio's clock (from the
``start`` to the ``finish`` event), anchored at the wall-clock time of the start.
:meth:`JobTracing.handler` is optional: it opens the run's span itself, just before the
handler runs, and makes it the current span inside the handler so that the handler's own
spans nest under it; :meth:`~JobTracing.run` then completes that span. A wrapped handler
of a worker that no :meth:`~JobTracing.run` watches produces no span (nothing could end
it) and simply runs the handler.

How the trace context travels: in the job's headers (D30), metadata stored beside the
payload for the job's life. :func:`trace_headers` returns what the global propagator
writes for the current context (W3C ``traceparent``, ``tracestate`` and ``baggage`` by
default), to pass as ``enqueue(..., headers=...)``; the run's span reads it back from
:attr:`Job.headers <alkstore_trio.Job.headers>` with the same propagator. The payload is
never touched. A job without a trace context in its headers gets a span without a link,
so producers can adopt tracing one at a time. These headers count towards the limits
of a job's headers (64 entries, 16 KiB in all): the W3C propagators stay within them
(they write at most 8 KiB of baggage), but one that wrote more would make the enqueue
raise :class:`~alkstore_trio.InvalidArgument`.

The run span is a root span (a job may run hours after it was enqueued, and several
times): it *links* to the producer's span instead of being its child. Attributes:
``messaging.system`` (``"alkstore_trio"``), ``messaging.operation.type``
(``"process"``), ``messaging.destination.name`` (the queue), ``messaging.message.id``,
``alkstore.job.id``, ``alkstore.job.queue``, ``alkstore.job.attempt`` (the claim
token), ``alkstore.job.max_attempts``, ``alkstore.worker.id``, ``alkstore.job.outcome``
(``ack``, ``retry``, ``dead``, ``release``, ``lease_lost``, ``cancelled`` (R15), or
``incomplete`` when the worker stopped before the outcome was applied),
``alkstore.job.error`` (the error stored with the job, when there is one) and
``alkstore.job.timed_out``. The status is ``ERROR`` when the handler raised (other than
:class:`~alkstore_trio.Retry`), timed out, or the job was dead-lettered, lost or left
incomplete; otherwise it is left unset.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

import trio
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace

from .. import __version__
from .._errors import InvalidArgument
from .._runtime import Fail, Retry, Worker
from .._runtime._asyncio import _MARK, is_marked

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from .._core import Job
    from .._runtime import Handler, WorkerEvent

__all__ = ["JobTracing", "trace_headers"]

#: The events that settle a run's outcome.
_OUTCOMES: Final = frozenset({"ack", "retry", "dead", "release", "lease_lost", "cancelled"})
#: Outcomes that mark the span as an error.
_FAILED_OUTCOMES: Final = frozenset({"dead", "lease_lost", "incomplete"})

_Key = tuple[str, str, int, int]  # worker id, queue, job id, attempt


def trace_headers(*, context: Context | None = None) -> dict[str, str]:
    """The job headers that carry the current trace context, for ``enqueue``'s
    ``headers=``: the runs of the job then link to the current span.

    Written by OpenTelemetry's global propagator (W3C ``traceparent`` and
    ``tracestate``, and ``baggage``, unless you configured another); empty when there is
    nothing to carry (no span is active). Add your own headers to the dict as you like:
    ``headers={**trace_headers(), "tenant": "acme"}``.

    Args:
        context: The context to carry; default the current one.

    Returns:
        A new dict of header names to values.
    """
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    return carrier


def _producer_context(job: Job) -> Context | None:
    """The trace context the job's headers carry (``None`` for a job without headers)."""
    return propagate.extract(job.headers) if job.headers else None


@dataclass(eq=False, slots=True)
class _Run:
    """One job run's span while it is open."""

    span: trace.Span
    #: Wall-clock start (ns since the epoch) and the trio time it corresponds to.
    start_ns: int
    start_at: float
    end_ns: int | None = None
    outcome: str | None = None
    error: str | None = None
    failed: bool = False


@final
class JobTracing:
    """Spans for job runs (see the module docstring for what each span holds).

    One instance can watch several workers; run :meth:`run` for each.

    Args:
        tracer_provider: The provider to get the tracer from; default the global one
            (set by your OpenTelemetry SDK setup).
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        if tracer_provider is not None and not isinstance(tracer_provider, trace.TracerProvider):
            raise InvalidArgument(
                f"tracer_provider must be an opentelemetry TracerProvider or None; got "
                f"{type(tracer_provider).__name__}"
            )
        self._tracer = trace.get_tracer(
            "alkstore_trio.contrib.opentelemetry", __version__, tracer_provider=tracer_provider
        )
        self._watched: set[str] = set()
        self._runs: dict[_Key, _Run] = {}

    def handler(self, handler: Handler) -> Handler:
        """Wrap a job handler: it runs with its run's span as the current span, so the
        spans it makes are children of the run's span. The job reaches it unchanged.

        Exceptions the handler raises are recorded on the span (with their traceback)
        and propagate unchanged; the worker decides the outcome as usual. A handler made
        by :func:`~alkstore_trio.asyncio_handler` stays one.

        Args:
            handler: ``async def handler(job) -> None``.

        Returns:
            The wrapped handler, to give to the :class:`~alkstore_trio.Worker`.

        Raises:
            InvalidArgument: ``handler`` is not callable.
        """
        if not callable(handler):
            raise InvalidArgument(f"handler must be an async function; got {handler!r}")

        @functools.wraps(handler)
        async def traced(job: Job) -> None:
            worker_id = job.claimed_by
            run = None
            if worker_id is not None and worker_id in self._watched:
                run = self._open(
                    _key(worker_id, job),
                    job,
                    _producer_context(job),
                    time.time_ns(),
                    trio.current_time(),
                )
            if run is None:
                await handler(job)
                return
            with trace.use_span(
                run.span, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ):
                try:
                    await handler(job)
                except (Retry, Fail):
                    raise
                except Exception as exc:
                    run.span.record_exception(exc)
                    raise

        if is_marked(handler):
            setattr(traced, _MARK, True)
        return traced

    async def run(
        self,
        worker: Worker,
        *,
        buffer: int | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Trace ``worker``'s job runs until it stops; use with ``nursery.start`` before
        ``worker.run`` (it reports started once subscribed, so no run is missed).

        Returns after the worker's ``"worker_stop"`` event (at once if the worker already
        finished). Spans still open then, or when this is cancelled, are ended with the
        outcome ``incomplete``.

        Args:
            worker: The worker to watch.
            buffer: The subscription's buffer (see :meth:`Worker.events`); ``None``, the
                default, never drops an event.

        Raises:
            InvalidArgument: ``worker`` is not a :class:`~alkstore_trio.Worker`, this
                object already watches it, or ``buffer`` is invalid.
        """
        if not isinstance(worker, Worker):
            raise InvalidArgument(f"worker must be a Worker; got {type(worker).__name__}")
        worker_id = worker.worker_id
        if worker_id in self._watched:
            raise InvalidArgument(f"this JobTracing already watches worker {worker_id!r}")
        with worker.events(buffer=buffer) as events:
            self._watched.add(worker_id)
            try:
                task_status.started()
                async for event in events:
                    self._observe(event)
            finally:
                self._watched.discard(worker_id)
                self._close_worker(worker_id, time.time_ns())

    def _observe(self, event: WorkerEvent) -> None:
        job = event.job
        if event.kind == "worker_stop":
            self._close_worker(event.worker_id, int(event.wall_time * 1e9))
        if job is None:
            return
        key = _key(event.worker_id, job)
        kind = event.kind
        if kind == "start":
            if key not in self._runs:
                producer = _producer_context(job)
                self._open(key, job, producer, int(event.wall_time * 1e9), event.at)
            return
        run = self._runs.get(key)
        if run is None:
            return  # a run started before we watched, or its start was dropped
        if kind == "finish":
            run.end_ns = run.start_ns + max(0, round((event.at - run.start_at) * 1e9))
        elif kind in ("timeout", "handler_error"):
            run.failed = True
            run.error = event.error
            if kind == "timeout":
                run.span.set_attribute("alkstore.job.timed_out", True)
            run.span.add_event(kind, _error_attributes(event.error), int(event.wall_time * 1e9))
        elif kind in _OUTCOMES:
            run.outcome = kind
            if event.error is not None:
                run.error = event.error
        if run.end_ns is not None and run.outcome is not None:
            self._close(key, run)

    def _open(
        self, key: _Key, job: Job, producer: Context | None, start_ns: int, start_at: float
    ) -> _Run:
        links = []
        if producer is not None:
            span_context = trace.get_current_span(producer).get_span_context()
            if span_context.is_valid:
                links.append(trace.Link(span_context))
        span = self._tracer.start_span(
            f"process {job.queue}",
            # A root span: not a child of whatever context the worker was started in.
            context=otel_context.Context(),
            kind=trace.SpanKind.CONSUMER,
            attributes={
                "messaging.system": "alkstore_trio",
                "messaging.operation.type": "process",
                "messaging.destination.name": job.queue,
                "messaging.message.id": str(job.id),
                "alkstore.job.id": job.id,
                "alkstore.job.queue": job.queue,
                "alkstore.job.attempt": job.attempts,
                "alkstore.job.max_attempts": job.max_attempts,
                "alkstore.worker.id": key[0],
            },
            links=links,
            start_time=start_ns,
            record_exception=False,
            set_status_on_exception=False,
        )
        run = _Run(span, start_ns, start_at)
        self._runs[key] = run
        return run

    def _close(self, key: _Key, run: _Run) -> None:
        del self._runs[key]
        outcome = run.outcome or "incomplete"
        span = run.span
        span.set_attribute("alkstore.job.outcome", outcome)
        if run.error is not None:
            span.set_attribute("alkstore.job.error", run.error)
        if run.failed or outcome in _FAILED_OUTCOMES:
            span.set_status(trace.StatusCode.ERROR, run.error or outcome)
        span.end(end_time=run.end_ns)

    def _close_worker(self, worker_id: str, now_ns: int) -> None:
        """End the spans of a stopped (or no longer watched) worker."""
        for key in [key for key in self._runs if key[0] == worker_id]:
            run = self._runs[key]
            if run.end_ns is None:
                run.end_ns = max(run.start_ns, now_ns)
            self._close(key, run)


def _key(worker_id: str, job: Job) -> _Key:
    return (worker_id, job.queue, job.id, job.attempts)


def _error_attributes(error: str | None) -> dict[str, str]:
    return {} if error is None else {"alkstore.job.error": error}
