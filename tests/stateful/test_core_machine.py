"""The pure core's indexed ``JobTable`` agrees with the naive ``ReferenceModel``.

A Hypothesis ``RuleBasedStateMachine`` applies the same operations to both, with an
explicit ``now`` that moves forwards in small and large steps, lands exactly on (and one
microsecond past) every deadline, ``run_at``, expiry and retention limit, and also moves
*backwards* (a manual clock can be set back; the table must then rebuild its heaps).
After every step every row must agree, live and dead, on every queue.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from alkstore_trio import Job, QueueOpts
from alkstore_trio._core import backoff_delay_s, enqueue_specs
from alkstore_trio._engines._memory._table import JobTable
from alkstore_trio.engine import Claim, FailItem, RetryItem
from alkstore_trio.testing import ReferenceModel
from alkstore_trio.testing._model import ModelTransaction, model_backoff_delay_s

START = datetime(2000, 1, 1, tzinfo=UTC)
ONE_US = timedelta(microseconds=1)
QUEUES = {
    "alpha": QueueOpts(visibility_timeout_s=10, max_attempts=2, backoff_base_s=1),
    "beta": QueueOpts(
        visibility_timeout_s=5,
        max_attempts=1,
        backoff_base_s=0,
        expires_in_s=20,
        dead_letter_retention_s=0,
    ),
    "gamma": QueueOpts(
        visibility_timeout_s=30,
        max_attempts=3,
        backoff_base_s=0.5,
        expires_in_s=12.5,
        dead_letter_retention_s=15,
    ),
}
RETENTIONS = (None, 0.0, 3.0, 15.0)

queues = st.sampled_from(sorted(QUEUES))
payloads = st.binary(max_size=3)
priorities = st.sampled_from([0, 1, -1, 7])
delays = st.sampled_from([None, 0.0, 2.0, 7.5, -3.0, 40.0])
run_ats = st.sampled_from([None, 0.0, -5.0, 3.0, 12.0])
overrides = st.sampled_from([None, 1, 2, 4])
workers = st.sampled_from(["w1", "w2"])
errors = st.sampled_from([None, "boom", ""])
#: What the machine ran (for the figures file): examples, and agreement checks (one after
#: the setup and after every step).
RUN: Counter[str] = Counter()


class CoreAgainstModel(RuleBasedStateMachine):
    """Steps a ``JobTable`` and a ``ReferenceModel`` together."""

    def __init__(self) -> None:
        super().__init__()
        RUN["examples"] += 1
        self.table = JobTable()
        self.model = ReferenceModel()
        self.table_rng = random.Random(0)
        self.now = START
        # Snapshots of every claim handed out: (queue, id, token, max_attempts, base).
        self.claims: list[Job] = []
        # The open transaction: its model side and the table's reserved rows.
        self.tx: ModelTransaction | None = None
        self.tx_rows: list = []

    # -- setup ---------------------------------------------------------------------------

    @initialize(seed=st.integers(0, 2**16))
    def seed_the_backoff_draws(self, seed: int) -> None:
        self.table_rng = random.Random(seed)
        self.model.rng = random.Random(seed)

    def _specs(self, queue, items, priority, delay_s, run_at_in_s, max_attempts):
        run_at = None if run_at_in_s is None else self.now + timedelta(seconds=run_at_in_s)
        specs = enqueue_specs(
            queue,
            QUEUES[queue],
            items,
            max_payload_bytes=1024,
            priority=priority,
            delay_s=delay_s,
            run_at=run_at,
            max_attempts=max_attempts,
        )
        return specs, run_at

    # -- Q2 ------------------------------------------------------------------------------

    @rule(
        queue=queues,
        items=st.lists(payloads, min_size=1, max_size=3),
        priority=priorities,
        delay_s=delays,
        run_at_in_s=run_ats,
        max_attempts=overrides,
    )
    def enqueue(self, queue, items, priority, delay_s, run_at_in_s, max_attempts):
        specs, run_at = self._specs(queue, items, priority, delay_s, run_at_in_s, max_attempts)
        got = self.table.enqueue(specs, self.now)
        want = self.model.enqueue_many(
            queue,
            items,
            opts=QUEUES[queue],
            priority=priority,
            delay_s=delay_s,
            run_at=run_at,
            max_attempts=max_attempts,
            now=self.now,
        )
        assert got == want

    # -- Q10 -----------------------------------------------------------------------------

    @rule(
        queue=queues,
        payload=payloads,
        priority=priorities,
        delay_s=delays,
        max_attempts=overrides,
        default_stamps=st.booleans(),
    )
    def tx_enqueue(self, queue, payload, priority, delay_s, max_attempts, default_stamps):
        if self.tx is None:
            self.tx = self.model.transaction()
            self.tx_rows = []
        opts = QueueOpts() if default_stamps else QUEUES[queue]
        (spec,) = enqueue_specs(
            queue,
            opts,
            [payload],
            max_payload_bytes=1024,
            priority=priority,
            delay_s=delay_s,
            run_at=None,
            max_attempts=max_attempts,
        )
        (job_id,) = self.table.reserve_ids(1)
        want = self.tx.enqueue(
            queue,
            payload,
            opts=None if default_stamps else opts,
            priority=priority,
            delay_s=delay_s,
            max_attempts=max_attempts,
        )
        assert job_id == want
        self.tx_rows.append((job_id, spec))

    @precondition(lambda self: self.tx is not None)
    @rule(commit=st.booleans())
    def tx_end(self, commit):
        assert self.tx is not None
        if commit:
            got = self.table.insert(self.tx_rows, self.now)
            assert got == self.tx.commit(now=self.now)
        else:
            self.tx.rollback()
        self.tx = None
        self.tx_rows = []

    # -- Q3 ------------------------------------------------------------------------------

    @rule(queue=queues, worker=workers, n=st.integers(-1, 4))
    def claim(self, queue, worker, n):
        got = self.table.claim(queue, worker, n, self.now)
        want = self.model.claim(queue, worker, n, now=self.now)
        assert got == want
        self.claims.extend(got)

    # -- Q4 ------------------------------------------------------------------------------

    @precondition(lambda self: self.claims)
    @rule(data=st.data(), extend_s=st.sampled_from([None, 1.0, 5.0, 40.0]))
    def heartbeat(self, data, extend_s):
        job = data.draw(st.sampled_from(self.claims), label="claim")
        got = bool(
            self.table.heartbeat(job.queue, [Claim(job.id, job.attempts)], extend_s, self.now)
        )
        want = self.model.heartbeat(job.queue, job.id, job.attempts, extend_s, now=self.now)
        assert got == want

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def ack(self, data):
        job = data.draw(st.sampled_from(self.claims), label="claim")
        got = bool(self.table.ack(job.queue, [Claim(job.id, job.attempts)], self.now))
        assert got == self.model.ack(job.queue, job.id, job.attempts, now=self.now)

    @precondition(lambda self: self.claims)
    @rule(data=st.data(), error=errors, delay_s=st.sampled_from([None, 0.0, 3.0, 0.5]))
    def retry(self, data, error, delay_s):
        job = data.draw(st.sampled_from(self.claims), label="claim")
        # The facade's draw (decision 2), with the core's backoff function.
        delay = delay_s
        if delay is None and job.attempts < job.max_attempts:
            delay = float(backoff_delay_s(job.backoff_base_s, job.attempts, self.table_rng))
        got = self.table.retry(
            job.queue, [RetryItem(job.id, job.attempts, error, delay)], self.now
        )[0]
        want = self.model.retry(job.queue, job.id, job.attempts, error, delay_s, now=self.now)
        assert got == want

    @precondition(lambda self: self.claims)
    @rule(data=st.data(), error=errors)
    def fail(self, data, error):
        job = data.draw(st.sampled_from(self.claims), label="claim")
        got = self.table.fail(job.queue, [FailItem(job.id, job.attempts, error)], self.now)[0]
        assert got == self.model.fail(job.queue, job.id, job.attempts, error, now=self.now)

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def retry_claims(self, data):
        # Claims may repeat (the facade forbids it, the engines define it: D20).
        claims = data.draw(st.lists(st.sampled_from(self.claims), max_size=4), label="claims")
        items = [
            (job, data.draw(errors), data.draw(st.sampled_from([None, 0.0, 3.0, 0.5])))
            for job in claims
        ]
        resolved = []
        for job, error, delay_s in items:
            delay = delay_s
            if delay is None and job.attempts < job.max_attempts:
                delay = float(backoff_delay_s(job.backoff_base_s, job.attempts, self.table_rng))
            resolved.append((job.id, job.attempts, error, delay))
        queue = claims[0].queue if claims else "alpha"
        got = self.table.retry(queue, resolved, self.now)
        wanted = [(job.id, job.attempts, error, delay_s) for job, error, delay_s in items]
        assert got == self.model.retry_claims(queue, wanted, now=self.now)

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def fail_claims(self, data):
        claims = data.draw(st.lists(st.sampled_from(self.claims), max_size=4), label="claims")
        items = [(job.id, job.attempts, data.draw(errors)) for job in claims]
        queue = claims[0].queue if claims else "alpha"
        got = self.table.fail(queue, items, self.now)
        assert got == self.model.fail_claims(queue, items, now=self.now)

    # -- Q6, Q7, Q9 ----------------------------------------------------------------------

    def _ids(self):
        issued = self.model.issued_ids()
        return st.sampled_from([*issued, 0, -1, len(issued) + 1])

    @rule(queue=queues, data=st.data())
    def ack_batch(self, queue, data):
        ids = data.draw(st.lists(self._ids(), max_size=5), label="ids")
        got = self.table.ack_batch(queue, ids, self.now)
        assert got == self.model.ack_batch(queue, ids, now=self.now)

    @rule(queue=queues, data=st.data())
    def cancel(self, queue, data):
        job_id = data.draw(self._ids(), label="job_id")
        cancelled, announce = self.table.cancel(queue, job_id, self.now)
        assert cancelled == self.model.cancel(queue, job_id, now=self.now)
        # Q19.5: the holder is told exactly when the row is (still) cancelling.
        job = self.model.get_job(queue, job_id)
        assert announce == (job is not None and job.state == "cancelling")

    @precondition(lambda self: self.claims)
    @rule(queue=queues, data=st.data())
    def settle_cancelled(self, queue, data):
        claims = data.draw(st.lists(st.sampled_from(self.claims), max_size=3), label="claims")
        pairs = [(job.id, job.claim_token) for job in claims]
        got = self.table.settle_cancelled(queue, pairs, self.now)
        assert got == self.model.settle_cancelled(queue, pairs, now=self.now)

    @rule(queue=queues, data=st.data())
    def cancelling_among(self, queue, data):
        ids = data.draw(st.lists(self._ids(), max_size=4), label="ids")
        assert self.table.cancelling_among(queue, ids) == self.model.cancelling_among(queue, ids)

    @rule(queue=queues, retention_s=st.sampled_from(RETENTIONS))
    def sweep_expired(self, queue, retention_s):
        got = self.table.sweep_expired(queue, retention_s, self.now)
        assert got == self.model.sweep_expired(queue, retention_s, now=self.now)

    # -- time ----------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([1.0, 0.5, 5.0, 11.0, 31.0, 100.0, 4000.0]))
    def advance(self, seconds):
        self.now += timedelta(seconds=seconds)

    @rule(seconds=st.sampled_from([1e-6, 1.0, 6.0, 60.0]))
    def clock_goes_back(self, seconds):
        self.now -= timedelta(seconds=seconds)

    def _targets(self):
        out = []
        for job in self.model.jobs():
            instants = [job.run_at, job.claim_expires_at, job.expires_at]
            if job.died_at is not None:
                instants += [job.died_at + timedelta(seconds=r or 0) for r in RETENTIONS]
            for instant in instants:
                if instant is not None:
                    out += [t for t in (instant, instant + ONE_US) if t > self.now]
        return sorted(set(out))

    @precondition(lambda self: self._targets())
    @rule(data=st.data())
    def advance_to_an_instant_that_matters(self, data):
        self.now = data.draw(st.sampled_from(self._targets()), label="now")

    # -- agreement -----------------------------------------------------------------------

    @invariant()
    def every_row_agrees(self):
        RUN["checks"] += 1
        assert list(self.table.jobs()) == self.model.jobs()
        assert len(self.table) == len(self.model.jobs())
        issued = self.model.issued_ids()
        for queue in QUEUES:
            for job_id in [*issued, 0, len(issued) + 1]:
                assert self.table.get(job_id, queue) == self.model.get_job(queue, job_id)


def test_q2_q10_core_job_table_agrees_with_the_reference_model(figures):
    RUN.clear()
    run_state_machine_as_test(
        CoreAgainstModel,
        settings=settings(
            max_examples=200,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    figures.record(examples=RUN["examples"], agreement_checks=RUN["checks"])


@given(
    base_s=st.sampled_from([0.0, 0.3, 0.5, 1.0, 2.0, 2.5, 5.0, 7.0, 3600.0, 1e6]),
    attempt=st.integers(1, 40),
    seed=st.integers(0, 2**32),
)
def test_q5_core_backoff_draws_exactly_like_the_model(base_s, attempt, seed):
    core_rng, model_rng = random.Random(seed), random.Random(seed)
    assert backoff_delay_s(base_s, attempt, core_rng) == model_backoff_delay_s(
        base_s, attempt, model_rng
    )
    assert core_rng.getstate() == model_rng.getstate()


def test_q5_model_backoff_matches_the_contract_examples():
    rng = random.Random(1)

    def delays(base_s, attempt):
        return {model_backoff_delay_s(base_s, attempt, rng) for _ in range(300)}

    assert delays(2, 1) == {1, 2}
    assert delays(2, 2) == {2, 3, 4}
    assert delays(2, 3) == {4, 5, 6, 7, 8}
    assert delays(5, 30) <= set(range(1800, 3601))
    assert delays(0, 1) == {0}
    assert delays(0.5, 1) == {1}  # decision 12: a cap below one second gives 1
