"""Prometheus metrics for workers, fed by their event streams, and for the store's
queues, fed by :meth:`Store.stats` (``pip install 'alkstore_trio[prometheus]'``).

Example::

    from prometheus_client import start_http_server
    from alkstore_trio.contrib.prometheus import StoreStatsMetrics, WorkerMetrics

    metrics = WorkerMetrics()  # once per process (per registry); share it among workers
    queue_stats = StoreStatsMetrics(store)  # once per process: polls store.stats()
    start_http_server(9100)  # prometheus-client's own exporter thread
    worker = Worker(store, {"emails": send_email})
    async with trio.open_nursery() as nursery:
        await nursery.start(queue_stats.run)  # a first reading is served once it returns
        await nursery.start(metrics.run, worker)  # subscribed: no event is missed
        await nursery.start(worker.run)

Two sources, two classes. What workers *do* (claims, acks, retries, run times) is only
known to the workers, and :class:`WorkerMetrics` counts it from their events. What the
queues *hold* (ready, delayed, processing, dead jobs) is only known to the store, and
:class:`StoreStatsMetrics` reads it with :meth:`Store.stats` every ``interval_s``: one
process is enough for that, whatever the number of workers.

Why the event stream. Every figure of :class:`WorkerMetrics` is counted from the
:class:`~alkstore_trio.WorkerEvent` the worker publishes for each transition (rule R9),
by a task that only reads them: the metrics can never slow, block or change the worker,
and they agree with :meth:`Worker.statistics` (``alkstore_jobs_acked_total`` is
``statistics().acked``, summed over the workers watched). The task subscribes before it
reports started, so starting it before the worker means the first claim is counted. It
asks for an unbounded buffer by default: :meth:`WorkerMetrics.observe` never blocks, so
the buffer only holds the events of one scheduling round; with a bound, events a full
buffer drops are lost to the metrics (``statistics().events_dropped`` counts them).

The worker figures (``alkstore`` is ``namespace``; every series but
``alkstore_workers_running`` has a ``queue`` label, and every series a ``worker_id``
label when ``worker_id_label=True``):

- ``alkstore_jobs_claimed_total``: jobs claimed (``claim``)
- ``alkstore_jobs_acked_total``: jobs acked (``ack``)
- ``alkstore_jobs_retried_total``: jobs given back to run again (``retry``)
- ``alkstore_jobs_dead_lettered_total``: jobs moved to dead by a worker (``dead``)
- ``alkstore_jobs_released_total``: jobs handed back by a stopping worker
- ``alkstore_jobs_lease_lost_total``: claims found lost (``lease_lost``)
- ``alkstore_jobs_cancelled_total``: jobs cancelled while held (``cancelled``, R15)
- ``alkstore_handler_errors_total``: handlers that raised an exception
- ``alkstore_handler_timeouts_total``: handlers cancelled by ``job_timeout_s``
- ``alkstore_engine_errors_total``: store operations that failed (retried)
- ``alkstore_sweep_failures_total``: ``sweep_expired`` runs that failed
- ``alkstore_jobs_enqueued_total``: jobs enqueued, as told by :meth:`WorkerMetrics.count_enqueued`
- ``alkstore_jobs_in_flight``: claims held now (gauge)
- ``alkstore_workers_running``: workers watched that are running (gauge)
- ``alkstore_claim_latency_seconds``: from ``run_at`` to ``claimed_at`` (histogram)
- ``alkstore_job_run_seconds``: from a handler's start to its finish (histogram)

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
enqueue committed.

The store figures, from the last reading of :meth:`Store.stats` (a ``queue`` label on
the first six):

- ``alkstore_queue_jobs``: jobs by ``state``: ``ready``, ``delayed`` (both pending),
  ``processing``, ``dead``; the four add up to every row of the queue (gauge)
- ``alkstore_queue_jobs_reclaimable``: the processing jobs whose claim lapsed (gauge)
- ``alkstore_queue_paused``: 1 while the queue is paused (Q18), else 0 (gauge)
- ``alkstore_queue_limit``: the queue's limits by ``limit``: ``max_running``,
  ``rate_per_s``, ``burst`` and ``max_running_per_key`` (Q18.7-Q18.9); a limit not set
  has no sample (gauge)
- ``alkstore_queue_throttled_total``: claims of the queue that a limit held back, by
  ``limit``: ``running``, ``rate`` or ``per_key`` (counter, Q18.10)
- ``alkstore_queue_oldest_ready_age_seconds``: how long the longest-waiting ready job
  has been claimable, 0 when none is (gauge)
- ``alkstore_queue_acked_total``: jobs of the queue acked (counter, D27)
- ``alkstore_queue_dead_lettered_total``: moves of the queue's jobs to dead, by a
  worker or a sweep; a redriven job that dies again counts twice (counter, D27)
- ``alkstore_queue_cancelled_total``: live jobs of the queue cancelled (counter, D27)
- ``alkstore_store_ids_issued_total``: job ids the store handed out (counter)
- ``alkstore_store_jobs_removed_total``: job rows that left the store: acked, cancelled,
  purged, and ids of rolled-back enqueues (counter, D23)
- ``alkstore_queue_stats_up``: 1 if the last reading succeeded, else 0 (gauge)
- ``alkstore_queue_stats_last_success_timestamp_seconds``: the store clock at the last
  successful reading, in Unix seconds (gauge)
- ``alkstore_queue_stats_failures_total``: readings that failed (counter)
- ``alkstore_queue_stats_duration_seconds``: how long the last reading took (gauge)

How :class:`StoreStatsMetrics` serves them. It is a prometheus-client *custom
collector*: a scrape never touches the store, it serves the last reading that
:meth:`StoreStatsMetrics.run` took (an atomic swap of one frozen value, so a scrape from
the exporter's thread sees one reading whole). That is also why totals read from the
store are exported as true counters (``CounterMetricFamily``): their value is the
store's, not this process's, so it survives a restart of the poller and agrees across
every process that exports it. A reading that fails (the store cannot be reached, or
it does not answer within ``timeout_s``) is logged and counted, ``..._stats_up`` drops
to 0, and the last good values keep being served until the next reading succeeds:
dropping them would end every series for the length of a network blip and reset the
``for:`` clock of every alert on them. Alert on ``alkstore_queue_stats_up == 0`` (or on
the age of ``..._last_success_timestamp_seconds``) to know the values are stale.

The per-queue counters are the store's too (D27): they count every ack, dead-letter move
and cancel of the queue, whoever made it (a worker, a producer's ``cancel``, a sweep),
since the schema got them on PostgreSQL and since the store opened in memory. They are
not :class:`WorkerMetrics`' ``alkstore_jobs_*`` (what the watched workers did, counted
in this process, lost at its restart); both live on one registry without a clash.

A queue that a reading no longer lists has all its series end, gauges and counters
alike, and Prometheus marks them stale: keeping every queue name ever seen would grow
the series without bound. :meth:`Store.stats` lists the queues that hold jobs or have
counted any, though, so a queue stays listed once one of its jobs was acked,
dead-lettered or cancelled: for good on PostgreSQL (its counter rows stay), as long as
the store is open in memory. Name the queues in ``queues=`` to export exactly those,
always present, at 0 when the reading does not list them.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

import trio
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .._core import QueueStats, StoreStats, Throttled
from .._core import _validate as v
from .._errors import EngineError, InvalidArgument
from .._runtime import Worker
from .._store import Queue, Store

if TYPE_CHECKING:
    from collections.abc import Iterable

    from prometheus_client.metrics import MetricWrapperBase
    from prometheus_client.metrics_core import Metric

    from .._runtime import WorkerEvent

__all__ = [
    "DEFAULT_LATENCY_BUCKETS_S",
    "DEFAULT_STATS_INTERVAL_S",
    "StoreStatsMetrics",
    "WorkerMetrics",
]

logger = logging.getLogger("alkstore_trio.contrib.prometheus")

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

#: Seconds between two readings of :meth:`Store.stats` unless told otherwise: Prometheus'
#: default scrape interval, since a scrape only ever serves the last reading.
DEFAULT_STATS_INTERVAL_S: Final = 15.0

#: Which counter each event kind increments (see the module docstring).
_COUNTED: Final = {
    "claim": "claimed",
    "ack": "acked",
    "retry": "retried",
    "dead": "dead_lettered",
    "release": "released",
    "lease_lost": "lease_lost",
    "cancelled": "cancelled",
    "handler_error": "handler_errors",
    "timeout": "timeouts",
    "engine_error": "engine_errors",
    "sweep_failed": "sweep_failures",
}
#: The events that end a claim (exactly one per claim whose outcome was settled).
_SETTLED: Final = frozenset({"ack", "retry", "dead", "release", "lease_lost", "cancelled"})

_COUNTERS: Final = {
    "claimed": ("jobs_claimed", "Jobs claimed by the workers."),
    "acked": ("jobs_acked", "Jobs acked (their handler returned)."),
    "retried": ("jobs_retried", "Jobs given back to run again (Retry, an error, a timeout)."),
    "dead_lettered": ("jobs_dead_lettered", "Jobs moved to dead by the workers."),
    "released": ("jobs_released", "Jobs handed back because their worker stopped."),
    "lease_lost": ("jobs_lease_lost", "Claims found lost; the handler was cancelled."),
    "cancelled": ("jobs_cancelled", "Jobs cancelled in the store while held (R15)."),
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
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"invalid metric settings: {exc}") from None
        collectors: list[MetricWrapperBase] = [
            *self._counters.values(),
            self._in_flight,
            self._workers_running,
            self._claim_latency,
            self._run_time,
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


#: The per-queue counters of :class:`QueueStats` (D27): the metric's name (without the
#: ``_total`` that prometheus-client adds), the field it reads, and its help text.
_QUEUE_COUNTERS: Final = (
    ("queue_acked", "acked_total", "Jobs of the queue acked, counted by the store (D27)."),
    (
        "queue_dead_lettered",
        "dead_lettered_total",
        "Moves of the queue's jobs to dead (worker or sweep), counted by the store (D27).",
    ),
    (
        "queue_cancelled",
        "cancelled_total",
        "Live jobs of the queue cancelled, counted by the store (D27).",
    ),
)

#: The states of ``alkstore_queue_jobs`` and the :class:`QueueStats` field each one
#: reads. They partition a queue's rows: their sum is every row of the queue
#: (``reclaimable``, a part of ``processing``, has a gauge of its own for that reason).
_QUEUE_STATES: Final = (
    ("ready", "pending_ready"),
    ("delayed", "pending_delayed"),
    ("processing", "processing"),
    ("dead", "dead"),
)


@dataclass(frozen=True, slots=True)
class _Readings:
    """Everything a scrape of :class:`StoreStatsMetrics` serves, replaced whole by each
    reading (a scrape may run in prometheus-client's exporter thread)."""

    #: The last successful reading, ``None`` before the first one.
    last: StoreStats | None = None
    #: Whether the last reading succeeded.
    up: bool = False
    #: Readings that failed, in all.
    failures: int = 0
    #: Readings that failed in a row, since the last success.
    failing: int = 0
    #: Seconds the last reading took (trio's clock), ``None`` before the first one.
    duration_s: float | None = None


_DURATION_HELP: Final = "Seconds the last reading took."


@final
class StoreStatsMetrics:
    """Queue depths and store-wide totals for Prometheus, read with :meth:`Store.stats`
    every ``interval_s`` by :meth:`run` (see the module docstring for the list).

    A prometheus-client custom collector: it registers itself on ``registry``, and a
    scrape serves the last reading without touching the store. Create one per process
    (the counts are the store's, so one exporting process is enough) and run it beside
    your workers, or in a process of its own::

        queue_stats = StoreStatsMetrics(store, interval_s=15)
        async with trio.open_nursery() as nursery:
            await nursery.start(queue_stats.run)

    or under a supervisor, which restarts it if it crashes::

        async with open_supervisor() as supervisor:
            await supervisor.start(queue_stats.run, name="queue-stats")

    Each reading is one :meth:`Store.stats` call for every queue, at one instant of the
    store's clock; it costs in proportion to the rows counted (on PostgreSQL it walks the
    partial indexes), so keep ``interval_s`` at several seconds.

    Args:
        store: The store to read.
        registry: Where to register; default prometheus-client's global ``REGISTRY``.
        namespace: The metric name prefix (default ``"alkstore"``).
        interval_s: Seconds from the start of one reading to the start of the next (> 0).
        timeout_s: A reading not answered within this many seconds is abandoned and
            counted as failed (> 0); default ``interval_s``.
        queues: Export only these queues (names or handles of ``store``), each always
            present, at 0 when the reading does not list it. ``None``, the default,
            exports every queue the reading lists (those with jobs or counts).

    Raises:
        InvalidArgument: An argument is invalid, or ``registry`` already holds metrics of
            these names (nothing was registered then).
    """

    def __init__(
        self,
        store: Store,
        registry: CollectorRegistry = REGISTRY,
        *,
        namespace: str = "alkstore",
        interval_s: float = DEFAULT_STATS_INTERVAL_S,
        timeout_s: float | None = None,
        queues: str | Queue | Iterable[str | Queue] | None = None,
    ) -> None:
        if not isinstance(store, Store):
            raise InvalidArgument(f"store must be a Store; got {type(store).__name__}")
        if not isinstance(registry, CollectorRegistry):
            raise InvalidArgument(
                f"registry must be a prometheus_client.CollectorRegistry; got "
                f"{type(registry).__name__}"
            )
        if not isinstance(namespace, str):
            raise InvalidArgument(f"namespace must be a str; got {type(namespace).__name__}")
        self._store = store
        self._prefix = f"{namespace}_" if namespace else ""
        self._interval_s = v.check_duration("interval_s", interval_s, min_s=0, min_inclusive=False)
        self._timeout_s = (
            self._interval_s
            if timeout_s is None
            else v.check_duration("timeout_s", timeout_s, min_s=0, min_inclusive=False)
        )
        self._queues = None if queues is None else _queue_names(store, queues)
        self._readings = _Readings()
        self._running = False
        try:
            registry.register(self)
        except ValueError as exc:
            raise InvalidArgument(
                f"registry already holds a metric of this name ({exc}), or the name is "
                "invalid; create one StoreStatsMetrics per registry (and store), or pass "
                "another registry or namespace"
            ) from None

    @property
    def interval_s(self) -> float:
        """Seconds from the start of one reading to the start of the next."""
        return self._interval_s

    @property
    def queues(self) -> tuple[str, ...] | None:
        """The queues exported, or ``None`` for every queue a reading lists."""
        return self._queues

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the store now and then every ``interval_s``, forever; use with
        ``nursery.start`` or :meth:`Supervisor.start <alkstore_trio.Supervisor.start>`.

        It reports started after the first reading, successful or not, so the metrics
        hold one as soon as ``start`` returns. Readings are spaced start to start on
        trio's clock; a reading that took longer than ``interval_s`` is followed by the
        next at once, never by a burst of catch-up readings. A failed reading does not
        end it (see :meth:`poll`). Cancel it to stop; the last reading is still served.

        Raises:
            RuntimeError: This object's ``run`` is already running (one poller each).
            StoreClosed: The store was closed (nothing is left to read).
        """
        if self._running:
            raise RuntimeError(
                "this StoreStatsMetrics is already running; run it once (one poller per collector)"
            )
        self._running = True
        try:
            next_at = trio.current_time()
            await self.poll()
            task_status.started()
            while True:
                next_at = max(next_at + self._interval_s, trio.current_time())
                await trio.sleep_until(next_at)
                await self.poll()
        finally:
            self._running = False

    async def poll(self) -> bool:
        """Take one reading now (what :meth:`run` does every ``interval_s``).

        A reading fails when :meth:`Store.stats` raises :class:`EngineError` (the
        database cannot be reached) or does not answer within ``timeout_s``. The failure
        is logged as a warning on the ``alkstore_trio.contrib.prometheus`` logger (its
        type and message, never the DSN) and counted, ``..._stats_up`` becomes 0, and the
        last successful reading keeps being served.

        Returns:
            ``True`` if the reading succeeded, ``False`` if it failed.

        Raises:
            StoreClosed: The store was closed.
        """
        started = trio.current_time()
        stats: StoreStats | None = None
        failure = f"no answer within timeout_s={self._timeout_s:g}"
        with trio.move_on_after(self._timeout_s):
            try:
                stats = await self._store.stats()
            except EngineError as exc:
                failure = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        duration_s = trio.current_time() - started
        before = self._readings
        if stats is None:
            self._readings = dataclasses.replace(
                before,
                up=False,
                failures=before.failures + 1,
                failing=before.failing + 1,
                duration_s=duration_s,
            )
            kept = (
                "nothing to serve yet"
                if before.last is None
                else f"serving the reading of {before.last.now.isoformat()}"
            )
            logger.warning(
                "store stats reading failed (%s); %s; failure %d in a row, trying again in %gs",
                failure,
                kept,
                before.failing + 1,
                self._interval_s,
                extra={"event": "stats_failed", "failures": before.failing + 1},
            )
            return False
        self._readings = _Readings(
            last=stats, up=True, failures=before.failures, failing=0, duration_s=duration_s
        )
        if before.failing:
            logger.info(
                "store stats reading succeeded again after %d failed",
                before.failing,
                extra={"event": "stats_recovered", "failures": before.failing},
            )
        return True

    def collect(self) -> list[Metric]:
        """The metric families of the last reading (called by prometheus-client on each
        scrape; never touches the store)."""
        return self._families(self._readings)

    def describe(self) -> list[Metric]:
        """The metric families without samples: what prometheus-client checks for name
        clashes when this collector registers."""
        return self._families(_Readings())

    def _families(self, readings: _Readings) -> list[Metric]:
        def name(suffix: str) -> str:
            return self._prefix + suffix

        jobs = GaugeMetricFamily(
            name("queue_jobs"),
            "Jobs in the queue by state at the last reading (ready and delayed are pending).",
            labels=("queue", "state"),
        )
        reclaimable = GaugeMetricFamily(
            name("queue_jobs_reclaimable"),
            "Processing jobs whose claim lapsed, at the last reading.",
            labels=("queue",),
        )
        oldest = GaugeMetricFamily(
            name("queue_oldest_ready_age_seconds"),
            "Seconds the longest-waiting ready job has been claimable (0: none is ready).",
            labels=("queue",),
        )
        paused = GaugeMetricFamily(  # Q18
            name("queue_paused"), "1 while the queue is paused, else 0.", labels=("queue",)
        )
        totals = [
            (CounterMetricFamily(name(suffix), doc, labels=("queue",)), field)
            for suffix, field, doc in _QUEUE_COUNTERS
        ]
        issued = CounterMetricFamily(
            name("store_ids_issued"), "Job ids the store handed out (enqueues, rolled back too)."
        )
        removed = CounterMetricFamily(
            name("store_jobs_removed"),
            "Job rows that left the store: acked, cancelled, purged, rolled-back ids (D23).",
        )
        up = GaugeMetricFamily(
            name("queue_stats_up"),
            "1 if the last reading of the store's stats succeeded, else 0.",
            value=1 if readings.up else 0,
        )
        last_success = GaugeMetricFamily(
            name("queue_stats_last_success_timestamp_seconds"),
            "The store clock at the last successful reading, in Unix seconds.",
        )
        failures = CounterMetricFamily(
            name("queue_stats_failures"),
            "Readings of the store's stats that failed.",
            value=readings.failures,
        )
        duration = GaugeMetricFamily(name("queue_stats_duration_seconds"), _DURATION_HELP)
        stats = readings.last
        if stats is not None:
            for queue, entry in self._entries(stats):
                for state, field in _QUEUE_STATES:
                    jobs.add_metric((queue, state), 0 if entry is None else getattr(entry, field))
                reclaimable.add_metric((queue,), 0 if entry is None else entry.reclaimable)
                age_s = None if entry is None else entry.oldest_ready_age_s
                oldest.add_metric((queue,), 0.0 if age_s is None else age_s)
                paused.add_metric((queue,), 1 if entry is not None and entry.paused else 0)
                for family, field in totals:
                    family.add_metric((queue,), 0 if entry is None else getattr(entry, field))
            rows = sum(entry.live + entry.dead for entry in stats.queues)
            issued.add_metric((), stats.ids_issued)
            removed.add_metric((), max(0, stats.ids_issued - rows))
            last_success.add_metric((), stats.now.timestamp())
        if readings.duration_s is not None:
            duration.add_metric((), readings.duration_s)
        return [
            jobs,
            reclaimable,
            oldest,
            paused,
            *self._limit_families(stats),
            *(family for family, _ in totals),
            issued,
            removed,
            up,
            last_success,
            failures,
            duration,
        ]

    def _limit_families(self, stats: StoreStats | None) -> list[Metric]:
        """Q18.7-Q18.11: the limit values (a sample per limit that is set) and the
        throttle counts of every exported queue."""
        limit = GaugeMetricFamily(
            self._prefix + "queue_limit",
            "The queue's limits: max_running, rate_per_s, burst and max_running_per_key "
            "(unset: no sample).",
            labels=("queue", "limit"),
        )
        throttled = CounterMetricFamily(
            self._prefix + "queue_throttled",
            "Claims of the queue that a limit held back (running: max_running; rate; "
            "per_key: max_running_per_key).",
            labels=("queue", "limit"),
        )
        for queue, entry in [] if stats is None else self._entries(stats):
            limits = None if entry is None else entry.limits
            if limits is not None:
                for field in ("max_running", "rate_per_s", "burst", "max_running_per_key"):
                    value = getattr(limits, field)
                    if value is not None:
                        limit.add_metric((queue, field), value)
            counts = Throttled() if entry is None else entry.throttled
            throttled.add_metric((queue, "running"), counts.running)
            throttled.add_metric((queue, "rate"), counts.rate)
            throttled.add_metric((queue, "per_key"), counts.per_key)
        return [limit, throttled]

    def _entries(self, stats: StoreStats) -> list[tuple[str, QueueStats | None]]:
        """The queues to export and their entries; ``None`` for a queue of ``queues=``
        the reading does not list (it has no rows: its gauges are 0)."""
        if self._queues is None:
            return [(entry.queue, entry) for entry in stats.queues]
        return [(queue, stats.queue(queue)) for queue in self._queues]


def _queue_names(store: Store, queues: str | Queue | Iterable[str | Queue]) -> tuple[str, ...]:
    """``queues=`` of :class:`StoreStatsMetrics`: distinct names, in order."""
    if isinstance(queues, str | Queue):
        queues = [queues]  # one queue, not the letters of its name
    try:
        items = list(queues)
    except TypeError:
        raise InvalidArgument(
            f"queues must be queue names or handles, or None; got a {type(queues).__name__}"
        ) from None
    if not items:
        raise InvalidArgument("queues must name at least one queue, or be None for every queue")
    return tuple(dict.fromkeys(store._queue_name(queue) for queue in items))


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
