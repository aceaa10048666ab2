"""Model checking an engine: drive it and the :class:`ReferenceModel` with the same random
operations, and demand that they agree after every step.

Why this shape: an engine is correct when it is indistinguishable from the contract
through the public API. So the checker only uses ``Store``/``Queue``/``JobHandle``
(opened through an :class:`~alkstore_trio.testing.EngineHarness`), feeds the same
operations to the naive :class:`~alkstore_trio.testing.ReferenceModel`, and compares

- every operation's return value (ids, claimed snapshots, ``True``/``False`` of handle
  operations, ack counts, sweep results), and
- after every step, every job's observable state: ``get_job`` of every id ever issued
  (and a few never issued), asked of every queue, live and dead rows alike.

The steps are drawn one at a time with Hypothesis's ``data.draw`` inside a trio run
(``hypothesis-trio`` is not used: it breaks on current Hypothesis). Each step is a small
record with a readable ``repr`` that leaves out default values, so a shrunk failure reads
as a short script. Time moves only through the harness, in small steps, by large jumps
past every deadline, or *exactly* onto an interesting instant of some row (a deadline,
a ``run_at``, an expiry, a retention limit) or one microsecond after it, where the
contract's ``<`` versus ``<=`` boundaries live.

The model must see the same clock read as the engine: the harness's clock has to stand
still between :meth:`~alkstore_trio.testing.EngineHarness.advance` calls.

Hypothesis is imported here, and this module is imported by
``alkstore_trio.testing`` only when one of its names is first used, so the rest of
``alkstore_trio.testing`` works without Hypothesis installed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from functools import partial
from typing import TYPE_CHECKING, Literal, TypeAlias

import hypothesis.strategies as st
import trio
from hypothesis import HealthCheck, event, given, note, settings

from ..._core import Headers, Job, JobState, QueueOpts
from ..._errors import HandleConsumed
from .._model import ModelTransaction, ReferenceModel

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..._store import JobHandle, Queue, Store, Transaction
    from .._harness import EngineHarness

__all__ = ["DEFAULT_QUEUES", "check_engine_against_model", "engine_vs_model_test"]

#: The queue handles the checker uses unless told otherwise: three queue names with small
#: visibility timeouts, 1-3 attempts, expiry and retention on some, and a second handle
#: on ``alpha`` with other stamps (rows keep the stamps of the handle that enqueued them;
#: a sweep applies the retention of the handle that sweeps).
DEFAULT_QUEUES: tuple[tuple[str, QueueOpts], ...] = (
    ("alpha", QueueOpts(visibility_timeout_s=10, max_attempts=2, backoff_base_s=1)),
    (
        "beta",
        QueueOpts(
            visibility_timeout_s=5,
            max_attempts=1,
            backoff_base_s=0,
            expires_in_s=20,
            dead_letter_retention_s=0,
        ),
    ),
    (
        "gamma",
        QueueOpts(
            visibility_timeout_s=30,
            max_attempts=3,
            backoff_base_s=0.5,
            expires_in_s=45,
            dead_letter_retention_s=15,
        ),
    ),
    (
        "alpha",
        QueueOpts(
            visibility_timeout_s=7,
            max_attempts=3,
            backoff_base_s=2,
            expires_in_s=12.5,
            dead_letter_retention_s=5,
        ),
    ),
)

_WORKERS = ("w1", "w2")
#: ``run_at`` is given in UTC or in another zone: Q8 wants UTC back either way.
_RUN_AT_TIMEZONES: tuple[tzinfo, ...] = (UTC, timezone(timedelta(hours=2)))
_ONE_MICROSECOND = timedelta(microseconds=1)
_RETENTIONS: tuple[float, ...] = (0.0, 3.0, 5.0, 10.0, 15.0)

# -- steps ------------------------------------------------------------------------------


class _Step:
    """A step's repr shows only the fields that differ from their defaults."""

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.default is not value and f.default != value:
                shown.append(f"{f.name}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"


#: A step's headers as pairs (steps stay hashable); ``None`` passes no ``headers=``.
_HeaderPairs: TypeAlias = tuple[tuple[str, str], ...]


def _headers(pairs: _HeaderPairs | None) -> dict[str, str] | None:
    return None if pairs is None else dict(pairs)


@dataclass(frozen=True, repr=False)
class Enqueue(_Step):
    """``queue.enqueue``; the payload is passed as a ``payload_as``; ``run_at_in_s`` is
    relative to now, given in the zone ``_RUN_AT_TIMEZONES[run_at_tz]``."""

    queue: str
    payload: bytes = b""
    payload_as: Literal["bytes", "bytearray", "memoryview"] = "bytes"
    priority: int = 0
    delay_s: float | None = None
    run_at_in_s: float | None = None
    run_at_tz: int = 0
    max_attempts: int | None = None
    headers: _HeaderPairs | None = None


@dataclass(frozen=True, repr=False)
class EnqueueMany(_Step):
    """``queue.enqueue_many`` (possibly of no payloads)."""

    queue: str
    payloads: tuple[bytes, ...] = ()
    priority: int = 0
    delay_s: float | None = None
    max_attempts: int | None = None
    headers: _HeaderPairs | None = None


@dataclass(frozen=True, repr=False)
class Claim(_Step):
    """``claim_one`` when ``n`` is None, else ``claim_batch(worker, n)``."""

    queue: str
    worker: str = "w1"
    n: int | None = None


@dataclass(frozen=True, repr=False)
class Heartbeat(_Step):
    """``handle.heartbeat(extend_s)``."""

    handle: str
    extend_s: float | None = None


@dataclass(frozen=True, repr=False)
class Ack(_Step):
    """``handle.ack()``."""

    handle: str


@dataclass(frozen=True, repr=False)
class AckHandles(_Step):
    """``queue.ack_handles(handles)`` over distinct unconsumed handles of that queue."""

    queue: str
    handles: tuple[str, ...] = ()


@dataclass(frozen=True, repr=False)
class AckHandlesAndClaim(_Step):
    """``queue.ack_handles_and_claim(handles, worker, n)`` over distinct unconsumed
    handles of that queue (possibly none)."""

    queue: str
    handles: tuple[str, ...] = ()
    worker: str = "w1"
    n: int = 1


@dataclass(frozen=True, repr=False)
class HeartbeatHandles(_Step):
    """``queue.heartbeat_handles(handles, extend_s)`` over distinct unconsumed handles of
    that queue."""

    queue: str
    handles: tuple[str, ...] = ()
    extend_s: float | None = None


@dataclass(frozen=True, repr=False)
class RetryHandles(_Step):
    """``queue.retry_handles(items)``: ``(handle, error, delay_s)`` items over distinct
    unconsumed handles of that queue."""

    queue: str
    items: tuple[tuple[str, str | None, float | None], ...] = ()


@dataclass(frozen=True, repr=False)
class FailHandles(_Step):
    """``queue.fail_handles(items)``: ``(handle, error)`` items over distinct unconsumed
    handles of that queue."""

    queue: str
    items: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True, repr=False)
