"""alkstore_trio: a durable job queue and actor-style supervision framework for trio.

Layers, each importing only the ones below it (checked by import-linter):

- ``_util``, ``_errors``, ``_core``: shared helpers, the error hierarchy and the pure
  contract (records, validation, backoff, transitions, claim order, retention); no I/O,
  no trio.
- ``_engines``: the engine protocol (public as ``alkstore_trio.engine``) and the engines:
  the in-memory engine actor with its indexed table, and the PostgreSQL engine. Neither
  engine imports the other; psycopg is imported only inside the PostgreSQL engine.
- ``_store``: the public ``Store``/``Queue``/``JobHandle``/``Transaction`` facade,
  identical on every engine; ``_open``: ``open_store`` (a URL or an engine instance).
- ``_runtime``: supervision (``open_supervisor``) and the ``Worker``; never imports an
  engine.
- ``testing``: manual clock, reference model, conformance suite, state machine.
- ``postgres``: PostgreSQL administration (migrate, the migration script, DSN
  redaction); public, but imported explicitly (it needs the ``postgres`` extra when used).
- ``_tasks``: typed tasks (``Tasks``, ``Task``) on top of the queues and the worker; it
  needs the ``tasks`` extra (msgspec), so it is imported on first use of those names.
- ``_cli``: the ``alkstore-trio`` command, a package with one module per command group;
  it reaches PostgreSQL only through ``postgres`` and ``open_store``.

Everything public is re-exported here (except the ``testing``, ``contrib`` and
``postgres`` modules, imported by name); nothing else is public.
"""

import logging as _logging
from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._core import HEADER_SCAN_ROWS as HEADER_SCAN_ROWS
from ._core import Enqueued as Enqueued
from ._core import Headers as Headers
from ._core import Job as Job
from ._core import JobPage as JobPage
from ._core import JobState as JobState
from ._core import Periodic as Periodic
from ._core import PeriodicFired as PeriodicFired
from ._core import PeriodicInfo as PeriodicInfo
from ._core import PeriodicTick as PeriodicTick
from ._core import QueueLimits as QueueLimits
from ._core import QueueOpts as QueueOpts
from ._core import QueueStats as QueueStats
from ._core import StoreStats as StoreStats
from ._core import SweepResult as SweepResult
from ._core import Throttled as Throttled
from ._core import WorkerInfo as WorkerInfo
from ._core import WorkerRegistration as WorkerRegistration
from ._engines._wake import WakeListener as WakeListener
from ._errors import AlkstoreError as AlkstoreError
from ._errors import ClaimLost as ClaimLost
from ._errors import EngineError as EngineError
from ._errors import HandleConsumed as HandleConsumed
from ._errors import InvalidArgument as InvalidArgument
from ._errors import JobGone as JobGone
from ._errors import SchemaError as SchemaError
from ._errors import StoreClosed as StoreClosed
from ._open import open_store as open_store
from ._runtime import AsyncioCancelled as AsyncioCancelled
from ._runtime import ChildStatistics as ChildStatistics
from ._runtime import Fail as Fail
from ._runtime import Handler as Handler
from ._runtime import JobContext as JobContext
from ._runtime import JobTransaction as JobTransaction
from ._runtime import RestartPolicy as RestartPolicy
from ._runtime import Retry as Retry
from ._runtime import Supervisor as Supervisor
from ._runtime import SupervisorEscalated as SupervisorEscalated
from ._runtime import SupervisorStatistics as SupervisorStatistics
from ._runtime import Worker as Worker
from ._runtime import WorkerEvent as WorkerEvent
from ._runtime import WorkerStatistics as WorkerStatistics
from ._runtime import asyncio_handler as asyncio_handler
from ._runtime import current_job as current_job
from ._runtime import open_supervisor as open_supervisor
from ._runtime import sync_handler as sync_handler
from ._store import JobHandle as JobHandle
from ._store import Queue as Queue
from ._store import Store as Store
from ._store import Transaction as Transaction

if _TYPE_CHECKING:
    from ._tasks import Task as Task
    from ._tasks import TaskCall as TaskCall
    from ._tasks import TaskOptions as TaskOptions
    from ._tasks import Tasks as Tasks

__version__ = "0.1.0"

#: The names of the ``tasks`` extra, imported on first use: ``import alkstore_trio`` never
#: imports msgspec.
_TASK_NAMES = frozenset({"Task", "TaskCall", "TaskOptions", "Tasks"})


def __getattr__(name: str) -> object:
    if name in _TASK_NAMES:
        try:
            from . import _tasks
        except ModuleNotFoundError as exc:
            if exc.name != "msgspec":
                raise
            raise ModuleNotFoundError(
                f"alkstore_trio.{name} needs the tasks extra: pip install 'alkstore_trio[tasks]'",
                name="msgspec",
            ) from exc
        return getattr(_tasks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# A library leaves logging to the application: without this, an application that never
# configured logging would get the worker's warnings (and handlers' tracebacks) printed
# to stderr by Python's last-resort handler.
_logging.getLogger("alkstore_trio").addHandler(_logging.NullHandler())
