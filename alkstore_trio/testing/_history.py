"""A per-job history checker: record what workers did, then prove nothing broke.

Why it exists. The queue promises at-least-once execution with exactly-once handout and
lease fencing (Q3, Q4). Those promises are about *histories*, not single calls: whether two
leases on one job ever overlapped, whether a stale holder ever got an operation accepted,
whether a job vanished without an ack. So a test records every claim, heartbeat, ack,
retry, dead-letter, release, lease loss and handler start/end of a run, and this module
checks the record job by job against the final state of the store. Sources: in-process,
:class:`HistoryRecorder` subscribes to :meth:`Worker.events` (``buffer=None``: it must
see every event) and keeps the events, writes them as JSON lines (never a payload), or
both; across processes, :func:`~._history_files.load_history` merges the files.

What is checked (the rule names of :class:`Violation`):

- ``handout``: a (job, claim token) pair was handed to two claims (Q3). Claims are keyed
  by token (Q19.8; old records by attempt, which repeats after a release).
- ``lease_overlap``: a later claim started (on the *store's* clock) while the earlier
  claim's lease was still valid: ``claimed_at`` of the later claim <= the earlier lease's
  deadline, and no accepted retry or release had ended the earlier claim. Claims are
  ordered by store time; ``claim order``: a later claim has a lower attempt than the
  claim before it, which only a release gives back.
- ``stale_token``: an operation (heartbeat, ack, retry, release, dead) was accepted
  although its claim token was no longer current: it was recorded after a later claim of
  the same job (by more than ``slack_s`` on the recording clock), or it is an ack or a
  dead-letter followed by any later claim (a deleted or dead row was claimed again, or
  the ack held a stale token: both are violations whatever the order).
- ``foreign_operation``: an operation recorded by another worker than the claim's holder.
- ``after_refusal`` / ``after_terminal``: an operation accepted on a claim after a refusal
  (``lease_lost``) or after an accepted ack, retry, release or dead-letter (one-shot).
- ``orphan``: an event of a claim that was never recorded.
- ``handler``: a handler started twice for one claim, or finished without a start.
- ``unknown_job``: events of a job id that was never enqueued (when ``enqueued`` is given).
- ``missing``: an enqueued job is neither acked, nor dead, nor live at the end (nor
  removed on purpose by the caller: ``removed``).
- ``final_state``: the final state contradicts the record (acked but still live or dead,
  dead-lettered but live).

Notes, not violations: a job gone without a recorded ack whose last holder's record is
incomplete (no ``worker_stop``: killed, its ack may have landed unrecorded) or whose ack
failed with an engine error (it may have committed); attempts missing from the record.

Clocks, and how heartbeats are handled. Leases are compared on the store's clock only
(``claimed_at`` and ``claim_expires_at`` of each claim's snapshot), never on a worker's. A
heartbeat's new deadline is known only when its event carries it (``lease_until``), so an
earlier lease is known to last *at least* until its claim's deadline (or the latest
recorded ``lease_until``): an overlap hidden behind an unrecorded extension is not seen by
``lease_overlap``, but the stale holder's next accepted operation after the reclaim is
(``stale_token``). Ordering between workers uses the
recording clock (trio time in one process, wall time across processes), on which an event is
recorded just *after* the store answered; ``slack_s`` absorbs the recording lag (0 in one
process under a mock clock; a few hundred milliseconds across processes, more if a test
pauses processes).
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, TextIO, TypeAlias

import trio

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from datetime import datetime

    from .._runtime._worker import Worker, WorkerEvent
    from .._store import Queue

#: Operations whose acceptance the record shows (logged after the store said yes; R16's
#: ``completed_in_tx`` is an ack that committed with the handler's transaction).
ACCEPTED_KINDS: Final = frozenset(
    {"heartbeat", "ack", "completed_in_tx", "retry", "release", "dead", "cancelled"}
)
#: Accepted operations that end a claim (one-shot, Q4).
TERMINAL_KINDS: Final = frozenset(
    {"ack", "completed_in_tx", "retry", "release", "dead", "cancelled"}
)
#: Accepted operations after which the job is never claimed again.
_FINAL_KINDS: Final = frozenset({"ack", "completed_in_tx", "dead", "cancelled"})
_ACKS: Final = frozenset({"ack", "completed_in_tx"})
#: Names used by older records (``tests/faults/_worker_proc.py``) for the same events.
_LEGACY_KINDS: Final = {"end": "finish", "stopped": "worker_stop", "ready": "worker_start"}

TimeBase = Literal["trio", "wall"]


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """One recorded event, without payload.

    Attributes:
        kind: A :data:`alkstore_trio._runtime._worker.EVENT_KINDS` name (``"claim"``,
            ``"heartbeat"``, ``"ack"``...).
        source: Who recorded it (the worker id): events of one source are totally ordered
            by ``seq``.
        seq: The event's position in its source's record.
        t: When it was recorded, on the recording clock (trio time in one process, wall
            time across processes); only used to order events of different sources.
        job_id: The job, or ``None`` for worker-level events.
        attempt: The job's ``attempts`` right after the claim (repeats after a release).
        queue: The queue, if any.
        claimed_at: The claim's ``claimed_at`` on the store's clock (epoch seconds).
        claim_expires_at: The claim's deadline at claim time (store clock, epoch seconds).
        lease_until: For a heartbeat, the new deadline if the source knew it.
        error: The error text of a retry, release, dead-letter or failure.
        op: For ``engine_error``: the operation that failed (``"ack"``, ``"claim"``...).
    """

    kind: str
    source: str
    seq: int
    t: float
    job_id: int | None = None
    attempt: int | None = None
    queue: str | None = None
    claimed_at: float | None = None
    claim_expires_at: float | None = None
    lease_until: float | None = None
    error: str | None = None
    op: str | None = None
    #: Q19.8: the claim's token (``None`` in records older than version 9).
    claim_token: int | None = None

    @classmethod
    def from_worker_event(
        cls, event: WorkerEvent, seq: int, *, time_base: TimeBase = "trio"
    ) -> HistoryEvent:
        """The history event of one :class:`WorkerEvent` (``seq``: its position)."""
        job = event.job
        return cls(
            kind=event.kind,
            source=event.worker_id,
            seq=seq,
            t=event.at if time_base == "trio" else event.wall_time,
            job_id=None if job is None else job.id,
            attempt=None if job is None else job.attempts,
            queue=event.queue,
            claimed_at=None if job is None else _epoch(job.claimed_at),
            claim_expires_at=None if job is None else _epoch(job.claim_expires_at),
            error=event.error,
            op=_failed_operation(event),
            claim_token=None if job is None else job.claim_token,
        )

    def describe(self) -> str:
        """A short human-readable rendering for messages."""
        who = f"{self.kind} by {self.source}"
        if self.attempt is not None:
            who += f" (attempt {self.attempt})"
        return f"{who} at t={self.t:.3f}"


def _epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _failed_operation(event: WorkerEvent) -> str | None:
    if event.kind != "engine_error":
        return None
    # The worker's message reads "<operation> failed (...)".
    word = event.message.split(" ", 1)[0]
    return word or None


def event_record(event: WorkerEvent, seq: int) -> dict[str, Any]:
    """One :class:`WorkerEvent` as a JSON-able record (never the payload, nor the
    message, which engine errors may fill with driver text).

    Keys: ``ev`` (the kind), ``pid``, ``t`` (wall time), ``at`` (trio time), ``seq``,
    ``worker_id``, and for job events ``id``, ``attempt``, ``claim_token``, ``queue``,
    ``claimed_at`` and ``claim_expires_at`` (store clock, epoch seconds); ``error``,
    ``delay_s`` and ``op`` when set. The key names match ``tests/faults/_worker_proc.py``'s records.
    """
    record: dict[str, Any] = {
        "ev": event.kind,
        "pid": os.getpid(),
        "t": event.wall_time,
        "at": event.at,
        "seq": seq,
        "worker_id": event.worker_id,
    }
    job = event.job
    if job is not None:
        record.update(
            id=job.id,
            attempt=job.attempts,
            claim_token=job.claim_token,
            queue=job.queue,
            claimed_at=_epoch(job.claimed_at),
            claim_expires_at=_epoch(job.claim_expires_at),
        )
    elif event.queue is not None:
        record["queue"] = event.queue
    if event.error is not None:
        record["error"] = event.error
    if event.delay_s is not None:
        record["delay_s"] = event.delay_s
    op = _failed_operation(event)
    if op is not None:
        record["op"] = op
    return record


class HistoryRecorder:
    """Records the events of one or more workers (R9 event streams) for :func:`check_history`.

    Example::

        recorder = HistoryRecorder()
        async with trio.open_nursery() as nursery:
            await nursery.start(recorder.record_worker, worker)  # before worker.run
            await nursery.start(worker.run)
            ...
        report = recorder.check(enqueued=ids, final=await read_final_state([queue], ids))
        report.assert_ok()

    Args:
        stream: If given, every event is also written to it as one JSON line
            (:func:`event_record`), flushed at once, so a killed process loses at most the
            line being written. :func:`load_history` reads such files back.
        keep: Keep the events in memory (``events``); turn off for very long runs that
            only write the stream.
        time_base: The clock of the kept events' ``t``: ``"trio"`` (one process) or
            ``"wall"``.
    """

    def __init__(
        self, stream: TextIO | None = None, *, keep: bool = True, time_base: TimeBase = "trio"
    ) -> None:
        if time_base not in ("trio", "wall"):
            raise ValueError(f"time_base must be 'trio' or 'wall'; got {time_base!r}")
        self._stream = stream
        self._keep = keep
        self._time_base: TimeBase = time_base
        self._events: list[HistoryEvent] = []
        self._seq: dict[str, int] = defaultdict(int)

    @property
    def events(self) -> list[HistoryEvent]:
        """The events kept so far, in recording order."""
        return list(self._events)

    def record(self, event: WorkerEvent) -> None:
        """Record one event."""
        seq = self._seq[event.worker_id]
        self._seq[event.worker_id] = seq + 1
        if self._keep:
            self._events.append(
                HistoryEvent.from_worker_event(event, seq, time_base=self._time_base)
            )
        if self._stream is not None:
            self._stream.write(json.dumps(event_record(event, seq)) + "\n")
            self._stream.flush()

    async def record_worker(
        self, worker: Worker, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Record every event of ``worker`` until its stream ends (after ``worker_stop``).

        Start it with ``await nursery.start(recorder.record_worker, worker)`` *before*
        the worker runs: it is subscribed once ``start`` returns, so no event is missed.
        """
        with worker.events(buffer=None) as events:
            task_status.started()
            async for event in events:
                self.record(event)
                # One dispatcher step can publish dozens of events; write all that are
                # waiting now, so the record never falls behind the worker (a process
                # killed mid-run then loses at most the events of its last step).
                while True:
                    try:
                        self.record(events.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break

    def check(
        self,
        *,
        enqueued: Iterable[int] | None = None,
        final: FinalState | None = None,
        removed: Iterable[int] = (),
        slack_s: float = 0.0,
    ) -> HistoryReport:
        """:func:`check_history` on the events kept so far."""
        return check_history(
            self._events, enqueued=enqueued, final=final, removed=removed, slack_s=slack_s
        )


@dataclass(frozen=True, slots=True)
class FinalState:
    """What the store holds at the end of a run: the ids still live (pending or
    processing) and the ids dead. Every other id is gone (acked, cancelled or purged)."""

    live: frozenset[int] = frozenset()
    dead: frozenset[int] = frozenset()

    @classmethod
    def of(cls, *, live: Iterable[int] = (), dead: Iterable[int] = ()) -> FinalState:
        """A final state from any iterables of ids."""
        return cls(frozenset(live), frozenset(dead))


async def read_final_state(queues: Iterable[Queue], ids: Iterable[int]) -> FinalState:
    """The final state of ``ids`` read through the public API (``get_job`` on each queue
    until found; one round trip per id and queue tried). For very large runs, a query of
    the tables is faster: build a :class:`FinalState` from it instead."""
    queue_list = list(queues)
    live: set[int] = set()
    dead: set[int] = set()
    for job_id in ids:
        for queue in queue_list:
            job = await queue.get_job(job_id)
            if job is not None:
                (dead if job.state == "dead" else live).add(job_id)
                break
    return FinalState(frozenset(live), frozenset(dead))


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule.

    Attributes:
        rule: Which rule (see the module docstring): ``"handout"``, ``"lease_overlap"``,
            ``"stale_token"``, ``"foreign_operation"``, ``"after_refusal"``,
            ``"after_terminal"``, ``"orphan"``, ``"handler"``, ``"unknown_job"``,
            ``"missing"``, ``"final_state"``.
        job_id: The job concerned.
        message: What happened, with the events involved.
    """

    rule: str
    job_id: int | None
    message: str

    def __str__(self) -> str:
        return f"job {self.job_id}: [{self.rule}] {self.message}"


@dataclass(frozen=True, slots=True)
class HistoryReport:
    """The result of :func:`check_history`: violations per job, notes and figures.

    Attributes:
        violations: Every broken rule, job by job in id order.
        notes: Facts that are not violations but explain gaps (see the module docstring).
        jobs: Jobs checked (enqueued ones and any seen in the record).
        claims: Claims recorded.
        reclaims: Claims that took over a lapsed claim (the earlier one ended with no
            accepted retry or release).
        accepted: Accepted operations recorded (heartbeat, ack, retry, release, dead).
        refused: Refusals recorded (``lease_lost``).
        acked: Jobs acked.
        dead: Jobs dead at the end (``None`` without a final state).
        live: Jobs still live at the end (``None`` without a final state).
        concurrent_runs: Times a handler started while an earlier claim's handler of the
            same job still ran (honest dual execution after a lapse, Q4: not a violation
            by itself).
    """

    violations: tuple[Violation, ...]
    notes: tuple[str, ...]
    jobs: int
    claims: int
    reclaims: int
    accepted: int
    refused: int
    acked: int
    dead: int | None
    live: int | None
    concurrent_runs: int

    @property
    def ok(self) -> bool:
        """Whether no rule was broken."""
        return not self.violations

    def by_job(self) -> dict[int | None, list[Violation]]:
        """The violations grouped by job id."""
        grouped: dict[int | None, list[Violation]] = {}
        for violation in self.violations:
            grouped.setdefault(violation.job_id, []).append(violation)
        return grouped

    def rules(self) -> set[str]:
        """The names of the rules broken."""
        return {violation.rule for violation in self.violations}

    def summary(self) -> str:
        """One line of figures (for test output and reports)."""
        final = "" if self.live is None else f", {self.live} live, {self.dead} dead at the end"
        return (
            f"{self.jobs} jobs checked: {self.claims} claims ({self.reclaims} reclaims), "
            f"{self.accepted} accepted operations, {self.refused} refused, {self.acked} acked"
            f"{final}, {self.concurrent_runs} concurrent runs, "
            f"{len(self.violations)} violations"
        )

    def assert_ok(self) -> None:
        """Raise :class:`AssertionError` listing every violation, job by job."""
        if self.ok:
            return
        lines = [f"{len(self.violations)} history violations ({self.summary()}):"]
        for job_id, violations in sorted(
            self.by_job().items(), key=lambda item: -1 if item[0] is None else item[0]
        ):
            lines.append(f"  job {job_id}:")
            lines.extend(f"    [{v.rule}] {v.message}" for v in violations)
        raise AssertionError("\n".join(lines))


# --- the checker -------------------------------------------------------------------------


@dataclass(slots=True)
class _Claim:
    token: int
    attempt: int
    source: str
    t: float
    seq: int
    claimed_at: float | None
    expires_at: float | None
    synthesized: bool
    lease_until: float | None = None
    events: list[HistoryEvent] = field(default_factory=list)
    accepted: list[HistoryEvent] = field(default_factory=list)
    terminal: HistoryEvent | None = None
    lost: bool = False
    started_t: float | None = None
    finished_t: float | None = None
    failed_ops: set[str] = field(default_factory=set)


def check_history(
    events: Iterable[HistoryEvent],
    *,
    enqueued: Iterable[int] | None = None,
    final: FinalState | None = None,
    removed: Iterable[int] = (),
    slack_s: float = 0.0,
) -> HistoryReport:
    """Check a recorded history job by job (see the module docstring for the rules).

    Args:
        events: Every event of the run, from every worker (merge with :func:`load_history`
            or several recorders' ``events``).
        enqueued: The ids enqueued during the run; every one must end acked, dead or live,
            and no other id may appear in the record. ``None``: only the ids seen.
        final: The store's state at the end (:func:`read_final_state`); ``None`` skips the
            final-state rules (``missing``, ``final_state``).
        removed: Ids the test removed on purpose (``cancel``, a dead-row purge): gone
            without an ack is expected for them.
        slack_s: How much later than the store's answer an event may be recorded (see the
            module docstring).

    Returns:
        A :class:`HistoryReport`; call :meth:`HistoryReport.assert_ok`.
    """
    if not (isinstance(slack_s, int | float) and math.isfinite(slack_s) and slack_s >= 0):
        raise ValueError(f"slack_s must be a finite number >= 0; got {slack_s!r}")
    all_events = list(events)
    complete = {e.source for e in all_events if e.kind == "worker_stop"}
    by_job: dict[int, list[HistoryEvent]] = defaultdict(list)
    for event in all_events:
        if event.job_id is not None:
            by_job[event.job_id].append(event)
    enqueued_ids = None if enqueued is None else set(enqueued)
    removed_ids = set(removed)
    job_ids = set(by_job) | (enqueued_ids or set())

    state = _Totals()
    for job_id in sorted(job_ids):
        _check_job(
            job_id,
            by_job.get(job_id, []),
            state,
            enqueued=enqueued_ids,
            final=final,
            removed=job_id in removed_ids,
            complete=complete,
            slack_s=float(slack_s),
        )
    return HistoryReport(
        violations=tuple(state.violations),
        notes=tuple(state.notes),
        jobs=len(job_ids),
        claims=state.claims,
        reclaims=state.reclaims,
        accepted=state.accepted,
        refused=state.refused,
        acked=state.acked,
        dead=None if final is None else len(final.dead & job_ids),
        live=None if final is None else len(final.live & job_ids),
        concurrent_runs=state.concurrent_runs,
    )


@dataclass(slots=True)
class _Totals:
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    claims: int = 0
    reclaims: int = 0
    accepted: int = 0
    refused: int = 0
    acked: int = 0
    concurrent_runs: int = 0


_Violate: TypeAlias = "Callable[[str, str], None]"


def _check_job(
    job_id: int,
    events: list[HistoryEvent],
    totals: _Totals,
    *,
    enqueued: set[int] | None,
    final: FinalState | None,
    removed: bool,
    complete: set[str],
    slack_s: float,
) -> None:
    def violate(rule: str, message: str) -> None:
        totals.violations.append(Violation(rule, job_id, message))

    if enqueued is not None and job_id not in enqueued and events:
        violate("unknown_job", f"{len(events)} events recorded for a job never enqueued")

    claims = _collect_claims(events, violate)
    totals.claims += len(claims)
    for claim in claims.values():
        _replay_claim(claim, violate)
        totals.accepted += len(claim.accepted)
        totals.refused += sum(e.kind == "lease_lost" for e in claim.events)

    ordered = sorted(claims.values(), key=_claim_order)
    _check_across_claims(job_id, ordered, totals, violate, slack_s=slack_s)

    acked = any(c.terminal is not None and c.terminal.kind in _ACKS for c in ordered)
    totals.acked += acked
    if final is None:
        return
    live, dead = job_id in final.live, job_id in final.dead
    last = ordered[-1] if ordered else None
    if acked and (live or dead):
        violate(
            "final_state", f"acked, yet the store still holds it as {'live' if live else 'dead'}"
        )
    if last is not None and last.terminal is not None and last.terminal.kind == "dead" and live:
        violate("final_state", f"dead-lettered ({last.terminal.describe()}), yet still live")
    cancelled = last is not None and last.terminal is not None and last.terminal.kind == "cancelled"
    if cancelled and (live or dead):  # R15: settled as cancelled, so gone
        violate("final_state", f"cancelled, yet the store still holds it as {live=}, {dead=}")
    if live or dead or acked or cancelled or removed:
        return
    if last is not None and last.source not in complete:
        totals.notes.append(
            f"job {job_id}: gone without a recorded ack; its last holder {last.source} "
            f"(attempt {last.attempt}) left an incomplete record (killed?), so its ack may "
            "have landed before it was written"
        )
    elif last is not None and "ack" in last.failed_ops:
        totals.notes.append(
            f"job {job_id}: gone without a recorded ack; the ack of attempt {last.attempt} "
            "failed with an engine error and may have committed before the connection broke"
        )
    else:
        held = "never claimed" if last is None else f"last claimed as attempt {last.attempt}"
        violate(
            "missing",
            f"neither acked, nor dead, nor live at the end ({held}; {len(events)} events)",
        )


def _collect_claims(events: list[HistoryEvent], violate: _Violate) -> dict[int, _Claim]:
    claims: dict[int, _Claim] = {}
    for event in sorted(events, key=_order):
        token = event.attempt if event.claim_token is None else event.claim_token
        if token is None or event.attempt is None:
            violate("orphan", f"{event.describe()} carries no attempt (claim token)")
            continue
        claim = claims.get(token)
        if event.kind == "claim":
            if claim is not None and not claim.synthesized:
                violate(
                    "handout",
                    f"attempt {event.attempt} (claim token {token}) was handed out twice: "
                    f"to {claim.source} at "
                    f"t={claim.t:.3f} and to {event.source} at t={event.t:.3f}",
                )
                continue
            claims[token] = _Claim(
                token=token,
                attempt=event.attempt,
                source=event.source,
                t=event.t,
                seq=event.seq,
                claimed_at=event.claimed_at,
                expires_at=event.claim_expires_at,
                synthesized=False,
                events=[] if claim is None else claim.events,
            )
            continue
        if claim is None:
            # Older records (and torn files) have no claim line: any event carrying the
            # claim's store times stands for it.
            claim = claims[token] = _Claim(
                token=token,
                attempt=event.attempt,
                source=event.source,
                t=event.t,
                seq=event.seq,
                claimed_at=event.claimed_at,
                expires_at=event.claim_expires_at,
                synthesized=True,
            )
        elif claim.synthesized and claim.claimed_at is None and event.claimed_at is not None:
            claim.claimed_at, claim.expires_at = event.claimed_at, event.claim_expires_at
        claim.events.append(event)
    for claim in claims.values():
        if claim.synthesized and claim.claimed_at is None:
            kinds = ", ".join(sorted({e.kind for e in claim.events}))
            violate("orphan", f"events of attempt {claim.attempt} ({kinds}) but no recorded claim")
    return claims


def _replay_claim(claim: _Claim, violate: _Violate) -> None:
    """One claim's own events in its holder's order: one-shot, refusals, handler."""
    claim.lease_until = claim.expires_at
    for event in sorted(claim.events, key=lambda e: (e.source != claim.source, e.seq, e.t)):
        if event.source != claim.source:
            violate(
                "foreign_operation",
                f"{event.describe()} on attempt {claim.attempt}, which {claim.source} holds",
            )
        kind = event.kind
        if kind in ACCEPTED_KINDS:
            claim.accepted.append(event)
            if claim.terminal is not None:
                violate(
                    "after_terminal",
                    f"{event.describe()} accepted after {claim.terminal.describe()} "
                    "(ack, retry, release and dead-letter are one-shot)",
                )
            elif claim.lost:
                violate(
                    "after_refusal",
                    f"{event.describe()} accepted after the claim was refused (lease_lost)",
                )
            if kind in TERMINAL_KINDS and claim.terminal is None:
                claim.terminal = event
            elif kind == "heartbeat" and event.lease_until is not None:
                claim.lease_until = max(claim.lease_until or -math.inf, event.lease_until)
        elif kind == "lease_lost":
            claim.lost = True
        elif kind == "engine_error" and event.op:
            claim.failed_ops.add(event.op)
        elif kind == "start":
            if claim.started_t is not None:
                violate("handler", f"the handler of attempt {claim.attempt} started twice")
            claim.started_t = event.t
        elif kind == "finish":
            if claim.started_t is None:
                violate("handler", f"the handler of attempt {claim.attempt} finished unstarted")
            claim.finished_t = event.t


def _check_across_claims(
    job_id: int, claims: list[_Claim], totals: _Totals, violate: _Violate, *, slack_s: float
) -> None:
    if claims and claims[0].attempt > 1:
        totals.notes.append(
            f"job {job_id}: attempts 1..{claims[0].attempt - 1} are not in the record"
        )
    for index, claim in enumerate(claims):
        later = claims[index + 1 :]
        # Stale tokens: anything accepted after a later claim was recorded.
        for event in claim.accepted:
            overtaken = [b for b in later if event.t > b.t + slack_s]
            if overtaken:
                first = overtaken[0]
                violate(
                    "stale_token",
                    f"{event.describe()} was accepted after attempt {first.attempt} was "
                    f"claimed by {first.source} at t={first.t:.3f}: its token was no "
                    "longer current",
                )
        if later and claim.terminal is not None and claim.terminal.kind in _FINAL_KINDS:
            violate(
                "stale_token",
                f"{claim.terminal.describe()} was accepted, yet attempt {later[0].attempt} was "
                f"claimed by {later[0].source}: either the {claim.terminal.kind} held a "
                "stale token or a finished job was claimed again",
            )
        if not later:
            continue
        after = later[0]
        # Q19.8: a release gives the attempt back, so the next claim repeats its number.
        given_back = claim.terminal is not None and claim.terminal.kind == "release"
        expected = claim.attempt if given_back else claim.attempt + 1
        if after.attempt > expected:
            totals.notes.append(
                f"job {job_id}: attempts {expected}..{after.attempt - 1} are not in the record"
            )
        if claim.terminal is None:
            totals.reclaims += 1
        if claim.started_t is not None and after.started_t is not None:
            ended = claim.finished_t if claim.finished_t is not None else math.inf
            if claim.started_t <= after.started_t < ended:
                totals.concurrent_runs += 1
        if after.claimed_at is None or claim.claimed_at is None:
            continue
        if after.attempt < expected:
            violate(
                "lease_overlap",
                f"claim order: attempt {after.attempt} was claimed at store time "
                f"{after.claimed_at:.6f}, after attempt {claim.attempt} ({claim.claimed_at:.6f})",
            )
        ended_early = claim.terminal is not None and claim.terminal.kind in ("retry", "release")
        lease_until = claim.lease_until
        if not ended_early and lease_until is not None and after.claimed_at <= lease_until:
            violate(
                "lease_overlap",
                f"attempt {after.attempt} was claimed by {after.source} at store time "
                f"{after.claimed_at:.6f} while attempt {claim.attempt} ({claim.source}) held a "
                f"lease valid until {lease_until:.6f}, not ended by a retry or release",
            )


def _claim_order(claim: _Claim) -> tuple[float, int, float]:
    """Claims of one job by store time (then attempt, then recording time)."""
    at = claim.claimed_at
    return (math.inf if at is None else at, claim.attempt, claim.t)


def _order(event: HistoryEvent) -> tuple[float, str, int]:
    return (event.t, event.source, event.seq)
