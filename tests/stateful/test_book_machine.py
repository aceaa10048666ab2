"""The worker's claim book under any order of events (R2, R5, R6, R7, item 5).

A Hypothesis ``RuleBasedStateMachine`` drives one :class:`ClaimBook` the way the worker's
actors do — claims (plain and fused with acks), starts, handler ends, reports, renewals
accepted and refused, outcome statements accepted, refused and failed, ticks, wakes,
stops and the end of the grace — in any interleaving, with a clock that only moves
forward. No event loop: the book is synchronous. After every step:

- no handler ever starts on a claim whose lease ran out by the worker's clock, nor on one
  lost or being cancelled (item 5, R6, R7);
- nothing is sent for a lost claim: no renewal, no outcome (R6);
- the concurrency limit holds, and a stopping book claims nothing (R2, R7);
- every claim ends exactly once: claimed = acked + retried + dead + released + lost +
  the claims held and not yet lost (R9's counters add up).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from alkstore_trio._runtime._book import ACK, CANCELLED, ClaimBook, ClaimState, Outcome, Verdict

QUEUES = ("a", "b")
#: Claims whose job actor has yet to end.
_ACTIVE = (ClaimState.STARTING, ClaimState.RUNNING, ClaimState.CANCELLING, ClaimState.ABORTING)
VT_S = 30.0


@dataclass
class FakeJob:
    id: int
    queue: str
    attempts: int
    max_attempts: int = 3
    visibility_timeout_s: float = VT_S


@dataclass
class FakeHandle:
    job: FakeJob


RESULTS = st.sampled_from(
    [ACK, Outcome("retry", "boom", None), Outcome("retry", "later", 1.0), Outcome("fail", "x")]
)


class BookMachine(RuleBasedStateMachine):
    claims = Bundle("claims")
    prefetch = 0

    #: R12: the per-queue caps (none in the plain machines).
    caps: ClassVar[Mapping[str, int]] = MappingProxyType({})

    def __init__(self) -> None:
        super().__init__()
        self.concurrency = 4
        self.book = ClaimBook(
            QUEUES,
            concurrency=self.concurrency,
            claim_batch_max=3,
            heartbeat_interval_s=None,
            prefetch=self.prefetch,
            queue_concurrency=self.caps,
        )
        self.now = 0.0
        self.next_id = 1

    def _handles(self, queue: str, n: int) -> list[FakeHandle]:
        out = []
        for _ in range(n):
            out.append(FakeHandle(FakeJob(self.next_id, queue, attempts=1 + self.next_id % 3)))
            self.next_id += 1
        return out

    # --- time --------------------------------------------------------------------------

    @rule(dt=st.sampled_from([0.0, 0.5, 10.0, 29.0, 31.0]))
    def advance(self, dt):
        self.now += dt

    # --- claiming ----------------------------------------------------------------------

    @rule(target=claims, queue=st.sampled_from(QUEUES), got=st.integers(0, 3), late=st.booleans())
    def claim(self, queue, got, late):
        n = self.book.claim_size(queue)
        if not n:
            if self.book.stopping:
                assert n is None
                assert not self.book.wants_claim()
            return []
        sent_at = self.now
        if late:
            self.now += 31.0  # frozen between sending the claim and its answer
        handles = self._handles(queue, min(got, n))
        return list(self.book.claimed(queue, handles, n, sent_at=sent_at, now=self.now))

    @rule(target=claims, got=st.integers(0, 3), failed=st.booleans())
    def pipelined_claim(self, got, failed):
        sent = self.book.next_pipelined_claim()
        if sent is None:
            return []
        assert self.book.next_pipelined_claim() is None  # one in flight at a time
        queue, n = sent
        assert n <= self.book.claim_batch_max
        self.book.claim_answered()
        if failed:
            self.book.claim_failed(queue)
            return []
        handles = self._handles(queue, min(got, n))
        return list(self.book.claimed(queue, handles, n, sent_at=self.now, now=self.now))

    @rule(queue=st.sampled_from(QUEUES))
    def wake(self, queue):
        self.book.wake({queue})

    @rule()
    def tick(self):
        for claim in self.book.tick():
            assert claim.state is ClaimState.SETTLING

    # --- job actors ----------------------------------------------------------------------

    @rule(batch=claims)
    def start(self, batch):
        for claim in batch:
            before = claim.state
            lapsed = self.now >= claim.lease_until
            started = self.book.start(claim, self.now)
            # Item 5, R6, R7: only a STARTING claim within its lease may start.
            assert started == (before is ClaimState.STARTING and not lapsed)
            if before is ClaimState.STARTING and lapsed:
                assert claim.state is ClaimState.LOST

    @rule(batch=claims, result=st.one_of(st.none(), RESULTS), deadline=st.booleans())
    def finish(self, batch, result, deadline):
        for claim in batch:
            if claim.state in _ACTIVE:
                ran = claim.state is not ClaimState.STARTING
                aborting = claim.state is ClaimState.ABORTING
                hit = deadline and ran and self.now >= claim.lease_until
                self.book.finished(claim, result if ran else None, deadline_hit=hit)
                if aborting:  # R15: whatever the handler did, the outcome is cancelled
                    assert (claim.state, claim.outcome) == (ClaimState.FINISHED, CANCELLED)

    @rule(batch=claims)
    def report(self, batch):
        for claim in batch:
            if claim.state is ClaimState.FINISHED or (
                claim.state is ClaimState.LOST and claim in self.book.claims
            ):
                verdict = self.book.reported(claim, self.now)
                if verdict is Verdict.SEND:
                    assert claim.state is ClaimState.SETTLING
                else:
                    assert claim not in self.book.claims

    # --- R15: cancel announcements --------------------------------------------------------

    @rule(batch=claims, unknown=st.booleans())
    def cancel_announced(self, batch, unknown):
        before = {claim: claim.state for claim in batch}
        ids = [claim.handle.job.id for claim in batch] + ([10**9] if unknown else [])
        aborted, unstarted = self.book.cancel_requested(ids, self.now)
        for claim, state in before.items():
            if state in (ClaimState.RUNNING, ClaimState.CANCELLING):
                assert claim in aborted
                assert claim.state is ClaimState.ABORTING
            elif state is ClaimState.STARTING:
                assert claim in unstarted
                assert claim.state is ClaimState.FINISHED
                assert not self.book.start(claim, self.now)  # it never starts
            else:
                assert claim.state is state  # finished, settling, lost, done: as they were
        assert len(aborted) + len(unstarted) == len(set(aborted) | set(unstarted))

    # --- R16: transactional completion -----------------------------------------------------

    @rule(batch=claims)
    def begin_commit(self, batch):
        for claim in batch:
            before = claim.state
            began = self.book.committing(claim)
            assert began == (before is ClaimState.RUNNING and not claim.in_tx)
            if began:
                assert claim.state is ClaimState.COMMITTING

    @rule(batch=claims, ok=st.booleans())
    def end_commit(self, batch, ok):
        for claim in batch:
            if claim.state is not ClaimState.COMMITTING:
                assert self.book.committed(claim, ok) is False  # not committing: no effect
                continue
            announced = claim.aborted_at is not None
            lost = self.book.committed(claim, ok)
            if ok:
                assert claim.in_tx
                assert claim.state is ClaimState.RUNNING
                assert not lost
            elif announced:
                assert claim.state is ClaimState.ABORTING
                assert not lost
            else:
                assert claim.state is ClaimState.LOST
                assert lost

    # --- heartbeats ----------------------------------------------------------------------

    @rule(batch=claims, accepted=st.booleans())
    def renew(self, batch, accepted):
        for group in self.book.renewable(batch).values():
            for claim in group:
                assert claim.state is not ClaimState.LOST  # R6: nothing for a lost claim
                if accepted:
                    deadline = self.book.renewed(claim, self.now)
                    assert deadline is None or deadline == self.now + VT_S
                else:
                    committing = claim.state is ClaimState.COMMITTING
                    news = self.book.refused(claim)
                    if committing:  # R16: held until the commit answers
                        assert not news
                        assert claim.state is ClaimState.COMMITTING

    # --- outcome statements --------------------------------------------------------------

    @rule(
        answer=st.sampled_from(["accepted", "refused", "refused_cancelled", "failed"]),
        acks=st.booleans(),
    )
    def settle(self, answer, acks):
        groups = self.book.settle_groups(list(self.book.claims))
        for (queue, kind), group in groups.items():
            for claim in group:
                assert claim.state is ClaimState.SETTLING  # never a lost claim
            if answer == "failed":
                continue  # stays SETTLING: the tick sends it again
            fused = 0
            if kind == "ack" and acks:
                fused = self.book.fused_claim_size(queue, len(group))
            for claim in group:
                # R15: a refused outcome the dispatcher then settled as cancelled.
                cancelled = answer == "refused_cancelled"
                result = self.book.settled(claim, answer == "accepted", cancelled=cancelled)
                assert (result == "cancelled") == (
                    cancelled or (answer == "accepted" and kind == "cancelled")
                )
            if fused:
                self.book.claimed(
                    queue, self._handles(queue, fused), fused, sent_at=self.now, now=self.now
                )

    # --- stop ----------------------------------------------------------------------------

    @rule()
    def stop(self):
        self.book.stop()

    @rule()
    def grace_over(self):
        if not self.book.stopping:
            return
        for claim in self.book.grace_over():
            assert claim.state is ClaimState.CANCELLING
        for claim in self.book.claims:
            assert claim.state not in (ClaimState.STARTING, ClaimState.RUNNING)

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def the_concurrency_limit_holds(self):
        assert len(self.book.claims) <= self.concurrency + self.prefetch

    @invariant()
    def held_claims_are_not_done(self):
        for claim in self.book.claims:
            assert claim.state is not ClaimState.DONE

    @invariant()
    def every_claim_ends_once(self):
        c = self.book.counts
        held = sum(claim.state is not ClaimState.LOST for claim in self.book.claims)
        ended = c["acked"] + c["retried"] + c["dead_lettered"] + c["released"] + c["lease_lost"]
        ended += c["cancelled"]
        assert c["claimed"] == ended + held

    @invariant()
    def r15_once_announced_the_outcome_is_cancelled(self):
        for claim in self.book.claims:
            if claim.in_tx or claim.state is ClaimState.COMMITTING:
                continue  # R16: the commit decides (completed, or aborting)
            if claim.aborted_at is not None and claim.state is not ClaimState.ABORTING:
                assert claim.state in (ClaimState.FINISHED, ClaimState.SETTLING)
                assert claim.outcome is CANCELLED
            if claim.state is ClaimState.ABORTING:
                assert claim not in self.book.renewable([claim]).get(claim.queue, [])

    @invariant()
    def r16_a_claim_completed_in_its_transaction_is_never_sent_or_renewed(self):
        for claim in self.book.claims:
            if claim.in_tx:
                assert claim not in self.book.renewable([claim]).get(claim.queue, [])
                assert claim.state is not ClaimState.SETTLING
                assert claim.outcome is None or claim.state is ClaimState.FINISHED

    @invariant()
    def a_stopping_book_claims_nothing(self):
        if self.book.stopping:
            assert not self.book.wants_claim()
            for queue in QUEUES:
                assert self.book.claim_size(queue) is None
                assert self.book.fused_claim_size(queue, 1) == 0

    @invariant()
    def r12_the_caps_hold_and_a_capped_queue_starves_none(self):
        book = self.book
        for queue, cap in self.caps.items():
            held = sum(claim.queue == queue for claim in book.claims)
            assert book.held[queue] == held <= cap
        # R12.3: a woken uncapped queue is claimed from whenever a slot is free.
        uncapped = [q for q in QUEUES if q not in self.caps and q in book.woken]
        if uncapped and book.free > 0 and not book.stopping:
            assert book.wants_claim()
            assert all(book.claim_size(q) == min(book.free, book.claim_batch_max) for q in uncapped)


BookMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
TestBookMachine = BookMachine.TestCase


class PrefetchBookMachine(BookMachine):
    """The same, with prefetch: claims beyond concurrency, one pipelined claim at a time."""

    prefetch = 2


PrefetchBookMachine.TestCase.settings = BookMachine.TestCase.settings
TestPrefetchBookMachine = PrefetchBookMachine.TestCase


class CappedBookMachine(BookMachine):
    """R12: queue "a" capped at 2 of 4 slots, with prefetch (the caps bound it too)."""

    prefetch = 2
    caps: ClassVar[Mapping[str, int]] = MappingProxyType({"a": 2})


CappedBookMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None
)
TestCappedBookMachine = CappedBookMachine.TestCase
