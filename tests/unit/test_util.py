"""The shared helpers of ``alkstore_trio._util``: one answer for every caller."""

from __future__ import annotations

import functools
import math

import pytest

from alkstore_trio._util import finite_number, is_async_callable, lone_exception


async def _handler(job: object, extra: int = 0) -> None:
    pass


def _sync(job: object) -> None:
    pass


class _AsyncCall:
    async def __call__(self, job: object) -> None:
        pass


class _SyncCall:
    def __call__(self, job: object) -> None:
        pass


@pytest.mark.parametrize(
    "fn",
    [
        _handler,
        functools.partial(_handler, extra=1),
        functools.partial(functools.partial(_handler), extra=1),
        _AsyncCall(),
        functools.partial(_AsyncCall()),
        _AsyncCall().__call__,
    ],
)
def test_r3_async_callables_are_recognised_through_partials_and_objects(fn):
    assert is_async_callable(fn)


@pytest.mark.parametrize(
    "fn", [_sync, functools.partial(_sync), _SyncCall(), _AsyncCall, None, 3, "handler"]
)
def test_r3_everything_else_is_not_an_async_callable(fn):
    assert not is_async_callable(fn)


def test_lone_exception_unwraps_exactly_one():
    one = ValueError("x")
    assert lone_exception(BaseExceptionGroup("g", [one])) is one
    group = BaseExceptionGroup("g", [ValueError("a"), KeyError("b")])
    assert lone_exception(group) is group


@pytest.mark.parametrize(("value", "expected"), [(0, 0.0), (1.5, 1.5), (-2, -2.0), (10**3, 1e3)])
def test_finite_number_accepts_finite_ints_and_floats(value, expected):
    assert finite_number(value) == expected


@pytest.mark.parametrize("value", [True, False, math.inf, -math.inf, math.nan, 10**400, "1", None])
def test_finite_number_refuses_bools_infinities_nan_and_non_numbers(value):
    assert finite_number(value) is None
