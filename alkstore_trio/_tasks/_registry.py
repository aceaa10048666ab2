"""The task registry, :class:`Tasks`: declares tasks and routes a queue's jobs to them
(T3, T5).

A registry is a ``Mapping`` of queue names to handlers, which is all a
:class:`~alkstore_trio.Worker` needs: ``Worker(store, tasks)`` serves every queue a task
of the registry uses, and the handler of a queue reads each job's envelope and calls the
task it names. So the worker knows nothing of tasks, and a registry can be mixed with
plain handlers: ``Worker(store, {**tasks, "raw": handler})``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, final, overload

import trio

from .._core import Periodic, QueueOpts
from .._core import _validate as v
from .._errors import InvalidArgument
from .._runtime import Fail
from ._codec import ArgsCodec, EnvelopeError, read_header
from ._options import TaskOptions, check_options
from ._task import P, R, Task

if TYPE_CHECKING:
    from datetime import datetime

    from .._core import Job
    from .._core._periodic import CatchUp
    from .._runtime import Handler
    from ._options import KeySpec

#: The most characters of a task name (it is stored in every job's payload).
TASK_NAME_MAX_CHARS = 200


class TaskDecorator(Protocol):
    """What ``tasks.task(...)`` with options returns: a decorator making a :class:`Task`."""

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


@final
class Tasks(Mapping[str, "Handler"]):
    """A registry of tasks, and the handlers a worker serves them with (T3, T5).

    Example::

        tasks = Tasks()

        @tasks.task(queue="emails", max_attempts=5)
        async def send_email(to: str, subject: str) -> None:
            ...

        await send_email.defer(store, to="ada@example.com", subject="hi")
        worker = Worker(store, tasks)  # or: alkstore-trio worker --tasks myapp:tasks

    Args:
        thread_limit: The most sync (plain ``def``) tasks of this registry running in
            worker threads at once (>= 1; T7).

    Raises:
        InvalidArgument: ``thread_limit`` is not an int >= 1.
    """

    def __init__(self, *, thread_limit: int = 10) -> None:
        if isinstance(thread_limit, bool) or not isinstance(thread_limit, int) or thread_limit < 1:
            raise InvalidArgument(f"thread_limit must be an int >= 1; got {thread_limit!r}")
        self._tasks: dict[str, Task[..., Any]] = {}
        self._routers: dict[str, _Router] = {}
        self._periodic: list[Periodic] = []
        self._limiter = trio.CapacityLimiter(thread_limit)

    def __repr__(self) -> str:
        return f"<Tasks: {len(self._tasks)} tasks on queues {list(self._routers)}>"

    # -- Mapping[str, Handler]: what a Worker serves -------------------------------------

    def __getitem__(self, queue: str) -> Handler:
        return self._routers[queue]

    def __iter__(self) -> Iterator[str]:
        return iter(self._routers)

    def __len__(self) -> int:
        return len(self._routers)

    @property
    def tasks(self) -> Mapping[str, Task[..., Any]]:
        """The declared tasks by name (a read-only view)."""
        return dict(self._tasks)

    @property
    def periodic(self) -> tuple[Periodic, ...]:
        """The schedules of the periodic tasks (``cron=`` / ``every_s=``); a worker given
        the registry fires them (Q17)."""
        return tuple(self._periodic)

    def get_task(self, name: str) -> Task[..., Any] | None:
        """The task named ``name``, or ``None``."""
        return self._tasks.get(name)

    # -- declaring tasks -----------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...
    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int | None = None,
        delay_s: float | None = None,
        run_at: datetime | None = None,
        unique_key: KeySpec | None = None,
        unique_for_s: float | None = None,
        concurrency_key: KeySpec | None = None,
        timeout_s: float | None = None,
        opts: QueueOpts | None = None,
        cron: str | None = None,
        every_s: float | None = None,
        tz: str = "UTC",
        schedule_args: Mapping[str, Any] | None = None,
        catch_up: CatchUp = "one",
    ) -> TaskDecorator: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int | None = None,
        delay_s: float | None = None,
        run_at: datetime | None = None,
        unique_key: KeySpec | None = None,
        unique_for_s: float | None = None,
        concurrency_key: KeySpec | None = None,
        timeout_s: float | None = None,
        opts: QueueOpts | None = None,
        cron: str | None = None,
        every_s: float | None = None,
        tz: str = "UTC",
        schedule_args: Mapping[str, Any] | None = None,
        catch_up: CatchUp = "one",
    ) -> Any:
        """Declare a task: ``@tasks.task`` or ``@tasks.task(queue=..., ...)`` on an
        ``async def`` function (or a plain ``def``, run in a worker thread: T7).

        Its parameters are the job's arguments: each is stored in the payload as JSON and
        must be annotated with a type msgspec can decode (str, int, float, bool, None,
        datetimes, UUIDs, Decimals, enums, dataclasses, Structs, TypedDicts, and lists,
        tuples, sets and dicts of them; unannotated means any JSON value). A return
        annotation other than ``None`` declares a result (T6).

        Args:
            fn: The function (when used without parentheses).
            name: The name stored in each job (1-200 characters); default
                ``"module.qualname"``. Renaming a task strands its queued jobs in the
                dead letters (unknown task), so give long-lived tasks an explicit name.
            queue: The queue its jobs go to (Q1's names); several tasks may share one.
            priority: Every job's priority (int32; larger runs first).
            max_attempts: Every job's attempt budget (>= 1), or ``None`` for ``opts``'.
            delay_s: Every job runs no earlier than this many seconds after its defer.
            run_at: Every job runs no earlier than this aware datetime.
            unique_key: Q15: a ``str.format`` template over the arguments
                (``"invoice:{invoice_id}"``) or a function of them returning a str; a
                defer whose key a live job holds enqueues nothing.
            unique_for_s: Q15's throttle window of the key (needs ``unique_key``).
            concurrency_key: Q18.8's per-key key: a template or function like
                ``unique_key``.
            timeout_s: Seconds the function may run before it is cancelled and the job
                retried (> 0), inside the worker's own ``job_timeout_s``.
            opts: The :class:`QueueOpts` stamped on every job (default ``QueueOpts()``).
            cron: Make it periodic (Q17): a cron expression (needs the ``cron`` extra).
            every_s: Make it periodic (Q17): seconds between fire times.
            tz: The time zone of ``cron``.
            schedule_args: The arguments of the periodic jobs (checked now).
            catch_up: Fire times missed while no worker ran (Q17.5), as
                ``Periodic(catch_up=...)``: ``"one"``, ``"skip"`` or an int N.

        Raises:
            InvalidArgument: an option is invalid, the name is taken, or the function's
                signature cannot be stored (``*args``, an undecodable annotation).
        """
        options = TaskOptions(
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            delay_s=delay_s,
            run_at=run_at,
            unique_key=unique_key,
            unique_for_s=unique_for_s,
            concurrency_key=concurrency_key,
            timeout_s=timeout_s,
            opts=QueueOpts() if opts is None else opts,
        )
        schedule = {
            "cron": cron, "every_s": every_s, "tz": tz, "args": schedule_args,
            "catch_up": catch_up,
        }  # fmt: skip

        def decorate(fn: Callable[..., Any]) -> Task[..., Any]:
            return self._declare(fn, name, options, schedule)

        return decorate if fn is None else decorate(fn)

    def _declare(
        self,
        fn: Callable[..., Any],
        name: str | None,
        options: TaskOptions,
        schedule: dict[str, Any],
    ) -> Task[..., Any]:
        if isinstance(fn, Task):
            raise InvalidArgument(f"{fn!r} is already a task; declare each function once")
        if not callable(fn) or isinstance(fn, type):
            raise InvalidArgument(f"a task must be a function; got {type(fn).__name__}")
        if name is None:
            name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"
        name = v.check_text("name", name, max_chars=TASK_NAME_MAX_CHARS)
        if name in self._tasks:
            raise InvalidArgument(
                f"a task named {name!r} is already declared in this registry; give one of "
                "them another name="
            )
        codec = ArgsCodec(name, fn)
        options = check_options(codec.params, options)
        limiter = None if inspect.iscoroutinefunction(fn) else self._limiter
        task: Task[..., Any] = Task(fn, name, options, codec, limiter)
        periodic = _periodic_of(task, schedule)
        self._tasks[name] = task
        if options.queue not in self._routers:
            self._routers[options.queue] = _Router(options.queue, self._tasks)
        if periodic is not None:
            self._periodic.append(periodic)
        return task


def _periodic_of(task: Task[..., Any], schedule: dict[str, Any]) -> Periodic | None:
    """The task's schedule (Q17), named after the task, or ``None`` if it has none."""
    cron, every_s, args = schedule["cron"], schedule["every_s"], schedule["args"]
    if cron is None and every_s is None:
        if args is not None:
            raise InvalidArgument("schedule_args needs cron= or every_s= (a periodic task)")
        if schedule["catch_up"] != "one":
            raise InvalidArgument("catch_up needs cron= or every_s= (a periodic task)")
        return None
    if args is not None and not isinstance(args, Mapping):
        raise InvalidArgument(f"schedule_args must be a mapping; got {type(args).__name__}")
    try:
        payload = task.payload(**dict(args or {}))
    except InvalidArgument as exc:
        raise InvalidArgument(f"schedule_args: {exc}") from None
    o = task.options
    return Periodic(
        task.name,
        o.queue,
        cron=cron,
        every_s=every_s,
        tz=schedule["tz"],
        payload=payload,
        priority=o.priority,
        max_attempts=o.max_attempts,
        opts=o.opts,
        catch_up=schedule["catch_up"],
    )


@final
class _Router:
    """The handler of one queue of a registry: reads a job's envelope and runs the task
    it names (T5). Routes by name over the whole registry, so a task moved to another
    queue still runs the jobs left on its old one."""

    __slots__ = ("_tasks", "queue")

    def __init__(self, queue: str, tasks: dict[str, Task[..., Any]]) -> None:
        self.queue = queue
        self._tasks = tasks

    def __repr__(self) -> str:
        return f"<task router of queue {self.queue!r}>"

    async def __call__(self, job: Job) -> Any:
        """Run the job's task; returns its encoded result (bytes) or ``None``.

        Raises:
            Fail: the payload is not a task envelope, or names a task this registry does
                not have (dead-lettered at once: no retry could make it run).
        """
        try:
            header = read_header(job.payload)
        except EnvelopeError as exc:
            raise Fail(f"queue {self.queue!r}: {exc}") from None
        task = self._tasks.get(header.task)
        if task is None:
            known = sorted(name for name, t in self._tasks.items() if t.queue == self.queue)
            raise Fail(
                f"unknown task {header.task!r}: this worker's registry has no task of that "
                f"name (tasks of queue {self.queue!r}: {', '.join(known) or 'none'}); "
                "deploy the code that declares it, then requeue the job"
            )
        return await task.run_args(header.args)
