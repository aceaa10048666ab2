"""The in-memory engine, driven through the public API, agrees with the reference model
(Q1-Q10) under random operation sequences; see ``alkstore_trio.testing._statemachine`` (package)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from _figures import run_counting_examples

from alkstore_trio.testing import MemoryHarness, ReferenceModel, engine_vs_model_test

STEPS = 50
# 100 examples of 50 steps each in the default run (1000 under ``-m slow``), every step
# followed by get_job of every id on every queue.
_agree = engine_vs_model_test(MemoryHarness, steps=STEPS, max_examples=100)
_agree_long = engine_vs_model_test(MemoryHarness, steps=STEPS, max_examples=1000)


def test_q1_q10_memory_engine_agrees_with_the_reference_model(figures) -> None:
    examples = run_counting_examples(_agree)
    figures.record(examples=examples, steps_per_example=STEPS)


@pytest.mark.slow
def test_q1_q18_memory_engine_agrees_with_the_reference_model_long(figures) -> None:
    examples = run_counting_examples(_agree_long)
    figures.record(examples=examples, steps_per_example=STEPS)


async def test_q8_run_at_given_in_another_timezone_reads_back_as_utc() -> None:
    """Q8: "Timestamps are timezone-aware UTC datetimes", whatever zone run_at was given in."""
    harness = MemoryHarness()
    plus_two = timezone(timedelta(hours=2))
    run_at = datetime(2000, 1, 1, 5, tzinfo=plus_two)
    async with harness.open_store() as store:
        queue = store.queue("alpha")
        job_id = await queue.enqueue(b"x", run_at=run_at)
        job = await queue.get_job(job_id)
    assert job is not None
    assert job.run_at == run_at
    assert job.run_at.utcoffset() == timedelta(0)
    model = ReferenceModel()
    model.enqueue("alpha", b"x", run_at=run_at, now=datetime(2000, 1, 1, tzinfo=UTC))
    model_job = model.get_job("alpha", 1)
    assert model_job is not None
    assert model_job.run_at.utcoffset() == timedelta(0)
