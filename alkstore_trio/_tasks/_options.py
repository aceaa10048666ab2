"""A task's options (T3): what every job it defers is stamped with, checked when the task
is declared (or when :meth:`Task.options` overrides them), never first at enqueue time."""

from __future__ import annotations

import dataclasses
import string
from typing import TYPE_CHECKING, Any, TypeAlias

from .._core import QueueOpts
from .._core import _validate as v
from .._errors import InvalidArgument
from .._util import finite_number

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import datetime

#: A unique or concurrency key: a ``str.format`` template over the task's arguments
#: (``"email:{to}"``) or a function of them returning a str.
KeySpec: TypeAlias = "str | Callable[..., str]"


class _Unset:
    """The marker of an option :meth:`Task.options` leaves as it is."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclasses.dataclass(frozen=True, slots=True)
class TaskOptions:
    """The checked options of a task (see :meth:`Tasks.task` for each one's meaning)."""

    queue: str
    priority: int = 0
    max_attempts: int | None = None
    delay_s: float | None = None
    run_at: datetime | None = None
    unique_key: KeySpec | None = None
    unique_for_s: float | None = None
    concurrency_key: KeySpec | None = None
    timeout_s: float | None = None
    opts: QueueOpts = dataclasses.field(default_factory=QueueOpts)

    def replace(self, params: tuple[str, ...], **changes: Any) -> TaskOptions:
        """A copy with the options in ``changes`` that are not :data:`UNSET`, checked."""
        given = {key: value for key, value in changes.items() if value is not UNSET}
        return check_options(params, dataclasses.replace(self, **given))


def check_options(params: tuple[str, ...], options: TaskOptions) -> TaskOptions:
    """``options`` if every value is valid for a task with parameters ``params``.

    Raises:
        InvalidArgument: an option is invalid (the message names it).
    """
    v.check_queue_name(options.queue)
    v.check_priority(options.priority)
    v.check_optional_max_attempts(options.max_attempts)
    if options.delay_s is not None and finite_number(options.delay_s) is None:
        raise InvalidArgument(f"delay_s must be None or a finite number; got {options.delay_s!r}")
    v.check_optional_run_at(options.run_at)
    if options.unique_for_s is not None:
        if options.unique_key is None:
            raise InvalidArgument("unique_for_s needs a unique_key; give both or neither")
        v.check_duration("unique_for_s", options.unique_for_s, min_s=0, min_inclusive=False)
    if options.timeout_s is not None:
        v.check_duration("timeout_s", options.timeout_s, min_s=0, min_inclusive=False)
    if not isinstance(options.opts, QueueOpts):
        raise InvalidArgument(f"opts must be a QueueOpts; got {type(options.opts).__name__}")
    _check_key_spec("unique_key", options.unique_key, params)
    _check_key_spec("concurrency_key", options.concurrency_key, params)
    return options


def _check_key_spec(param: str, spec: object, params: tuple[str, ...]) -> None:
    if spec is None or callable(spec):
        return
    if not isinstance(spec, str):
        raise InvalidArgument(
            f"{param} must be a str template (e.g. 'email:{{to}}'), a function of the "
            f"task's arguments returning a str, or None; got {type(spec).__name__}"
        )
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(spec) if field is not None]
    except ValueError as exc:
        raise InvalidArgument(f"{param} {spec!r} is not a str.format template: {exc}") from None
    for field in fields:
        root = field.split(".", 1)[0].split("[", 1)[0]
        if root not in params:
            raise InvalidArgument(
                f"{param} {spec!r} names {{{field}}}, which is not a parameter of the task "
                f"(its parameters: {', '.join(params) or 'none'})"
            )


def make_key(param: str, spec: KeySpec | None, arguments: Mapping[str, Any]) -> str | None:
    """The key ``spec`` gives for one call's ``arguments`` (checked as the store would:
    1-256 characters, no NUL); ``None`` when there is no spec.

    Raises:
        InvalidArgument: the key function raised or returned something else than a
            valid key.
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        key: object = spec.format_map(arguments)
    else:
        try:
            key = spec(**arguments)
        except Exception as exc:
            raise InvalidArgument(
                f"the {param} function raised {type(exc).__name__}: {exc}"
            ) from exc
    if param == "unique_key":
        return v.check_unique_key(key)
    return v.check_concurrency_key(key)