class Retry(_Step):
    """``handle.retry(error, delay_s)``."""

    handle: str
    error: str | None = None
    delay_s: float | None = None


@dataclass(frozen=True, repr=False)
class Fail(_Step):
    """``handle.fail(error)``."""

    handle: str
    error: str | None = None


_HandleOp: TypeAlias = Literal["heartbeat", "ack", "retry", "fail"]


@dataclass(frozen=True, repr=False)
class Reuse(_Step):
    """An operation on a consumed handle: must raise ``HandleConsumed``, change nothing
    and draw nothing from the store's random source."""

    handle: str
    op: _HandleOp = "heartbeat"


@dataclass(frozen=True, repr=False)
class AckBatch(_Step):
    """``queue.ack_batch(ids)``."""

    queue: str
    ids: tuple[int, ...] = ()


@dataclass(frozen=True, repr=False)
class Cancel(_Step):
    """``queue.cancel(job_id)``."""

    queue: str
    job_id: int = 0


@dataclass(frozen=True, repr=False)
class Sweep(_Step):
    """``sweep_expired`` through the handle, or through a handle on the same queue whose
    ``dead_letter_retention_s`` is ``retention_s`` instead."""

    queue: str
    retention_s: float | Literal["own"] | None = "own"


@dataclass(frozen=True, repr=False)
class RequeueDead(_Step):
    """``queue.requeue_dead(ids)``, or ``queue.requeue_dead(all=True)`` when ``ids`` is
    ``None`` (D24)."""

    queue: str
    ids: tuple[int, ...] | None = None


@dataclass(frozen=True, repr=False)
class PurgeDead(_Step):
    """``queue.purge_dead(older_than_s, dry_run=dry_run)`` (D25, D29)."""

    queue: str
    older_than_s: float | None = None
    dry_run: bool = False


@dataclass(frozen=True, repr=False)
class Inspect(_Step):
    """The operator's reads (D22, D26): ``store.stats()`` (of every queue, or of
    ``queue``), ``store.get_job`` of every id, and ``queue.list_jobs`` of each state
    in pages of ``limit``."""

    queue: str
    every_queue: bool = True
    limit: int = 2


@dataclass(frozen=True, repr=False)
class Advance(_Step):
    """Move the clock forward by ``seconds``."""

    seconds: float = 0.0


@dataclass(frozen=True, repr=False)
class AdvanceTo(_Step):
    """Move the clock exactly onto ``what`` of job ``job_id`` (plus ``plus_us``)."""

    job_id: int
    what: str
    plus_us: int = 0
    seconds: float = 0.0


@dataclass(frozen=True, repr=False)
class TxItem(_Step):
    """One ``tx.enqueue``: through the handle ``queue``, or by bare name when ``bare``."""

    queue: str
    bare: bool = False
    payload: bytes = b""
    priority: int = 0
    delay_s: float | None = None
    max_attempts: int | None = None
    headers: _HeaderPairs | None = None


@dataclass(frozen=True, repr=False)
class Tx(_Step):
    """A transaction of ``items``: committed, or rolled back by an exception."""

    items: tuple[TxItem, ...] = ()
    commit: bool = True


@dataclass(frozen=True, repr=False)
class Crash(_Step):
    """The worker dies: its unfinished handles are never used again."""

    worker: str = "w1"


# -- drawing steps ----------------------------------------------------------------------

