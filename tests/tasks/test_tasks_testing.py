"""T8: alkstore_trio.testing's helpers for tasks: perform, drain (retries included, on a
ManualClock), enqueued_jobs and assert_enqueued."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from alkstore_trio import Fail, InvalidArgument, Retry, Tasks
from alkstore_trio.testing import assert_enqueued, drain, enqueued_jobs, perform


class Flaky(Exception):
    pass


def make_tasks(log):
    tasks = Tasks()

    @tasks.task(name="add", queue="math")
    async def add(a: int, b: int) -> int:
        log.append(("add", a, b))
        return a + b

    @tasks.task(name="flaky", queue="math", max_attempts=3)
    async def flaky(fails: int) -> None:
        log.append(("flaky", fails))
        if sum(1 for entry in log if entry[0] == "flaky") <= fails:
            raise Flaky("down")

    @tasks.task(name="later", queue="other", delay_s=3600)
    async def later(at: datetime) -> None:
        log.append(("later", at))

    @tasks.task(name="choose", queue="other")
    async def choose(how: str) -> None:
        if how == "retry":
            raise Retry(delay_s=5, error="again")
        if how == "fail":
            raise Fail("never")

    return tasks, add, flaky, later, choose


async def test_t8_perform_runs_one_call_inline_with_the_worker_outcome_mapping():
    log = []
    _, add, flaky, _, choose = make_tasks(log)
    done = await perform(add, 2, b=3)
    assert (done.outcome, done.value, done.error, done.job_id) == ("ack", 5, None, None)
    retried = await perform(flaky, fails=1)
    assert (retried.outcome, retried.error, retried.delay_s) == ("retry", "Flaky: down", None)
    assert isinstance(retried.exception, Flaky)
    assert (await perform(choose, how="retry")).outcome == "retry"
    assert (await perform(choose, how="retry")).delay_s == 5
    failed = await perform(choose, how="fail")
    assert (failed.outcome, failed.error) == ("fail", "never")
    with pytest.raises(InvalidArgument, match="Expected `int`, got `str`"):
        await perform(add, a="2", b=3)
    assert log == [("add", 2, 3), ("flaky", 1)]


async def test_t8_drain_runs_everything_due_including_retries_on_the_manual_clock(
    memory_store, clock
):
    log = []
    tasks, add, flaky, later, _ = make_tasks(log)
    start = clock.now()
    await add.defer(memory_store, a=1, b=2)
    await flaky.defer(memory_store, fails=2)
    await later.defer(memory_store, at=start)
    outcomes = await drain(memory_store, tasks, clock=clock)
    assert [(o.task, o.outcome, o.dead) for o in outcomes] == [
        ("add", "ack", False),
        ("flaky", "retry", False),
        ("flaky", "retry", False),
        ("flaky", "ack", False),
        ("later", "ack", False),
    ]
    assert outcomes[0].value == 3
    assert clock.now() - start >= timedelta(seconds=3600)
    assert await enqueued_jobs(memory_store, "math") == []


async def test_t8_drain_reports_a_job_retried_to_its_last_attempt_as_dead(memory_store, clock):
    log = []
    tasks, _, flaky, _, choose = make_tasks(log)
    await flaky.defer(memory_store, fails=10)
    await choose.defer(memory_store, how="fail")
    await memory_store.queue("other").enqueue(b"junk")
    outcomes = await drain(memory_store, tasks, clock=clock)
    by_task = [(o.task, o.outcome, o.dead) for o in outcomes]
    assert by_task.count(("flaky", "retry", False)) == 2
    assert ("flaky", "retry", True) in by_task
    assert ("choose", "fail", True) in by_task
    (junk,) = [o for o in outcomes if o.task is None]
    assert (junk.outcome, junk.dead) == ("fail", True)
    assert "not a task envelope" in junk.error
    assert len(await memory_store.queue("math").list_jobs("dead")) == 1


async def test_t8_drain_without_a_clock_runs_only_what_is_due_now(memory_store):
    log = []
    tasks, _, flaky, later, _ = make_tasks(log)
    await flaky.defer(memory_store, fails=1)
    await later.defer(memory_store, at=datetime(2026, 1, 1, tzinfo=UTC))
    outcomes = await drain(memory_store, tasks)
    assert [(o.task, o.outcome) for o in outcomes] == [("flaky", "retry")]
    assert len(await enqueued_jobs(memory_store, flaky)) == 1
    assert len(await enqueued_jobs(memory_store, later)) == 1


async def test_t8_drain_stops_a_task_that_retries_forever(memory_store, clock):
    tasks = Tasks()

    @tasks.task(name="forever", queue="q", max_attempts=1000)
    async def forever() -> None:
        raise Retry(delay_s=1)

    await forever.defer(memory_store)
    with pytest.raises(RuntimeError, match="drain ran 10 jobs"):
        await drain(memory_store, tasks, clock=clock, max_runs=10)
    assert len(await enqueued_jobs(memory_store, forever)) == 1


async def test_t8_enqueued_jobs_and_assert_enqueued_match_the_typed_arguments(memory_store):
    log = []
    _, add, _, later, _ = make_tasks(log)
    at = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)
    await add.defer(memory_store, a=1, b=2)
    await add.defer(memory_store, a=1, b=3)
    await later.defer(memory_store, at=at)
    await memory_store.queue("math").enqueue(b"raw bytes")
    assert len(await enqueued_jobs(memory_store, add)) == 2
    assert len(await enqueued_jobs(memory_store, add, a=1)) == 2
    assert len(await enqueued_jobs(memory_store, add, a=1, b=3)) == 1
    assert len(await enqueued_jobs(memory_store, "math")) == 3
    assert len(await enqueued_jobs(memory_store, "math", b=2)) == 1
    job = await assert_enqueued(memory_store, later, at=at)
    assert job.queue == "other"
    assert await assert_enqueued(memory_store, "other", at="2026-03-04T05:06:00Z") == job
    with pytest.raises(AssertionError) as raised:
        await assert_enqueued(memory_store, add, a=1, b=4)
    message = str(raised.value)
    assert "no pending job of task 'add' with a, b as given" in message
    assert "add" in message
    assert "(not a task envelope)" in message
    assert "3" not in message.split("first 20")[1].replace("#3", "")  # no argument values
    with pytest.raises(InvalidArgument, match="not parameters of task 'add'"):
        await enqueued_jobs(memory_store, add, c=1)
