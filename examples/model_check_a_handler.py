"""Model-check your own handler: random faults, real workers, invariants checked.

The handler under test charges a payment for each job. It passes an *idempotency key*
to the payment provider (as most payment APIs accept): a second charge with a key the
provider has seen moves no money. Jobs run at least once, so the key must be the same on
every attempt of a job: here it is derived from the job's id.

A Hypothesis test draws a scenario: a few orders, what the provider does on each call
(answers, is unreachable, resets the connection *after* charging, stalls past the job
timeout, declines the card), and faults of the infrastructure (a pause that makes every
lease lapse at once, by jumping the store's clock; a worker stopped and replaced). Two
real ``Worker`` s run the handler on the in-memory engine under trio's ``MockClock``, with
a ``HistoryRecorder`` on each, until every job is settled. Then it checks:

- every job ends acked or dead, none still pending or processing;
- the side effect happened at most once per job (the provider's ledger), and exactly
  once for every acked job;
- ``check_history``: no two claims of a job overlapped, no stale claim had an operation
  accepted, nothing vanished.

A model check that cannot fail checks nothing, so the script also runs the same test on
a subtly broken handler, whose key includes the attempt number, and shows the shortest
scenario Hypothesis finds that charges an order twice.

Settings are bounded and derandomized (the same scenarios on every run, no example
database written), so the script runs in seconds. Copy ``model_check`` and the
``Scenario`` strategy into your test suite and replace ``ChargeHandler`` with yours.

Run it with ``python examples/model_check_a_handler.py`` (needs Hypothesis:
``pip install 'alkstore_trio[testing]'``).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, Protocol

import hypothesis.strategies as st
import trio
import trio.testing
from hypothesis import HealthCheck, Phase, example, given, settings

from alkstore_trio import Fail, Job, Queue, QueueOpts, Retry, Worker, open_store
from alkstore_trio.testing import HistoryRecorder, TrioClock, read_final_state

# --- the code under test: a provider client and the handler ---------------------------


class ProviderUnavailable(Exception):
    """The provider could not be reached, or the connection broke: worth retrying."""


class CardDeclined(Exception):
    """The provider refused the charge: retrying cannot help."""


class Provider(Protocol):
    async def charge(self, *, idempotency_key: str, order: str, cents: int) -> None: ...


class ChargeHandler:
    """The handler under test: charge the order a job describes, exactly once.

    The idempotency key is the job's id: the same on every attempt, so a retry after a
    charge whose answer was lost (or a second worker running the job after a lapsed
    lease) moves no money twice.
    """

    def __init__(self, provider: Provider) -> None:
        self.provider = provider

    def idempotency_key(self, job: Job) -> str:
        return f"job-{job.id}"

    async def __call__(self, job: Job) -> None:
        try:
            request = json.loads(job.payload)
            order, cents = str(request["order"]), int(request["cents"])
        except (ValueError, KeyError, TypeError):
            raise Fail("payload is not JSON with 'order' and 'cents'") from None
        try:
            await self.provider.charge(
                idempotency_key=self.idempotency_key(job), order=order, cents=cents
            )
        except CardDeclined as exc:
            raise Fail(f"CardDeclined: {exc}") from None
        except ProviderUnavailable as exc:
            raise Retry(error=f"ProviderUnavailable: {exc}") from None  # the queue's backoff


class KeyPerAttemptHandler(ChargeHandler):
    """A subtly broken handler: its key changes with every attempt, so the provider
    cannot recognise a retry of a charge that already went through."""

    def idempotency_key(self, job: Job) -> str:
        return f"job-{job.id}-attempt-{job.attempts}"


# --- the environment: a provider with a ledger, and the faults it injects -------------

#: What the provider does on one call.
Fault = Literal["ok", "unreachable", "reset_after_charge", "stall", "decline"]
#: What happens to the infrastructure at some instant.
Disruption = Literal["pause", "restart"]

VISIBILITY_TIMEOUT_S = 30.0
JOB_TIMEOUT_S = 60.0
MAX_ATTEMPTS = 4
#: The most mock seconds a scenario may take before its jobs count as stuck.
SETTLE_LIMIT_S = 3600.0


@dataclass
class LedgerProvider:
    """Stands for the payment provider: records each charge, and honours idempotency
    keys (a charge with a known key moves no money). ``ledger`` is the money moved."""

    ledger: dict[str, str] = field(default_factory=dict)  # idempotency key -> order

    async def charge(self, *, idempotency_key: str, order: str, cents: int) -> None:
        await trio.sleep(0.2)  # the network round trip (mock time)
        self.ledger.setdefault(idempotency_key, order)

    def charges_per_order(self) -> Counter[str]:
        return Counter(self.ledger.values())


@dataclass
class FaultyProvider:
    """Wraps the provider; its ``n``-th call for an order does ``plan[order][n]``."""

    real: LedgerProvider
    plan: dict[str, tuple[Fault, ...]]
    calls: Counter[str] = field(default_factory=Counter)

    async def charge(self, *, idempotency_key: str, order: str, cents: int) -> None:
        faults = self.plan.get(order, ())
        number = self.calls[order]
        self.calls[order] += 1
        fault = faults[number] if number < len(faults) else "ok"
        if fault == "unreachable":
            await trio.sleep(1)
            raise ProviderUnavailable("connect timeout")
        if fault == "decline":
            raise CardDeclined("insufficient funds")
        if fault == "stall":
            await trio.sleep(10 * JOB_TIMEOUT_S)  # the worker's job_timeout_s cancels it
        await self.real.charge(idempotency_key=idempotency_key, order=order, cents=cents)
        if fault == "reset_after_charge":
            raise ProviderUnavailable("connection reset before the answer")


class SkewedClock(TrioClock):
    """The store's clock: trio's (mock) clock plus a skew that ``pause`` moves forward,
    as if every worker had frozen for longer than a lease."""

    def __init__(self) -> None:
        super().__init__()
        self.skew = timedelta()

    def now(self) -> datetime:
        return super().now() + self.skew


# --- scenarios ------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """What Hypothesis draws: the orders (cents, provider faults per call) and the
    infrastructure's disruptions (mock seconds after the start, what)."""

    orders: tuple[tuple[int, tuple[Fault, ...]], ...]
    disruptions: tuple[tuple[float, Disruption], ...]