# Built once: building strategies per step would cost more than running the step.
_PAYLOADS = st.binary(max_size=3)
_PAYLOAD_LISTS = st.lists(_PAYLOADS, max_size=3).map(tuple)
_PAYLOAD_TYPE_CHOICES: tuple[Literal["bytes", "bytearray", "memoryview"], ...] = (
    "bytes",
    "bytearray",
    "memoryview",
)
_PAYLOAD_TYPES = st.sampled_from(_PAYLOAD_TYPE_CHOICES)
_PRIORITIES = st.sampled_from((0, 1, -1, 7))
_DELAYS = st.sampled_from((None, 0.0, 2.0, 7.5, -3.0, 40.0))
_RUN_AT_IN = st.sampled_from((None, 0.0, -5.0, 3.0, 12.0))
_OVERRIDES = st.sampled_from((None, 1, 2, 4))
_HEADERS: st.SearchStrategy[_HeaderPairs | None] = st.sampled_from(
    (None, (), (("traceparent", "00-0af7-b7ad-01"),), (("b", ""), ("a", "ü"), ("ab", "{}")))
)
_WORKER_IDS = st.sampled_from(_WORKERS)
_BATCH_SIZES = st.sampled_from((None, 1, 2, 3, 0, -1))
_CLAIM_SIZES = st.sampled_from((1, 2, 3, 0, -1))
_ADVANCES = st.sampled_from((1.0, 0.5, 5.0, 11.0, 31.0, 100.0, 4000.0))
_ERRORS = st.sampled_from((None, "boom", ""))
_RETRY_DELAYS = st.sampled_from((None, 0.0, 3.0, 0.5))
_EXTENDS = st.sampled_from((None, 1.0, 5.0, 40.0, 0.25))
_SWEEP_RETENTION_CHOICES: tuple[float | Literal["own"] | None, ...] = ("own", None, *_RETENTIONS)
_SWEEP_RETENTIONS = st.sampled_from(_SWEEP_RETENTION_CHOICES)
_HANDLE_OP_CHOICES: tuple[_HandleOp, ...] = ("heartbeat", "ack", "retry", "fail")
_HANDLE_OPS = st.sampled_from(_HANDLE_OP_CHOICES)
_TX_SIZES = st.integers(0, 3)
_PURGE_AGES = st.sampled_from((None, 0.0, 3.0, 10.0))
_LIST_LIMITS = st.sampled_from((1, 2, 100))
_ACK_BATCH_SIZES = st.integers(0, 5)

_StepKind: TypeAlias = Literal[
    "enqueue",
    "claim",
    "advance",
    "ack",
    "retry",
    "fail",
    "heartbeat",
    "advance to",
    "enqueue_many",
    "ack_batch",
    "cancel",
    "sweep",
    "transaction",
    "crash",
    "reuse",
    "ack_handles",
    "heartbeat_handles",
    "retry_handles",
    "fail_handles",
    "ack_handles_and_claim",
    "requeue_dead",
    "purge_dead",
    "inspect",
]
_HANDLE_KINDS: tuple[_StepKind, ...] = (
    "ack",
    "retry",
    "fail",
    "heartbeat",
    "crash",
    "ack_handles",
    "heartbeat_handles",
    "retry_handles",
    "fail_handles",
    "ack_handles_and_claim",
)


