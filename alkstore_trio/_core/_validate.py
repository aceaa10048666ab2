"""Argument validation: every check the contract asks for, raising :class:`InvalidArgument`.

Each function takes the parameter's *name* so the message can name it, returns the value
in its canonical form, and has no side effect. Engines never see an unchecked value.
Messages show values through :func:`_show`, which is short and never prints bytes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Final

from .._errors import InvalidArgument

#: Largest priority (32-bit signed).
PRIORITY_MAX: Final = 2**31 - 1
#: Smallest priority (32-bit signed).
PRIORITY_MIN: Final = -(2**31)
#: Largest ``max_attempts`` (the attempts counter is a 32-bit signed integer).
MAX_ATTEMPTS_MAX: Final = 2**31 - 1
#: Largest job id (a 64-bit signed integer).
JOB_ID_MAX: Final = 2**63 - 1
#: Largest magnitude of any duration in seconds: 100 years. Larger values would overflow
#: timestamps on some engines; no job queue needs them.
DURATION_MAX_S: Final = 100 * 365 * 24 * 3600.0
#: Default largest payload, in bytes (1 MiB).
DEFAULT_MAX_PAYLOAD_BYTES: Final = 1024 * 1024
#: Q19.1: the default largest result, in bytes (``open_store(max_result_bytes=...)``).
DEFAULT_MAX_RESULT_BYTES: Final = 1024 * 1024
#: Largest worker id and largest error text, in characters.
WORKER_ID_MAX_CHARS: Final = 200
ERROR_MAX_CHARS: Final = 65536

#: Most headers on one job (D30).
HEADERS_MAX_COUNT: Final = 64
#: Longest header name, in characters (D30).
HEADER_NAME_MAX_CHARS: Final = 256
#: Most bytes of all header names and values together, UTF-8 encoded (D30): room for a
#: W3C trace context with an 8 KiB ``baggage`` and more.
HEADERS_MAX_BYTES: Final = 16384
#: Longest unique key, in characters (Q15): the limit of a header name.
UNIQUE_KEY_MAX_CHARS: Final = HEADER_NAME_MAX_CHARS

_QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}")
RESERVED_PREFIX: Final = "alk_"


def _show(value: object) -> str:
    """A short, safe rendering of an offending value for an error message."""
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{type(value).__name__} of {len(value)} bytes>"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return text


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_queue_name(name: object) -> str:
    """Q1: 1-63 characters from ``[A-Za-z0-9_.:-]``, alphanumeric first, not ``alk_…``."""
    if not isinstance(name, str) or _QUEUE_NAME.fullmatch(name) is None:
        raise InvalidArgument(
            f"queue name must be 1-63 characters from [A-Za-z0-9_.:-] starting with a "
            f"letter or digit; got {_show(name)}"
        )
    if name.startswith(RESERVED_PREFIX):
        raise InvalidArgument(
            f"queue names starting with {RESERVED_PREFIX!r} are reserved for the library; "
            f"got {_show(name)}"
        )
    return name


def check_duration(
    param: str,
    value: object,
    *,
    min_s: float | None = None,
    min_inclusive: bool = True,
) -> float:
    """A finite number of seconds (not a bool), optionally bounded below, at most 100 years
    in magnitude. Returns it as a float."""
    if not _is_number(value):
        raise InvalidArgument(
            f"{param} must be a number of seconds (int or float); got {_show(value)}"
        )
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except OverflowError:  # an int too large for a float
        seconds = DURATION_MAX_S * 2 if value > 0 else -DURATION_MAX_S * 2  # type: ignore[operator]
    if not math.isfinite(seconds):
        raise InvalidArgument(f"{param} must be a finite number of seconds; got {_show(value)}")
    if min_s is not None:
        too_small = seconds < min_s if min_inclusive else seconds <= min_s
        if too_small:
            bound = ">=" if min_inclusive else ">"
            raise InvalidArgument(f"{param} must be {bound} {min_s:g} seconds; got {_show(value)}")
    if abs(seconds) > DURATION_MAX_S:
        raise InvalidArgument(
            f"{param} must be at most {DURATION_MAX_S:g} seconds (100 years) in magnitude; "
            f"got {_show(value)}"
        )
    return seconds


def check_optional_duration(
    param: str, value: object, *, min_s: float, min_inclusive: bool = True
) -> float | None:
    """Like :func:`check_duration`, but ``None`` passes through."""
    if value is None:
        return None
    return check_duration(param, value, min_s=min_s, min_inclusive=min_inclusive)


def check_int(param: str, value: object, *, lo: int, hi: int) -> int:
    """An int (not a bool) in ``[lo, hi]``."""
    if not _is_int(value):
        raise InvalidArgument(f"{param} must be an int; got {_show(value)}")
    number: int = value  # type: ignore[assignment]
    if not lo <= number <= hi:
        raise InvalidArgument(f"{param} must be between {lo} and {hi}; got {_show(value)}")
    # Canonical: a plain int, also for a subclass such as an Enqueued id (Q15), which a
    # driver may not adapt (psycopg refuses a list mixing int and a subclass).
    return number if type(number) is int else int(number)


def check_priority(value: object) -> int:
    """Q2: an int in the 32-bit signed range."""
    return check_int("priority", value, lo=PRIORITY_MIN, hi=PRIORITY_MAX)


def check_max_attempts(param: str, value: object) -> int:
    """Q1/Q2: an int >= 1 (and at most 2**31 - 1)."""
    return check_int(param, value, lo=1, hi=MAX_ATTEMPTS_MAX)


def check_optional_max_attempts(value: object) -> int | None:
    """The per-job ``max_attempts`` override: ``None`` or an int >= 1."""
    if value is None:
        return None
    return check_max_attempts("max_attempts", value)


def check_job_id(value: object) -> int:
    """A job id: an int in the 64-bit signed range. Unknown ids are not errors."""
    return check_int("job_id", value, lo=-JOB_ID_MAX - 1, hi=JOB_ID_MAX)


def check_job_ids(values: object) -> list[int]:
    """Q6: an iterable of job ids, de-duplicated, order kept."""
    if isinstance(values, str | bytes | bytearray | memoryview) or not isinstance(values, Iterable):
        raise InvalidArgument(f"ids must be an iterable of job ids (ints); got {_show(values)}")
    ids = [check_job_id(v) for v in values]
    return list(dict.fromkeys(ids))


def check_aware_datetime(param: str, value: object) -> datetime:
    """A timezone-aware datetime (naive datetimes are ambiguous and rejected)."""
    if not isinstance(value, datetime):
        raise InvalidArgument(f"{param} must be a timezone-aware datetime; got {_show(value)}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise InvalidArgument(
            f"{param} must be timezone-aware (e.g. datetime.now(timezone.utc)); "
            f"got the naive {_show(value)}"
        )
    return value


def check_aware_utc(param: str, value: object) -> datetime:
    """A timezone-aware datetime, converted to UTC; one whose UTC time falls outside
    ``datetime``'s range (e.g. year 1 at +14:00) is invalid, not an ``OverflowError``."""
    aware = check_aware_datetime(param, value)
    try:
        return aware.astimezone(UTC)
    except OverflowError:
        raise InvalidArgument(
            f"{param} must be within the datetime range once converted to UTC; got {aware!r}"
        ) from None


