"""Test helpers for typed tasks (T8), after Oban.Testing and rivertest: what was
deferred (:func:`enqueued_jobs`, :func:`assert_enqueued`), running one task inline as a
worker would (:func:`perform`), and running everything due, retries included, on a
manual clock (:func:`drain`). They need the ``tasks`` extra (msgspec)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypeVar, final

import msgspec

from .._errors import InvalidArgument
from .._runtime import Fail, Retry
from .._runtime._events import describe, error_text
from .._store import Store
from .._tasks import Task, Tasks
from .._tasks._codec import EnvelopeError, read_header

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._core import Job
    from .._store import Queue
    from ._clock import ManualClock

P = ParamSpec("P")
R = TypeVar("R")

#: A handler's outcome, as the worker settles it (R5).
OutcomeKind = Literal["ack", "retry", "fail"]

#: The jobs one :func:`drain` claims at once per queue.
_DRAIN_BATCH = 100


@final
@dataclass(frozen=True, slots=True)
class TaskOutcome(Generic[R]):
    """What one run of a task came to, mapped as the worker maps it (R5): returned ->
    ``"ack"``; :class:`~alkstore_trio.Retry` or any other exception -> ``"retry"``
    (with the error text the worker would store); :class:`~alkstore_trio.Fail` ->
    ``"fail"``.

    Attributes:
        task: The task's name (``None`` when the payload named none: not an envelope).
        outcome: ``"ack"``, ``"retry"`` or ``"fail"``.
        error: The ``last_error`` the worker would store (``None`` on ack).
        delay_s: A ``Retry``'s ``delay_s`` (``None``: the backoff curve).
        value: What the task returned, after the encode and decode a stored result goes
            through (``None`` when it declares no result or did not return).
        job_id: The job's id (:func:`drain`), or ``None`` (:func:`perform`).
        dead: Whether the job ended in the dead letters (a fail, or a retry on its last
            attempt); always ``False`` for :func:`perform`, which has no job.
        exception: The exception the task raised, if any.
    """

    task: str | None
    outcome: OutcomeKind
    error: str | None = None
    delay_s: float | None = None
    value: R | None = None
    job_id: int | None = None
    dead: bool = False
    exception: BaseException | None = None


async def perform(task: Task[P, R], /, *args: P.args, **kwargs: P.kwargs) -> TaskOutcome[R]:
    """Run one call of ``task`` here and now, as a worker would run its job (T8): the
    arguments are checked as :meth:`Task.defer` checks them, go through the envelope and
    are decoded into the annotated types, and the outcome is mapped as the worker maps it.
    No store, no job.

    Example::

        outcome = await perform(send_email, to="ada@example.com", subject="hi")
        assert outcome.outcome == "ack"

    Raises:
        InvalidArgument: the arguments do not fit the task (as ``defer`` raises).
    """
    payload = task.payload(*args, **kwargs)
    header = read_header(payload)
    outcome, _ = await _outcome(task, lambda: task.run_args(header.args), task.name)
    return outcome


async def drain(
    store: Store,
    tasks: Tasks,
    *,
    clock: ManualClock | None = None,
    max_runs: int = 10_000,
    worker_id: str = "alkstore-testing-drain",
) -> list[TaskOutcome[Any]]:
    """Run every due job of the registry's queues until none is left (T8), settling each
    as the worker does; returns the outcomes in the order the jobs ran.

    With a :class:`ManualClock` (the one the store was opened with), jobs that are not
    due yet — delayed ones and retries waiting for their backoff — are made due by
    advancing the clock to the next one, so a job retried until it is dead runs all its
    attempts. Without one, only the jobs due now run (a retry waits for a later drain).

    Args:
        store: The store the jobs are in (a memory store in most tests).
        tasks: The registry whose queues are drained; each job runs through the
            registry's router (an unknown task is dead-lettered, as in a worker).
        clock: The store's :class:`ManualClock`, to advance to the next due job.
        max_runs: The most jobs run before giving up (>= 1): a task that retries
            forever stops the drain with ``RuntimeError`` rather than hang the test.
        worker_id: The ``claimed_by`` of the drain's claims.

    Raises:
        RuntimeError: more than ``max_runs`` jobs ran.
        InvalidArgument: an argument is invalid.
    """
    if not isinstance(store, Store):
        raise InvalidArgument(f"store must be a Store; got {type(store).__name__}")
    if not isinstance(tasks, Tasks):
        raise InvalidArgument(f"tasks must be a Tasks registry; got {type(tasks).__name__}")
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
        raise InvalidArgument(f"max_runs must be an int >= 1; got {max_runs!r}")
    queues = [store.queue(name) for name in tasks]
    outcomes: list[TaskOutcome[Any]] = []
    while True:
        ran = False
        for queue in queues:
            for handle in await queue.claim_batch(worker_id, _DRAIN_BATCH):
                if len(outcomes) >= max_runs:
                    await handle.retry("drain stopped: max_runs reached", delay_s=0)
                    raise RuntimeError(
                        f"drain ran {max_runs} jobs and more are due (a task that retries "
                        "forever?); raise max_runs if that many are expected"
                    )
                outcomes.append(await _run_job(tasks, handle))
                ran = True
        if ran:
            continue
        if clock is None or not await _advance_to_next_due(queues, clock):
            return outcomes


async def _advance_to_next_due(queues: list[Queue], clock: ManualClock) -> bool:
    """Advance ``clock`` to the earliest not-yet-due job of ``queues``; whether there was
    one."""
    waits = [wait for queue in queues if (wait := await queue.next_due_in_s()) is not None]
    if not waits or min(waits) <= 0:
        # Nothing delayed; or something due that no claim returned (a paused queue, a
        # limit): advancing the clock would not make it run.
        return False
    clock.advance(min(waits))
    return True


async def _run_job(tasks: Tasks, handle: Any) -> TaskOutcome[Any]:
    """Run one claimed job through its queue's router and settle it as the worker does."""
    job: Job = handle.job
    try:
        name: str | None = read_header(job.payload).task
    except EnvelopeError:
        name = None
    task = None if name is None else tasks.get_task(name)
    router = tasks[job.queue]
    outcome, result = await _outcome(task, lambda: router(job), name)
    last = job.attempts >= job.max_attempts
    if outcome.outcome == "ack":
        # Q19.1 as the worker settles: a kept job's ack stores the result bytes.
        await handle.ack(result=result if job.keep_completed_s is not None else None)
    elif outcome.outcome == "fail":
        await handle.fail(outcome.error)
    else:
        await handle.retry(outcome.error, outcome.delay_s)
    dead = outcome.outcome == "fail" or (outcome.outcome == "retry" and last)
    return TaskOutcome(
        outcome.task,
        outcome.outcome,
        outcome.error,
        outcome.delay_s,
        outcome.value,
        job.id,
        dead,
        outcome.exception,
    )


