"""One-for-one supervision of long-lived trio tasks (rule R1).

Why a supervisor, when trio has nurseries: a nursery treats its children as one piece of
work. When one child raises, the nursery cancels the others and re-raises, which is right
for work that must succeed or fail as a whole and wrong for long-lived actors (a listener,
a timer, a sweeper) whose occasional crash is expected and is cured by starting them
again. Erlang/OTP's answer is the supervisor, and this module is its one-for-one flavour
on trio:

- Each child runs in a task of the supervisor's nursery, wrapped in a loop that catches
  the child's *crash* (any :class:`Exception`) and, if the child's restart policy says so,
  starts the function again. Only that child restarts; its siblings never notice.
  :class:`trio.Cancelled` and other non-``Exception`` exceptions (``KeyboardInterrupt``,
  ``SystemExit``) are never crashes: they pass through the loop untouched, and the nursery
  does what it always does with them.
- Restarting forever would hide a real fault (a crash loop looks like a busy actor), so
  the restarts are budgeted: more than ``max_restarts`` restarts within any
  ``restart_window_s`` seconds and the supervisor gives up. It cancels its remaining
  children and the body of its ``async with`` block, and raises
  :class:`SupervisorEscalated` from the block, so the failure reaches whoever opened the
  supervisor (in OTP terms, it escalates to the parent). The window *slides*: the
  supervisor remembers when each recent restart happened, and forgets a restart
  ``restart_window_s`` seconds after it. A fixed window (counting per wall-clock bucket)
  would let a crash burst straddling a bucket edge through with up to twice the budget.
- The child is started like :meth:`trio.Nursery.start`: its function takes
  ``task_status`` and calls ``task_status.started(value)``. The wrapper task runs the
  function itself, handing it a task status of its own that forwards the *first* run's
  ``started`` to the real one, so :meth:`Supervisor.start` returns the first run's value
  and later runs' values are dropped. A first run that fails before ``started`` is not
  restarted: :meth:`Supervisor.start` raises its exception, as ``nursery.start`` would
  (and as OTP's ``start_child`` returns an error instead of retrying a failing init).

Time is trio's clock (:func:`trio.current_time`), so tests drive the window and the
restart delays with :class:`trio.testing.MockClock` instead of sleeping.
"""

from __future__ import annotations

import collections
import logging
import math
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias, final, get_args

import trio

from .._errors import AlkstoreError, InvalidArgument
from .._util import finite_number, lone_exception

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

logger = logging.getLogger("alkstore_trio.supervisor")

#: When a child is started again (Erlang/OTP's restart types): ``"permanent"`` whenever it
#: ends, by returning or crashing; ``"transient"`` only when it crashed; ``"temporary"``
#: never.
RestartPolicy: TypeAlias = Literal["permanent", "transient", "temporary"]

_RESTART_POLICIES: Final[tuple[str, ...]] = get_args(RestartPolicy)
#: The backoff exponent is capped so that ``restart_delay_s * 2**n`` cannot overflow.
_MAX_BACKOFF_EXPONENT: Final = 64
_PRIVATE: Final = object()


class SupervisorEscalated(AlkstoreError):
    """Raised out of ``async with open_supervisor(...)`` when a child needed more than
    ``max_restarts`` restarts within ``restart_window_s`` seconds.

    Before raising it the supervisor has cancelled all its other children and the body of
    the block. The crash that would have needed one restart too many is attached as
    ``__cause__`` (it is ``None`` when that child was a ``"permanent"`` one that returned
    instead of crashing). This error is never wrapped in an :class:`ExceptionGroup`.

    Unlike the child's own exception (one crash, which the supervisor cured by restarting)
    this is the verdict that restarting did not help, handed to whoever opened the
    supervisor. Unlike :class:`~alkstore_trio.EngineError` (one store operation failed, and
    the store stays usable), it ends the whole supervised group: open a new supervisor, or
    let the failure end the program.

    Attributes:
        supervisor: The ``name`` of the supervisor that gave up.
        child: The name of the child whose crash exhausted the restart budget.
    """

    def __init__(self, message: str, *, supervisor: str, child: str) -> None:
        super().__init__(message)
        self.supervisor = supervisor
        self.child = child

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_escalation, (str(self), self.supervisor, self.child))