@st.composite
def _steps(draw: st.DrawFn, run: _Run, now: datetime) -> _Step:
    """One step that can be taken from the run's current state.

    Kinds are listed simplest first, so that shrinking turns steps into enqueues and
    claims where it can. Enqueues, claims and time moves are listed more than once: they
    are what leads to the interesting states (lapsed claims, reclaims, expiry).
    """
    live = [s.label for s in run.slots.values() if not s.consumed and not s.crashed]
    consumed = [s.label for s in run.slots.values() if s.consumed]
    targets = run._time_targets(now)
    kinds: list[_StepKind] = ["enqueue", "claim", "advance", "claim", "enqueue"]
    if live:
        kinds += _HANDLE_KINDS
    if targets:
        kinds += ["advance to", "advance to"]
    kinds += ["enqueue_many", "ack_batch", "cancel", "sweep", "transaction"]
    kinds += ["requeue_dead", "purge_dead", "inspect"]
    if consumed:
        kinds.append("reuse")
    kind = draw(st.sampled_from(kinds))
    queue = draw(run.labels)
    if kind == "enqueue":
        return Enqueue(
            queue,
            payload=draw(_PAYLOADS),
            payload_as=draw(_PAYLOAD_TYPES),
            priority=draw(_PRIORITIES),
            delay_s=draw(_DELAYS),
            run_at_in_s=draw(_RUN_AT_IN),
            run_at_tz=draw(st.integers(0, len(_RUN_AT_TIMEZONES) - 1)),
            max_attempts=draw(_OVERRIDES),
            headers=draw(_HEADERS),
        )
    if kind == "claim":
        return Claim(queue, worker=draw(_WORKER_IDS), n=draw(_BATCH_SIZES))
    if kind == "advance":
        return Advance(draw(_ADVANCES))
    if kind == "advance to":
        return draw(st.sampled_from(targets[draw(st.sampled_from(sorted(targets)))]))
    if kind == "crash":
        return Crash(draw(_WORKER_IDS))
    if kind in (
        "ack_handles",
        "heartbeat_handles",
        "retry_handles",
        "fail_handles",
        "ack_handles_and_claim",
    ):
        name = run.queues[queue].name
        mine = [label for label in live if run.slots[label].handle.job.queue == name]
        # One handle per job: a stale and a current handle of one job may both be live
        # here, and listing a job twice is a usage error (InvalidArgument).
        slots = run.slots
        chosen: list[str] = (
            draw(st.lists(st.sampled_from(mine), unique_by=lambda label: slots[label].handle.id))
            if mine
            else []
        )
        if kind == "heartbeat_handles":
            return HeartbeatHandles(queue, handles=tuple(chosen), extend_s=draw(_EXTENDS))
        if kind == "retry_handles":
            retries = tuple((label, draw(_ERRORS), draw(_RETRY_DELAYS)) for label in chosen)
            return RetryHandles(queue, items=retries)
        if kind == "fail_handles":
            return FailHandles(queue, items=tuple((label, draw(_ERRORS)) for label in chosen))
        if kind == "ack_handles_and_claim":
            return AckHandlesAndClaim(
                queue, handles=tuple(chosen), worker=draw(_WORKER_IDS), n=draw(_CLAIM_SIZES)
            )
        return AckHandles(queue, handles=tuple(chosen))
    if kind in ("ack", "retry", "fail", "heartbeat"):
        handle = draw(st.sampled_from(live))
        if kind == "ack":
            return Ack(handle)
        if kind == "retry":
            return Retry(handle, error=draw(_ERRORS), delay_s=draw(_RETRY_DELAYS))
        if kind == "fail":
            return Fail(handle, error=draw(_ERRORS))
        return Heartbeat(handle, extend_s=draw(_EXTENDS))
    if kind == "reuse":
        return Reuse(draw(st.sampled_from(consumed)), op=draw(_HANDLE_OPS))
    if kind == "enqueue_many":
        return EnqueueMany(
            queue,
            payloads=draw(_PAYLOAD_LISTS),
            priority=draw(_PRIORITIES),
            delay_s=draw(_DELAYS),
            max_attempts=draw(_OVERRIDES),
            headers=draw(_HEADERS),
        )
    # Ids of processing (for ack_batch) or live (for cancel) rows come first, so that
    # effective acks and cancels are common; then every id ever issued (lapsed, dead,
    # gone, of other queues) and ids never issued.
    jobs = run.model.jobs()
    name = run.queues[queue].name
    processing = [job.id for job in jobs if job.state == "processing" and job.queue == name]
    live_ids = [job.id for job in jobs if job.state != "dead" and job.queue == name]
    pool = st.sampled_from([*live_ids, *run._id_pool()])
    if kind == "ack_batch":
        ack_pool = st.sampled_from([*processing, *processing, *run._id_pool()])
        ids = [draw(ack_pool) for _ in range(draw(_ACK_BATCH_SIZES))]
        duplicate: bool = draw(st.booleans())
        if ids and duplicate:
            ids.append(ids[0])
        return AckBatch(queue, ids=tuple(ids))
    if kind == "cancel":
        return Cancel(queue, job_id=draw(pool))
    if kind == "sweep":
        return Sweep(queue, retention_s=draw(_SWEEP_RETENTIONS))
    if kind == "requeue_dead":
        # Dead ids of this queue first, then any id (live, gone, of other queues).
        dead = [job.id for job in jobs if job.state == "dead" and job.queue == name]
        every: bool = draw(st.booleans())
        if every:
            return RequeueDead(queue)
        redrive_pool = st.sampled_from([*dead, *dead, *run._id_pool()])
        return RequeueDead(queue, ids=tuple(draw(redrive_pool) for _ in range(draw(_TX_SIZES))))
    if kind == "purge_dead":
        return PurgeDead(queue, older_than_s=draw(_PURGE_AGES), dry_run=draw(st.booleans()))
    if kind == "inspect":
        return Inspect(queue, every_queue=draw(st.booleans()), limit=draw(_LIST_LIMITS))
    items = tuple(
        TxItem(
            draw(run.labels),
            bare=draw(st.booleans()),
            payload=draw(_PAYLOADS),
            priority=draw(_PRIORITIES),
            delay_s=draw(_DELAYS),
            max_attempts=draw(_OVERRIDES),
            headers=draw(_HEADERS),
        )
        for _ in range(draw(_TX_SIZES))
    )
    return Tx(items, commit=draw(st.booleans()))


# -- the run ----------------------------------------------------------------------------


class _Rollback(Exception):
    """Raised inside a transaction block to roll it back."""


@dataclass
class _Slot:
    label: str
    handle: JobHandle
    worker: str
    consumed: bool = False
    crashed: bool = False


_Outcome: TypeAlias = object


class Disagreement(AssertionError):
    """The engine and the reference model disagree."""


def _agree(what: str, engine: object, model: object) -> None:
    if engine != model:
        differ = ""
        if isinstance(engine, Job) and isinstance(model, Job):
            # The repr leaves out the payload and the headers: name what differs.
            names = [
                f.name for f in fields(Job) if getattr(engine, f.name) != getattr(model, f.name)
            ]
            differ = f"\n  fields that differ: {', '.join(names)}"
        raise Disagreement(f"{what}:\n  engine: {engine!r}\n  model:  {model!r}{differ}")


_TIMESTAMP_FIELDS = (
    "run_at",
    "enqueued_at",
    "expires_at",
    "claimed_at",
    "claim_expires_at",
    "died_at",
)


def _check_shape(what: str, job: Job | None) -> None:
    """Q8: the payload is ``bytes`` and every timestamp a timezone-aware UTC datetime
    (``==`` cannot tell: ``b"a" == bytearray(b"a")``, and datetimes compare instants)."""
    if job is None:
        return
    if type(job.payload) is not bytes:
        raise Disagreement(f"{what}: the payload is a {type(job.payload).__name__} (Q2, Q8)")
    if type(job.headers) is not Headers or list(job.headers) != sorted(job.headers):
        raise Disagreement(f"{what}: the headers are not Headers in key order (D30)")
    for name in _TIMESTAMP_FIELDS:
        value = getattr(job, name)
        if value is not None and (value.tzinfo is None or value.utcoffset() != timedelta(0)):
            raise Disagreement(f"{what}: {name} is not a UTC datetime (Q8): {value!r}")


