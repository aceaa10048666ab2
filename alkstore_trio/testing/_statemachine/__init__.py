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

Layout: ``_steps.py`` holds the step records, ``_drawing.py`` the strategies that draw
them, ``_run.py`` the run that applies each step to the engine and to the model (one
method per kind of step) and compares them; this module drives a run and builds the
ready-made test.

Hypothesis is imported here, and this module is imported by
``alkstore_trio.testing`` only when one of its names is first used, so the rest of
``alkstore_trio.testing`` works without Hypothesis installed.
"""

from __future__ import annotations

import random
from functools import partial
from typing import TYPE_CHECKING

import hypothesis.strategies as st
import trio
from hypothesis import HealthCheck, event, given, note, settings

from ..._core import QueueOpts
from .._model import ReferenceModel
from ._periodic_steps import dst_start_offsets  # Q17.7
from ._run import Disagreement, _Outcome, _Run
from ._steps import (
    AckBatch,
    AckHandles,
    AckHandlesAndClaim,
    AdvanceTo,
    Claim,
    FailHandles,
    HeartbeatHandles,
    RetryHandles,
    Sweep,
    Tx,
    _Step,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..._store import Queue
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
            keep_completed_s=0,  # Q19.2: kept, purgeable one instant after its ack
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
            keep_completed_s=30,
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
            keep_completed_s=8,  # Q19.2: alpha's rows are kept or not by their stamp
        ),
    ),
)


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
        # Q17.7: maybe start an hour before a daylight-saving change (the store is empty).
        start = await harness.now()
        await harness.advance(data.draw(st.sampled_from(dst_start_offsets(start)), label="start"))
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