def _rebuild_escalation(message: str, supervisor: str, child: str) -> SupervisorEscalated:
    return SupervisorEscalated(message, supervisor=supervisor, child=child)


@dataclass(frozen=True, slots=True)
class ChildStatistics:
    """One supervised child, as seen by :meth:`Supervisor.statistics`.

    Attributes:
        name: The child's name, unique among the supervisor's current children.
        restart: Its restart policy.
        running: ``True`` while its function runs; ``False`` while it waits out a restart
            delay.
        restarts: How many times it was restarted.
        last_crash: The type of the exception of its last crash, ``None`` if it never
            crashed. Only the type is kept: messages may hold data that does not belong in
            metrics.
    """

    name: str
    restart: RestartPolicy
    running: bool
    restarts: int
    last_crash: type[Exception] | None


@dataclass(frozen=True, slots=True)
class SupervisorStatistics:
    """A snapshot of a supervisor, returned by :meth:`Supervisor.statistics`.

    The snapshot is a frozen value: it does not change as the supervisor goes on.

    Attributes:
        name: The supervisor's name.
        children: Its current children, in the order they were started. A child that has
            left (a ``"temporary"`` child that ended, a ``"transient"`` child that
            returned, any child once the supervisor stopped) is no longer listed; its
            crashes and restarts still count in the totals.
        children_running: How many children are running their function now (children
            waiting out a restart delay are not).
        restarts_total: Restarts over the supervisor's life, all children together.
        crashes_total: Crashes over the supervisor's life, including crashes of children
            that were not restarted.
        restarts_in_window: Restarts within the last ``restart_window_s`` seconds: the
            supervisor escalates when a restart would take this past ``max_restarts``.
    """

    name: str
    children: tuple[ChildStatistics, ...]
    children_running: int
    restarts_total: int
    crashes_total: int
    restarts_in_window: int

    def child(self, name: str) -> ChildStatistics:
        """The statistics of the current child called ``name``.

        Raises:
            KeyError: No current child has that name.
        """
        for child in self.children:
            if child.name == name:
                return child
        raise KeyError(name)


class _ChildStatus(trio.TaskStatus[Any]):
    """The ``task_status`` handed to one run of a child.

    The first run's forwards ``started(value)`` to the real task status of
    :meth:`trio.Nursery.start`, so that :meth:`Supervisor.start` returns the value; later
    runs have nothing to forward to and only record the call.
    """

    def __init__(self, forward_to: trio.TaskStatus[Any] | None) -> None:
        self._forward_to = forward_to
        self.called = False

    def started(self, value: Any = None) -> None:
        if self.called:
            raise RuntimeError("called 'started' twice on the same task status")
        self.called = True
        if self._forward_to is not None:
            self._forward_to.started(value)


class _Child:
    """The mutable state of one supervised child."""

    __slots__ = ("args", "fn", "last_crash", "name", "restart", "restarts", "running", "spawned")

    def __init__(
        self,
        name: str,
        restart: RestartPolicy,
        fn: Callable[..., Awaitable[object]],
        args: tuple[object, ...],
    ) -> None:
        self.name = name
        self.restart = restart
        self.fn = fn
        self.args = args
        self.spawned = False
        self.running = False
        self.restarts = 0
        self.last_crash: type[Exception] | None = None

    def snapshot(self) -> ChildStatistics:
        return ChildStatistics(
            name=self.name,
            restart=self.restart,
            running=self.running,
            restarts=self.restarts,
            last_crash=self.last_crash,
        )