def check_optional_run_at(value: object) -> datetime | None:
    """Q2: ``None`` or a timezone-aware datetime."""
    if value is None:
        return None
    return check_aware_utc("run_at", value)


def check_payload(value: object, max_bytes: int) -> bytes:
    """Q2: bytes, bytearray or memoryview, at most ``max_bytes`` long. Returns bytes.

    The message never shows the payload, only its type and size.
    """
    if isinstance(value, bytes):
        payload = value
    elif isinstance(value, bytearray | memoryview):
        try:
            payload = bytes(value)
        except ValueError:  # a released memoryview
            raise InvalidArgument("payload is a released memoryview; pass live bytes") from None
    else:
        raise InvalidArgument(
            f"payload must be bytes, bytearray or memoryview (encode it yourself, e.g. "
            f"json.dumps(obj).encode()); got a {type(value).__name__}"
        )
    if len(payload) > max_bytes:
        raise InvalidArgument(
            f"payload must be at most {max_bytes} bytes (max_payload_bytes); "
            f"got {len(payload)} bytes"
        )
    return payload


def result_bytes(value: object, max_bytes: int) -> bytes | None:
    """Q19.1: a result as stored: ``None``, or bytes from bytes, bytearray or memoryview
    at most ``max_bytes`` long. Raises ``InvalidArgument`` naming the type or the size
    (never the value): the worker retries a job whose handler returned such a value,
    with the message as its ``last_error``."""
    if value is None:
        return None
    if isinstance(value, bytes):
        result = value
    elif isinstance(value, bytearray | memoryview):
        try:
            result = bytes(value)
        except ValueError:  # a released memoryview
            raise InvalidArgument("result is a released memoryview; return live bytes") from None
    else:
        raise InvalidArgument(
            f"result must be bytes, bytearray, memoryview or None (encode it yourself, "
            f"e.g. json.dumps(obj).encode()); got a {type(value).__name__}"
        )
    if len(result) > max_bytes:
        raise InvalidArgument(f"result of {len(result)} bytes exceeds max_result_bytes={max_bytes}")
    return result