FAULTS: tuple[Fault, ...] = ("ok", "unreachable", "reset_after_charge", "stall", "decline")

scenarios = st.builds(
    Scenario,
    orders=st.lists(
        st.tuples(
            st.sampled_from([500, 1250, 9900]),
            st.lists(st.sampled_from(FAULTS), max_size=MAX_ATTEMPTS).map(tuple),
        ),
        min_size=1,
        max_size=5,
    ).map(tuple),
    disruptions=st.lists(
        st.tuples(
            # Half-second offsets keep disruptions off the instants where the workers
            # poll, heartbeat and retry (mostly whole seconds and steps of 0.2 s), so
            # that a scenario replays the same way when Hypothesis shrinks it.
            st.integers(0, 119).map(lambda s: s + 0.5),
            st.sampled_from(["pause", "restart"]),
        ),
        max_size=3,
    ).map(lambda items: tuple(sorted(items))),
)


PAUSE_DURING_A_STALL = Scenario(
    orders=((500, ("stall", "reset_after_charge")), (1250, ("unreachable",)), (9900, ())),
    disruptions=((10.5, "pause"),),
)
RESTART_DURING_A_STALL = Scenario(
    orders=((500, ("stall",)), (1250, ("stall", "stall")), (9900, ("decline",))),
    disruptions=((20.5, "restart"),),
)


# --- one run, and its invariants ------------------------------------------------------


@dataclass
class RunResult:
    """What a run did (summed over runs by the checks' summary)."""

    runs: int = 1
    workers: int = 0
    claims: int = 0
    acked: int = 0
    dead: int = 0
    lease_lost: int = 0


async def settled(queue: Queue, ids: list[int]) -> bool:
    """Whether every job is acked (gone) or dead."""
    for job_id in ids:
        job = await queue.get_job(job_id)
        if job is not None and job.state != "dead":
            return False
    return True


async def run_scenario(
    scenario: Scenario, make_handler: Callable[[Provider], ChargeHandler]
) -> RunResult:
    """Run the scenario under two workers and check every invariant (AssertionError)."""
    provider = LedgerProvider()
    orders = {f"order-{n}": cents for n, (cents, _) in enumerate(scenario.orders)}
    plan = {f"order-{n}": faults for n, (_, faults) in enumerate(scenario.orders)}
    handler = make_handler(FaultyProvider(provider, plan))
    clock = SkewedClock()
    recorder = HistoryRecorder()
    workers: list[Worker] = []  # every worker started
    running: list[Worker] = []  # those not stopped yet
    async with open_store("memory://", clock=clock) as store:
        opts = QueueOpts(
            visibility_timeout_s=VISIBILITY_TIMEOUT_S, max_attempts=MAX_ATTEMPTS, backoff_base_s=2
        )
        queue = store.queue("payments", opts)
        payloads = [json.dumps({"order": o, "cents": c}).encode() for o, c in orders.items()]
        ids = await queue.enqueue_many(payloads)
        order_of = dict(zip(ids, orders, strict=True))

        async with trio.open_nursery() as nursery:

            async def start_worker(name: str) -> None:
                worker = Worker(
                    store,
                    {queue: handler},
                    worker_id=name,
                    concurrency=2,
                    poll_interval_s=5,
                    job_timeout_s=JOB_TIMEOUT_S,
                    shutdown_grace_s=5,
                )
                workers.append(worker)
                running.append(worker)
                await nursery.start(recorder.record_worker, worker)  # before run()
                await nursery.start(worker.run)

            await start_worker("w1")
            await start_worker("w2")
            for at_s, disruption in scenario.disruptions:
                await trio.sleep_until(at_s)
                if disruption == "pause":
                    clock.skew += timedelta(seconds=VISIBILITY_TIMEOUT_S + 1)
                else:  # stop the oldest running worker gracefully, start a replacement
                    running.pop(0).stop()
                    await start_worker(f"w{len(workers) + 1}")
            with trio.move_on_after(SETTLE_LIMIT_S):
                while not await settled(queue, ids):  # noqa: ASYNC110 - polls the store
                    await trio.sleep(10)
            for worker in running:
                worker.stop()
        final = await read_final_state([queue], ids)

    # 1. Every job ends acked or dead.
    assert not final.live, f"jobs {sorted(final.live)} never settled"
    # 2. The side effect happened at most once per job, exactly once per acked job.
    charges = provider.charges_per_order()
    twice = {order: n for order, n in charges.items() if n > 1}
    assert not twice, f"orders charged more than once: {twice}"
    for job_id in set(ids) - final.dead:  # acked
        assert charges[order_of[job_id]] == 1, f"job {job_id} was acked but never charged"
    # 3. The history of every claim keeps the queue's rules.
    report = recorder.check(enqueued=ids, final=final)
    report.assert_ok()
    return RunResult(
        workers=len(workers),
        claims=report.claims,
        acked=report.acked,
        dead=len(final.dead),
        lease_lost=sum(w.statistics().lease_lost for w in workers),
    )


