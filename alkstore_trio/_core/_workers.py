"""Q21 the worker registry: what a worker says about itself, and how a row reads.

Why a registry at all: the jobs show only the workers that hold one (``claimed_by``), so
an idle worker, or one that died between two jobs, is invisible there. Each worker keeps
one row (its registration, plus three times the engine stamps on its own clock) and
rewrites it every :data:`WORKER_BEAT_S`; an operator reads the rows and sees how long ago
each worker last spoke. The row is advisory: no job operation reads it.

Pure: ``now`` is always an argument.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, get_args

from .._errors import InvalidArgument
from . import _validate as v

if TYPE_CHECKING:
    from datetime import datetime

#: Q21.3: seconds between two beats of a running worker (trio's clock).
WORKER_BEAT_S: Final = 15.0
#: Q21.4: the default ``gone_after_s`` of ``list_workers``: four missed beats.
WORKER_GONE_AFTER_S: Final = 4 * WORKER_BEAT_S
#: Q21.4: a row whose heartbeat is older than this is purged by the next start or beat.
WORKER_PURGE_AFTER_S: Final = 86400.0
#: Q21.4: the most rows one start or beat purges.
WORKER_PURGE_BATCH: Final = 100
#: Q21.4: the default and largest ``limit`` of ``list_workers``.
WORKERS_LIST_DEFAULT: Final = 1000
WORKERS_LIST_MAX: Final = 10000
#: Q21.3: the longest a worker's ``"stop"`` write may take on its way out of ``run``.
WORKER_STOP_WRITE_S: Final = 5.0

HOST_MAX_CHARS: Final = 255
VERSION_MAX_CHARS: Final = 64
QUEUES_MAX: Final = 1000
_INT4_MAX: Final = 2**31 - 1

#: Q21.2: what a beat says.
BeatPhase = Literal["start", "beat", "stop"]
#: Q21.4: how a row reads.
WorkerState = Literal["running", "stopped", "gone"]


@dataclass(frozen=True)
class WorkerRegistration:
    """What a worker registers about itself (Q21.1); :class:`~alkstore_trio.Worker`
    makes its own.

    Attributes:
        worker_id: The worker's id, the ``claimed_by`` of its claims.
        host: The host name it runs on.
        pid: Its process id.
        queues: The names of the queues it serves (empty: a scheduler-only worker).
        concurrency: Its total slots for handlers.
        version: The library's version it runs (may be empty).

    Raises:
        InvalidArgument: A field is invalid (Q21.1).
    """

    worker_id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    version: str = ""

    def __post_init__(self) -> None:
        v.check_worker_id(self.worker_id)
        v.check_text("host", self.host, max_chars=HOST_MAX_CHARS)
        v.check_int("pid", self.pid, lo=0, hi=_INT4_MAX)
        v.check_int("concurrency", self.concurrency, lo=0, hi=_INT4_MAX)
        if not isinstance(self.version, str):
            raise InvalidArgument(f"version must be a str; got {type(self.version).__name__}")
        if self.version:
            v.check_text("version", self.version, max_chars=VERSION_MAX_CHARS)
        object.__setattr__(self, "queues", _check_queues(self.queues))


def _check_queues(queues: object) -> tuple[str, ...]:
    if isinstance(queues, str | bytes) or not isinstance(queues, Iterable):
        raise InvalidArgument(
            f"queues must be an iterable of queue names; got {type(queues).__name__}"
        )
    names = tuple(v.check_queue_name(name) for name in queues)
    if len(names) > QUEUES_MAX:
        raise InvalidArgument(f"queues must hold at most {QUEUES_MAX} names; got {len(names)}")
    if len(set(names)) != len(names):
        raise InvalidArgument("queues must not name a queue twice")
    return names


def check_phase(phase: object) -> BeatPhase:
    """Q21.2: ``"start"``, ``"beat"`` or ``"stop"``."""
    if phase not in get_args(BeatPhase):
        raise InvalidArgument(f"phase must be 'start', 'beat' or 'stop'; got {phase!r}")
    return phase  # type: ignore[return-value]


@dataclass(frozen=True)
class WorkerInfo:
    """One worker's row, as ``store.list_workers()`` and ``alkstore-trio workers`` show it
    (Q21.4). Times are the engine's clock.

    Attributes:
        worker_id: The worker's id (the ``claimed_by`` of its claims).
        host: Its host name.
        pid: Its process id.
        queues: The queues it serves.
        concurrency: Its total slots.
        version: The library version it runs (may be empty).
        started_at: When it registered.
        heartbeat_at: When it last beat (or stopped).
        stopped_at: When it stopped gracefully, or ``None``.
        state: ``"running"``, ``"stopped"``, or ``"gone"`` (no beat for ``gone_after_s``).
        now: The engine's clock at the read.
    """

    worker_id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    version: str
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None
    state: WorkerState
    now: datetime

    @property
    def heartbeat_age_s(self) -> float:
        """Seconds from the last beat to the read (never negative)."""
        return max(0.0, (self.now - self.heartbeat_at).total_seconds())


def worker_state(
    heartbeat_at: datetime, stopped_at: datetime | None, now: datetime, gone_after_s: float
) -> WorkerState:
    """Q21.4: how a row reads at ``now``."""
    if stopped_at is not None:
        return "stopped"
    if (now - heartbeat_at).total_seconds() > gone_after_s:
        return "gone"
    return "running"


def list_order_key(info: WorkerInfo) -> tuple[float, str]:
    """Q21.4: the latest heartbeat first, ties by ``worker_id``."""
    return (-info.heartbeat_at.timestamp(), info.worker_id)
