"""The claim book: a worker's claims in flight as a synchronous state machine.

Why it exists. A worker's hard questions are all about one claim at a time: may its
handler still start, is its outcome still ours to send, does a refused renewal cancel it,
what does a stop do to it. Answered in the middle of trio code, with a handful of flags
per claim, the answers depend on the order in which tasks happen to run. Here they are a
plain object that takes *events* and returns *decisions* (the sans-I/O shape of httpcore's
connection pool, and of the project's own core for jobs): no trio, no clock reads, no
store. The worker's trio actors feed it events with the time they read and carry out what
it decides — statements to send, scopes to cancel, handlers to start or not. So R2, R5,
R6 and R7 are checked here without an event loop (``tests/unit/test_book.py``,
``tests/stateful/test_book_machine.py``), beside the end-to-end tests of the worker.

Each claim has exactly one :class:`ClaimState`::

    claimed ─► STARTING ─start()─► RUNNING ─finished()─► FINISHED ─reported()─► SETTLING
                  │  │                │  │                                      │
                  │  └─grace_over()─► CANCELLING ─finished()─► FINISHED         settled()
                  │                   │                                         ▼
                  └─ lease lapsed ─►  LOST ◄── refused() / lease ran out       DONE
                     before start        (outcome discarded)            (out of the book)

    RUNNING ─committing()─► COMMITTING ─committed(ok)─► RUNNING (in_tx: its outcome is
        "completed in the transaction", nothing is sent) or LOST (refused, or unknown)
    (R16: a transactional completion in flight; a refusal meanwhile waits for its end)

    RUNNING / CANCELLING ─cancel_requested()─► ABORTING ─finished()─► FINISHED
    STARTING ─cancel_requested()─► FINISHED (never starts)
    (R15: the store announced the job cancelled; its outcome is settle_cancelled)

The events: :meth:`ClaimBook.claimed` (a claim statement answered), :meth:`~ClaimBook.start`
(a job actor is about to run the handler's first line), :meth:`~ClaimBook.finished` (the
handler ended), :meth:`~ClaimBook.reported` (the dispatcher received that),
:meth:`~ClaimBook.renewed` / :meth:`~ClaimBook.refused` (a heartbeat's answer),
:meth:`~ClaimBook.settled` (an outcome statement's answer), :meth:`~ClaimBook.stop`,
:meth:`~ClaimBook.tick`, :meth:`~ClaimBook.wake`, :meth:`~ClaimBook.grace_over` and
:meth:`~ClaimBook.cancel_requested` (R15: the job was cancelled in the store).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from .._store import JobHandle

#: The ``last_error`` of jobs released by a stopping worker.
WORKER_STOPPED: Final = "worker stopped"
#: The ``last_error`` of a job given back because its handler was stopped at the lease's
#: deadline (no renewal got through in time) and a late renewal then showed the claim
#: was still held.
LEASE_UNCERTAIN: Final = "handler stopped: the claim could not be renewed in time"


class ClaimState(enum.Enum):
    """Where one claim is. Exactly one per claim; there are no other flags."""

    #: Claimed; its job actor has not run the handler's first line yet.
    STARTING = "starting"
    #: Its handler runs.
    RUNNING = "running"
    #: The worker is stopping and the grace ran out: its scope was cancelled (or its
    #: handler will never start); its outcome will be a release.
    CANCELLING = "cancelling"
    #: R15: the job was cancelled in the store (``queue.cancel``): its scope was cancelled
    #: (or its handler will never start); its outcome will be ``settle_cancelled``.
    ABORTING = "aborting"
    #: R16: the handler's transactional completion is in flight (its COMMIT not yet
    #: answered): a refusal meanwhile is held until :meth:`ClaimBook.committed`.
    COMMITTING = "committing"
    #: The claim was found lost (a refusal, or its lease ran out by the worker's clock):
    #: its scope was cancelled, its outcome will be discarded, no statement is sent for it.
    LOST = "lost"
    #: The handler ended; the outcome is on its way to the dispatcher.
    FINISHED = "finished"
    #: The outcome is known and its statement is due (again, if it failed: R8).
    SETTLING = "settling"
    #: Settled or dropped: no longer in the book.
    DONE = "done"


#: States whose cancel scope is still open (a renewal moves its deadline).
_SCOPED: Final = frozenset(
    {ClaimState.STARTING, ClaimState.RUNNING, ClaimState.CANCELLING, ClaimState.COMMITTING}
)
#: R15: states a cancel announcement aborts (their scope is to be cancelled); R16: not
#: a commit in flight (its completion is refused, or it won the race).
_ABORTABLE: Final = _SCOPED - {ClaimState.COMMITTING}
#: States a refusal leaves as they are.
_NOT_LOSABLE: Final = frozenset({ClaimState.LOST, ClaimState.DONE, ClaimState.ABORTING})
#: States whose claim may still be renewed.
_RENEWABLE: Final = _SCOPED | {ClaimState.FINISHED}


class Outcome(NamedTuple):
    """What is to be done with a claim's job: ``kind`` is ``"ack"``, ``"retry"``,
    ``"fail"``, ``"release"`` (given back because the worker stopped (Q19.8's release:
    the attempt is returned) or the lease was uncertain (a retry with delay 0: a handler
    that used a whole lease spends its attempt)) or ``"cancelled"`` (R15:
    ``settle_cancelled``). An ack carries the handler's ``result`` (Q19.1) for a kept job
    (``None`` for none, and always for an unkept job: the job actor discarded it)."""

    kind: str
    error: str | None = None
    delay_s: float | None = None
    result: bytes | None = None


def statement_kind(outcome: Outcome) -> str:
    """The statement that settles ``outcome``: its kind, but a release for an uncertain
    lease is sent as a retry with delay 0 (R7, Q19.8)."""
    if outcome.kind == "release" and outcome.error != WORKER_STOPPED:
        return "retry"
    return outcome.kind


#: The outcome of a claim whose handler returned (shared: the hot path allocates none).
ACK: Final = Outcome("ack")
#: R15: the outcome of a claim whose job was cancelled in the store.
CANCELLED: Final = Outcome("cancelled")
#: The raw result of a handler cancelled by its lease's deadline (see :meth:`reported`).
_LAPSED: Final = Outcome("lapsed")
#: R16: the outcome of a claim completed in its handler's transaction: nothing to send.
IN_TX: Final = Outcome("completed_in_tx")


@dataclass(eq=False, slots=True)
class Claim:
    """One claim in the book. Only the book changes ``state``, ``outcome`` and
    ``lease_until``; ``scope`` and ``heartbeat_scope`` belong to the worker's actors
    (the book never reads them)."""

    handle: JobHandle
    queue: str
    claimed_at: float
    heartbeat_interval_s: float
    #: Time by which the lease surely ends: when the claim or last accepted renewal was
    #: *sent* + the visibility timeout (never later than the store's own deadline).
    lease_until: float
    state: ClaimState = ClaimState.STARTING
    #: The outcome to apply (SETTLING), or the handler's raw result (FINISHED).
    outcome: Outcome | None = None
    scope: Any = None
    heartbeat_scope: Any = None
    #: R15: when the cancel announcement reached the book, and when the job actor ended
    #: (trio time; the actor sets it): the cancel's latency in this worker.
    aborted_at: float | None = None
    ended_at: float | None = None
    #: Q19.7: progress reported by the handler and not yet sent (the next heartbeat
    #: carries it); set by the handler's context, cleared by the dispatcher.
    progress: str | None = None
    #: R16: completed in the handler's transaction (no statement is sent for it), and
    #: whether a refusal arrived while its completion was in flight.
    in_tx: bool = False
    refused_in_commit: bool = False


class Verdict(enum.Enum):
    """What :meth:`ClaimBook.reported` decided about a finished claim."""

    #: Its outcome statement is due (the claim is SETTLING).
    SEND = "send"
    #: It was lost before: the outcome is discarded, nothing to do.
    DISCARD = "discard"
    #: Its lease ran out with no renewal getting through: now lost (log it).
    LOSE = "lose"


class ClaimBook:
    """The claims of one worker and its claiming policy (R2, R5, R6, R7, R12), synchronous.

    R12: a capped queue's claims *held* (every state but DONE, like the total's) never
    exceed its cap; each claim of it asks for no more than its free slots, and a queue
    at its cap is skipped (never ends a round, takes no fused share), so it holds up no
    other queue. Without caps, the claim path reads one empty dict.

    Args:
        queues: The served queue names, in the worker's order (the round robin's).
        concurrency: The most handlers running at once.
        claim_batch_max: The most jobs one claim asks for.
        prefetch: Claims held beyond ``concurrency``, waiting for a handler slot (the
            next batch is claimed while the current one runs).
        heartbeat_interval_s: The renewal interval, or ``None`` for a third of each
            job's visibility timeout.
        queue_concurrency: R12: the most claims held at once per capped queue (queues
            left out are capped by ``concurrency`` alone).
    """

    def __init__(
        self,
        queues: Iterable[str],
        *,
        concurrency: int,
        claim_batch_max: int,
        heartbeat_interval_s: float | None,
        prefetch: int = 0,
        queue_concurrency: Mapping[str, int] | None = None,
    ) -> None:
        self.queues: tuple[str, ...] = tuple(queues)
        #: R12: the caps of the capped queues, and the claims each holds (empty: none,
        #: and then the claim path never looks at them).
        self.caps: dict[str, int] = dict(queue_concurrency or {})
        self.held: dict[str, int] = dict.fromkeys(self.caps, 0)
        self.concurrency = concurrency
        #: The most claims held at once: running, waiting to run, or settling.
        self.capacity = concurrency + prefetch
        #: Pipelined (prefetch > 0): a claim statement runs beside the outcome statements
        #: instead of being fused with the acks; the queue it is out for and its size.
        self.pipelined = prefetch > 0
        self.claim_in_flight: str | None = None
        self._reserved = 0
        self.claim_batch_max = claim_batch_max
        self.heartbeat_interval_s = heartbeat_interval_s
        #: The claims held: every state but DONE.
        self.claims: set[Claim] = set()
        #: Queues that may have jobs ready (woken, ticked, or their last claim was full).
        self.woken: set[str] = set(self.queues)
        self.stopping = False
        self._rotation = 0
        #: R11: per queue, the earliest time a delayed job is known to be due (from a
        #: wake, the worker's own retry or a lookup); ``inf``: none is; absent: unknown.
        self.due: dict[str, float] = {}
        #: R11: the queues whose next due time the dispatcher is to look up now.
        self.lookups: set[str] = set()
        self.counts: dict[str, int] = dict.fromkeys(
            (
                "claimed",
                "acked",
                "retried",
                "dead_lettered",
                "released",
                "lease_lost",
                "cancelled",
                "completed_in_tx",
            ),
            0,
        )

    # --- claiming (R2) ---------------------------------------------------------------

    @property
    def free(self) -> int:
        """Room for new claims (``capacity`` less the claims held or being claimed)."""
        return self.capacity - len(self.claims) - self._reserved

    def wants_claim(self) -> bool:
        """Whether the dispatcher should claim now: not stopping, a queue woken, a slot
        free (R12: in a woken queue too)."""
        if self.stopping or not self.woken or self.free <= 0:
            return False
        return not self.caps or any(self._cap_room(queue) > 0 for queue in self.woken)

    def _cap_room(self, queue: str) -> int:
        """R12: the claims ``queue``'s own cap still allows (with the pipelined claim's
        reservation if it is out for this queue); ``capacity`` when uncapped."""
        cap = self.caps.get(queue)
        if cap is None:
            return self.capacity
        reserved = self._reserved if queue == self.claim_in_flight else 0
        return cap - self.held[queue] - reserved

    def claim_round(self) -> tuple[str, ...]:
        """The queues in this round's order (round robin: each round starts one later)."""
        start = self._rotation % len(self.queues)
        self._rotation += 1
        return self.queues[start:] + self.queues[:start]

    def claim_size(self, queue: str) -> int | None:
        """How many to claim from ``queue`` now: ``None`` ends the round (no slot free, or
        stopping), 0 skips the queue (not woken, or R12: at its cap)."""
        free = self.free
        if free <= 0 or self.stopping:
            return None
        if queue not in self.woken:
            return 0
        if self.caps:
            free = max(0, min(free, self._cap_room(queue)))
        return min(free, self.claim_batch_max)

    def next_pipelined_claim(self) -> tuple[str, int] | None:
        """Pipelined: the claim to send now beside whatever else is in flight — from the
        next woken queue in round-robin order, ``min(room, claim_batch_max)`` — or
        ``None`` (one is out already, no room, nothing woken, or stopping). The room it
        takes is reserved until :meth:`claim_answered`."""
        if not self.pipelined or self.claim_in_flight is not None or not self.wants_claim():
            return None
        for queue in self.claim_round():
            n = self.claim_size(queue)
            if n is None:
                return None
            if n:
                self.claim_in_flight = queue
                self._reserved = n
                return queue, n
        return None

    def claim_answered(self) -> None:
        """The pipelined claim returned (or failed): its reservation ends (the claims it
        brought are entered with :meth:`claimed`)."""
        self.claim_in_flight = None
        self._reserved = 0

    def fused_claim_size(self, queue: str, acks: int) -> int:
        """How many to claim from ``queue`` with ``acks`` of its acks (D21, R-D7): its
        fair share of the slots free once they are acked, divided among the woken queues
        so a deep queue cannot starve the others; 0: send the acks alone (stopping, the
        queue is idle, no slot would be free, or pipelined: the claim goes beside).
        R12: the share is divided among the woken queues with room under their caps
        (a capped queue at its cap takes none), and never exceeds the queue's own room
        once its acks settle."""
        free = self.free + acks
        if self.pipelined or self.stopping or queue not in self.woken or free <= 0:
            return 0
        if not self.caps:
            return min(-(-free // len(self.woken)), self.claim_batch_max)
        room = self._cap_room(queue) + acks
        sharing = sum(1 for q in self.woken if q == queue or self._cap_room(q) > 0)
        return max(0, min(-(-free // sharing), room, self.claim_batch_max))

    def claim_failed(self, queue: str) -> None:
        """A claim from ``queue`` failed: try it again on the next wake or tick (R8)."""
        self.woken.discard(queue)

    def claimed(
        self, queue: str, handles: list[JobHandle], asked: int, *, sent_at: float, now: float
    ) -> list[Claim]:
        """A claim of ``asked`` jobs sent at ``sent_at`` returned ``handles``: the jobs to
        start, one claim each. A short claim means the queue is empty for now (it is no
        longer woken); a full one leaves it woken (drain)."""
        if len(handles) < asked:
            self.woken.discard(queue)
            # R11: drained; unless a later due time is known, find out when to look again.
            if self.due.get(queue, -math.inf) <= now:
                self.lookups.add(queue)
        interval = self.heartbeat_interval_s
        claims = []
        for handle in handles:
            vt = handle.job.visibility_timeout_s
            claim = Claim(handle, queue, now, interval or vt / 3, sent_at + vt)
            claims.append(claim)
        self.claims.update(claims)
        self.counts["claimed"] += len(claims)
        if queue in self.held:
            self.held[queue] += len(claims)
        return claims

    def wake(self, queues: Iterable[str]) -> None:
        """These queues may have jobs ready (R3)."""
        self.woken.update(queues)

    def tick(self) -> list[Claim]:
        """The re-poll (R4): every queue is woken, and its next due time is forgotten (a
        short claim looks it up again: R11); returns the claims whose outcome statement
        is due again (it failed before: R8)."""
        self.woken = set(self.queues)
        self.due.clear()
        return [claim for claim in self.claims if claim.state is ClaimState.SETTLING]

    # --- due times (R11) -------------------------------------------------------------

    def announced(self, queue: str, at: float, now: float) -> bool:
        """A job of ``queue`` is due at ``at`` (a wake said so at ``now``, or this worker
        retried it with that delay). True: ask the timer to wake the queue then (it is
        earlier than any due time known). An unknown due time (or one that passed) stays
        unknown: an earlier job may exist that no wake announced (one enqueued before
        the worker listened, or after the known one)."""
        known = self.due.get(queue)
        if known is None or known <= now:
            return True
        if at < known:
            self.due[queue] = at
            return True
        return False

    def looked_up(self, queue: str, at: float, sent_at: float) -> bool:
        """A lookup sent at ``sent_at`` found ``queue``'s next delayed job due at ``at``
        (``inf``: none). True: ask the timer to wake the queue then. A known due time
        that had passed when the lookup was sent is replaced: the lookup is the newer
        answer (kept, every later short claim looked the queue up again until the next
        re-poll). One still ahead stays when it is earlier (a wake announced it while the
        lookup was on its way).

        The queue is woken too: one more claim, right after the lookup. A job that came
        due between the short claim and the lookup is in neither answer (the claim ran
        before it was due, the lookup answers times after its own now); without it, that
        job waited for the next due time (up to 50 ms late under a backlog of delays)."""
        self.lookups.discard(queue)
        known = self.due.get(queue)
        self.due[queue] = at if known is None or known <= sent_at else min(known, at)
        self.woken.add(queue)
        return at < math.inf

    def lookup_failed(self, queue: str) -> None:
        """A lookup failed: the due time stays unknown (the next short claim or tick
        tries again, R8)."""
        self.lookups.discard(queue)

    def retried_unknown(self, queue: str) -> None:
        """This worker retried a job of ``queue`` with the store's backoff delay (drawn
        in the store, D2): look the due time up now."""
        self.due.pop(queue, None)
        self.lookups.add(queue)

    # --- job actors (R5, item 5) -----------------------------------------------------

    def start(self, claim: Claim, now: float) -> bool:
        """A job actor is about to run the handler's first line at ``now``: may it?

        Only if the claim is STARTING and its lease has not run out by the worker's clock.
        A claim whose lease lapsed before its handler started (a worker frozen, or starved,
        between the claim and the start) becomes LOST and its handler never runs: another
        worker may hold the job by now. A claim cancelled by a stop never starts either
        (its outcome will be a release)."""
        if claim.state is not ClaimState.STARTING:
            return False
        if now >= claim.lease_until:
            self._lose(claim)
            return False
        claim.state = ClaimState.RUNNING
        return True

    def finished(self, claim: Claim, result: Outcome | None, *, deadline_hit: bool = False) -> None:
        """The job actor ended: ``result`` is the handler's outcome, or ``None`` if it was
        cancelled or never started (``deadline_hit``: cancelled by the lease's deadline,
        not by the book)."""
        state = claim.state
        if state is ClaimState.LOST or state is ClaimState.DONE:
            return
        if claim.in_tx:
            result = IN_TX  # R16: done in the transaction, whatever the handler did after
        elif state is ClaimState.ABORTING:
            # R15: cancelled in the store: whatever the handler did, the job is cancelled.
            result = CANCELLED
        elif state is ClaimState.CANCELLING:
            # Stopping, the grace ran out: give the job back (whatever the handler did
            # while being cancelled, its claim is released).
            result = Outcome("release", WORKER_STOPPED, 0.0) if result is None else result
        elif result is None:
            result = _LAPSED if deadline_hit else Outcome("release", WORKER_STOPPED, 0.0)
        claim.state = ClaimState.FINISHED
        claim.outcome = result

    def reported(self, claim: Claim, now: float) -> Verdict:
        """The dispatcher received a job actor's end at ``now``: decide the outcome."""
        if claim.state is not ClaimState.FINISHED:
            # Lost (found so while the handler ran, or before it started).
            self._drop(claim)
            return Verdict.DISCARD
        if claim.outcome is IN_TX:
            self._drop(claim)
            self.counts["acked"] += 1
            self.counts["completed_in_tx"] += 1
            return Verdict.DISCARD
        if claim.outcome is _LAPSED:
            if claim.lease_until > now:
                # A renewal sent before the deadline was accepted after the handler had
                # been stopped: the claim is still ours, so give the job back now rather
                # than leave an unused lease for a visibility timeout.
                claim.outcome = Outcome("release", LEASE_UNCERTAIN, 0.0)
            else:
                # R6/R8: no renewal got through before the lease ran out (the store was
                # unreachable); another worker may hold the job now.
                self._lose(claim)
                self._drop(claim)
                return Verdict.LOSE
        claim.state = ClaimState.SETTLING
        return Verdict.SEND

    # --- cancel announcements (R15) --------------------------------------------------

    def cancel_requested(
        self, job_ids: Iterable[int], now: float
    ) -> tuple[list[Claim], list[Claim]]:
        """The store announced these jobs cancelled at ``now`` (ids of jobs this worker
        does not hold are ignored). Returns (aborted, unstarted). A claim whose handler
        runs (or is being cancelled by a stop) becomes ABORTING: in ``aborted``, its
        scope is to be cancelled at once. One whose handler has not started never starts:
        it is FINISHED with ``settle_cancelled`` as outcome, in ``unstarted``, for the
        dispatcher to report (its job actor skips it). A finished one's outcome becomes
        ``settle_cancelled`` (its ack would be refused). One settling already is left to
        the refusal path."""
        wanted = set(job_ids)
        aborted: list[Claim] = []
        unstarted: list[Claim] = []
        for claim in self.claims:
            if claim.handle.job.id not in wanted:
                continue
            state = claim.state
            if state is ClaimState.STARTING:
                claim.state, claim.outcome = ClaimState.FINISHED, CANCELLED
                claim.aborted_at = claim.ended_at = now
                unstarted.append(claim)
            elif state is ClaimState.RUNNING or state is ClaimState.CANCELLING:
                claim.state = ClaimState.ABORTING
                claim.aborted_at = now
                aborted.append(claim)
            elif state is ClaimState.COMMITTING:
                claim.aborted_at = now  # R16: settled by committed()
            elif state is ClaimState.FINISHED and claim.aborted_at is None and not claim.in_tx:
                claim.aborted_at = claim.ended_at = now  # it ended before: no latency
                claim.outcome = CANCELLED
        return aborted, unstarted

    def abortable(self) -> dict[str, list[Claim]]:
        """R15's safety net: per queue, the claims whose handlers run or have yet to
        start (to ask the store which of their jobs are cancelling)."""
        held: dict[str, list[Claim]] = {}
        for claim in self.claims:
            if claim.state in _ABORTABLE:
                held.setdefault(claim.queue, []).append(claim)
        return held

    # --- heartbeats (R6) -------------------------------------------------------------

    def renewable(self, claims: Iterable[Claim]) -> dict[str, list[Claim]]:
        """Of these claims, those to renew now, by queue (one statement per queue); claims
        settled, lost or reported are left out (their handles may be consumed)."""
        groups: dict[str, list[Claim]] = {}
        for claim in claims:
            # R15: an announced claim is settled without a lease: nothing to renew.
            if claim.state in _RENEWABLE and claim.aborted_at is None and not claim.in_tx:
                group = groups.setdefault(claim.queue, [])
                if claim not in group:
                    group.append(claim)
        return groups

    def renewed(self, claim: Claim, sent_at: float) -> float | None:
        """A renewal sent at ``sent_at`` was accepted: the lease's new end, to become the
        scope's deadline, or ``None`` when the scope is closed already."""
        if claim.state not in _RENEWABLE:
            return None
        claim.lease_until = sent_at + claim.handle.job.visibility_timeout_s
        return claim.lease_until if claim.state in _SCOPED else None

    def refused(self, claim: Claim) -> bool:
        """A renewal, ack, retry or fail was refused: the claim is lost. True when this
        is news (count and log it); either way its scope is to be cancelled and nothing
        more is tried for it."""
        if claim.state in _NOT_LOSABLE or claim.aborted_at is not None or claim.in_tx:
            # LOST or DONE already; R15: an announced claim's job is cancelling in the
            # store, so a refusal is expected there: its outcome stays settle_cancelled.
            # R16: a claim completed in its transaction is gone from the store.
            return False
        if claim.state is ClaimState.COMMITTING:
            claim.refused_in_commit = True  # R16: decided by committed()
            return False
        self._lose(claim)
        return True

    # --- transactional completion (R16) ---------------------------------------------

    def committing(self, claim: Claim) -> bool:
        """The handler's transaction is about to complete the claim and commit: may it?
        Only while the handler runs (not once lost, aborted or stopped)."""
        if claim.state is not ClaimState.RUNNING or claim.in_tx:
            return False
        claim.state = ClaimState.COMMITTING
        return True

    def committed(self, claim: Claim, ok: bool) -> bool:
        """The transaction's commit answered: ``ok`` (the completion committed), else it
        was refused, rolled back or its outcome is unknown (the claim is then lost: no
        statement is sent; an unknown commit's job either finished or runs again once
        its lease lapses). A refusal held meanwhile is dropped when it committed (the
        heartbeat waited on the completion's row lock). True when the claim was lost
        here (news, to log)."""
        if claim.state is not ClaimState.COMMITTING:
            return False
        claim.refused_in_commit = False
        if ok:
            claim.state = ClaimState.RUNNING
            claim.in_tx = True
            return False
        if claim.aborted_at is not None:
            claim.state = ClaimState.ABORTING  # R15: cancelled meanwhile: settle it so
            return False
        self._lose(claim)
        return True

    def needs_heartbeat_actor(self, claim: Claim) -> bool:
        """A claim that ran one heartbeat interval gets a heartbeat actor if its handler
        still runs (or has yet to start)."""
        return claim.state in _SCOPED and claim.heartbeat_scope is None

    # --- outcomes (R2) ---------------------------------------------------------------

    def settle_groups(self, claims: Iterable[Claim]) -> dict[tuple[str, str], list[Claim]]:
        """The statements to send for these claims' outcomes: one per queue and kind
        (``"ack"``, ``"retry"``, ``"release"`` — a stopped worker's, R7 — ``"fail"`` or
        ``"cancelled"``; a release for an uncertain lease is a retry)."""
        groups: dict[tuple[str, str], list[Claim]] = {}
        for claim in claims:
            if claim.state is ClaimState.SETTLING:
                outcome = claim.outcome
                assert outcome is not None
                kind = outcome.kind if outcome.kind != "release" else statement_kind(outcome)
                groups.setdefault((claim.queue, kind), []).append(claim)
        return groups

    def settled(self, claim: Claim, done: bool, *, cancelled: bool = False) -> str:
        """The store answered a claim's outcome statement (``done``: accepted). Returns
        what happened: ``"ack"``, ``"retry"``, ``"release"``, ``"dead"`` (a fail, or a
        retry on the job's last attempt), ``"cancelled"`` (R15: its settle_cancelled was
        accepted, or ``cancelled``: it was refused, and then settled as cancelled) or
        ``"lost"`` (refused)."""
        outcome = claim.outcome
        assert outcome is not None
        if cancelled or (done and outcome is CANCELLED):
            self._drop(claim)
            self.counts["cancelled"] += 1
            return "cancelled"
        if not done:
            self._lose(claim)
            self._drop(claim)
            return "lost"
        self._drop(claim)
        job = claim.handle.job
        if outcome.kind == "ack":
            self.counts["acked"] += 1
            return "ack"
        given_back = statement_kind(outcome) == "release"  # never dead-letters (Q19.8)
        if outcome.kind == "fail" or (not given_back and job.attempts >= job.max_attempts):
            self.counts["dead_lettered"] += 1
            return "dead"
        if outcome.kind == "release":
            self.counts["released"] += 1
            return "release"
        self.counts["retried"] += 1
        return "retry"

    # --- graceful stop (R7) ----------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming."""
        self.stopping = True

    def release_unstarted(self) -> list[Claim]:
        """Stopping: the claims whose handlers have not started (prefetched, or about to
        start) are given back now rather than run during the grace (R7). They become
        FINISHED with a release; the dispatcher reports and settles them, and their job
        actors skip them."""
        unstarted = [claim for claim in self.claims if claim.state is ClaimState.STARTING]
        for claim in unstarted:
            claim.state = ClaimState.FINISHED
            claim.outcome = Outcome("release", WORKER_STOPPED, 0.0)
        return unstarted

    def grace_over(self) -> list[Claim]:
        """The grace ran out: the claims whose handlers run or have yet to start become
        CANCELLING; their scopes are to be cancelled, and their jobs released."""
        cancelled = [
            claim
            for claim in self.claims
            if claim.state is ClaimState.STARTING or claim.state is ClaimState.RUNNING
        ]
        for claim in cancelled:
            claim.state = ClaimState.CANCELLING
        return cancelled

    def open_scopes(self) -> list[Claim]:
        """The claims whose scopes are still open (to cancel when the worker must end)."""
        return [
            claim
            for claim in self.claims
            if claim.state in _SCOPED or claim.state is ClaimState.ABORTING
        ]

    def only_settling(self) -> bool:
        """Every claim held waits for an outcome statement (nothing runs)."""
        return all(claim.state is ClaimState.SETTLING for claim in self.claims)

    # --- internals -------------------------------------------------------------------

    def _lose(self, claim: Claim) -> None:
        claim.state = ClaimState.LOST
        self.counts["lease_lost"] += 1

    def _drop(self, claim: Claim) -> None:
        claim.state = ClaimState.DONE
        if self.held and claim in self.claims and claim.queue in self.held:
            self.held[claim.queue] -= 1
        self.claims.discard(claim)


def heartbeat_groups(claims: Iterable[Claim]) -> dict[float, list[Claim]]:
    """These new claims grouped by heartbeat interval (one timer request each, R-D1)."""
    groups: dict[float, list[Claim]] = {}
    for claim in claims:
        groups.setdefault(claim.heartbeat_interval_s, []).append(claim)
    return groups