def check_payload_list(values: object) -> list[object]:
    """Q2: ``enqueue_many``'s ``payloads``: an iterable of payloads (each checked later by
    :func:`check_payload`), not a single payload. Returns them as a list."""
    if isinstance(values, bytes | bytearray | memoryview | str):
        raise InvalidArgument(
            "payloads must be an iterable of payloads (e.g. a list of bytes), not a "
            f"single {type(values).__name__}"
        )
    try:
        return list(values)  # type: ignore[call-overload,no-any-return]
    except TypeError:
        raise InvalidArgument(
            f"payloads must be an iterable of bytes; got a {type(values).__name__}"
        ) from None


def check_text(param: str, value: object, *, max_chars: int) -> str:
    """A non-empty str every engine can store: no NUL, no lone surrogate."""
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{param} must be a non-empty str; got {_show(value)}")
    return _check_storable(param, value, max_chars=max_chars)


def _check_storable(param: str, value: str, *, max_chars: int | None, echo: bool = True) -> str:
    """``value`` fits every engine: at most ``max_chars`` characters (``None``: no
    bound), no NUL, no lone surrogate. With ``echo=False`` the message never shows it."""
    if max_chars is not None and len(value) > max_chars:
        raise InvalidArgument(
            f"{param} must be at most {max_chars} characters; got {len(value)} characters"
        )
    got = f"; got {_show(value)}" if echo else ""
    if "\x00" in value:
        raise InvalidArgument(f"{param} must not contain NUL characters{got}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"{param} must be valid Unicode text (no lone surrogates){got}"
        ) from None
    return value


