"""The conformance suite (``alkstore_trio.testing``), one pytest test per check and
engine, plus proof that the suite can fail.

The tests are generated: for every check ``q<N>_<what>`` in
:data:`~alkstore_trio.testing.CONFORMANCE_CHECKS` this module defines
``test_q<N>_<what>``, parametrized by the ``harness`` fixture of ``conftest.py``
(``test_q3_claim_order_is_priority_then_run_at_then_id[memory]``).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from typing import Any

import pytest

from alkstore_trio import Job, Store, SweepResult, open_store
from alkstore_trio._engines._memory._table import JobTable
from alkstore_trio.engine import MemoryEngine
from alkstore_trio.testing import (
    CONFORMANCE_CHECKS,
    EngineHarness,
    MemoryHarness,
    check_conformance,
)


def _make_test(
    check: Callable[[EngineHarness], Awaitable[None]],
) -> Callable[[EngineHarness], Awaitable[None]]:
    async def test(harness: EngineHarness) -> None:
        await check(harness)

    test.__name__ = test.__qualname__ = f"test_{check.__name__}"
    test.__doc__ = check.__doc__
    return test


for _check in CONFORMANCE_CHECKS:
    globals()[f"test_{_check.__name__}"] = _make_test(_check)
del _check


def test_every_check_is_named_after_a_rule() -> None:
    names = [check.__name__ for check in CONFORMANCE_CHECKS]
    assert len(set(names)) == len(names), "two checks share a name"
    rules = {name.split("_", 1)[0] for name in names}
    # Q14 (engine instances) is a property of open_store, not of one engine: it is
    # pinned by test_third_party_engine.py and by every PostgreSQL run of the suite,
    # whose harness opens its stores as open_store(PostgresEngine(...)).
    # Q7's text is replaced by Q19.5 (two-phase cancel), checked by the q19_5_* checks.
    contract = {f"q{n}" for n in [*range(1, 7), *range(8, 14), 15]} | {"q16"}
    contract |= {"q17"}  # Q17 periodic jobs
    contract |= {"q18"}  # Q18: queue controls.
    contract |= {"q19"}  # Q19.1-Q19.5 and Q19.8: results, history, wait, cancel, tokens.
    contract |= {"q21"}  # Q21: the worker registry.
    assert contract <= rules, f"contract rules covered: {sorted(rules & contract)}"
    # The rest pin decisions where the contract is silent (decisions-foundation.md).
    assert all(rule[0] == "d" and rule[1:].isdigit() for rule in rules - contract), sorted(rules)


async def test_check_conformance_passes_on_the_memory_engine() -> None:
    await check_conformance(MemoryHarness())


async def test_check_conformance_runs_only_the_named_checks() -> None:
    calls: list[str] = []

    class CountingHarness(MemoryHarness):
        def open_store(  # type: ignore[override]
            self, *, rng: random.Random | None = None
        ) -> AbstractAsyncContextManager[Store]:
            calls.append("open")
            return super().open_store(rng=rng)

    await check_conformance(CountingHarness(), only=["q4_ack_deletes_the_row"])
    assert calls == ["open"]
    with pytest.raises(ValueError, match="no_such_check"):
        await check_conformance(MemoryHarness(), only=["no_such_check"])
    with pytest.raises(ValueError, match="iterable of check names"):
        await check_conformance(MemoryHarness(), only="q4_ack_deletes_the_row")


# -- the suite can fail -----------------------------------------------------------------
#
# Broken engines, built at the harness level: a MemoryHarness whose stores run a
# subclass of the in-memory engine's job table with one rule broken. Nothing in the
# library is edited; each broken table is swapped in while the store is still empty.


class _DeadlineBlindTable(JobTable):
    """Ignores the deadline: a holder's operations are judged as if the lease were
    still running."""

    def _valid(self, queue: str, job_id: int, token: int, now: datetime) -> Job | None:
        job = self.get(job_id, queue)
        if job is not None and job.claim_expires_at is not None:
            now = min(now, job.claim_expires_at)
        return super()._valid(queue, job_id, token, now)


class _TokenBlindTable(JobTable):
    """The claim operations ignore the claim token (the hazard D18 exists for): a stale
    holder's ack, heartbeat, retry or fail acts on a job another worker has reclaimed
    since."""

    def _valid(self, queue: str, job_id: int, token: int, now: datetime) -> Job | None:
        job = self.get(job_id, queue)
        return super()._valid(queue, job_id, token if job is None else job.attempts, now)


class _WorstFirstTable(JobTable):
    """Hands out the *worst* claimable rows first (the claim order reversed): it claims
    every claimable row, keeps the last n and puts the others back as they were."""

    def claim(self, queue: str, worker_id: str, n: int, now: datetime) -> list[Job]:
        before = {job.id: job for job in self.jobs() if job.queue == queue}
        everything = super().claim(queue, worker_id, len(before) + 1, now)
        kept = everything[::-1][:n]
        for job in everything[::-1][n:]:
            self._set_live(before[job.id], now)
        return kept


class _LazySweepTable(JobTable):
    """Never expires anything: the sweep only purges."""

    def sweep_expired(self, queue: str, retention_s: float | None, now: datetime) -> SweepResult:
        return SweepResult(0, 0)


class _UncountedTable(JobTable):
    """Moves jobs as the contract says but keeps no count of them (D27)."""

    def _counts(self, queue: str) -> Any:
        counts = super()._counts(queue)
        del self._finished[queue]  # the caller adds to a count nobody keeps
        return counts


class _CancelAsAckTable(JobTable):
    """Counts a cancelled job as acked (D27)."""

    def cancel(self, queue: str, job_id: int) -> bool:
        cancelled = super().cancel(queue, job_id)
        if cancelled:
            counts = self._counts(queue)
            counts.cancelled -= 1
            counts.acked += 1
        return cancelled


class _BrokenHarness(MemoryHarness):
    table_class: type[JobTable] = JobTable

    @asynccontextmanager
    async def open_store(self, *, rng: random.Random | None = None) -> AsyncIterator[Store]:
        engine = MemoryEngine(self.clock)
        engine._table = self.table_class()
        async with open_store(engine, rng=rng) as store:
            yield store


class _DeadlineBlindHarness(_BrokenHarness):
    name = "deadline-blind"
    table_class = _DeadlineBlindTable


class _WorstFirstHarness(_BrokenHarness):
    name = "worst-first"
    table_class = _WorstFirstTable


class _TokenBlindHarness(_BrokenHarness):
    name = "token-blind"
    table_class = _TokenBlindTable


class _LazySweepHarness(_BrokenHarness):
    name = "lazy-sweep"
    table_class = _LazySweepTable


class _UncountedHarness(_BrokenHarness):
    name = "uncounted"
    table_class = _UncountedTable


class _CancelAsAckHarness(_BrokenHarness):
    name = "cancel-as-ack"
    table_class = _CancelAsAckTable


@pytest.mark.parametrize(
    ("harness_class", "must_fail"),
    [
        pytest.param(
            _DeadlineBlindHarness,
            {
                "q4_claim_lapses_one_instant_after_the_deadline",
                "q4_late_heartbeat_is_refused",
                "q4_heartbeat_does_not_consume_the_handle",
                "q6_ack_batch_deletes_only_valid_claims_of_this_queue",
                "q13_heartbeat_handles_renews_valid_claims_and_refuses_stale_ones",
                "q13_retry_handles_retries_valid_claims_and_refuses_stale_ones",
                "q13_fail_handles_dead_letters_valid_claims_and_refuses_stale_ones",
            },
            id="deadline-blind",
        ),
        pytest.param(
            _TokenBlindHarness,
            {
                "q13_ack_handles_acks_valid_claims_in_one_call_and_refuses_stale_ones",
                "q13_heartbeat_handles_renews_valid_claims_and_refuses_stale_ones",
                "q13_retry_handles_retries_valid_claims_and_refuses_stale_ones",
                "q13_fail_handles_dead_letters_valid_claims_and_refuses_stale_ones",
            },
            id="token-blind",
        ),
        pytest.param(
            _WorstFirstHarness,
            {
                "q3_claim_order_is_priority_then_run_at_then_id",
                "q3_claim_batch_takes_the_best_n",
                "q3_reclaimable_rows_take_their_place_in_the_order",
                "q2_priority_accepts_the_int32_range",
            },
            id="worst-first",
        ),
        pytest.param(
            _LazySweepHarness,
            {
                "q9_sweep_dead_letters_expired_pending_and_processing_rows",
                "q9_retention_zero_purges_dead_rows_after_their_death_instant",
                "q9_sweep_is_scoped_to_its_queue",
                "q4_dead_letter_moves_are_atomic",
            },
            id="lazy-sweep",
        ),
        pytest.param(
            _UncountedHarness,
            {
                "d27_stats_count_each_queues_acked_jobs",
                "d27_stats_count_each_queues_dead_letter_moves",
                "d27_stats_count_each_queues_cancelled_jobs",
                "d27_stats_list_queues_with_counted_jobs_even_without_rows",
            },
            id="uncounted",
        ),
        pytest.param(
            _CancelAsAckHarness,
            {"d27_stats_count_each_queues_cancelled_jobs"},
            id="cancel-as-ack",
        ),
    ],
)
async def test_a_broken_engine_is_caught(
    harness_class: type[_BrokenHarness], must_fail: set[str]
) -> None:
    with pytest.raises(AssertionError) as caught:
        await check_conformance(harness_class())
    report = str(caught.value)
    failed = {line[2:].split(":", 1)[0] for line in report.splitlines() if line.startswith("- ")}
    assert must_fail <= failed, f"not caught: {sorted(must_fail - failed)}\n{report}"
    assert report.startswith(f"engine {harness_class.name!r} failed")
