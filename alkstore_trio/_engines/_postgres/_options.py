"""The PostgreSQL engine's options: checked before anything connects, the connection
string kept out of reprs, and the choice of driver."""

from __future__ import annotations

from typing import TypedDict

from ..._core import _validate as v
from ..._errors import InvalidArgument
from . import _driver, _pool, _schema, _sql
from ._dsn import redact_dsn

__all__ = ["PostgresOptions", "check_options", "driver_connect"]


class PostgresOptions(TypedDict):
    """The checked PostgreSQL options of ``open_store``."""

    schema: str
    pool_size: int
    connect_timeout_s: float
    migrate: _schema.MigratePolicy
    application_name: str
    listen: bool


def check_options(
    *,
    schema: object,
    pool_size: object,
    connect_timeout_s: object,
    migrate: object,
    application_name: object,
    listen: object = True,
) -> PostgresOptions:
    """Validate ``open_store``'s PostgreSQL options before anything connects."""
    if not isinstance(listen, bool):
        raise InvalidArgument(f"listen must be True or False; got {type(listen).__name__}")
    return PostgresOptions(
        schema=_sql.check_schema_name(schema),
        pool_size=v.check_int("pool_size", pool_size, lo=1, hi=1000),
        connect_timeout_s=v.check_duration(
            "connect_timeout_s", connect_timeout_s, min_s=0, min_inclusive=False
        ),
        migrate=_schema.check_policy(migrate),
        application_name=v.check_text("application_name", application_name, max_chars=50),
        listen=listen,
    )


class _Conninfo:
    """A connection string kept out of reprs: it may hold a password, and an engine's
    attributes end up in logs and tracebacks (``vars(engine)``)."""

    __slots__ = ("redacted", "value")

    def __init__(self, value: str) -> None:
        self.value = value
        self.redacted = redact_dsn(value)

    def __repr__(self) -> str:
        return f"<conninfo {self.redacted}>"


def driver_connect(driver: object) -> _pool.ConnectFn[_driver.Connection]:
    if driver is None:
        return _driver.connect
    if driver == "native":
        return _driver.connect_native
    if driver == "thread":
        return _driver.connect_threaded
    raise InvalidArgument(f"driver must be 'native', 'thread' or None; got {driver!r}")
