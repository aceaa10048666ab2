"""The task envelope (T1) and the typed codec of one task's arguments and result (T2).

Why msgspec. A task's arguments are checked against its annotations when it is deferred
and decoded into those types when it runs, on every job: the codec is on the hot path of
both the client and the worker. ``docs/reference/dependencies.md`` gives the measured
comparison with pydantic and cattrs; in short, msgspec checks and encodes a call in about
a microsecond, decodes it in about as much, and installs in under a megabyte, with no
dependencies of its own.

The envelope is JSON: ``{"v":1,"task":"<name>","args":{...}}``. Only ``v`` (the envelope
version) and ``task`` are read before the task is known; ``args`` is kept raw and decoded
by that task's own decoder, so a queue shared by several tasks costs one parse of the
header per job, whatever the tasks' argument types.
"""

from __future__ import annotations

import datetime
import decimal
import inspect
import re
import typing
import uuid
from typing import TYPE_CHECKING, Any, Final

import msgspec
import msgspec.inspect

from .._errors import InvalidArgument

if TYPE_CHECKING:
    from collections.abc import Callable

#: The envelope's version: a worker refuses (dead-letters) any other.
ENVELOPE_VERSION: Final = 1

#: Types that :func:`msgspec.convert` must not build from a str or a number at defer time:
#: a ``datetime`` parameter takes a datetime, not an ISO string (the worker would accept
#: either once encoded, but a wrong type is the caller's mistake, reported at once).
_BUILTIN_TYPES: Final = (
    datetime.datetime,
    datetime.date,
    datetime.time,
    datetime.timedelta,
    uuid.UUID,
    decimal.Decimal,
    bytes,
    bytearray,
)

_KINDS_ALLOWED: Final = (
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY,
)


class Header(msgspec.Struct, forbid_unknown_fields=False):
    """What the worker reads of every envelope before it knows the task."""

    v: int
    task: str
    args: msgspec.Raw = msgspec.Raw(b"{}")


_header_decoder: Final = msgspec.json.Decoder(Header)
_encoder: Final = msgspec.json.Encoder()


class EnvelopeError(Exception):
    """A payload that is not a task envelope this version understands."""


def read_header(payload: bytes) -> Header:
    """The envelope's header; raises :class:`EnvelopeError` (the reason, never the
    payload's bytes) when the payload is not an envelope of version 1."""
    try:
        header = _header_decoder.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise EnvelopeError(f"the payload is not a task envelope ({exc})") from None
    if header.v != ENVELOPE_VERSION:
        raise EnvelopeError(
            f"the task envelope has version {header.v}; this worker reads version "
            f"{ENVELOPE_VERSION}"
        )
    return header


