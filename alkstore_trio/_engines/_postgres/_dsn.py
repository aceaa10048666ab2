"""Connection strings and connection errors: the one place that reads a DSN for people.

A DSN may carry a password, so it is never shown whole: :func:`redact_dsn` keeps the
user, hosts, ports and database, and :func:`hide_password` masks the password wherever a
message might echo it (libpq's own parse errors quote the whole string).

Why connection errors are sorted into kinds. The pool retries a failed connect until
``connect_timeout_s``, because a server that restarts or a network that blinks comes
back. Some answers never change by waiting: an unknown database or role, a failed
authentication, a host name that does not resolve, a port that is not a number. Waiting
ten seconds for them only hides the answer, so they are *permanent* and fail at once.
*Refused* (nobody listens on the port) is in between: before a pool ever connected it is
almost always a wrong port or a stopped server, and failing at once is what an operator
wants; once the pool has connected it is the server restarting, and retrying is right.
The kinds are read from libpq's SQLSTATE when there is one and else from its message
(English; a localized message is taken as transient, which only costs the timeout).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Final, Literal

import psycopg
import psycopg.conninfo

from ..._errors import EngineError, InvalidArgument

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "DSN_SHAPE",
    "ConnectFailure",
    "check_dsn",
    "connect_error",
    "connect_failure",
    "describe",
    "engine_errors",
    "hide_password",
    "password_of",
    "redact_dsn",
]

#: The shape of a DSN, for messages.
DSN_SHAPE: Final = "postgresql://user[:password]@host[:port]/dbname or 'host=... dbname=...'"

#: How a failed connect is handled: ``permanent`` fails at once, ``refused`` fails at once
#: unless the pool connected before, ``transient`` is retried until the timeout.
ConnectFailure = Literal["permanent", "refused", "transient"]

#: SQLSTATEs of answers that waiting cannot change: authorization (class 28), an unknown
#: database (3D000), too many connections for the role is *not* here (it passes).
_PERMANENT_SQLSTATES: Final = frozenset({"28000", "28P01", "3D000"})
#: Fragments of libpq messages that mean the same (checked lowercased).
_PERMANENT_TEXTS: Final = (
    "does not exist",  # database "x" / role "x"
    "authentication failed",
    "no password supplied",
    "no pg_hba.conf entry",
    "name or service not known",
    "nodename nor servname provided",
    "servname not supported",
    "no address associated with hostname",
    "invalid integer value",
    "invalid port number",
    "invalid connection option",
    "invalid sslmode value",
)
_REFUSED_TEXTS: Final = ("connection refused",)


def _params(conninfo: str) -> dict[str, object] | None:
    try:
        return dict(psycopg.conninfo.conninfo_to_dict(conninfo))
    except psycopg.Error:
        return None


def redact_dsn(conninfo: str) -> str:
    """The connection string without its password, for messages (host, port, user and
    database only): ``postgresql://user@host:port/dbname``; ``<dsn>`` if it cannot be
    parsed."""
    params = _params(conninfo)
    if params is None:
        return "<dsn>"
    user = params.get("user")
    host = params.get("host") or "localhost"
    port = params.get("port")
    dbname = params.get("dbname") or ""
    who = f"{user}@" if user else ""
    where = f"{host}:{port}" if port else f"{host}"
    return f"postgresql://{who}{where}/{dbname}"


def password_of(conninfo: str) -> str | None:
    """The DSN's password, or ``None`` (none, or the DSN cannot be parsed)."""
    params = _params(conninfo)
    secret = None if params is None else params.get("password")
    return None if not secret else str(secret)


def hide_password(text: str, conninfo: str) -> str:
    """``text`` with the DSN's password, if it has one, replaced by ``***``."""
    password = password_of(conninfo)
    return text.replace(password, "***") if password else text


def check_dsn(conninfo: object) -> str:
    """``conninfo`` if libpq can parse it and its ports are numbers.

    Raises:
        InvalidArgument: it is not a str, libpq cannot parse it, or a port is not a
            number in 1..65535. The message never quotes the DSN (it may hold a
            password).
    """
    if not isinstance(conninfo, str) or not conninfo.strip():
        raise InvalidArgument(f"the DSN must be a non-empty string; expected {DSN_SHAPE}")
    params = _params(conninfo)
    if params is None:
        raise InvalidArgument(
            "the DSN is not a PostgreSQL URL or libpq conninfo (the value is not shown: it "
            f"may hold a password); expected {DSN_SHAPE}"
        )
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise InvalidArgument(
                f"the DSN's port {port!r} is not a number in 1..65535; "
                "e.g. postgresql://app@db.example:5432/shop"
            )
    return conninfo


def connect_failure(exc: BaseException) -> ConnectFailure:
    """The kind of a failed connect attempt (see the module docstring)."""
    if isinstance(exc, InvalidArgument | psycopg.ProgrammingError):
        return "permanent"  # a malformed DSN
    if not isinstance(exc, psycopg.Error):
        return "transient"
    if (exc.sqlstate or "") in _PERMANENT_SQLSTATES:
        return "permanent"
    text = str(exc).lower()
    if "temporary failure" in text:
        return "transient"
    if any(fragment in text for fragment in _PERMANENT_TEXTS):
        return "permanent"
    if any(fragment in text for fragment in _REFUSED_TEXTS):
        return "refused"
    return "transient"


def describe(exc: BaseException, conninfo: str) -> str:
    """The cause of a driver error in one line, password masked: for a failed connect,
    libpq's reason without its preamble (``database "x" does not exist``)."""
    if isinstance(exc, psycopg.ProgrammingError) and _params(conninfo) is None:
        return "the DSN is not a PostgreSQL URL or libpq conninfo"
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    first = lines[0]
    if " failed: " in first:
        first = first.rsplit(" failed: ", 1)[1]
    for preamble in ("FATAL:", "ERROR:", "connection failed:"):
        first = first.removeprefix(preamble).strip()
    if "Multiple connection attempts failed" in str(exc):
        first += f" (and {sum(line.startswith('- ') for line in lines) - 1} more attempt(s))"
    return hide_password(" ".join(first.split()) or type(exc).__name__, conninfo)


def connect_error(
    exc: BaseException, conninfo: str, *, timeout_s: float | None = None
) -> Exception:
    """Our error for a connect that failed with ``exc``: :class:`InvalidArgument` for a
    malformed DSN, else :class:`EngineError` naming the cause (``timeout_s``: after
    retrying that long)."""
    if isinstance(exc, InvalidArgument):
        return exc
    where = redact_dsn(conninfo)
    if isinstance(exc, psycopg.ProgrammingError) or (
        isinstance(exc, psycopg.Error) and "invalid integer value" in str(exc)
    ):
        return InvalidArgument(f"cannot connect to {where}: {describe(exc, conninfo)}")
    within = "" if timeout_s is None else f" within {timeout_s:g} s"
    return EngineError(f"cannot connect to {where}{within}: {describe(exc, conninfo)}")


@contextlib.contextmanager
def engine_errors(conninfo: str, doing: str) -> Iterator[None]:
    """Turn driver errors raised in the block into :class:`EngineError`, with ``doing``
    (e.g. ``"migrating schema 'shop'"``) and the cause named, password masked."""
    try:
        yield
    except psycopg.Error as exc:
        raise EngineError(
            f"{doing} on {redact_dsn(conninfo)} failed: {describe(exc, conninfo)}"
        ) from exc