async def _outcome(
    task: Task[..., Any] | None, run: Callable[[], Awaitable[Any]], name: str | None
) -> tuple[TaskOutcome[Any], bytes | None]:
    """R5's mapping of how ``run`` ended, with the value decoded from the result bytes;
    and those bytes (``None``: none)."""
    try:
        result = await run()
    except Retry as exc:
        return TaskOutcome(name, "retry", error_text(exc.error), exc.delay_s, exception=exc), None
    except Fail as exc:
        return TaskOutcome(name, "fail", error_text(exc.error), exception=exc), None
    except Exception as exc:
        return TaskOutcome(name, "retry", describe(exc), exception=exc), None
    value = None if result is None or task is None else task.decode_result(result)
    return TaskOutcome(name, "ack", value=value), result


async def enqueued_jobs(
    store: Store, task_or_queue: Task[..., Any] | str, **match: Any
) -> list[Job]:
    """The pending jobs (due or delayed) of a task, or of a queue, whose arguments equal
    every ``match`` given (T8), ids ascending.

    For a task, only its jobs are listed and ``match`` is compared with the arguments
    decoded into their annotated types (``when=datetime(...)``); for a queue name, every
    job of the queue is listed and ``match`` is compared with the arguments as JSON
    values (a job that is not a task envelope never matches a non-empty ``match``).

    Raises:
        InvalidArgument: ``task_or_queue`` is neither a Task nor a queue name, or a
            ``match`` name is not a parameter of the task.
    """
    if isinstance(task_or_queue, Task):
        task: Task[..., Any] | None = task_or_queue
        queue = store.queue(task_or_queue.queue)
        unknown = set(match) - set(task_or_queue._codec.params)
        if unknown:
            raise InvalidArgument(
                f"match names {sorted(unknown)}, not parameters of task {task_or_queue.name!r}"
            )
    elif isinstance(task_or_queue, str):
        task, queue = None, store.queue(task_or_queue)
    else:
        raise InvalidArgument(
            f"task_or_queue must be a Task or a queue name; got {type(task_or_queue).__name__}"
        )
    wanted = match if task is not None else msgspec.to_builtins(match)
    found: list[Job] = []
    after: int | None = None
    while True:
        page = await queue.list_jobs("pending", limit=1000, after_id=after)
        found.extend(job for job in page if _matches(job, task, wanted))
        if len(page) < 1000:
            return found
        after = page[-1].id


def _matches(job: Job, task: Task[..., Any] | None, match: dict[str, Any]) -> bool:
    try:
        header = read_header(job.payload)
    except EnvelopeError:
        return task is None and not match
    if task is not None and header.task != task.name:
        return False
    if not match:
        return True
    try:
        args = (
            task._codec.decode(header.args)
            if task is not None
            else msgspec.json.decode(header.args)
        )
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    return isinstance(args, dict) and all(
        key in args and args[key] == value for key, value in match.items()
    )


async def assert_enqueued(store: Store, task_or_queue: Task[..., Any] | str, **match: Any) -> Job:
    """Assert that a pending job of the task (or queue) has the arguments ``match`` (T8),
    as :func:`enqueued_jobs` compares them; returns the first such job.

    Raises:
        AssertionError: no such job; the message lists what is enqueued instead (task
            names and argument names, never their values).
    """
    jobs = await enqueued_jobs(store, task_or_queue, **match)
    if jobs:
        return jobs[0]
    what = (
        f"task {task_or_queue.name!r}"
        if isinstance(task_or_queue, Task)
        else f"queue {task_or_queue!r}"
    )
    queue = task_or_queue.queue if isinstance(task_or_queue, Task) else task_or_queue
    pending = await store.queue(queue).list_jobs("pending", limit=20)
    seen = ", ".join(_describe_job(job) for job in pending) or "none"
    wanted = ", ".join(sorted(match)) or "any arguments"
    raise AssertionError(
        f"no pending job of {what} with {wanted} as given; pending jobs of queue "
        f"{queue!r} (first 20): {seen}"
    )


def _describe_job(job: Job) -> str:
    try:
        return f"#{job.id} {read_header(job.payload).task}"
    except EnvelopeError:
        return f"#{job.id} (not a task envelope)"