class ArgsCodec:
    """Checks, encodes and decodes the arguments of one task function.

    Built once per task when it is declared: the parameters become the fields of a
    ``msgspec.Struct`` (their annotations its types, their defaults its defaults), so
    that a call's keyword arguments are checked by one ``msgspec.convert`` and the
    envelope's ``args`` decode straight into the annotated types.

    Raises:
        InvalidArgument: The function takes ``*args``, ``**kwargs`` or positional-only
            parameters, or an annotation is a type msgspec cannot decode.
    """

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name = name
        signature = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception as exc:
            raise InvalidArgument(
                f"task {name!r}: its annotations cannot be resolved ({exc}); import the "
                "types they name at module level"
            ) from None
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        for param in signature.parameters.values():
            if param.kind not in _KINDS_ALLOWED:
                raise InvalidArgument(
                    f"task {name!r}: parameter {param.name!r} is {param.kind.description}; "
                    "a task takes named parameters only (no *args, **kwargs or "
                    "positional-only parameters), each stored in the job's payload"
                )
            hint = hints.get(param.name, Any)
            if param.default is inspect.Parameter.empty:
                fields.append((param.name, hint))
            else:
                fields.append((param.name, hint, param.default))
        #: The parameter names in order; those that may be given by position.
        self.params: tuple[str, ...] = tuple(signature.parameters)
        self.positional: tuple[str, ...] = tuple(
            p.name
            for p in signature.parameters.values()
            if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        try:
            self.struct: type[msgspec.Struct] = msgspec.defstruct(
                f"{name}.args", fields, kw_only=True, forbid_unknown_fields=True
            )
            self.decoder = msgspec.json.Decoder(self.struct)
            _check_storable(msgspec.inspect.type_info(self.struct))
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(
                f"task {name!r}: its parameters cannot be stored as JSON ({exc}); use "
                "str, int, float, bool, None, datetimes, UUIDs, Decimals, enums, "
                "dataclasses, msgspec Structs, TypedDicts, and lists, tuples, sets and "
                "dicts of them"
            ) from None
        self._prefix = b'{"v":%d,"task":%s,"args":' % (ENVELOPE_VERSION, _encoder.encode(name))
        self.returns = _return_hint(hints)
        self._result_decoder = None if self.returns is None else msgspec.json.Decoder(self.returns)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> msgspec.Struct:
        """The call's arguments, checked against the annotations (defaults filled in).

        Raises:
            InvalidArgument: too many positional arguments, one given twice, a missing or
                unknown one, or a value of the wrong type; the message names the
                parameter and the expected type, never the value.
        """
        if args:
            if len(args) > len(self.positional):
                raise InvalidArgument(
                    f"task {self.name!r} takes {len(self.positional)} positional arguments; "
                    f"got {len(args)}"
                )
            for param, value in zip(self.positional, args, strict=False):
                if param in kwargs:
                    raise InvalidArgument(
                        f"task {self.name!r}: argument {param!r} is given twice "
                        "(by position and by name)"
                    )
                kwargs[param] = value
        try:
            return msgspec.convert(kwargs, self.struct, builtin_types=_BUILTIN_TYPES)
        except msgspec.ValidationError as exc:
            raise InvalidArgument(
                f"task {self.name!r}: invalid arguments: {argument_error(exc)}"
            ) from None

    def encode(self, bound: msgspec.Struct) -> bytes:
        """The envelope of checked arguments."""
        return self._prefix + _encoder.encode(bound) + b"}"

    def decode(self, raw: msgspec.Raw | bytes) -> dict[str, Any]:
        """The envelope's ``args`` decoded into the annotated types, as keyword
        arguments; raises ``msgspec.ValidationError`` / ``DecodeError``."""
        return msgspec.structs.asdict(self.decoder.decode(raw))

    def encode_result(self, value: object) -> bytes | None:
        """A returned value as JSON bytes (``None`` when the task declares no result)."""
        if self.returns is None:
            return None
        return _encoder.encode(value)

    def decode_result(self, data: bytes | bytearray | memoryview) -> Any:
        """JSON result bytes decoded into the task's return type.

        Raises:
            InvalidArgument: The task declares no result, or ``data`` does not decode
                into its return type.
        """
        if self._result_decoder is None:
            raise InvalidArgument(
                f"task {self.name!r} declares no result (its return annotation is None "
                "or missing); annotate the return type to store one"
            )
        try:
            return self._result_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise InvalidArgument(
                f"task {self.name!r}: the result does not decode into its return type ({exc})"
            ) from None


def _check_storable(info: msgspec.inspect.Type, seen: set[int] | None = None) -> None:
    """Raise ``TypeError`` if a type of the tree is one msgspec can only pass through with
    an encode or decode hook (a ``CustomType``): such an argument could not be stored."""
    seen = set() if seen is None else seen
    if id(info) in seen:
        return
    seen.add(id(info))
    if isinstance(info, msgspec.inspect.CustomType):
        raise TypeError(f"type {info.cls.__qualname__} is not supported")
    for value in msgspec.structs.astuple(info):
        nested = value if isinstance(value, tuple) else (value,)
        for item in nested:
            if isinstance(item, msgspec.inspect.Field):
                item = item.type
            if isinstance(item, msgspec.inspect.Type):
                _check_storable(item, seen)


_ENUM_VALUE: Final = re.compile(r"^Invalid enum value .*(?= - at `)|^Invalid enum value .*$")


def argument_error(exc: Exception) -> str:
    """msgspec's message about an argument struct in the task's words: an *argument*
    (not a field), at ``to`` or ``items[0].qty`` (not ``$.to``)."""
    text = str(exc).replace("Object missing required field", "missing required argument")
    text = text.replace("Object contains unknown field", "unknown argument")
    # msgspec quotes the value of a bad enum or Literal: an argument's value may be
    # private, and this text is stored as the job's last_error and logged.
    text = _ENUM_VALUE.sub("Invalid enum value", text)
    return text.replace("`$.", "`").replace("`$[", "`[")


def _return_hint(hints: dict[str, Any]) -> Any:
    """The return annotation that declares a result, or ``None`` for none."""
    hint = hints.get("return")
    if hint is None or hint is type(None):
        return None
    return hint
