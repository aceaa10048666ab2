"""Q17 periodic jobs: the schedule definition and its fire-time arithmetic, pure.

Why the arithmetic lives here and "now" does not: exactly-once firing across a fleet is
the engine's job (PostgreSQL locks the schedule's row, the in-memory engine's actor runs
one request at a time), and the time is always the engine's clock, read inside the same
atomic step that enqueues the jobs and advances the row. What every engine shares is
*which* fire times a schedule owes at a given ``now``, given the ``next_fire_at`` its row
holds: :func:`plan_fires`. Cron expressions are evaluated by ``cronsim`` in the
schedule's time zone (``zoneinfo``), so daylight-saving days follow the library's
documented rules (a time that does not exist runs once at the first instant after the
gap; a time that exists twice runs once, at its first occurrence).

Vocabulary: a *fire time* is an instant the schedule is due. A fire time is *missed*
when the next fire time after it has come too (a whole period passed without any worker
firing it). ``catch_up`` is how many missed fire times still get a job; the most recent
due fire time always does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .._errors import InvalidArgument
from . import _validate as v
from ._records import DEFAULT_OPTS, EnqueueSpec, Headers, QueueOpts

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

#: The header naming the schedule that enqueued a job (Q17.4).
PERIODIC_NAME_HEADER: Final = "alk-periodic"
#: The header holding the fire time a job stands for, ISO 8601 in UTC (Q17.4).
PERIODIC_FIRE_AT_HEADER: Final = "alk-periodic-fire-at"
#: A schedule's row lists as stale when no worker declared it for this long (Q17.6).
PERIODIC_STALE_AFTER_S: Final = 600.0
#: The longest a worker goes without asking about its schedules: the safety re-check,
#: which also stamps ``last_seen_at`` well inside :data:`PERIODIC_STALE_AFTER_S`.
PERIODIC_RECHECK_S: Final = 60.0
#: Q17.9: how soon a call asks again about a schedule whose row another call was firing
#: (and skipped): its holder fires it, and this re-check notices if the holder died.
PERIODIC_HELD_RECHECK_S: Final = 1.0
#: Schedule names: like queue names, up to 200 characters.
PERIODIC_NAME_MAX_CHARS: Final = 200
#: The most fire times one schedule's ``catch_up`` may backfill.
CATCH_UP_MAX: Final = 1000
#: The shortest and longest ``every_s``.
EVERY_S_MIN: Final = 0.001
EVERY_S_MAX: Final = 366 * 86400.0

CatchUp = Literal["one", "skip"] | int
_CATCH_UP_WORDS: Final[dict[str, int]] = {"skip": 0, "one": 1}


def _cronsim() -> Any:
    try:
        import cronsim  # the optional `cron` extra
    except ImportError:
        raise InvalidArgument(
            "Periodic(cron=...) needs the cron extra: pip install 'alkstore_trio[cron]' "
            "(every_s= works without it)"
        ) from None
    return cronsim


@dataclass(frozen=True, eq=False, repr=False)
class Periodic:
    """A periodic job (Q17): a schedule that enqueues one job per fire time, exactly once
    across every worker that declares it, with fire times on the engine's clock.

    Example::

        digest = Periodic("morning-digest", "emails", cron="0 7 * * *", tz="Europe/Riga")
        worker = Worker(store, {"emails": send}, periodic=[digest])

    Each job the schedule enqueues carries the headers ``alk-periodic`` (the name) and
    ``alk-periodic-fire-at`` (the fire time it stands for, ISO 8601 in UTC), beside your
    own ``headers``: a handler can make its effect idempotent per fire time.

    Args:
        name: The schedule's identity in the store (1-200 characters, storable text).
            Two workers declaring the same name serve the same schedule.
        queue: The queue its jobs go to (a queue name; Q1's rules).
        cron: A cron expression of five fields, or six with seconds first (needs
            ``alkstore_trio[cron]``), evaluated in ``tz``. Exactly one of ``cron`` and ``every_s``.
        every_s: Seconds between fire times (0.001 .. 366 days); the first fire time is
            ``every_s`` after the schedule is first declared, then every ``every_s`` on
            that grid.
        payload: Every job's payload (bytes, at most the store's limit).
        tz: The IANA time zone of ``cron`` (``zoneinfo``), default ``"UTC"``.
        headers: Headers for every job (D30); the two ``alk-periodic`` names are set by
            the schedule and may not be given.
        priority: Every job's priority (int32).
        max_attempts: Every job's attempt budget, or ``None`` for ``opts``' stamp.
        opts: The stamps of every job (``QueueOpts``), default ``QueueOpts()``.
        catch_up: What happens to fire times missed while no worker ran (Q17.5):
            ``"one"`` (default) enqueues one job for them, for the latest missed fire
            time; ``"skip"`` enqueues none; an int ``N`` (0..1000) backfills the latest
            ``N``. The most recent due fire time always gets its job.

    Raises:
        InvalidArgument: an argument is invalid, both or neither of ``cron`` and
            ``every_s`` are given, the time zone is unknown, or ``cron`` is given
            without the ``cron`` extra installed.
    """

    name: str
    queue: str
    cron: str | None = None
    every_s: float | None = None
    payload: bytes = b""
    tz: str = "UTC"
    headers: Headers = field(default_factory=Headers)
    priority: int = 0
    max_attempts: int | None = None
    opts: QueueOpts = DEFAULT_OPTS
    catch_up: int = 1

    def __init__(
        self,
        name: str,
        queue: str,
        *,
        cron: str | None = None,
        every_s: float | None = None,
        payload: bytes | bytearray | memoryview = b"",
        tz: str = "UTC",
        headers: Mapping[str, str] | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        opts: QueueOpts | None = None,
        catch_up: CatchUp = "one",
    ) -> None:
        init = object.__setattr__
        init(self, "name", check_name(name))
        init(self, "queue", v.check_queue_name(queue))
        if (cron is None) == (every_s is None):
            raise InvalidArgument(
                f"Periodic {name!r} needs exactly one of cron= and every_s=; "
                f"got cron={cron!r}, every_s={every_s!r}"
            )
        init(self, "tz", _check_tz(tz))
        if cron is not None:
            init(self, "cron", _check_cron(cron))
        else:
            init(self, "every_s", _check_every(every_s))
        init(self, "payload", v.check_payload(payload, v.DEFAULT_MAX_PAYLOAD_BYTES))
        init(self, "headers", _check_headers(headers))
        init(self, "priority", v.check_priority(priority))
        init(self, "max_attempts", v.check_optional_max_attempts(max_attempts))
        if opts is not None and not isinstance(opts, QueueOpts):
            raise InvalidArgument(f"opts must be a QueueOpts or None; got {type(opts).__name__}")
        init(self, "opts", DEFAULT_OPTS if opts is None else opts)
        init(self, "catch_up", _check_catch_up(catch_up))

    def __repr__(self) -> str:
        return (
            f"Periodic({self.name!r}, {self.queue!r}, {self.expression!r}, tz={self.tz!r}, "
            f"catch_up={self.catch_up!r})"
        )

    @property
    def expression(self) -> str:
        """The schedule as stored and listed: ``"cron:0 7 * * *"`` or ``"every:60s"``."""
        if self.cron is not None:
            return f"cron:{self.cron}"
        return f"every:{self.every_s!r}s"

    # -- fire-time arithmetic (instants are aware UTC datetimes) ------------------------

    def _first_fire_after(self, now: datetime) -> datetime:
        """The first fire time of a row made (or re-defined) at ``now``."""
        if self.every_s is not None:
            return now + _step(self.every_s)
        return _cron_next(self, now)

    def _after(self, fire: datetime) -> datetime:
        """The fire time following the fire time ``fire``."""
        if self.every_s is not None:
            return fire + _step(self.every_s)
        return _cron_next(self, fire)

    def _before(self, fire: datetime) -> Iterator[datetime]:
        """The fire times before ``fire``, latest first (cron only)."""
        cronsim = _cronsim()
        zone = ZoneInfo(self.tz)
        for local in cronsim.CronSim(self.cron, fire.astimezone(zone), reverse=True):
            at: datetime = local.astimezone(UTC)
            if at < fire:  # see _cron_next: in a fold, local order is not time order
                yield at


def _cron_next(p: Periodic, after: datetime) -> datetime:
    """The first cron fire time later than ``after`` (UTC).

    cronsim walks local wall-clock time, and fires an ambiguous local time once, at its
    first occurrence (Q17.7). Started inside a fold's second hour (after the clocks
    went back), it answers that first occurrence, which is an hour *earlier* than the
    start: so the walk goes on until a time later than ``after`` in UTC. Without this, a
    schedule created or planned in that hour got a next fire time in the past, and
    never advanced past it (the state machine found it, across Berlin's fall-back)."""
    cronsim = _cronsim()
    for local in cronsim.CronSim(p.cron, after.astimezone(ZoneInfo(p.tz))):
        result: datetime = local.astimezone(UTC)
        if result > after:
            return result
    raise AssertionError("unreachable: a cron expression fires forever")  # pragma: no cover


def _step(every_s: float) -> timedelta:
    return timedelta(seconds=every_s)


class FirePlan(NamedTuple):
    """What one schedule owes at one clock read: the fire times to enqueue (ascending)
    and the row's next ``next_fire_at``."""

    fires: tuple[datetime, ...]
    next_fire_at: datetime


def plan_fires(p: Periodic, next_fire_at: datetime | None, now: datetime) -> FirePlan:
    """Q17.2/Q17.5: the fire times a schedule owes at ``now``, given its row's
    ``next_fire_at`` (``None``: the row is new or was re-defined, Q17.3).

    The due fire times are those in ``[next_fire_at, now]``. The latest of them always
    gets a job; of the earlier ones (the missed ones), only the latest ``catch_up`` do.
    The new ``next_fire_at`` is the first fire time after ``now``.
    """
    if next_fire_at is None:
        return FirePlan((), p._first_fire_after(now))
    if next_fire_at > now:
        return FirePlan((), next_fire_at)
    if p.every_s is not None:
        step = _step(p.every_s)
        behind = (now - next_fire_at) // step
        latest = next_fire_at + behind * step
        kept = min(p.catch_up, behind)
        fires = tuple(latest - i * step for i in range(kept, -1, -1))
        return FirePlan(fires, latest + step)
    return _plan_cron(p, next_fire_at, now)


def _plan_cron(p: Periodic, next_fire_at: datetime, now: datetime) -> FirePlan:
    upcoming = _cron_next(p, now)
    # The latest fire time <= now, and the missed ones before it, walking back from the
    # upcoming one; never before the row's next_fire_at (those fired already).
    due: list[datetime] = []
    for fire in p._before(upcoming):
        if fire < next_fire_at or len(due) > p.catch_up:
            break
        due.append(fire)
    return FirePlan(tuple(reversed(due)), upcoming)


def fire_spec(p: Periodic, fire_at: datetime) -> EnqueueSpec:
    """Q17.4: the job one fire time enqueues: the schedule's payload and stamps, with
    the two ``alk-periodic`` headers added to its own."""
    stamped = Headers(
        [
            *p.headers.items(),
            (PERIODIC_NAME_HEADER, p.name),
            (PERIODIC_FIRE_AT_HEADER, format_fire_at(fire_at)),
        ]
    )
    return EnqueueSpec(
        queue=p.queue,
        payload=p.payload,
        priority=p.priority,
        delay_s=None,
        run_at=None,
        max_attempts=p.opts.max_attempts if p.max_attempts is None else p.max_attempts,
        visibility_timeout_s=p.opts.visibility_timeout_s,
        backoff_base_s=p.opts.backoff_base_s,
        expires_in_s=p.opts.expires_in_s,
        headers=stamped,
        keep_completed_s=p.opts.keep_completed_s,
    )


def format_fire_at(fire_at: datetime) -> str:
    """A fire time as its header shows it: ISO 8601 in UTC, ``2026-03-29T07:00:00+00:00``."""
    return fire_at.astimezone(UTC).isoformat()


def check_schedules(value: object) -> tuple[Periodic, ...]:
    """``periodic=``: an iterable of :class:`Periodic` with distinct names."""
    if isinstance(value, Periodic):
        value = [value]
    if not isinstance(value, Iterable) or isinstance(value, str | bytes):
        raise InvalidArgument(
            f"periodic must be an iterable of Periodic; got {type(value).__name__}"
        )
    try:
        items = tuple(value)
    except TypeError:
        raise InvalidArgument(
            f"periodic must be an iterable of Periodic; got {type(value).__name__}"
        ) from None
    names: set[str] = set()
    for item in items:
        if not isinstance(item, Periodic):
            raise InvalidArgument(
                f"periodic must hold Periodic schedules; got a {type(item).__name__}"
            )
        if item.name in names:
            raise InvalidArgument(f"periodic names the schedule {item.name!r} twice")
        names.add(item.name)
    return items


# -- what the engines report ----------------------------------------------------------


class PeriodicFired(NamedTuple):
    """One job a schedule enqueued: the schedule, the fire time, the new job's id."""

    name: str
    fire_at: datetime
    job_id: int


class PeriodicTick(NamedTuple):
    """The answer of one ``fire_periodic`` call (Q17.2).

    Attributes:
        fired: The jobs enqueued, by schedule and fire time.
        next_in_s: Seconds on the engine's clock until the earliest ``next_fire_at`` of
            the schedules asked about (0 when one is due already; at most
            :data:`PERIODIC_HELD_RECHECK_S` when another call held a row, Q17.9).
    """

    fired: tuple[PeriodicFired, ...]
    next_in_s: float


@dataclass(frozen=True)
class PeriodicInfo:
    """One schedule's row, as ``store.list_periodic()`` and ``alkstore-trio periodic
    list`` show it (Q17.6).

    Attributes:
        name: The schedule's name.
        queue: The queue its jobs go to (the last declaring worker's).
        expression: ``"cron:<expr>"`` or ``"every:<seconds>s"``.
        tz: The time zone of the expression.
        next_fire_at: The next fire time, or ``None`` until a worker computes it.
        last_fire_at: The latest fire time that got a job, or ``None``.
        last_seen_at: When a worker last declared the schedule.
        stale: No worker declared it for ``stale_after_s``: it no longer fires.
    """

    name: str
    queue: str
    expression: str
    tz: str
    next_fire_at: datetime | None
    last_fire_at: datetime | None
    last_seen_at: datetime
    stale: bool


def delay_until(at: datetime | None, now: datetime) -> float:
    """Seconds from ``now`` until ``at`` (0 when past; the re-check for ``None``)."""
    if at is None:
        return 0.0
    return max(0.0, (at - now).total_seconds())


# -- argument checks ------------------------------------------------------------------


def check_name(name: object) -> str:
    """A schedule name (Q17.1): 1-200 characters of storable text."""
    return v.check_text("Periodic name", name, max_chars=PERIODIC_NAME_MAX_CHARS)


def _check_tz(tz: object) -> str:
    if not isinstance(tz, str) or not tz:
        raise InvalidArgument(f"tz must be an IANA time zone name; got {tz!r}")
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(
            f"tz {tz!r} is not a time zone zoneinfo knows (e.g. 'UTC', 'Europe/Riga')"
        ) from None
    return tz


def _check_cron(cron: object) -> str:
    if not isinstance(cron, str) or not cron.strip():
        raise InvalidArgument(f"cron must be a cron expression str; got {cron!r}")
    cronsim = _cronsim()
    expr = " ".join(cron.split())
    try:
        next(cronsim.CronSim(expr, datetime(2000, 1, 1, tzinfo=UTC)))
    except (cronsim.CronSimError, StopIteration) as exc:
        raise InvalidArgument(f"cron {cron!r} is not a valid cron expression ({exc})") from None
    return expr


def _check_every(every_s: object) -> float:
    if isinstance(every_s, bool) or not isinstance(every_s, int | float):
        raise InvalidArgument(f"every_s must be a number of seconds; got {every_s!r}")
    value = float(every_s)
    if not math.isfinite(value) or not EVERY_S_MIN <= value <= EVERY_S_MAX:
        raise InvalidArgument(
            f"every_s must be between {EVERY_S_MIN} and {EVERY_S_MAX:g} seconds; got {every_s!r}"
        )
    return value


def _check_headers(headers: object) -> Headers:
    if headers is None:
        return Headers()
    pairs = v.check_headers(headers)
    taken = {PERIODIC_NAME_HEADER, PERIODIC_FIRE_AT_HEADER} & {name for name, _ in pairs}
    if taken:
        raise InvalidArgument(
            f"headers may not set {sorted(taken)}: the schedule sets them on every job"
        )
    return Headers(pairs)


def _check_catch_up(value: object) -> int:
    if isinstance(value, str) and value in _CATCH_UP_WORDS:
        return _CATCH_UP_WORDS[value]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= CATCH_UP_MAX:
        return value
    raise InvalidArgument(
        f"catch_up must be 'one', 'skip' or an int from 0 to {CATCH_UP_MAX}; got {value!r}"
    )
