"""The engine seam: the protocol every engine implements, and the engines that ship.

``open_store(url)`` makes an engine from a URL; ``open_store(engine)`` takes an instance
(Q14), so a program can build one itself, wrap one (to inject faults, count calls, or
log), or bring its own::

    from alkstore_trio.engine import MemoryEngine

    async with alkstore_trio.open_store(MemoryEngine(clock=ManualClock())) as store:
        ...

The protocol (:class:`Engine`) is split by who uses it: :class:`WorkPath` (producers and
workers: enqueue, claim, heartbeat, ack, retry, fail) and :class:`OperatorPath` (reads,
stats, cancel, redrive, purge, sweep), plus the lifecycle, transactions and wake
listeners. Claim operations take lists: a single ack is a batch of one (Q13). The store
facade validates every argument first, so an engine receives only canonical values.

An engine is conforming when :func:`alkstore_trio.testing.check_conformance` and
:func:`alkstore_trio.testing.check_engine_against_model` pass on a harness whose
``open_store`` opens ``alkstore_trio.open_store(YourEngine(...))``; both use only public
names. :class:`WakeHub` is the fan-out an engine publishes its wakes into; it makes the
:class:`~alkstore_trio.WakeListener` objects that ``open_wake_listener`` returns.
:class:`ForwardingEngine` hands every call to another engine: subclass it to count,
trace, log or inject faults around any engine.

:class:`PostgresEngine` needs the ``postgres`` extra (psycopg); it is imported on first
use.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._core import EnqueueSpec as EnqueueSpec
from ._engines._forwarding import ForwardingEngine as ForwardingEngine
from ._engines._memory import Clock as Clock
from ._engines._memory import MemoryEngine as MemoryEngine
from ._engines._memory import WallClock as WallClock
from ._engines._protocol import Claim as Claim
from ._engines._protocol import Completion as Completion
from ._engines._protocol import Engine as Engine
from ._engines._protocol import EngineTransaction as EngineTransaction
from ._engines._protocol import FailItem as FailItem
from ._engines._protocol import OperatorPath as OperatorPath
from ._engines._protocol import ProgressItem as ProgressItem
from ._engines._protocol import RetryItem as RetryItem
from ._engines._protocol import SqlParams as SqlParams
from ._engines._protocol import WorkPath as WorkPath
from ._engines._wake import DoneListener as DoneListener
from ._engines._wake import WakeHub as WakeHub

if _TYPE_CHECKING:
    from ._engines._postgres._backend import PostgresEngine as PostgresEngine


def __getattr__(name: str) -> object:
    if name == "PostgresEngine":
        from ._engines._postgres._backend import PostgresEngine

        return PostgresEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
