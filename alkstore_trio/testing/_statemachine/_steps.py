"""The steps of the engine-vs-model machine: one small frozen record per operation.

Each step's ``repr`` leaves out its default values, so that a shrunk failure reads as a
short script (``Claim('alpha', n=2)``). A step names queues by their label in the run
and handles by the label the run gave them when they were claimed (``h3``); it holds no
live object, so Hypothesis can print, compare and replay it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, timedelta, timezone, tzinfo
from typing import Literal, TypeAlias

_WORKERS = ("w1", "w2")
#: ``run_at`` is given in UTC or in another zone: Q8 wants UTC back either way.
_RUN_AT_TIMEZONES: tuple[tzinfo, ...] = (UTC, timezone(timedelta(hours=2)))
_ONE_MICROSECOND = timedelta(microseconds=1)
_RETENTIONS: tuple[float, ...] = (0.0, 3.0, 5.0, 10.0, 15.0)


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
    unique_key: str | None = None
    unique_for_s: float | None = None
    concurrency_key: str | None = None  # Q18.8


@dataclass(frozen=True, repr=False)
class EnqueueMany(_Step):
    """``queue.enqueue_many`` (possibly of no payloads)."""

    queue: str
    payloads: tuple[bytes, ...] = ()
    priority: int = 0
    delay_s: float | None = None
    max_attempts: int | None = None
    headers: _HeaderPairs | None = None
    #: Q15: one key (or None) per payload, or None for ``unique_keys=None``.
    unique_keys: tuple[str | None, ...] | None = None
    unique_for_s: float | None = None
    #: Q18.8: one concurrency key (or None) per payload, or None for none.
    concurrency_keys: tuple[str | None, ...] | None = None


@dataclass(frozen=True, repr=False)
class Claim(_Step):
    """``claim_one`` when ``n`` is None, else ``claim_batch(worker, n)``."""

    queue: str
    worker: str = "w1"
    n: int | None = None


@dataclass(frozen=True, repr=False)
class Heartbeat(_Step):
    """``handle.heartbeat(extend_s, progress=progress)`` (Q19.7: ``None``: no news)."""

    handle: str
    extend_s: float | None = None
    progress: str | None = None


@dataclass(frozen=True, repr=False)
class Ack(_Step):
    """``handle.ack(result)`` (Q19.1: ``None`` for no result)."""

    handle: str
    result: bytes | None = None


@dataclass(frozen=True, repr=False)
class AckHandles(_Step):
    """``queue.ack_handles(handles, results)`` over distinct unconsumed handles of that
    queue (Q19.1: ``results`` one per handle, or ``None``)."""

    queue: str
    handles: tuple[str, ...] = ()
    results: tuple[bytes | None, ...] | None = None


@dataclass(frozen=True, repr=False)
class AckHandlesAndClaim(_Step):
    """``queue.ack_handles_and_claim(handles, worker, n)`` over distinct unconsumed
    handles of that queue (possibly none)."""

    queue: str
    handles: tuple[str, ...] = ()
    worker: str = "w1"
    n: int = 1
    results: tuple[bytes | None, ...] | None = None  # Q19.1


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


@dataclass(frozen=True, repr=False)
class Release(_Step):
    """``handle.release(error)`` (Q19.8)."""

    handle: str
    error: str | None = None


_HandleOp: TypeAlias = Literal["heartbeat", "ack", "retry", "fail", "release"]


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
    """``queue.purge_dead(older_than_s, dry_run=dry_run, ids=ids)`` (D25, D29, D25.1:
    ``ids`` ``None`` passes none)."""

    queue: str
    older_than_s: float | None = None
    dry_run: bool = False
    ids: tuple[int, ...] | None = None


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
    unique_key: str | None = None
    unique_for_s: float | None = None
    concurrency_key: str | None = None  # Q18.8


@dataclass(frozen=True, repr=False)
class Tx(_Step):
    """A transaction of ``items``: committed, or rolled back by an exception."""

    items: tuple[TxItem, ...] = ()
    commit: bool = True


@dataclass(frozen=True, repr=False)
class Crash(_Step):
    """The worker dies: its unfinished handles are never used again."""

    worker: str = "w1"
