"""The records of the contract: options (Q1), the job row (Q8), enqueue input (Q2), sweep
results (Q9) and the operator's statistics (D22). All frozen; all pure data."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, NamedTuple, TypeAlias, final

from .._errors import InvalidArgument
from . import _validate as v
from ._limits import NOT_THROTTLED, QueueLimits, Throttled

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from datetime import datetime

#: Q8: a row's state. ``"cancelling"`` (Q19.5) is a live row cancelled while processing.
#: ``"completed"`` (Q19.2) is a kept row after its ack, ``"cancelled"`` (Q19.5) a kept row
#: after its cancel: only jobs whose stamp ``keep_completed_s`` is not ``None`` have one.
JobState: TypeAlias = Literal[
    "pending", "processing", "cancelling", "dead", "completed", "cancelled"
]
#: Q19.4: the final states: a job in one of them never changes state again (a redrive,
#: D24, makes a dead job pending again: a new life, not a change of this outcome).
FINAL_STATES: frozenset[JobState] = frozenset({"completed", "cancelled", "dead"})


@dataclass(frozen=True, slots=True)
class QueueOpts:
    """Per-queue options (Q1). They are the *stamps* a queue handle writes onto every row
    it enqueues; a row keeps its stamps for life.

    Attributes:
        visibility_timeout_s: How long a claim is valid without a heartbeat (> 0).
        max_attempts: How many claims a job gets before it is dead-lettered (>= 1).
        backoff_base_s: The base of the retry backoff curve (>= 0; 0 retries at once).
        expires_in_s: A job not finished this long after its enqueue expires and is
            dead-lettered by the next sweep (> 0), or ``None`` for never.
        dead_letter_retention_s: How long a sweep keeps dead rows (>= 0), or ``None`` to
            keep them forever. Used by the sweeping handle, not stamped onto rows.
        keep_completed_s: Q19.2: how long a job stays readable after its ack, as a
            ``"completed"`` row with its result (>= 0), or ``None`` to delete it at its
            ack (the default). A stamp: whichever worker acks the job keeps it or not.

    Raises:
        InvalidArgument: a value is NaN, infinite, a bool, negative, out of range or of the
            wrong type.
    """

    visibility_timeout_s: float = 300.0
    max_attempts: int = 3
    backoff_base_s: float = 5.0
    expires_in_s: float | None = None
    dead_letter_retention_s: float | None = None
    keep_completed_s: float | None = None

    def __post_init__(self) -> None:
        checked = {
            "visibility_timeout_s": v.check_duration(
                "visibility_timeout_s", self.visibility_timeout_s, min_s=0, min_inclusive=False
            ),
            "max_attempts": v.check_max_attempts("max_attempts", self.max_attempts),
            "backoff_base_s": v.check_duration("backoff_base_s", self.backoff_base_s, min_s=0),
            "expires_in_s": v.check_optional_duration(
                "expires_in_s", self.expires_in_s, min_s=0, min_inclusive=False
            ),
            "dead_letter_retention_s": v.check_optional_duration(
                "dead_letter_retention_s", self.dead_letter_retention_s, min_s=0
            ),
            "keep_completed_s": v.check_optional_duration(
                "keep_completed_s", self.keep_completed_s, min_s=0
            ),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)


#: The stamps a row enqueued without a queue handle gets (Q1): 300 / 3 / 5 / None.
DEFAULT_OPTS = QueueOpts()


@final
class Headers(Mapping[str, str]):
    """A job's headers (D30): an immutable, hashable ``str -> str`` mapping, iterated in
    key order (on every engine; the order of the enqueuer's mapping is not kept).

    Headers are metadata the enqueuer attaches beside the payload, such as a trace
    context (``traceparent``) or a tenant id. Their ``repr`` names the keys only, never
    the values. Construct one from validated pairs only; the public API validates the
    ``headers=`` argument of ``enqueue`` (see :func:`alkstore_trio._core._validate.check_headers`).
    """

    __slots__ = ("_items",)

    _items: dict[str, str]

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        self._items = dict(sorted(pairs))

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Headers):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == dict(other.items())
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return f"<Headers {', '.join(self._items) or '(none)'}>"


#: The headers of a job enqueued without any.
NO_HEADERS: Final = Headers()


@dataclass(frozen=True, slots=True)
class Job:
    """One job row as an engine shows it (Q8): a frozen snapshot, never updated in place.

    Timestamps are timezone-aware UTC datetimes. ``attempts`` counts claims so far (a
    claimed job's snapshot shows the post-claim count: "attempt 2 of 3"), and
    ``claim_token`` is the claim's own token (Q19.8: fresh for every claim, ``None``
    while pending; dead rows keep their last one, D1). The payload and
    the headers are left out of ``repr`` so that logging a job never leaks them.
    ``headers`` are the enqueuer's metadata (D30), kept for the job's life like the
    payload; empty unless the enqueue gave some. ``unique_key`` is the key the enqueue
    gave (Q15), kept for the job's life, dead rows included, and so is
    ``concurrency_key`` (Q18.8).
    """

    id: int
    queue: str
    payload: bytes = field(repr=False)
    priority: int
    state: JobState
    attempts: int
    max_attempts: int
    run_at: datetime
    enqueued_at: datetime
    visibility_timeout_s: float
    backoff_base_s: float
    expires_at: datetime | None
    claimed_by: str | None
    claimed_at: datetime | None
    claim_expires_at: datetime | None
    last_error: str | None
    died_at: datetime | None
    headers: Headers = field(default=NO_HEADERS, repr=False)
    #: Q15: the job's unique key (``None`` for none). Left out of ``repr`` like the
    #: headers: a key is often made from private data (a user id, an address).
    unique_key: str | None = field(default=None, repr=False)
    #: Q18.8: the job's concurrency key (``None`` for none), left out of ``repr`` too.
    concurrency_key: str | None = field(default=None, repr=False)
    #: Q19.8: the claim token every operation on the claim is checked against (V), out
    #: of ``repr``: whoever knows it can ack the job.
    claim_token: int | None = field(default=None, repr=False)
    #: Q19.2: the stamp ``keep_completed_s``: seconds the job stays readable after its
    #: ack (``None``: deleted at its ack).
    keep_completed_s: float | None = None
    #: Q19.2: when a kept job was acked, or (Q19.5) recorded cancelled (``None`` unless
    #: ``state`` is ``"completed"`` or ``"cancelled"``).
    completed_at: datetime | None = None
    #: Q19.1: the handler's result stored with the ack of a kept job (``None`` for none),
    #: left out of ``repr`` like the payload.
    result: bytes | None = field(default=None, repr=False)
    #: Q19.7: the last progress text a handler reported for the job (a heartbeat carried
    #: it), kept into history and dead rows; ``None`` until one was reported.
    progress: str | None = None


class SweepResult(NamedTuple):
    """What :meth:`Queue.sweep_expired` did (Q9).

    Attributes:
        expired: Live rows moved to dead because they expired.
        purged: Dead rows deleted because their retention ran out.
        purged_completed: Q19.3: kept rows (``"completed"``, ``"cancelled"``) deleted because their
            ``completed_at + keep_completed_s`` passed.
        cancelled: Q19.5: cancelling rows finalized as cancelled because their lease
            lapsed (the holder never settled them).
    """

    expired: int
    purged: int
    purged_completed: int = 0
    cancelled: int = 0


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue's rows at one instant of the engine's clock (D22), from
    :meth:`Store.stats`.

    Attributes:
        queue: The queue's name.
        pending_ready: Pending rows whose ``run_at`` has come (``run_at <= now``).
        pending_delayed: Pending rows whose ``run_at`` is still ahead.
        processing: Processing rows, lapsed or not.
        reclaimable: The processing rows whose claim lapsed (``now > claim_expires_at``):
            the next claim reclaims them, or dead-letters those at their budget.
        dead: Dead rows (not yet purged).
        oldest_ready_age_s: How long the longest-waiting ready row has been claimable
            (``now - min(run_at)`` over the ready rows), in seconds; ``None`` when no
            row is ready. A growing value means the workers fall behind.
        acked_total: Jobs of the queue acked so far (D27): by a handle's ``ack``,
            ``ack_batch``, ``ack_handles`` and ``ack_handles_and_claim``.
        dead_lettered_total: Dead-letter moves of the queue so far (D27): ``fail``,
            ``retry`` at budget, the pre-claim sweep and the expiry sweep. A job
            redriven (D24) and dead again counts twice.
        cancelled_total: Live jobs of the queue cancelled so far (D27): finalized as
            cancelled (Q19.5), not when a processing one became cancelling.
        paused: Q18: the queue is paused (:meth:`Queue.pause`): no claim hands out its
            jobs until :meth:`Queue.resume`.
        limits: Q18.10: the queue's limits (:meth:`Queue.set_limits`), or ``None`` when
            it has none.
        throttled: Q18.10: how many claims of the queue each limit throttled so far
            (on PostgreSQL since its first limit was set, in memory since the store
            opened).
        cancelling: Q19.5: rows being cancelled: cancel was called while they were
            processing, and their holder has not stopped (or its lease not lapsed) yet.
            Live, but neither pending nor processing.

    The three ``*_total`` counters only grow: on PostgreSQL since the schema got its
    counters (migration 2), in memory since the store opened. Two readings give rates
    (``alkstore-trio stats --watch`` shows jobs finished per minute from them). Rows
    whose ``expires_at`` passed are counted where they sit until a sweep moves them
    (they are never claimed).
    """

    queue: str
    pending_ready: int
    pending_delayed: int
    processing: int
    reclaimable: int
    dead: int
    oldest_ready_age_s: float | None
    acked_total: int
    dead_lettered_total: int
    cancelled_total: int
    # Q18: queue controls.
    paused: bool = False
    limits: QueueLimits | None = None
    throttled: Throttled = NOT_THROTTLED
    # Q19.5: two-phase cancel.
    cancelling: int = 0

    @property
    def live(self) -> int:
        """Pending, processing and cancelling rows."""
        return self.pending_ready + self.pending_delayed + self.processing + self.cancelling

    @property
    def finished_total(self) -> int:
        """Jobs that reached an end so far: acked plus dead-lettered (D27)."""
        return self.acked_total + self.dead_lettered_total


@dataclass(frozen=True, slots=True)
class StoreStats:
    """What :meth:`Store.stats` saw (D22): every queue with rows or counted jobs, and
    every paused queue (Q18) (or the one asked for), read at one instant of the engine's clock.

    Attributes:
        now: The engine's clock at the reading (the database's clock on PostgreSQL).
        ids_issued: How many job ids the store has handed out so far (enqueued rows,
            and ids of rolled-back transactions), across every queue: two readings give
            the store's enqueue rate. ``ids_issued - live - dead - kept`` only grows, by every
            ack, cancel, purge and rolled-back id (D23).
        queues: One entry per queue, by name.
    """

    now: datetime
    ids_issued: int
    queues: tuple[QueueStats, ...]

    def queue(self, name: str) -> QueueStats | None:
        """The entry of queue ``name``, or ``None`` when it is not listed (no rows and
        nothing counted)."""
        for entry in self.queues:
            if entry.queue == name:
                return entry
        return None


class EnqueueSpec(NamedTuple):
    """Validated input for one row to enqueue, not yet resolved against a clock.

    ``max_attempts`` is already resolved (the per-job override or the stamp); the times
    are resolved by :func:`alkstore_trio._core.enqueued_job` with the engine's ``now``.
    A named tuple rather than a frozen dataclass: ``enqueue_many`` makes one per payload,
    and building a frozen dataclass cost more than the rest of the call's validation.
    Its ``repr`` leaves out the payload, the headers and the unique key.
    """

    queue: str
    payload: bytes
    priority: int
    delay_s: float | None
    run_at: datetime | None
    max_attempts: int
    visibility_timeout_s: float
    backoff_base_s: float
    expires_in_s: float | None
    headers: Headers = NO_HEADERS
    #: Q15: at most one live job per (queue, unique_key); ``None`` for no key.
    unique_key: str | None = None
    #: Q15: the window, in seconds, during which a created job's key refuses new jobs
    #: whatever became of it; ``None`` for none (always ``None`` without a key).
    unique_for_s: float | None = None
    #: Q18.8: the queue's ``max_running_per_key`` counts the live jobs of this key;
    #: ``None`` for no key.
    concurrency_key: str | None = None
    #: Q19.2: the stamp ``keep_completed_s`` (``None``: not kept after the ack).
    keep_completed_s: float | None = None

    def __repr__(self) -> str:
        return (
            f"EnqueueSpec(queue={self.queue!r}, priority={self.priority!r}, "
            f"delay_s={self.delay_s!r}, run_at={self.run_at!r}, "
            f"max_attempts={self.max_attempts!r}, "
            f"visibility_timeout_s={self.visibility_timeout_s!r}, "
            f"backoff_base_s={self.backoff_base_s!r}, expires_in_s={self.expires_in_s!r}, "
            f"unique_for_s={self.unique_for_s!r}, keep_completed_s={self.keep_completed_s!r})"
        )


class Enqueued(int):
    """What an enqueue returns (Q2, Q15): the job id, an ``int``, with a read-only
    :attr:`created` flag.

    ``created`` is ``False`` when the enqueue made no job because its ``unique_key`` was
    held: the id is then the live job's that holds the key, or, within a
    ``unique_for_s`` window, the id of the last job created with that key, whatever
    became of it (Q15). Without a key, ``created`` is always ``True``. Code that treats
    the result as an int (``job_id = await queue.enqueue(...)``) keeps working:
    an ``Enqueued`` equals, hashes, formats and pickles like its id.

    ``Enqueued(job_id)`` is a created job; :meth:`existing` makes the other kind (an
    engine written outside the library returns these from its ``enqueue``).
    """

    # No instance dict (attributes cannot be set) and no __new__ of our own: making one
    # costs what making an int subclass costs, on every enqueue of every job.
    __slots__ = ()

    @property
    def created(self) -> bool:
        """Whether this enqueue created the job (``False``: the key was held, Q15)."""
        return True

    @staticmethod
    def existing(job_id: int) -> Enqueued:
        """The result of an enqueue that created nothing: ``job_id`` holds the key."""
        return _Existing(job_id)

    def __repr__(self) -> str:
        return f"Enqueued({int(self)}, created={self.created})"

    # str() and f-strings show the id alone, as for an int (object.__str__ would call
    # the __repr__ above).
    __str__ = int.__repr__

    def __reduce__(self) -> tuple[type[Enqueued], tuple[int]]:
        return (type(self), (int(self),))


@final
class _Existing(Enqueued):
    """An :class:`Enqueued` with ``created=False`` (made by :meth:`Enqueued.existing`)."""

    __slots__ = ()

    @property
    def created(self) -> bool:
        """``False``: the enqueue created nothing (Q15)."""
        return False


def enqueue_specs(
    queue: str,
    opts: QueueOpts,
    payloads: Sequence[object],
    *,
    max_payload_bytes: int,
    priority: object,
    delay_s: object,
    run_at: object,
    max_attempts: object,
    headers: object = None,
    unique_keys: Sequence[str | None] | None = None,
    unique_for_s: object = None,
    concurrency_keys: Sequence[str | None] | None = None,
) -> list[EnqueueSpec]:
    """Validate Q2's arguments for one or many payloads; raise before any effect.

    ``unique_keys`` are already checked (one per payload, or ``None`` for no keys);
    ``unique_for_s`` is checked here and kept only on the specs with a key (Q15).
    ``concurrency_keys`` (Q18.8) are already checked like ``unique_keys``.
    """
    checked_headers = NO_HEADERS if headers is None else Headers(v.check_headers(headers))
    checked_priority = v.check_priority(priority)
    # Q2.1: a negative delay means now (it used to backdate the row).
    checked_delay = None if delay_s is None else max(0.0, v.check_duration("delay_s", delay_s))
    checked_run_at = v.check_optional_run_at(run_at)
    override = v.check_optional_max_attempts(max_attempts)
    resolved_max = opts.max_attempts if override is None else override
    if unique_keys is not None or unique_for_s is not None or concurrency_keys is not None:
        return _unique_specs(
            queue, opts, payloads, max_payload_bytes, checked_priority, checked_delay,
            checked_run_at, resolved_max, checked_headers, unique_keys, unique_for_s,
            concurrency_keys,
        )  # fmt: skip
    return [
        EnqueueSpec(
            queue=queue,
            payload=v.check_payload(payload, max_payload_bytes),
            priority=checked_priority,
            delay_s=checked_delay,
            run_at=checked_run_at,
            max_attempts=resolved_max,
            visibility_timeout_s=opts.visibility_timeout_s,
            backoff_base_s=opts.backoff_base_s,
            expires_in_s=opts.expires_in_s,
            headers=checked_headers,
            keep_completed_s=opts.keep_completed_s,
        )
        for payload in payloads
    ]


def _unique_specs(
    queue: str,
    opts: QueueOpts,
    payloads: Sequence[object],
    max_payload_bytes: int,
    priority: int,
    delay_s: float | None,
    run_at: datetime | None,
    max_attempts: int,
    headers: Headers,
    unique_keys: Sequence[str | None] | None,
    unique_for_s: object,
    concurrency_keys: Sequence[str | None] | None,
) -> list[EnqueueSpec]:
    """Q15/Q18.8: :func:`enqueue_specs` with keys (the path of keyed enqueues only)."""
    window = v.check_optional_duration("unique_for_s", unique_for_s, min_s=0, min_inclusive=False)
    keys: Sequence[str | None] = [None] * len(payloads) if unique_keys is None else unique_keys
    groups: Sequence[str | None] = (
        [None] * len(payloads) if concurrency_keys is None else concurrency_keys
    )
    if window is not None and not any(key is not None for key in keys):
        raise InvalidArgument("unique_for_s needs a unique_key; got no key")
    return [
        EnqueueSpec(
            queue=queue,
            payload=v.check_payload(payload, max_payload_bytes),
            priority=priority,
            delay_s=delay_s,
            run_at=run_at,
            max_attempts=max_attempts,
            visibility_timeout_s=opts.visibility_timeout_s,
            backoff_base_s=opts.backoff_base_s,
            expires_in_s=opts.expires_in_s,
            headers=headers,
            unique_key=key,
            unique_for_s=None if key is None else window,
            concurrency_key=group,
            keep_completed_s=opts.keep_completed_s,
        )
        for payload, key, group in zip(payloads, keys, groups, strict=True)
    ]