@final
class Supervisor:
    """A group of supervised children, restarted one for one. Made by
    :func:`open_supervisor`, which has the details of the restart budget.

    Children are daemons of the ``async with open_supervisor(...)`` block: leaving the
    block (normally or by an exception) cancels them, as does :meth:`cancel`.
    """

    def __init__(
        self,
        token: object,
        nursery: trio.Nursery,
        *,
        name: str,
        max_restarts: int,
        restart_window_s: float,
        restart_delay_s: float,
        restart_delay_max_s: float | None,
    ) -> None:
        if token is not _PRIVATE:
            raise TypeError("Supervisor has no public constructor; use open_supervisor()")
        self._nursery = nursery
        self._name = name
        self._max_restarts = max_restarts
        self._restart_window_s = restart_window_s
        self._restart_delay_s = restart_delay_s
        self._restart_delay_max_s = restart_delay_max_s
        self._children: dict[str, _Child] = {}
        #: (time, child name) of each restart in the current window, oldest first.
        self._recent_restarts: collections.deque[tuple[float, str]] = collections.deque()
        self._restarts_total = 0
        self._crashes_total = 0
        self._stopping = False
        self._escalation: SupervisorEscalated | None = None
        self._escalation_cause: Exception | None = None

    def __repr__(self) -> str:
        return f"<Supervisor {self._name!r} with {len(self._children)} children>"

    @property
    def name(self) -> str:
        """The name given to :func:`open_supervisor`; it appears in every log record."""
        return self._name

    async def start(
        self,
        fn: Callable[..., Awaitable[object]],
        *args: object,
        name: str | None = None,
        restart: RestartPolicy = "permanent",
    ) -> Any:
        """Start ``fn(*args, task_status=...)`` as a supervised child, like
        :meth:`trio.Nursery.start`.

        ``fn`` must accept a ``task_status`` keyword argument and call
        ``task_status.started(value)`` once it is ready. This method returns that value of
        the first run; a restarted run's ``started`` is accepted and its value dropped.

        The first run is not supervised until it calls ``started``: if it raises before,
        this method raises that exception unchanged and nothing is restarted (the crash is
        logged and counted); if it returns before, this method raises ``RuntimeError``, as
        :meth:`trio.Nursery.start` does. Cancelling this call cancels the child.

        Args:
            fn: The child's async function.
            *args: Positional arguments for ``fn``; the same ones are passed to every run.
                Pass state that must survive a restart (a memory channel, say) here, and
                keep state that a restart should reset inside ``fn``.
            name: The child's name in logs and statistics, unique among the supervisor's
                current children. Defaults to ``fn``'s qualified name.
            restart: When the child is started again after it ends: ``"permanent"``
                (always), ``"transient"`` (only after a crash) or ``"temporary"`` (never).

        Returns:
            The value the first run passed to ``task_status.started``.

        Raises:
            InvalidArgument: ``name`` is empty or already taken by a current child, or
                ``restart`` is not one of the three policies.
            RuntimeError: The supervisor is stopping or closed, or the first run returned
                without calling ``task_status.started``.
        """
        if self._stopping:
            raise RuntimeError(
                f"supervisor {self._name!r} is stopping or closed; start children inside "
                "its async with block"
            )
        child_name = _default_name(fn) if name is None else name
        if not isinstance(child_name, str) or not child_name:
            raise InvalidArgument(f"name must be a non-empty string; got {child_name!r}")
        if restart not in _RESTART_POLICIES:
            raise InvalidArgument(
                f"restart must be one of {', '.join(map(repr, _RESTART_POLICIES))}; got {restart!r}"
            )
        if child_name in self._children:
            raise InvalidArgument(
                f"name {child_name!r} is already taken by a child of supervisor "
                f"{self._name!r}; pass a distinct name= for each child"
            )
        child = _Child(child_name, restart, fn, args)
        self._children[child_name] = child
        try:
            return await self._nursery.start(
                self._supervise, child, name=f"{self._name}/{child_name}"
            )
        except BaseException:
            # Once its wrapper task runs, the wrapper forgets the child when it ends.
            if not child.spawned:
                self._forget(child)
            raise

    def cancel(self) -> None:
        """Stop the supervisor: cancel every child, and the body of its ``async with``
        block, which then exits without an exception (like cancelling a nursery's scope).
        """
        self._stopping = True
        self._nursery.cancel_scope.cancel()

    def statistics(self) -> SupervisorStatistics:
        """A frozen snapshot of the children, restarts and crashes (see
        :class:`SupervisorStatistics`). Must be called from within trio: it reads trio's
        clock to count the restarts in the current window.
        """
        now = trio.current_time()
        children = tuple(child.snapshot() for child in self._children.values())
        return SupervisorStatistics(
            name=self._name,
            children=children,
            children_running=sum(child.running for child in children),
            restarts_total=self._restarts_total,
            crashes_total=self._crashes_total,
            restarts_in_window=sum(
                1 for at, _ in self._recent_restarts if now - at < self._restart_window_s
            ),
        )

    def _forget(self, child: _Child) -> None:
        if self._children.get(child.name) is child:
            del self._children[child.name]

    async def _supervise(self, child: _Child, *, task_status: trio.TaskStatus[Any]) -> None:
        """The wrapper task of one child: run it, and run it again while its policy and the
        restart budget allow."""
        child.spawned = True
        status = _ChildStatus(task_status)
        first_run = True
        try:
            while True:
                crash: Exception | None = None
                child.running = True
                try:
                    await child.fn(*child.args, task_status=status)
                except Exception as exc:
                    if first_run and not status.called:
                        self._crashes_total += 1
                        self._log(
                            logging.WARNING,
                            "start_failed",
                            child,
                            "failed before calling task_status.started() (%s: %s); "
                            "start() raises it",
                            _type_name(exc),
                            exc,
                            exc=exc,
                        )
                        raise
                    crash = exc
                else:
                    if first_run and not status.called:
                        return  # trio's nursery.start() raises its RuntimeError for this
                finally:
                    child.running = False
                delay = self._after_run(child, crash)
                del crash  # the traceback holds this frame
                if delay is None:
                    return
                await trio.sleep(delay)
                self._log(logging.INFO, "restart", child, "restarted (restart %d)", child.restarts)
                status = _ChildStatus(None)
                first_run = False
        finally:
            self._forget(child)

    def _after_run(self, child: _Child, crash: Exception | None) -> float | None:
        """Decide what follows the end of a run: the delay before the restart, or ``None``
        when the child leaves (its policy, a stopping supervisor, or an escalation)."""
        if crash is not None:
            self._crashes_total += 1
            child.last_crash = type(crash)
        # A crash while the supervisor or an enclosing scope is being cancelled is a child
        # failing to stop cleanly: restarting it would only be cancelled again.
        if self._stopping or trio.current_effective_deadline() == -math.inf:
            if crash is not None:
                self._log(
                    logging.ERROR,
                    "crash",
                    child,
                    "crashed (%s: %s) while the supervisor was stopping; not restarted",
                    _type_name(crash),
                    crash,
                    exc=crash,
                )
            return None
        if child.restart == "temporary" or (child.restart == "transient" and crash is None):
            if crash is None:
                self._log(
                    logging.DEBUG, "exit", child, "returned; not restarted (%s)", child.restart
                )
            else:
                self._log(
                    logging.WARNING,
                    "crash",
                    child,
                    "crashed (%s: %s); not restarted (%s)",
                    _type_name(crash),
                    crash,
                    child.restart,
                    exc=crash,
                )
            return None

        now = trio.current_time()
        window = self._recent_restarts
        while window and now - window[0][0] >= self._restart_window_s:
            window.popleft()
        if len(window) >= self._max_restarts:
            self._escalate(child, crash)
            return None
        previous = sum(1 for _, name in window if name == child.name)
        window.append((now, child.name))
        child.restarts += 1
        self._restarts_total += 1
        delay = self._restart_delay(previous)
        if crash is None:
            self._log(
                logging.INFO,
                "exit",
                child,
                "returned; restart %d in %gs (%s)",
                child.restarts,
                delay,
                child.restart,
                delay_s=delay,
            )
        else:
            self._log(
                logging.WARNING,
                "crash",
                child,
                "crashed (%s: %s); restart %d in %gs",
                _type_name(crash),
                crash,
                child.restarts,
                delay,
                exc=crash,
                delay_s=delay,
            )
        return delay

    def _restart_delay(self, previous: int) -> float:
        """The wait before a restart, given the child's restarts still in the window.

        Without ``restart_delay_max_s`` it is always ``restart_delay_s``; with it, it
        doubles for each of the child's restarts in the window, up to the cap, and falls
        back as those restarts age out of the window.
        """
        if self._restart_delay_max_s is None:
            return self._restart_delay_s
        exponent = min(previous, _MAX_BACKOFF_EXPONENT)
        return min(self._restart_delay_s * 2.0**exponent, self._restart_delay_max_s)

    def _escalate(self, child: _Child, crash: Exception | None) -> None:
        """Give up: log the last crash with the verdict, cancel everything, and leave the
        error for :func:`open_supervisor` to raise once the nursery has closed."""
        ending_args: tuple[object, ...] = ()
        ending = "returned"
        if crash is not None:
            ending, ending_args = "crashed (%s: %s)", (_type_name(crash), crash)
        self._log(
            logging.ERROR,
            "escalate",
            child,
            ending + " and would need restart %d within %gs, more than max_restarts=%d; "
            "cancelling all children and raising SupervisorEscalated",
            *ending_args,
            self._max_restarts + 1,
            self._restart_window_s,
            self._max_restarts,
            exc=crash,
        )
        what = "returned" if crash is None else f"crashed ({_type_name(crash)})"
        self._escalation = SupervisorEscalated(
            f"supervisor {self._name!r} gave up: child {child.name!r} {what}, and restarting "
            f"it would make {self._max_restarts + 1} restarts within "
            f"restart_window_s={self._restart_window_s:g}, more than "
            f"max_restarts={self._max_restarts}; fix the crash (it is the __cause__, and is "
            "logged), or raise max_restarts if such crash rates are expected",
            supervisor=self._name,
            child=child.name,
        )
        self._escalation_cause = crash
        self.cancel()

    def _log(
        self,
        level: int,
        event: str,
        child: _Child,
        message: str,
        *args: object,
        exc: Exception | None = None,
        delay_s: float | None = None,
    ) -> None:
        """Log one event of ``child`` with the structured fields every record carries.

        The exception is passed to the formatter as an argument (its type and message, and
        the traceback via ``exc_info``), never rendered here: a failing ``__str__`` is
        then logging's problem, not the supervisor's.
        """
        logger.log(
            level,
            "supervisor %r: child %r " + message,
            self._name,
            child.name,
            *args,
            exc_info=exc,
            extra={
                "event": event,
                "supervisor": self._name,
                "child": child.name,
                "restart_policy": child.restart,
                "restarts": child.restarts,
                "exc_type": None if exc is None else _type_name(exc),
                "delay_s": delay_s,
            },
        )