def check_headers(value: object) -> list[tuple[str, str]]:
    """D30: a mapping of at most 64 str names (non-empty, at most 256 characters) to str
    values (empty allowed), each storable on every engine, together at most 16 KiB of
    UTF-8. Returns the pairs; the message never shows a header's value."""
    if not isinstance(value, Mapping):
        raise InvalidArgument(
            f"headers must be a mapping of str to str (e.g. a dict) or None; got a "
            f"{type(value).__name__}"
        )
    try:
        pairs = [(name, text) for name, text in value.items()]
    except Exception as exc:
        raise InvalidArgument(
            f"headers could not be read as a mapping ({type(exc).__name__})"
        ) from None
    if len(pairs) > HEADERS_MAX_COUNT:
        raise InvalidArgument(
            f"headers must have at most {HEADERS_MAX_COUNT} entries; got {len(pairs)}"
        )
    total = 0
    for name, text in pairs:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"a header name must be a non-empty str; got {_show(name)}")
        _check_storable("a header name", name, max_chars=HEADER_NAME_MAX_CHARS)
        if not isinstance(text, str):
            raise InvalidArgument(
                f"header {_show(name)} must have a str value; got a {type(text).__name__}"
            )
        _check_storable(f"header {_show(name)}", text, max_chars=None, echo=False)
        total += len(name.encode("utf-8")) + len(text.encode("utf-8"))
    if total > HEADERS_MAX_BYTES:
        raise InvalidArgument(
            f"headers must be at most {HEADERS_MAX_BYTES} bytes of names and values "
            f"(UTF-8); got {total} bytes"
        )
    return pairs


def check_unique_key(value: object, param: str = "unique_key") -> str:
    """Q15: a unique key, validated as a header name is (D30): a non-empty str of at most
    256 characters, no NUL, no lone surrogate. The message never shows the key (it may
    be derived from private data). Q18.8's ``concurrency_key`` is checked the same way
    (``param`` names it)."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{param} must be a str or None; got a {type(value).__name__}")
    if not value:
        raise InvalidArgument(f"{param} must be 1-{UNIQUE_KEY_MAX_CHARS} characters; got ''")
    return _check_storable(param, value, max_chars=UNIQUE_KEY_MAX_CHARS, echo=False)


def check_unique_keys(values: object, count: int, param: str = "unique_keys") -> list[str | None]:
    """Q15: ``enqueue_many``'s ``unique_keys``: one key (or ``None``) per payload (and
    Q18.8's ``concurrency_keys``, named by ``param``)."""
    if isinstance(values, str | bytes | bytearray | memoryview) or not isinstance(values, Iterable):
        raise InvalidArgument(
            f"{param} must be a sequence of str or None, one per payload; got a "
            f"{type(values).__name__}"
        )
    keys = [None if key is None else check_unique_key(key, param[:-1]) for key in values]
    if len(keys) != count:
        raise InvalidArgument(f"{param} must have one entry per payload ({count}); got {len(keys)}")
    return keys


def check_concurrency_key(value: object) -> str:
    """Q18.8: a concurrency key, checked as a unique key is (1-256 characters, no NUL)."""
    return check_unique_key(value, "concurrency_key")


def check_concurrency_keys(values: object, count: int) -> list[str | None]:
    """Q18.8: ``enqueue_many``'s ``concurrency_keys``: one key (or ``None``) per payload."""
    return check_unique_keys(values, count, "concurrency_keys")


def check_worker_id(value: object) -> str:
    """Q3: a non-empty str (stored as ``claimed_by``)."""
    return check_text("worker_id", value, max_chars=WORKER_ID_MAX_CHARS)


def check_error_text(value: object) -> str | None:
    """Q4: the ``error`` of retry/fail: ``None`` or a str (empty allowed) every engine can
    store."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"error must be a str or None; got {_show(value)}")
    return _check_storable("error", value, max_chars=ERROR_MAX_CHARS)


#: Q19.7: the longest progress text a running job may report.
PROGRESS_MAX_CHARS: Final = 1024


def check_progress(value: object) -> str | None:
    """Q19.7: a job's progress text: ``None`` (no news) or a str (empty allowed) of at most
    1,024 characters every engine can store (no NUL, no lone surrogate)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"progress must be a str or None; got {_show(value)}")
    return _check_storable("progress", value, max_chars=PROGRESS_MAX_CHARS)


def check_batch_size(value: object) -> int:
    """Q3: ``n`` must be an int; any int is accepted (``n <= 0`` claims nothing)."""
    if not _is_int(value):
        raise InvalidArgument(f"n must be an int; got {_show(value)}")
    return value  # type: ignore[return-value]
