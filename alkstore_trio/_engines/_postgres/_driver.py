"""The PostgreSQL driver: psycopg 3 connections driven by trio, and the choice between
its two implementations (:mod:`._native`, :mod:`._threaded`) behind one interface
(:mod:`._connection`). Import the driver from here.

Why this module looks the way it does
-------------------------------------
psycopg's async API only runs on asyncio. Measured on the project's machines, the
alternatives rank like this: driving psycopg's own connection with its socket waits done
by :func:`trio.lowlevel.wait_readable` / :func:`~trio.lowlevel.wait_writable` runs at
about the speed of psycopg's asyncio connection (≈70–80 µs of client CPU per query);
sync psycopg in worker threads at 0.5–0.75× of that; trio-asyncio bridging at 0.3×. The
native variant also behaves best under cancellation. So that is the default.

psycopg does all of its protocol work in generators (``psycopg.generators``) that yield
"wait until the socket is readable/writable" and are resumed with "it is". A
connection's ``wait()`` method is the single place where those generators meet an event
loop, and ``connection.lock`` is the only other asyncio object on the query path. The
native driver subclasses :class:`psycopg.AsyncConnection` and replaces exactly those two:
``wait()`` waits with trio, and the lock is an owner-less trio lock. Query conversion,
adaptation, prepared statements and result parsing stay psycopg's own code. Connecting
(psycopg's async ``connect`` uses asyncio) and server-side cancellation drive psycopg's
connection generators the same way.

The native driver (:mod:`._native`) is the only place that touches psycopg internals.
They are listed in :data:`INTERNALS`, psycopg is pinned to ``>=3.3,<3.4``,
:func:`internals_problems` checks the names and signatures at import, and
``tests/postgres/test_driver.py`` fails loudly when any of them changes. Outside the
tested range (or when the internals changed, or with ``ALKSTORE_PG_DRIVER=thread``)
:func:`connect` falls back, with a warning, to the *thread driver*: psycopg's public
sync API in worker threads behind a cancel-aware wrapper. Both drivers implement the
same :class:`Connection`; how it behaves under cancellation and on errors is written
once, in :mod:`._connection`.
"""

from __future__ import annotations

import os
import warnings
from typing import Final, Literal

from ..._errors import InvalidArgument
from ._connection import CANCEL_GRACE_S as CANCEL_GRACE_S
from ._connection import PREPARE_THRESHOLD as PREPARE_THRESHOLD
from ._connection import ROLLBACK_TIMEOUT_S as ROLLBACK_TIMEOUT_S
from ._connection import Connection as Connection
from ._connection import ConnectionBroken as ConnectionBroken
from ._connection import Notify as Notify
from ._connection import Params as Params
from ._native import INTERNALS as INTERNALS
from ._native import SUPPORTED_PSYCOPG as SUPPORTED_PSYCOPG
from ._native import _native_unsupported as _native_unsupported
from ._native import _version_tuple as _version_tuple
from ._native import connect_native as connect_native
from ._native import internals_problems as internals_problems
from ._threaded import connect_threaded as connect_threaded

__all__ = [
    "CANCEL_GRACE_S",
    "DRIVER",
    "DRIVER_ENV_VAR",
    "INTERNALS",
    "PREPARE_THRESHOLD",
    "Connection",
    "ConnectionBroken",
    "Notify",
    "Params",
    "connect",
    "connect_native",
    "connect_threaded",
    "internals_problems",
    "select_driver",
]


#: ``auto`` (default): the native driver when supported, else the thread driver with a
#: warning. ``thread``: always the thread driver.
DRIVER_ENV_VAR: Final = "ALKSTORE_PG_DRIVER"


def select_driver(
    requested: str | None, unsupported_because: str | None
) -> tuple[Literal["native", "thread"], str | None]:
    """Pick the driver :func:`connect` uses.

    Args:
        requested: The value of ``ALKSTORE_PG_DRIVER``: ``None``, ``""`` or ``"auto"``
            for the native driver when supported, ``"thread"`` for the thread driver.
        unsupported_because: Why the native driver cannot run, or ``None``.

    Returns:
        The driver, and the warning to give (or ``None``).

    Raises:
        InvalidArgument: ``requested`` is none of the values above.
    """
    choice = (requested or "auto").strip().lower()
    if choice == "thread":
        return "thread", None
    if choice != "auto":
        raise InvalidArgument(
            f"{DRIVER_ENV_VAR} must be 'auto' or 'thread'; got {requested!r}: "
            "unset it to use the native driver when supported"
        )
    if unsupported_because is None:
        return "native", None
    return "thread", (
        f"{unsupported_because}: alkstore_trio falls back to the slower thread driver "
        "(psycopg's sync API in worker threads); install psycopg>=3.3,<3.4"
    )


DRIVER: Literal["native", "thread"]
_warning: str | None
DRIVER, _warning = select_driver(os.environ.get(DRIVER_ENV_VAR), _native_unsupported())
if _warning is not None:
    warnings.warn(_warning, RuntimeWarning, stacklevel=2)


async def connect(conninfo: str, *, connect_timeout_s: float, application_name: str) -> Connection:
    """Open a connection in autocommit mode with the driver chosen at import (:data:`DRIVER`).

    Args:
        conninfo: A libpq connection string or ``postgresql://`` URL. Every host and
            resolved address in it is tried in turn.
        connect_timeout_s: The whole connect (name resolution and every attempt) must
            finish within this many seconds.
        application_name: Shown in ``pg_stat_activity.application_name``; overrides one
            in ``conninfo``.

    Returns:
        The connection; statements executed twice or more are prepared on the server
        (:data:`PREPARE_THRESHOLD`).

    Raises:
        psycopg.errors.ConnectionTimeout: not connected within ``connect_timeout_s``.
        psycopg.OperationalError: the server refused or could not be reached (every
            attempt is listed in the message).
        psycopg.ProgrammingError: ``conninfo`` is malformed.
        InvalidArgument: ``connect_timeout_s`` is not a finite number > 0.
    """
    if DRIVER == "native":
        return await connect_native(
            conninfo, connect_timeout_s=connect_timeout_s, application_name=application_name
        )
    return await connect_threaded(
        conninfo, connect_timeout_s=connect_timeout_s, application_name=application_name
    )