# --- the Hypothesis test --------------------------------------------------------------


def model_check(
    make_handler: Callable[[Provider], ChargeHandler],
    *,
    max_examples: int,
    totals: RunResult,
    always: tuple[Scenario, ...] = (),
) -> Callable[[], None]:
    """A Hypothesis test of ``make_handler``'s handler: ``max_examples`` drawn
    scenarios, plus the ``always`` ones. Each is one trio run under a ``MockClock``
    (timeouts, leases and backoff take no real time)."""

    def test_charge_handler_keeps_its_invariants(scenario: Scenario) -> None:
        clock = trio.testing.MockClock(autojump_threshold=0)
        result = trio.run(run_scenario, scenario, make_handler, clock=clock)
        totals.runs += result.runs
        totals.workers += result.workers
        totals.claims += result.claims
        totals.acked += result.acked
        totals.dead += result.dead
        totals.lease_lost += result.lease_lost

    test = test_charge_handler_keeps_its_invariants
    for scenario in always:  # as @example(scenario=...) decorators would
        test = example(scenario=scenario)(test)
    return settings(
        max_examples=max_examples,
        derandomize=True,  # the same scenarios on every run: CI is deterministic
        database=None,  # no example database: every run starts from the same scenarios
        deadline=None,
        report_multiple_bugs=False,
        # Find and shrink failures; skip the slow "explain" phase (it traces coverage).
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=[HealthCheck.too_slow],
    )(given(scenario=scenarios)(test))


def run_checks() -> None:
    # The workers log every failed attempt; this script only wants the verdicts.
    logging.getLogger("alkstore_trio").setLevel(logging.CRITICAL)

    # Scenarios checked whatever Hypothesis draws: a pause while a stalled call holds
    # its claim (the lease is lost under the running handler, the job is reclaimed), and
    # a worker replaced while it holds claims.
    always = (PAUSE_DURING_A_STALL, RESTART_DURING_A_STALL)
    totals = RunResult(runs=0)
    model_check(ChargeHandler, max_examples=40, totals=totals, always=always)()
    print(
        f"ChargeHandler: {totals.runs} scenarios passed ({totals.workers} workers, "
        f"{totals.claims} claims, {totals.acked} jobs acked, {totals.dead} dead, "
        f"{totals.lease_lost} leases lost under running handlers)"
    )
    assert totals.runs == 40 + len(always)
    assert totals.lease_lost > 0

    # The broken handler, on drawn scenarios only: Hypothesis finds a double charge and
    # shrinks it to the shortest scenario that shows it.
    try:
        model_check(KeyPerAttemptHandler, max_examples=40, totals=RunResult(runs=0))()
    except AssertionError as exc:
        reason = str(exc).splitlines()[0]
        shrunk = [note for note in getattr(exc, "__notes__", []) if "Scenario(" in note]
        print(f"KeyPerAttemptHandler: caught, as it should be: {reason}")
        for note in shrunk:
            print("  " + note.replace("\n", "\n  "))
        assert shrunk, "Hypothesis did not report the failing scenario"
    else:
        raise AssertionError("the model check missed the broken handler")


async def main() -> None:
    # Each Hypothesis example is a trio run of its own (under a MockClock), and trio
    # runs do not nest: run the checks in a thread.
    await trio.to_thread.run_sync(run_checks)


if __name__ == "__main__":
    trio.run(main)
