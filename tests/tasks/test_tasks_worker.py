"""T5-T6: a worker serving a registry: routing by task name, dead-lettering what cannot
run (not an envelope, an unknown task, arguments that do not decode), timeout_s, periodic
tasks, and results. The memory-engine tests run on trio's MockClock (autojump) with the
store on TrioClock: nothing sleeps for real. One test runs the routing on PostgreSQL."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest
import trio
from _worker_run import running

from alkstore_trio import Fail, InvalidArgument, Periodic, Worker, open_store
from alkstore_trio.testing import TrioClock


@dataclasses.dataclass
class Point:
    x: int
    y: int


@pytest.fixture
async def store(autojump_clock):
    async with open_store("memory://", clock=TrioClock()) as opened:
        yield opened


async def wait_until(predicate, *, step=0.1, limit=600.0):
    deadline = trio.current_time() + limit
    while not await predicate():
        assert trio.current_time() < deadline, "condition never became true"
        await trio.sleep(step)


def registry(seen):
    from alkstore_trio import Tasks

    tasks = Tasks()

    @tasks.task(name="greet", queue="shared")
    async def greet(name: str, at: datetime) -> None:
        seen.append(("greet", name, at))

    @tasks.task(name="move", queue="shared")
    async def move(to: Point, steps: list[int]) -> int:
        seen.append(("move", to, steps))
        return sum(steps)

    @tasks.task(name="refuse", queue="other")
    async def refuse(reason: str) -> None:
        raise Fail(reason)

    return tasks, greet, move, refuse


async def settled(store, queue):
    (counts,) = (await store.stats(queue)).queues
    return counts.pending_ready + counts.pending_delayed + counts.processing == 0


async def test_t5_a_worker_routes_each_job_of_a_shared_queue_by_task_name(autojump_clock, store):
    seen = []
    tasks, greet, move, refuse = registry(seen)
    at = datetime(2026, 5, 1, tzinfo=UTC)
    await greet.defer(store, name="ada", at=at)
    await move.defer(store, to=Point(1, 2), steps=[3, 4])
    await refuse.defer(store, reason="no")
    worker = Worker(store, tasks)
    assert {queue.name for queue in worker.queues} == {"shared", "other"}
    async with running(worker):
        await wait_until(lambda: settled(store, "shared"))
        await wait_until(lambda: settled(store, "other"))
    assert sorted(seen, key=lambda s: s[0]) == [
        ("greet", "ada", at),
        ("move", Point(1, 2), [3, 4]),
    ]
    (dead,) = await store.queue("other").list_jobs("dead")
    assert dead.last_error == "no"


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (
            b'{"v":1,"task":"gone","args":{}}',
            "unknown task 'gone': this worker's registry has no task of that name "
            "(tasks of queue 'shared': greet, move)",
        ),
        (b"not json", "queue 'shared': the payload is not a task envelope"),
        (b'{"task":"greet","args":{}}', "queue 'shared': the payload is not a task envelope"),
        (b'{"v":2,"task":"greet","args":{}}', "queue 'shared': the task envelope has version 2"),
        (
            b'{"v":1,"task":"move","args":{"to":{"x":1},"steps":[]}}',
            "task 'move': the job's arguments do not decode (missing required argument "
            "`y` - at `to`)",
        ),
        (
            b'{"v":1,"task":"greet","args":{"name":"a","at":"yesterday"}}',
            "task 'greet': the job's arguments do not decode (Invalid RFC3339",
        ),
    ],
)
async def test_t5_what_cannot_run_is_dead_lettered_and_the_worker_goes_on(
    autojump_clock, store, payload, error
):
    seen = []
    tasks, greet, _, _ = registry(seen)
    queue = store.queue("shared")
    bad = await queue.enqueue(payload, max_attempts=5)
    await greet.defer(store, name="after", at=datetime(2026, 1, 1, tzinfo=UTC))
    async with running(Worker(store, tasks)):
        await wait_until(lambda: settled(store, "shared"))
    (dead,) = await queue.list_jobs("dead")
    assert dead.id == bad
    assert dead.attempts == 1  # dead at once: no retry could make it run
    assert dead.last_error.startswith(error), dead.last_error
    assert [s[1] for s in seen] == ["after"]


async def test_t5_timeout_s_cancels_the_function_retries_the_job_and_counts_a_timeout(
    autojump_clock, store
):
    from alkstore_trio import Tasks

    tasks = Tasks()
    runs = []

    @tasks.task(name="slow", queue="slow", timeout_s=2, max_attempts=2)
    async def slow(seconds: float) -> None:
        runs.append(trio.current_time())
        await trio.sleep(seconds)

    await slow.defer(store, seconds=5)
    worker = Worker(store, tasks)
    events = []

    async def watch(channel):
        async for event in channel:  # ends after the worker's stop
            if event.kind in ("timeout", "handler_error"):
                events.append((event.kind, event.error))

    with worker.events() as channel:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, channel)
            async with running(worker):
                await wait_until(lambda: settled(store, "slow"))
    (dead,) = await store.queue("slow").list_jobs("dead")
    assert dead.last_error == "task 'slow' timed out after 2s (timeout_s)"
    assert len(runs) == 2
    # Counted and reported as a timeout, as the worker's own job_timeout_s is.
    stats = worker.statistics()
    assert (stats.timed_out, stats.handler_errors) == (2, 0)
    assert events == [("timeout", "task 'slow' timed out after 2s (timeout_s)")] * 2


async def test_t5_a_worker_fires_the_registry_periodic_tasks(autojump_clock, store):
    from alkstore_trio import Tasks

    tasks = Tasks()
    ticks = []

    @tasks.task(name="tick", queue="ticks", every_s=60, schedule_args={"label": "minute"})
    async def tick(label: str) -> None:
        ticks.append(label)

    @tasks.task(name="nightly", queue="ticks", cron=None, every_s=86400, catch_up=3)
    async def nightly() -> None: ...

    schedule, backfilled = tasks.periodic
    assert (schedule.name, schedule.queue, schedule.every_s) == ("tick", "ticks", 60)
    assert (schedule.catch_up, backfilled.catch_up) == (1, 3)  # Q17.5: "one" is 1
    async with running(Worker(store, tasks)):
        await wait_until(lambda: _at_least(ticks, 2), step=5, limit=3600)
    assert ticks[:2] == ["minute", "minute"]


async def _at_least(items, n):
    return len(items) >= n


async def test_t5_a_schedule_name_given_twice_is_invalid_argument(autojump_clock, store):
    from alkstore_trio import Tasks

    tasks = Tasks()

    @tasks.task(name="tick", queue="ticks", every_s=60)
    async def tick() -> None: ...

    with pytest.raises(InvalidArgument, match="names the schedule 'tick' twice"):
        Worker(store, tasks, periodic=[Periodic("tick", "ticks", every_s=5)])


async def test_t5_a_registry_mixes_with_plain_handlers(autojump_clock, store):
    seen = []
    tasks, greet, _, _ = registry(seen)
    raw = []

    async def handle(job):
        raw.append(job.payload)

    await store.queue("raw").enqueue(b"bytes")
    await greet.defer(store, name="x", at=datetime(2026, 1, 1, tzinfo=UTC))
    async with running(Worker(store, {**tasks, "raw": handle})):
        await wait_until(lambda: settled(store, "raw"))
        await wait_until(lambda: settled(store, "shared"))
    assert raw == [b"bytes"]
    assert [s[1] for s in seen] == ["x"]


async def test_t6_the_router_returns_the_encoded_result_and_the_task_decodes_it(
    autojump_clock, store
):
    seen = []
    tasks, _, move, _ = registry(seen)
    await move.defer(store, to=Point(0, 0), steps=[1, 2, 3])
    (handle,) = await store.queue("shared").claim_batch("test", 1)
    result = await tasks["shared"](handle.job)
    assert result == b"6"
    assert move.decode_result(result) == 6
    with pytest.raises(InvalidArgument, match="does not decode into its return type"):
        move.decode_result(b'"six"')
    assert (
        await tasks["other"](
            await _claim(
                store,
                "other",
                b'{"v":1,"task":"greet","args":{"name":"n","at":"2026-01-01T00:00:00Z"}}',
            )
        )
        is None
    )


async def _claim(store, queue, payload):
    await store.queue(queue).enqueue(payload)
    (handle,) = await store.queue(queue).claim_batch("test", 1)
    return handle.job


async def test_t6_a_return_value_that_does_not_encode_fails_the_job(autojump_clock, store):
    from alkstore_trio import Tasks

    tasks = Tasks()

    @tasks.task(name="odd", queue="q")
    async def odd() -> object:
        return object()

    await odd.defer(store)
    async with running(Worker(store, tasks)):
        await wait_until(lambda: settled(store, "q"))
    (dead,) = await store.queue("q").list_jobs("dead")
    assert dead.last_error.startswith("task 'odd': its return value does not encode")


async def test_t5_routing_on_postgresql(pg_dsn, schema):
    seen = []
    tasks, greet, move, _ = registry(seen)
    async with open_store(pg_dsn, schema=schema, migrate="apply") as store:
        at = datetime(2026, 5, 1, tzinfo=UTC)
        await greet.defer(store, name="pg", at=at)
        await move.defer(store, to=Point(5, 6), steps=[])
        await store.queue("shared").enqueue(
            json.dumps({"v": 1, "task": "nope", "args": {}}).encode()
        )
        async with running(Worker(store, tasks, poll_interval_s=0.05)):
            await wait_until(lambda: settled(store, "shared"), limit=30)
        (dead,) = await store.queue("shared").list_jobs("dead")
    assert dead.last_error.startswith("unknown task 'nope'")
    assert sorted(seen, key=lambda s: s[0]) == [("greet", "pg", at), ("move", Point(5, 6), [])]