@asynccontextmanager
async def open_supervisor(
    *,
    name: str = "supervisor",
    max_restarts: int = 3,
    restart_window_s: float = 5.0,
    restart_delay_s: float = 0.0,
    restart_delay_max_s: float | None = None,
) -> AsyncIterator[Supervisor]:
    """Open a one-for-one supervisor for the duration of an ``async with`` block.

    Start children with :meth:`Supervisor.start`. When a child ends it is restarted
    according to its policy (``"permanent"``: always; ``"transient"``: only after a crash;
    ``"temporary"``: never), and only that child restarts. A *crash* is any
    :class:`Exception`; :class:`trio.Cancelled`, ``KeyboardInterrupt`` and other
    ``BaseException`` subclasses are never crashes and propagate untouched, ending the
    supervisor like any nursery.

    The restart budget is shared by all children: when a restart would make more than
    ``max_restarts`` restarts within the last ``restart_window_s`` seconds (trio's
    clock), the supervisor *escalates*: it cancels every child and the block, and raises
    :class:`SupervisorEscalated` with the last crash as ``__cause__``. A restart counts
    from the moment its child ended, including any delay before it.

    Leaving the block normally cancels the children that are still running: they are
    daemons of the block, like the tasks of a service nursery. An exception raised by the
    block comes out unwrapped (not in an :class:`ExceptionGroup`) after the children were
    cancelled. A child that crashes while the supervisor stops is logged, not restarted.

    Every crash, restart and escalation is logged on the ``alkstore_trio.supervisor``
    logger, with the structured fields ``event``, ``supervisor``, ``child``,
    ``restart_policy``, ``restarts``, ``exc_type`` and ``delay_s``. The exception's type
    and message and its traceback are logged: do not put secrets or payloads in the
    messages of exceptions your children may raise.

    Args:
        name: The supervisor's name in logs, statistics and errors.
        max_restarts: Restarts allowed within ``restart_window_s`` (0 escalates on the
            first crash).
        restart_window_s: Length of the sliding window, in seconds (> 0).
        restart_delay_s: Wait before each restart, in seconds (>= 0).
        restart_delay_max_s: If given, the wait doubles with each restart of the same child
            still in the window (``restart_delay_s * 2**n``), up to this cap (>=
            ``restart_delay_s``). If ``None``, every wait is ``restart_delay_s``.
            A wait counts toward the window: a child that crashes at once restarts at most
            once per wait, so with waits of at least ``restart_window_s / max_restarts``
            a crash loop is slowed down but never escalates.

    Yields:
        The :class:`Supervisor`.

    Raises:
        InvalidArgument: An argument is out of range (on entering the block).
        SupervisorEscalated: The restart budget was exceeded.
    """
    _check_name("name", name)
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise InvalidArgument(f"max_restarts must be an integer >= 0; got {max_restarts!r}")
    _check_seconds("restart_window_s", restart_window_s, minimum=0.0, inclusive=False)
    _check_seconds("restart_delay_s", restart_delay_s, minimum=0.0, inclusive=True)
    if restart_delay_max_s is not None:
        _check_seconds(
            "restart_delay_max_s", restart_delay_max_s, minimum=restart_delay_s, inclusive=True
        )

    supervisor: Supervisor | None = None
    failure: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            supervisor = Supervisor(
                _PRIVATE,
                nursery,
                name=name,
                max_restarts=max_restarts,
                restart_window_s=float(restart_window_s),
                restart_delay_s=float(restart_delay_s),
                restart_delay_max_s=(
                    None if restart_delay_max_s is None else float(restart_delay_max_s)
                ),
            )
            try:
                yield supervisor
            finally:
                supervisor.cancel()
    except BaseExceptionGroup as group:
        # Children never raise an Exception (the wrapper catches it), so the group holds
        # the block's exception and any BaseException a child let through.
        failure = lone_exception(group)
    # Raised outside the except block, so that the group is not chained as the context.
    escalation = None if supervisor is None else supervisor._escalation
    if failure is not None and (escalation is None or not isinstance(failure, Exception)):
        raise failure
    if escalation is not None:
        assert supervisor is not None
        if failure is not None:
            # The block's own exception (raised while it was being cancelled) becomes the
            # escalation's context: raising inside this handler is what sets it.
            try:
                raise failure
            except Exception:
                raise escalation from supervisor._escalation_cause
        raise escalation from supervisor._escalation_cause


def _default_name(fn: object) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn))


def _type_name(exc: BaseException) -> str:
    """``ValueError`` for builtins, ``package.module.Error`` for everything else."""
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _check_name(param: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{param} must be a non-empty string; got {value!r}")


def _check_seconds(param: str, value: object, *, minimum: float, inclusive: bool) -> None:
    number = finite_number(value)
    if number is None or number < minimum or (number == minimum and not inclusive):
        bound = ">=" if inclusive else ">"
        raise InvalidArgument(
            f"{param} must be a finite number of seconds {bound} {minimum:g}; got {value!r}"
        )