@dataclass
class _Run:
    harness: EngineHarness
    store: Store
    model: ReferenceModel
    queues: dict[str, Queue]
    slots: dict[str, _Slot] = field(default_factory=dict)
    handles_made: int = 0

    def __post_init__(self) -> None:
        self.labels = st.sampled_from(list(self.queues))

    # -- drawing -----------------------------------------------------------------------

    def _id_pool(self) -> list[int]:
        """Ids for ack_batch and cancel: every issued id and some never issued."""
        return [*self._ids_to_read(), -1, 2**63 - 1]

    def _ids_to_read(self) -> list[int]:
        """Every issued id, 0, and the next id (not issued yet)."""
        issued = self.model.issued_ids()
        return [*issued, 0, len(issued) + 1]

    def step_strategy(self, now: datetime) -> st.SearchStrategy[_Step]:
        """Every step that can be taken from here (see :func:`_steps`)."""
        return _steps(self, now)

    def _time_targets(self, now: datetime) -> dict[str, list[AdvanceTo]]:
        """Every instant ahead where some row's fate may flip, and one microsecond after
        it, grouped by kind (so that rare kinds, like deadlines, are drawn as often as
        common ones)."""
        instants: list[tuple[int, str, datetime]] = []
        for job in self.model.jobs():
            if job.state == "processing" and job.claim_expires_at is not None:
                instants.append((job.id, "claim_expires_at", job.claim_expires_at))
            if job.state == "pending":
                instants.append((job.id, "run_at", job.run_at))
            if job.state != "dead" and job.expires_at is not None:
                instants.append((job.id, "expires_at", job.expires_at))
            if job.state == "dead" and job.died_at is not None:
                died_at = job.died_at
                instants.extend(
                    (job.id, f"died_at+{r:g}s", died_at + timedelta(seconds=r)) for r in _RETENTIONS
                )
        out: dict[str, list[AdvanceTo]] = {}
        for job_id, what, instant in instants:
            for plus_us in (0, 1):
                target = instant + plus_us * _ONE_MICROSECOND
                if target > now:
                    seconds = (target - now).total_seconds()
                    kind = what.split("+")[0]
                    out.setdefault(kind, []).append(AdvanceTo(job_id, what, plus_us, seconds))
        return out

    # -- applying ----------------------------------------------------------------------

    async def apply(self, step: _Step, now: datetime) -> _Outcome:
        """Run one step on the engine and on the model; check the results agree."""
        model = self.model
        if isinstance(step, Enqueue):
            queue = self.queues[step.queue]
            run_at = None
            if step.run_at_in_s is not None:
                run_at = (now + timedelta(seconds=step.run_at_in_s)).astimezone(
                    _RUN_AT_TIMEZONES[step.run_at_tz]
                )
            payload: bytes | bytearray | memoryview = step.payload
            if step.payload_as == "bytearray":
                payload = bytearray(step.payload)
            elif step.payload_as == "memoryview":
                payload = memoryview(step.payload)
            got = await queue.enqueue(
                payload,
                priority=step.priority,
                delay_s=step.delay_s,
                run_at=run_at,
                max_attempts=step.max_attempts,
                headers=_headers(step.headers),
            )
            want = model.enqueue(
                queue.name,
                step.payload,
                opts=queue.opts,
                priority=step.priority,
                delay_s=step.delay_s,
                run_at=run_at,
                max_attempts=step.max_attempts,
                headers=_headers(step.headers),
                now=now,
            )
            _agree(f"{step}: id", got, want)
            return got
        if isinstance(step, EnqueueMany):
            queue = self.queues[step.queue]
            got_ids = await queue.enqueue_many(
                list(step.payloads),
                priority=step.priority,
                delay_s=step.delay_s,
                max_attempts=step.max_attempts,
                headers=_headers(step.headers),
            )
            want_ids = model.enqueue_many(
                queue.name,
                list(step.payloads),
                opts=queue.opts,
                priority=step.priority,
                delay_s=step.delay_s,
                max_attempts=step.max_attempts,
                headers=_headers(step.headers),
                now=now,
            )
            _agree(f"{step}: ids", got_ids, want_ids)
            return got_ids
        if isinstance(step, Claim):
            return await self._claim(step, now)
        if isinstance(step, Heartbeat | Ack | Retry | Fail):
            return await self._handle_op(step, now)
        if isinstance(step, Reuse):
            return await self._reuse(step)
        if isinstance(step, AckHandles):
            queue = self.queues[step.queue]
            slots = [self.slots[label] for label in step.handles]
            for slot in slots:
                slot.consumed = True
            got_acked = await queue.ack_handles([slot.handle for slot in slots])
            claims = [(slot.handle.job.id, slot.handle.job.attempts) for slot in slots]
            deleted = model.ack_claims(queue.name, claims, now=now)
            want_acked = [job_id in deleted for job_id, _ in claims]
            _agree(f"{step}: results", got_acked, want_acked)
            return got_acked
        if isinstance(step, AckHandlesAndClaim):
            return await self._ack_and_claim(step, now)
        if isinstance(step, HeartbeatHandles):
            queue = self.queues[step.queue]
            slots = [self.slots[label] for label in step.handles]
            got_renewed = await queue.heartbeat_handles(
                [slot.handle for slot in slots], step.extend_s
            )
            claims = [(slot.handle.job.id, slot.handle.job.attempts) for slot in slots]
            renewed = model.heartbeat_claims(queue.name, claims, step.extend_s, now=now)
            want_renewed = [job_id in renewed for job_id, _ in claims]
            _agree(f"{step}: results", got_renewed, want_renewed)
            return got_renewed
        if isinstance(step, RetryHandles):
            queue = self.queues[step.queue]
            retries = [(self.slots[label], error, delay) for label, error, delay in step.items]
            for slot, _, _ in retries:
                slot.consumed = True
            got_retried = await queue.retry_handles(
                [(slot.handle, error, delay) for slot, error, delay in retries]
            )
            want_retried = model.retry_claims(
                queue.name,
                [
                    (slot.handle.job.id, slot.handle.job.attempts, error, delay)
                    for slot, error, delay in retries
                ],
                now=now,
            )
            _agree(f"{step}: results", got_retried, want_retried)
            return got_retried
        if isinstance(step, FailHandles):
            queue = self.queues[step.queue]
            fails = [(self.slots[label], error) for label, error in step.items]
            for slot, _ in fails:
                slot.consumed = True
            got_failed = await queue.fail_handles([(slot.handle, error) for slot, error in fails])
            want_failed = model.fail_claims(
                queue.name,
                [(slot.handle.job.id, slot.handle.job.attempts, error) for slot, error in fails],
                now=now,
            )
            _agree(f"{step}: results", got_failed, want_failed)
            return got_failed
        if isinstance(step, AckBatch):
            queue = self.queues[step.queue]
            got_count = await queue.ack_batch(list(step.ids))
            want_count = model.ack_batch(queue.name, list(step.ids), now=now)
            _agree(f"{step}: count", got_count, want_count)
            return got_count
        if isinstance(step, Cancel):
            queue = self.queues[step.queue]
            got_ok = await queue.cancel(step.job_id)
            want_ok = model.cancel(queue.name, step.job_id, now=now)
            _agree(f"{step}: result", got_ok, want_ok)
            return got_ok
        if isinstance(step, Sweep):
            queue = self.queues[step.queue]
            if step.retention_s != "own":
                opts = replace(queue.opts, dead_letter_retention_s=step.retention_s)
                queue = self.store.queue(queue.name, opts)
            got_sweep = await queue.sweep_expired()
            want_sweep = model.sweep_expired(
                queue.name, queue.opts.dead_letter_retention_s, now=now
            )
            _agree(f"{step}: result", got_sweep, want_sweep)
            return got_sweep
        if isinstance(step, RequeueDead):
            queue = self.queues[step.queue]
            if step.ids is None:
                got_count = await queue.requeue_dead(all=True)
            else:
                got_count = await queue.requeue_dead(list(step.ids))
            want_count = model.requeue_dead(queue.name, step.ids, now=now)
            _agree(f"{step}: count", got_count, want_count)
            return got_count
        if isinstance(step, PurgeDead):
            queue = self.queues[step.queue]
            got_count = await queue.purge_dead(step.older_than_s, dry_run=step.dry_run)
            want_count = model.purge_dead(
                queue.name, step.older_than_s, dry_run=step.dry_run, now=now
            )
            _agree(f"{step}: count", got_count, want_count)
            return got_count
        if isinstance(step, Inspect):
            return await self._inspect(step, now)
        if isinstance(step, Advance | AdvanceTo):
            await self.harness.advance(step.seconds)
            return await self.harness.now()
        if isinstance(step, Tx):
            return await self._transaction(step, now)
        if isinstance(step, Crash):
            for slot in self.slots.values():
                if slot.worker == step.worker and not slot.consumed:
                    slot.crashed = True
            return None
        raise AssertionError(f"unknown step {step!r}")  # pragma: no cover

    async def _inspect(self, step: Inspect, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        name = None if step.every_queue else queue.name
        got_stats = await self.store.stats(name)
        _agree(f"{step}: stats", got_stats, self.model.stats(name, now=now))
        for job_id in self._ids_to_read():
            got = await self.store.get_job(job_id)
            _agree(f"{step}: store.get_job({job_id})", got, self.model.find_job(job_id))
            _check_shape(f"{step}: store.get_job({job_id})", got)
        states: tuple[JobState, ...] = ("pending", "processing", "dead")
        for state in states:
            after: int | None = None
            while True:
                page = await queue.list_jobs(state, limit=step.limit, after_id=after)
                want = self.model.list_jobs(queue.name, state, limit=step.limit, after_id=after)
                _agree(f"{step}: list_jobs({state!r}, after_id={after})", page, want)
                if len(page) < step.limit:
                    break
                after = page[-1].id
        return sum(entry.live + entry.dead for entry in got_stats.queues)

    async def _claim(self, step: Claim, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        if step.n is None:
            one = await queue.claim_one(step.worker)
            got = [] if one is None else [one]
            n = 1
        else:
            got = await queue.claim_batch(step.worker, step.n)
            n = step.n
        want = self.model.claim(queue.name, step.worker, n, now=now)
        return self._claimed(step, step.worker, got, want)

    async def _ack_and_claim(self, step: AckHandlesAndClaim, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        slots = [self.slots[label] for label in step.handles]
        for slot in slots:
            slot.consumed = True
        got_acked, got = await queue.ack_handles_and_claim(
            [slot.handle for slot in slots], step.worker, step.n
        )
        claims = [(slot.handle.job.id, slot.handle.job.attempts) for slot in slots]
        deleted, want = self.model.ack_claims_and_claim(
            queue.name, claims, step.worker, step.n, now=now
        )
        _agree(f"{step}: ack results", got_acked, [job_id in deleted for job_id, _ in claims])
        return [got_acked, *self._claimed(step, step.worker, got, want)]

    def _claimed(
        self, step: _Step, worker: str, got: list[JobHandle], want: list[Job]
    ) -> list[str]:
        """Check claimed handles against the model's snapshots and keep them as slots;
        their labels."""
        _agree(f"{step}: claimed jobs", [h.job for h in got], want)
        labels = []
        for handle in got:
            _check_shape(f"{step}: snapshot", handle.job)
            _agree(f"{step}: handle id", handle.id, handle.job.id)
            self.handles_made += 1
            label = f"h{self.handles_made}"
            self.slots[label] = _Slot(label, handle, worker)
            labels.append(f"{label}=job {handle.id}/attempt {handle.job.attempts}")
        return labels

    async def _handle_op(self, step: Heartbeat | Ack | Retry | Fail, now: datetime) -> _Outcome:
        slot = self.slots[step.handle]
        handle = slot.handle
        job = handle.job
        model = self.model
        got: bool
        want: bool
        if isinstance(step, Heartbeat):
            got = await handle.heartbeat(step.extend_s)
            want = model.heartbeat(job.queue, job.id, job.attempts, step.extend_s, now=now)
        elif isinstance(step, Ack):
            slot.consumed = True
            got = await handle.ack()
            want = model.ack(job.queue, job.id, job.attempts, now=now)
        elif isinstance(step, Retry):
            slot.consumed = True
            got = await handle.retry(step.error, step.delay_s)
            want = model.retry(job.queue, job.id, job.attempts, step.error, step.delay_s, now=now)
        else:
            slot.consumed = True
            got = await handle.fail(step.error)
            want = model.fail(job.queue, job.id, job.attempts, step.error, now=now)
        _agree(f"{step}: result", got, want)
        return got

    async def _reuse(self, step: Reuse) -> _Outcome:
        handle = self.slots[step.handle].handle
        try:
            if step.op == "heartbeat":
                await handle.heartbeat()
            elif step.op == "ack":
                await handle.ack()
            elif step.op == "retry":
                await handle.retry()
            else:
                await handle.fail()
        except HandleConsumed:
            return "HandleConsumed"
        raise Disagreement(f"{step}: a consumed handle did not raise HandleConsumed (Q4)")

    async def _transaction(self, step: Tx, now: datetime) -> _Outcome:
        mtx = self.model.transaction()
        reserved: list[tuple[str, int]] = []
        finished: Transaction | None = None
        try:
            async with self.store.transaction() as tx:
                finished = tx
                for item in step.items:
                    queue = self.queues[item.queue]
                    got = await tx.enqueue(
                        queue.name if item.bare else queue,
                        item.payload,
                        priority=item.priority,
                        delay_s=item.delay_s,
                        max_attempts=item.max_attempts,
                        headers=_headers(item.headers),
                    )
                    want = self._model_tx_enqueue(mtx, queue, item)
                    _agree(f"{step}: {item}: id", got, want)
                    reserved.append((queue.name, got))
                # Q10: nothing is visible before the commit.
                for name, job_id in reserved:
                    seen = await self.store.queue(name).get_job(job_id)
                    _agree(f"{step}: job {job_id} before the commit", seen, None)
                if not step.commit:
                    raise _Rollback
        except _Rollback:
            mtx.rollback()
            outcome = "rolled back"
        else:
            mtx.commit(now=now)
            outcome = "committed"
        assert finished is not None
        try:
            await finished.enqueue(next(iter(self.queues.values())), b"late")
        except HandleConsumed:
            pass
        else:
            raise Disagreement(f"{step}: a finished transaction accepted an enqueue (Q10)")
        return f"{outcome} {[job_id for _, job_id in reserved]}"

    @staticmethod
    def _model_tx_enqueue(mtx: ModelTransaction, queue: Queue, item: TxItem) -> int:
        return mtx.enqueue(
            queue.name,
            item.payload,
            opts=None if item.bare else queue.opts,
            priority=item.priority,
            delay_s=item.delay_s,
            max_attempts=item.max_attempts,
            headers=_headers(item.headers),
        )

    # -- agreement on every row --------------------------------------------------------

    async def check_all_rows(self) -> None:
        """``get_job`` of every id ever issued (and a few never issued), on every queue."""
        names = sorted({queue.name for queue in self.queues.values()})
        ids = self._ids_to_read()
        for name in names:
            queue = self.store.queue(name)
            for job_id in ids:
                got = await queue.get_job(job_id)
                _agree(f"get_job({name!r}, {job_id})", got, self.model.get_job(name, job_id))
                _check_shape(f"get_job({name!r}, {job_id})", got)


def _event_name(step: _Step, outcome: _Outcome) -> str:
    """What happened, coarsely, for ``--hypothesis-show-statistics``."""
    kind = type(step).__name__
    if isinstance(step, AdvanceTo):
        return f"{kind} {step.what.split('+')[0]} +{step.plus_us}us"
    if isinstance(step, Claim):
        assert isinstance(outcome, list)
        reclaims = sum(1 for label in outcome if not label.endswith("attempt 1"))
        return f"{kind} n={step.n}: {min(len(outcome), 1)}+ claimed, {min(reclaims, 1)}+ reclaimed"
    if isinstance(step, Sweep):
        assert isinstance(outcome, tuple)
        return f"{kind}: expired {min(outcome[0], 1)}+, purged {min(outcome[1], 1)}+"
    if isinstance(step, Tx):
        return f"{kind} {str(outcome).split()[0]}"
    if isinstance(step, AckBatch):
        return f"{kind}: {min(int(str(outcome)), 2)}+ acked"
    if isinstance(step, AckHandlesAndClaim):
        assert isinstance(outcome, list)
        acks = sum(1 for result in outcome[0] if result)
        claimed = len(outcome) - 1
        return f"{kind}: {min(acks, 1)}+ acked, {min(claimed, 1)}+ claimed"
    if isinstance(step, AckHandles | HeartbeatHandles | RetryHandles | FailHandles):
        assert isinstance(outcome, list)
        applied = sum(1 for result in outcome if result)
        refused = len(outcome) - applied
        return f"{kind}: {min(applied, 1)}+ applied, {min(refused, 1)}+ refused"
    if isinstance(outcome, bool | str) or outcome is None:
        return f"{kind} -> {outcome}"
    return kind


async def check_engine_against_model(
    harness: EngineHarness,
    data: st.DataObject,
    *,
    steps: int = 50,
    queues: Sequence[tuple[str, QueueOpts]] = DEFAULT_QUEUES,
) -> None:
    """Drive an engine and the reference model with the same random steps; fail on the
    first disagreement (contract rules Q1-Q10).

    Opens one fresh store through ``harness`` (its random source seeded like the model's)
    and takes ``steps`` steps drawn from ``data``: enqueue, enqueue_many, claim_one and
    claim_batch (``n`` down to -1), heartbeat, ack, retry, fail, reuse of a consumed
    handle, ack_handles, heartbeat_handles, retry_handles and fail_handles of several
    handles, ack_handles_and_claim (acks, claims, or both), ack_batch of mixed ids,
    cancel, sweep_expired under several retentions, clock advances (onto deadlines
    exactly, and one microsecond past them), committed and rolled-back transactions,
    worker crashes, and the operator's redrive and purge of dead jobs and reads
    (stats, get_job by id alone, paged listings). After each step every job's
    ``get_job`` must agree on every queue.

    Call it inside ``trio.run`` from a ``@given(st.data())`` test (or use
    :func:`engine_vs_model_test`, which does that)::

        @settings(max_examples=200, deadline=None)
        @given(st.data())
        def test_my_engine_agrees_with_the_model(data):
            trio.run(partial(check_engine_against_model, MyHarness(), data))

    Args:
        harness: Opens fresh, empty stores of the engine and moves its clock. Its clock
            must stand still between ``advance`` calls.
        data: The Hypothesis data object the steps are drawn from.
        steps: How many steps to take.
        queues: ``(name, opts)`` of the queue handles to use; a name may repeat with
            other options.

    Raises:
        AssertionError: the engine disagreed with the model (the message names the step,
            what differed, and both values).
    """
    seed = data.draw(st.integers(0, 2**16), label="rng seed")
    model = ReferenceModel(rng=random.Random(seed))
    failure: Disagreement | None = None
    async with harness.open_store(rng=random.Random(seed)) as store:
        handles: dict[str, Queue] = {}
        for name, opts in queues:
            count = sum(1 for queue in handles.values() if queue.name == name)
            handles[name if count == 0 else f"{name}#{count + 1}"] = store.queue(name, opts)
        note(f"queue handles: {handles}")
        run = _Run(harness, store, model, handles)
        try:
            for index in range(steps):
                now = await harness.now()
                step = data.draw(run.step_strategy(now), label=f"step {index}")
                outcome = await run.apply(step, now)
                note(f"step {index} at {now.isoformat()}: {step!r} -> {outcome!r}")
                event(_event_name(step, outcome))
                await run.check_all_rows()
        except Disagreement as exc:
            # Raised outside the store's nursery, so it is not wrapped in an ExceptionGroup.
            failure = exc
    if failure is not None:
        raise failure


def engine_vs_model_test(
    harness_factory: Callable[[], EngineHarness],
    *,
    steps: int = 50,
    max_examples: int = 200,
    queues: Sequence[tuple[str, QueueOpts]] = DEFAULT_QUEUES,
) -> Callable[[], None]:
    """A ready-made pytest test that checks an engine against the reference model.

    Example (one line in your test module)::

        test_my_engine_agrees_with_the_model = engine_vs_model_test(MyHarness)

    Args:
        harness_factory: Makes a fresh harness for each example.
        steps: Steps per example.
        max_examples: How many examples Hypothesis runs.
        queues: As :func:`check_engine_against_model`.

    Returns:
        A synchronous test function (Hypothesis ``@given``), which runs each example
        in its own ``trio.run``.
    """

    @settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def test_engine_agrees_with_the_reference_model(data: st.DataObject) -> None:
        trio.run(
            partial(check_engine_against_model, harness_factory(), data, steps=steps, queues=queues)
        )

    return test_engine_agrees_with_the_reference_model
