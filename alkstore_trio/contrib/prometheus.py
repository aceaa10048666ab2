"""Prometheus metrics for workers, fed by their event streams (``pip install
'alkstore_trio[prometheus]'``).

Example::

    from prometheus_client import start_http_server
    from alkstore_trio.contrib.prometheus import WorkerMetrics

    metrics = WorkerMetrics()  # once per process (per registry); share it among workers
    start_http_server(9100)  # prometheus-client's own exporter thread
    worker = Worker(store, {"emails": send_email})
    async with trio.open_nursery() as nursery:
        await nursery.start(metrics.run, worker)  # subscribed: no event is missed
        await nursery.start(worker.run)

Why the event stream. Every figure here is counted from the :class:`~alkstore_trio.WorkerEvent`
the worker publishes for each transition (rule R9), by a task that only reads them: the
metrics can never slow, block or change the worker, and they agree with
:meth:`Worker.statistics` (``alkstore_jobs_acked_total`` is ``statistics().acked``, summed
over the workers watched). The task subscribes before it reports started, so starting it
before the worker means the first claim is counted. It asks for an unbounded buffer by
default: :meth:`WorkerMetrics.observe` never blocks, so the buffer only holds the events
of one scheduling round; with a bound, events a full buffer drops are lost to the metrics
(``statistics().events_dropped`` counts them).

The figures (``alkstore`` is ``namespace``; every series has a ``queue`` label, and a
``worker_id`` label when ``worker_id_label=True``):

- ``alkstore_jobs_claimed_total``: jobs claimed (``claim``)
- ``alkstore_jobs_acked_total``: jobs acked (``ack``)
- ``alkstore_jobs_retried_total``: jobs given back to run again (``retry``)
- ``alkstore_jobs_dead_lettered_total``: jobs moved to dead by a worker (``dead``)
- ``alkstore_jobs_released_total``: jobs handed back by a stopping worker
- ``alkstore_jobs_lease_lost_total``: claims found lost (``lease_lost``)
- ``alkstore_handler_errors_total``: handlers that raised an exception
- ``alkstore_handler_timeouts_total``: handlers cancelled by ``job_timeout_s``
- ``alkstore_engine_errors_total``: store operations that failed (retried)
- ``alkstore_sweep_failures_total``: ``sweep_expired`` runs that failed
- ``alkstore_jobs_enqueued_total``: jobs enqueued, as told by :meth:`WorkerMetrics.count_enqueued`
- ``alkstore_jobs_in_flight``: claims held now (gauge)
- ``alkstore_workers_running``: workers watched that are running (gauge)
- ``alkstore_claim_latency_seconds``: from ``run_at`` to ``claimed_at`` (histogram)
- ``alkstore_job_run_seconds``: from a handler's start to its finish
- ``alkstore_queue_jobs``: queue depth by ``state`` (gauge, see below)

``alkstore_claim_latency_seconds`` is how long a claimed job had been due: the job's
``claimed_at`` minus its ``run_at`` (when it was enqueued, or when its retry delay ran
out), both stamped by the store's own clock (the database's for PostgreSQL), so clocks of
other machines never enter it. A job reclaimed after a lapsed lease keeps its old
``run_at``, so its latency includes the lapsed attempt: such jobs show up as outliers.
``alkstore_job_run_seconds`` is measured on trio's clock from the ``start`` to the
``finish`` event of each run, whatever its outcome.

Enqueues happen outside workers, in producers (often inside the producer's own
transaction), so no event reports them: a producer that wants
``alkstore_jobs_enqueued_total`` calls :meth:`WorkerMetrics.count_enqueued` after its
enqueue committed. Queue depth (``alkstore_queue_jobs``) is an extension point:
:meth:`WorkerMetrics.set_queue_depth` sets it from counts you have; the store has no
``stats()`` API to poll for them yet, and nothing here invents them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final, final

import trio
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from .._errors import InvalidArgument
from .._runtime import Worker
from .._store import Queue

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from prometheus_client.metrics import MetricWrapperBase

    from .._runtime import WorkerEvent

__all__ = ["DEFAULT_LATENCY_BUCKETS_S", "WorkerMetrics"]

#: Histogram buckets (seconds) used for both histograms unless others are given: from
#: 5 ms to 10 min, since queue waits and job runs are often far longer than a request.
DEFAULT_LATENCY_BUCKETS_S: Final = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    math.inf,
)

#: Which counter each event kind increments (see the module docstring).
_COUNTED: Final = {
    "claim": "claimed",
    "ack": "acked",
    "retry": "retried",
    "dead": "dead_lettered",
    "release": "released",
    "lease_lost": "lease_lost",
    "handler_error": "handler_errors",
    "timeout": "timeouts",
    "engine_error": "engine_errors",
    "sweep_failed": "sweep_failures",
}
#: The events that end a claim (exactly one per claim whose outcome was settled).
_SETTLED: Final = frozenset({"ack", "retry", "dead", "release", "lease_lost"})

_COUNTERS: Final = {
    "claimed": ("jobs_claimed", "Jobs claimed by the workers."),
    "acked": ("jobs_acked", "Jobs acked (their handler returned)."),
    "retried": ("jobs_retried", "Jobs given back to run again (Retry, an error, a timeout)."),
    "dead_lettered": ("jobs_dead_lettered", "Jobs moved to dead by the workers."),
    "released": ("jobs_released", "Jobs handed back because their worker stopped."),
    "lease_lost": ("jobs_lease_lost", "Claims found lost; the handler was cancelled."),
    "handler_errors": ("handler_errors", "Handlers that raised an exception."),
    "timeouts": ("handler_timeouts", "Handlers cancelled by job_timeout_s."),
    "engine_errors": ("engine_errors", "Store operations that failed (tried again)."),
    "sweep_failures": ("sweep_failures", "sweep_expired runs that failed."),
    "enqueued": ("jobs_enqueued", "Jobs enqueued, as counted by the producers."),
}


@final
class WorkerMetrics:
    """Prometheus metrics for any number of workers (see the module docstring for the
    list and what each one measures).

    Create one per registry and share it: every worker it watches adds to the same
    series (labelled by queue, and by worker id if asked).

    Args:
        registry: Where to register the metrics; default prometheus-client's global
            ``REGISTRY``. Pass a fresh ``CollectorRegistry()`` to keep them apart.
        namespace: The metric name prefix (default ``"alkstore"``).
        worker_id_label: Also label every series with ``worker_id``. Off by default: the
            default worker ids are random per process, so each restart would start new
            series.
        claim_latency_buckets_s: Upper bounds (seconds) of the claim latency histogram.
        run_time_buckets_s: Upper bounds (seconds) of the run time histogram.

    Raises:
        InvalidArgument: An argument is invalid, or ``registry`` already holds metrics of
            these names (nothing was registered then).
    """

    def __init__(
        self,
        registry: CollectorRegistry = REGISTRY,
        *,
        namespace: str = "alkstore",
        worker_id_label: bool = False,
        claim_latency_buckets_s: Iterable[float] = DEFAULT_LATENCY_BUCKETS_S,
        run_time_buckets_s: Iterable[float] = DEFAULT_LATENCY_BUCKETS_S,
    ) -> None:
        if not isinstance(registry, CollectorRegistry):
            raise InvalidArgument(
                f"registry must be a prometheus_client.CollectorRegistry; got "
                f"{type(registry).__name__}"
            )
        if not isinstance(namespace, str):
            raise InvalidArgument(f"namespace must be a str; got {type(namespace).__name__}")
        if not isinstance(worker_id_label, bool):
            raise InvalidArgument(f"worker_id_label must be a bool; got {worker_id_label!r}")
        self._worker_id_label = worker_id_label
        labels = ("queue", "worker_id") if worker_id_label else ("queue",)
        try:
            self._counters = {
                key: Counter(name, doc, labels, namespace=namespace, registry=None)
                for key, (name, doc) in _COUNTERS.items()
            }
            self._in_flight = Gauge(
                "jobs_in_flight",
                "Claims held now (handler running, or its outcome not yet applied).",
                labels,
                namespace=namespace,
                registry=None,
            )
            self._workers_running = Gauge(
                "workers_running",
                "Workers watched that are running.",
                labels[1:],
                namespace=namespace,
                registry=None,
            )
            self._claim_latency = Histogram(
                "claim_latency_seconds",
                "Seconds a claimed job had been due: claimed_at - run_at, on the store clock.",
                labels,
                namespace=namespace,
                buckets=tuple(claim_latency_buckets_s),
                registry=None,
            )
            self._run_time = Histogram(
                "job_run_seconds",
                "Seconds from a handler's start to its finish (trio clock).",
                labels,
                namespace=namespace,
                buckets=tuple(run_time_buckets_s),
                registry=None,
            )
            self._queue_jobs = Gauge(
                "queue_jobs",
                "Jobs in a queue by state, as last set with set_queue_depth().",
                ("queue", "state"),
                namespace=namespace,
                registry=None,
            )
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"invalid metric settings: {exc}") from None
        collectors: list[MetricWrapperBase] = [
            *self._counters.values(),
            self._in_flight,
            self._workers_running,
            self._claim_latency,
            self._run_time,
            self._queue_jobs,
        ]
        _register_all(registry, collectors)
        #: Claims in flight: (worker id, job id, attempt) -> their label values.
        self._claims: dict[tuple[str, int, int], tuple[str, ...]] = {}
        #: Handlers running: (worker id, job id, attempt) -> trio time of their start.
        self._starts: dict[tuple[str, int, int], float] = {}

    async def run(
        self,
        worker: Worker,
        *,
        buffer: int | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Count ``worker``'s events until it stops; use with ``nursery.start`` before
        ``worker.run`` (it reports started once subscribed, so no event is missed).

        Returns after the worker's ``"worker_stop"`` event (at once if the worker already
        finished). Cancel it to stop counting earlier.

        Args:
            worker: The worker to watch.
            buffer: The subscription's buffer (see :meth:`Worker.events`); ``None``, the
                default, never drops an event.

        Raises:
            InvalidArgument: ``worker`` is not a :class:`~alkstore_trio.Worker`, or
                ``buffer`` is invalid.
        """
        if not isinstance(worker, Worker):
            raise InvalidArgument(f"worker must be a Worker; got {type(worker).__name__}")
        for queue in worker.queues:
            # Present every series of the served queues from the start, at 0.
            values = self._labels(queue.name, worker.worker_id)
            for counter in self._counters.values():
                counter.labels(*values)
            self._in_flight.labels(*values)
        with worker.events(buffer=buffer) as events:
            task_status.started()
            async for event in events:
                self.observe(event)

    def observe(self, event: WorkerEvent) -> None:
        """Apply one event to the metrics (what :meth:`run` does with each). Useful when
        you already consume a worker's events yourself; never blocks.

        Args:
            event: A :class:`~alkstore_trio.WorkerEvent`.
        """
        kind = event.kind
        values = self._labels(event.queue or "", event.worker_id)
        counter = _COUNTED.get(kind)
        if counter is not None:
            self._counters[counter].labels(*values).inc()
        if kind == "worker_start":
            self._running(event.worker_id).inc()
        elif kind == "worker_stop":
            self._running(event.worker_id).dec()
            self._forget_worker(event.worker_id)
        job = event.job
        if job is None:
            return
        key = (event.worker_id, job.id, job.attempts)
        if kind == "claim":
            self._claims[key] = values
            self._in_flight.labels(*values).inc()
            if job.claimed_at is not None:
                waited_s = (job.claimed_at - job.run_at).total_seconds()
                self._claim_latency.labels(*values).observe(max(0.0, waited_s))
        elif kind == "start":
            self._starts[key] = event.at
        elif kind == "finish":
            started_at = self._starts.pop(key, None)
            if started_at is not None:
                self._run_time.labels(*values).observe(max(0.0, event.at - started_at))
        elif kind in _SETTLED and self._claims.pop(key, None) is not None:
            self._in_flight.labels(*values).dec()

    def count_enqueued(self, queue: str | Queue, n: int = 1) -> None:
        """Add ``n`` to ``alkstore_jobs_enqueued_total`` for ``queue``. Call it in the
        producer once the enqueue committed (after the transaction, when you enqueue in
        one): a rolled-back enqueue must not count.

        With ``worker_id_label=True`` the series' ``worker_id`` is ``""``.

        Args:
            queue: The queue's name or handle.
            n: How many jobs (>= 0), e.g. ``len(ids)`` after ``enqueue_many``.

        Raises:
            InvalidArgument: ``queue`` or ``n`` is invalid.
        """
        if isinstance(queue, Queue):
            queue = queue.name
        if not isinstance(queue, str):
            raise InvalidArgument(
                f"queue must be a queue name or a Queue; got {type(queue).__name__}"
            )
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidArgument(f"n must be an int >= 0; got {n!r}")
        self._counters["enqueued"].labels(*self._labels(queue, "")).inc(n)

    def set_queue_depth(self, queue: str, counts: Mapping[str, int]) -> None:
        """Set ``alkstore_queue_jobs{queue, state}`` from counts you have (extension
        point). The store has no ``stats()`` API yet to poll for them; once it has, a
        poller calls this with its per-state counts.

        Args:
            queue: The queue's name.
            counts: Jobs per state, e.g. ``{"ready": 12, "delayed": 3, "dead": 1}``;
                states not named keep their last value.

        Raises:
            InvalidArgument: ``queue`` is not a str, or a count is not an int >= 0.
        """
        if not isinstance(queue, str):
            raise InvalidArgument(f"queue must be a str; got {type(queue).__name__}")
        checked: dict[str, int] = {}
        for state, count in counts.items():
            if not isinstance(state, str):
                raise InvalidArgument(f"counts keys must be state names; got {state!r}")
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise InvalidArgument(f"counts[{state!r}] must be an int >= 0; got {count!r}")
            checked[state] = count
        for state, count in checked.items():
            self._queue_jobs.labels(queue, state).set(count)

    def _labels(self, queue: str, worker_id: str) -> tuple[str, ...]:
        return (queue, worker_id) if self._worker_id_label else (queue,)

    def _running(self, worker_id: str) -> Gauge:
        if self._worker_id_label:
            return self._workers_running.labels(worker_id)
        return self._workers_running

    def _forget_worker(self, worker_id: str) -> None:
        """A stopped worker holds no claim: take back the ones whose outcome never came
        (``finalize_incomplete``, or events a bounded buffer dropped)."""
        for key in [key for key in self._claims if key[0] == worker_id]:
            self._in_flight.labels(*self._claims.pop(key)).dec()
        for key in [key for key in self._starts if key[0] == worker_id]:
            del self._starts[key]


def _register_all(registry: CollectorRegistry, collectors: list[MetricWrapperBase]) -> None:
    """Register every collector, or none: on a name clash, undo the ones registered."""
    done: list[MetricWrapperBase] = []
    try:
        for collector in collectors:
            registry.register(collector)
            done.append(collector)
    except ValueError as exc:
        for collector in done:
            registry.unregister(collector)
        raise InvalidArgument(
            f"registry already holds a metric of this name ({exc}); create one WorkerMetrics "
            "per registry and share it among workers, or pass another registry"
        ) from None
