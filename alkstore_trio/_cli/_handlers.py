"""The handlers of ``alkstore-trio worker``: ``--queue NAME=MODULE:FUNCTION`` parsed
(syntax only, at argument-parsing time) and then imported, before anything is opened.

A mistake in the command line is a :class:`QueueSpecError` (usage error, status 2); a
module that exists but raises while it is imported is a :class:`HandlerImportFailed`
(status 1: the fix is in that module). ``--periodic MODULE:ATTR`` (Q17) names the
worker's schedules the same way, and ``--tasks MODULE:ATTR`` (T5) a task registry.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from .._core import Periodic  # Q17
from .._core import _validate as v
from .._core._periodic import check_schedules  # Q17
from .._errors import InvalidArgument
from .._runtime import sync_handler
from .._util import is_async_callable

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .._runtime import Handler

#: The shape of a ``--queue`` value, for messages.
QUEUE_SPEC_SHAPE: Final = "NAME=MODULE:FUNCTION, e.g. emails=myapp.tasks:send_email"


class QueueSpecError(ValueError):
    """Raised by :func:`parse_queue_spec` and :func:`load_handlers` when a ``--queue``
    value cannot name a handler (bad syntax, no such module or attribute, not an async
    callable, a queue named twice): a usage error, exit status 2. The message names the
    value and the fix."""


class HandlerImportFailed(Exception):
    """Raised by :func:`load_handlers` when the module named by a ``--queue`` exists but
    importing it raised: the command line is right, the module's code failed (exit
    status 1). Unlike :class:`QueueSpecError` the fix is in that module."""


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """One parsed ``--queue NAME=MODULE:ATTR`` value."""

    queue: str
    module: str
    attr: str

    def __str__(self) -> str:
        return f"{self.queue}={self.module}:{self.attr}"


def _dotted(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def parse_queue_spec(text: str) -> QueueSpec:
    """Parse ``NAME=MODULE:ATTR`` (``ATTR`` may be dotted: ``Class.method``); imports
    nothing.

    Raises:
        QueueSpecError: The syntax is wrong or NAME is not a valid queue name.
    """
    name, equals, target = text.partition("=")
    module, colon, attr = target.partition(":")
    if not equals or not colon or not name:
        raise QueueSpecError(f"{text!r} is not {QUEUE_SPEC_SHAPE}")
    try:
        v.check_queue_name(name)
    except InvalidArgument as exc:
        raise QueueSpecError(f"{text!r}: {exc}") from None
    if module.endswith(".py"):
        raise QueueSpecError(
            f"{text!r}: {module!r} looks like a file name; name the module instead: "
            f"{name}={module.removesuffix('.py').replace('/', '.')}:{attr or 'FUNCTION'}"
        )
    if not _dotted(module):
        raise QueueSpecError(
            f"{text!r}: {module!r} is not an importable module name (dotted Python "
            f"identifiers, no file path or .py); expected {QUEUE_SPEC_SHAPE}"
        )
    if not _dotted(attr):
        raise QueueSpecError(
            f"{text!r}: {attr!r} is not an attribute name (dotted Python identifiers, "
            f"e.g. send_email or Mailer.send); expected {QUEUE_SPEC_SHAPE}"
        )
    return QueueSpec(name, module, attr)


def make_cwd_importable() -> None:
    """Put the current directory first on ``sys.path``, as ``python -m`` does, so that
    ``--queue emails=tasks:send`` finds ``./tasks.py`` under the ``alkstore-trio``
    console script too (whose ``sys.path[0]`` is the script's own directory). Not done
    when Python runs with ``-P`` / ``PYTHONSAFEPATH``: then only ``PYTHONPATH`` and the
    installed packages are searched, as the user asked."""
    if sys.flags.safe_path:
        return
    cwd = os.getcwd()
    if any(os.path.abspath(entry or os.curdir) == cwd for entry in sys.path):
        return
    sys.path.insert(0, cwd)


def _import(spec: QueueSpec | PeriodicSpec) -> Any:
    flag = "--queue" if isinstance(spec, QueueSpec) else spec.flag
    try:
        return importlib.import_module(spec.module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if spec.module == missing or spec.module.startswith(missing + "."):
            raise QueueSpecError(
                f"{flag} {str(spec)!r}: no module named {missing!r} (searched the current "
                "directory, PYTHONPATH and the installed packages); run the command from "
                "the directory that holds it, or add that directory to PYTHONPATH"
            ) from None
        raise HandlerImportFailed(
            f"{flag} {str(spec)!r}: importing {spec.module!r} failed: {exc}; install "
            f"the package it needs (or run python -c 'import {spec.module}' to see the "
            "traceback)"
        ) from exc
    except Exception as exc:
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise HandlerImportFailed(
            f"{flag} {str(spec)!r}: importing {spec.module!r} failed: {reason}; fix the "
            f"module (run python -c 'import {spec.module}' to see the traceback)"
        ) from exc


def load_handler(spec: QueueSpec) -> Handler:
    """Import ``spec.module`` and return the async callable at ``spec.attr``.

    Raises:
        QueueSpecError: No such module or attribute, or it is not an async callable.
        HandlerImportFailed: Importing the module raised.
    """
    obj = _import(spec)
    path = spec.module
    for part in spec.attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=3)
            hint = f"did you mean {', '.join(map(repr, close))}?" if close else "check the name"
            raise QueueSpecError(
                f"--queue {str(spec)!r}: {path!r} has no attribute {part!r}; {hint}"
            ) from None
        path = f"{path}.{part}" if path != spec.module else f"{path}:{part}"
    if is_async_callable(obj):
        handler: Handler = obj
        return handler
    if callable(obj) and not inspect.isclass(obj):
        return sync_handler(obj)  # T7: a plain def handler(job) runs in a worker thread
    raise QueueSpecError(
        f"--queue {str(spec)!r}: {path} is {_kind(obj)}, not a function; a handler is "
        "'async def handler(job) -> None' (or a plain 'def handler(job)', run in a thread)"
    )


def _kind(obj: object) -> str:
    if inspect.isclass(obj):
        return f"a class ({obj.__name__})"
    if callable(obj):
        return "a plain (sync) function" if inspect.isfunction(obj) else "a sync callable"
    return f"an object of type {type(obj).__name__}"


def load_handlers(specs: Iterable[QueueSpec]) -> dict[str, Handler]:
    """The handlers named by ``--queue`` values, by queue name. A queue named twice is
    reported before anything is imported.

    Raises:
        QueueSpecError: A queue is named twice, or a spec cannot be loaded.
        HandlerImportFailed: Importing a module raised.
    """
    specs = list(specs)
    if not specs:
        raise QueueSpecError(f"name at least one queue: --queue {QUEUE_SPEC_SHAPE}")
    seen: dict[str, QueueSpec] = {}
    for spec in specs:
        if spec.queue in seen:
            raise QueueSpecError(
                f"queue {spec.queue!r} is named twice (--queue {str(seen[spec.queue])!r} and "
                f"--queue {str(spec)!r}); give each queue one handler"
            )
        seen[spec.queue] = spec
    return {spec.queue: load_handler(spec) for spec in specs}


# -- Q17: --periodic MODULE:ATTR ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeriodicSpec:
    """One parsed ``--periodic MODULE:ATTR`` (or ``--tasks MODULE:ATTR``) value."""

    module: str
    attr: str
    flag: str = "--periodic"

    def __str__(self) -> str:
        return f"{self.module}:{self.attr}"


def parse_periodic_spec(text: str, flag: str = "--periodic") -> PeriodicSpec:
    """``MODULE:ATTR`` (dotted names allowed on both sides); syntax only."""
    module, sep, attr = text.partition(":")
    if not sep or not _dotted(module) or not _dotted(attr):
        what = (
            "a Periodic or a list of them (e.g. myapp.schedules:PERIODIC)"
            if flag == "--periodic"
            else "a Tasks registry (e.g. myapp.tasks:tasks)"
        )
        raise QueueSpecError(f"{flag} {text!r} must be MODULE:ATTR naming {what}")
    return PeriodicSpec(module, attr, flag)


def _attribute(spec: PeriodicSpec) -> Any:
    obj = _import(spec)
    for part in spec.attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise QueueSpecError(
                f"{spec.flag} {str(spec)!r}: {spec.module!r} has no attribute {spec.attr!r}"
            ) from None
    return obj


def load_tasks(
    specs: Iterable[PeriodicSpec], handlers: dict[str, Handler]
) -> tuple[dict[str, Handler], tuple[Periodic, ...]]:
    """T5: the handlers of the ``--tasks`` registries added to those of ``--queue``, and
    the registries' periodic tasks. A queue may be served once: by one ``--queue`` or by
    one registry.

    Raises:
        QueueSpecError: No such module or attribute, not a ``Tasks`` registry, or a queue
            served twice.
        HandlerImportFailed: Importing a module raised.
    """
    specs = list(specs)
    if not specs:
        return handlers, ()
    try:
        from .._tasks import Tasks
    except ModuleNotFoundError as exc:
        raise QueueSpecError(
            f"--tasks needs the tasks extra ({exc}): pip install 'alkstore_trio[tasks]'"
        ) from None
    merged = dict(handlers)
    periodic: list[Periodic] = []
    for spec in specs:
        obj = _attribute(spec)
        if not isinstance(obj, Tasks):
            raise QueueSpecError(
                f"--tasks {str(spec)!r} is {_kind(obj)}, not a Tasks registry (tasks = "
                "alkstore_trio.Tasks(), with functions declared by @tasks.task)"
            )
        if not obj:
            raise QueueSpecError(f"--tasks {str(spec)!r}: the registry declares no task")
        for queue, router in obj.items():
            if queue in merged:
                raise QueueSpecError(
                    f"--tasks {str(spec)!r}: queue {queue!r} already has a handler (another "
                    "--queue or --tasks); serve each queue from one place"
                )
            merged[queue] = router
        periodic.extend(obj.periodic)
    return merged, tuple(periodic)


def load_periodic(specs: Iterable[PeriodicSpec]) -> tuple[Periodic, ...]:
    """The schedules named by ``--periodic`` values: each names a ``Periodic`` or an
    iterable of them; all together must have distinct names.

    Raises:
        QueueSpecError: No such module or attribute, or not schedules with distinct names.
        HandlerImportFailed: Importing a module raised.
    """
    found: list[Periodic] = []
    for spec in specs:
        obj = _attribute(spec)
        found.extend([obj] if isinstance(obj, Periodic) else _schedules(spec, obj))
    try:
        return check_schedules(found)
    except InvalidArgument as exc:
        raise QueueSpecError(f"--periodic: {exc}") from None


def _schedules(spec: PeriodicSpec, obj: object) -> list[Periodic]:
    try:
        return list(check_schedules(obj))
    except InvalidArgument as exc:
        raise QueueSpecError(
            f"--periodic {str(spec)!r} must name a Periodic or a list of them: {exc}"
        ) from None
