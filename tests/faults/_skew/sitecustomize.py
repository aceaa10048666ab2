"""Shift this process's wall clock by ``ALKSTORE_TEST_CLOCK_SKEW_S`` seconds.

Put this folder first on ``PYTHONPATH`` of a subprocess and set
``ALKSTORE_TEST_CLOCK_SKEW_S`` (e.g. ``3600`` or ``-3600``): Python imports
``sitecustomize`` at startup, before any module of the program, so every later read of the
wall clock through Python sees the shifted time. Used by
``tests/faults/test_fault_clock_skew.py`` to run workers whose local clock is an hour
wrong (libfaketime would do it for the whole process, C code included, but it is not
installed, and nothing in the worker reads the clock from C).

What is shifted: ``time.time``, ``time.time_ns``, ``datetime.datetime.now``/``utcnow``/
``today`` and ``datetime.date.today`` (``time.localtime()`` and friends are left alone:
logging, the one user here, converts the shifted ``record.created``).
``datetime.datetime`` and ``datetime.date`` are C types whose ``now()`` reads the system
clock directly, so the module's attributes are replaced by subclasses with shifted
constructors; their metaclass makes ``isinstance`` and ``issubclass`` answer for the real
types, so values made by C code (psycopg's, say) still pass every
``isinstance(value, datetime)`` check. What is not shifted: the monotonic clocks
(``time.monotonic``, ``time.perf_counter``), hence trio's clock, which is right: a skewed
host's monotonic clock still measures durations correctly.

After patching, the module checks that the shift is in effect (else the process exits
with an error, so a test can never pass on an unshifted clock by mistake).
"""

from __future__ import annotations

import datetime as _datetime_module
import os
import sys
import time as _time_module
from typing import Any

SKEW_ENV = "ALKSTORE_TEST_CLOCK_SKEW_S"

_real_time = _time_module.time
_real_time_ns = _time_module.time_ns
_RealDatetime = _datetime_module.datetime
_RealDate = _datetime_module.date


def _install(skew_s: float) -> None:
    skew_ns = round(skew_s * 1e9)

    def time() -> float:
        return _real_time() + skew_s

    def time_ns() -> int:
        return _real_time_ns() + skew_ns

    class _RealTypeCheck(type):
        """``isinstance(x, SkewedDatetime)`` answers for the real type (as freezegun's
        fake types do)."""

        _real: type

        def __instancecheck__(cls, instance: Any) -> bool:
            return isinstance(instance, cls._real)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, cls._real)

    # No __dict__ (empty __slots__): the subclasses keep the C types' instance size,
    # which C extensions compiled against datetime (psycopg's) check when imported.
    class SkewedDate(_RealDate, metaclass=_RealTypeCheck):
        __slots__ = ()
        _real = _RealDate

        @classmethod
        def today(cls) -> Any:
            return _RealDate.fromtimestamp(time())

    class SkewedDatetime(_RealDatetime, metaclass=_RealTypeCheck):
        __slots__ = ()
        _real = _RealDatetime

        @classmethod
        def now(cls, tz: _datetime_module.tzinfo | None = None) -> Any:
            return _RealDatetime.fromtimestamp(time(), tz)

        @classmethod
        def utcnow(cls) -> Any:
            return _RealDatetime.fromtimestamp(time(), _datetime_module.UTC).replace(tzinfo=None)

        @classmethod
        def today(cls) -> Any:
            return _RealDatetime.fromtimestamp(time())

    _time_module.time = time
    _time_module.time_ns = time_ns
    _datetime_module.date = SkewedDate  # type: ignore[misc]
    _datetime_module.datetime = SkewedDatetime  # type: ignore[misc]


def _check(skew_s: float) -> None:
    """Exit with an error unless every patched reading is shifted by ``skew_s``."""
    from datetime import UTC, date, datetime

    readings = {
        "time.time()": _time_module.time() - _real_time(),
        "time.time_ns()": (_time_module.time_ns() - _real_time_ns()) / 1e9,
        "datetime.now(UTC)": datetime.now(UTC).timestamp() - _real_time(),
        "datetime.now()": datetime.now().timestamp() - _real_time(),
        "datetime.utcnow()": datetime.utcnow().replace(tzinfo=UTC).timestamp() - _real_time(),
    }
    wrong: dict[str, object] = {
        name: round(off, 3) for name, off in readings.items() if abs(off - skew_s) > 5
    }
    expected_day = _RealDate.fromtimestamp(_real_time() + skew_s)
    if date.today() not in (expected_day, _RealDate.fromtimestamp(_real_time() + skew_s - 5)):
        wrong["date.today()"] = str(date.today())
    real_value = _RealDatetime(2030, 1, 1, tzinfo=UTC)
    if not (isinstance(real_value, datetime) and isinstance(real_value, date)):
        wrong["isinstance"] = "a real datetime is not an instance of the patched types"
    if wrong:
        sys.exit(f"sitecustomize: the clock skew of {skew_s:g}s is not in effect: {wrong}")


def _skew_from_env() -> float | None:
    text = os.environ.get(SKEW_ENV)
    if not text:
        return None
    try:
        skew_s = float(text)
    except ValueError:
        sys.exit(f"sitecustomize: {SKEW_ENV} must be a number of seconds; got {text!r}")
    if skew_s != skew_s or abs(skew_s) > 10 * 365 * 86400:
        sys.exit(f"sitecustomize: {SKEW_ENV} must be a finite shift; got {text!r}")
    return skew_s


_skew_s = _skew_from_env()
if _skew_s is not None:
    _install(_skew_s)
    _check(_skew_s)
