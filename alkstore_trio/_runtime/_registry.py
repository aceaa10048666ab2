"""Q21.3: the registry actor, which keeps the worker's row in the worker registry.

Why an actor of its own rather than a statement beside the claims: the registry must
cost the hot path nothing. The claim, heartbeat and settle statements are the worker's
performance budget; this actor sends one statement every :data:`WORKER_BEAT_S` of
trio's clock, whatever the worker runs, and nothing else in the worker knows of it. It
is advisory: a write that fails is logged and tried at the next beat, and the worker
never stops over it (a schema not migrated yet, a database away for a while).
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from .._core._workers import (
    HOST_MAX_CHARS,
    VERSION_MAX_CHARS,
    WORKER_BEAT_S,
    WORKER_STOP_WRITE_S,
    WorkerRegistration,
)
from .._errors import EngineError, StoreClosed
from ._events import describe

if TYPE_CHECKING:
    from .._core._workers import BeatPhase
    from .._store import Store
    from ._events import Reporter
    from ._supervisor import Supervisor
    from ._worker import Worker


@functools.cache
def library_version() -> str:
    """The installed alkstore_trio's version ('' when the metadata is missing)."""
    try:
        return importlib.metadata.version("alkstore_trio")[:VERSION_MAX_CHARS]
    except importlib.metadata.PackageNotFoundError:
        return ""


def registration_of(
    worker_id: str, queues: tuple[str, ...], concurrency: int
) -> WorkerRegistration:
    """Q21.1: what this process registers for a worker."""
    host = socket.gethostname()[:HOST_MAX_CHARS].replace("\x00", "") or "unknown"
    return WorkerRegistration(
        worker_id=worker_id,
        host=host,
        pid=os.getpid(),
        queues=queues,
        concurrency=concurrency,
        version=library_version(),
    )


@dataclass
class RegistryActor:
    """A worker's registration and whether its start was written (Q21.3)."""

    store: Store
    registration: WorkerRegistration
    reporter: Reporter
    counts: dict[str, int]
    #: A start was tried: the way out of ``run`` writes the stop.
    tried: bool = False
    #: A start succeeded: later writes are beats.
    registered: bool = False

    @classmethod
    def of(cls, store: Store, worker: Worker, concurrency: int) -> RegistryActor:
        """The registry actor of ``worker`` (made by its ``__init__``)."""
        queues = tuple(queue.name for queue in worker.queues)
        registration = registration_of(worker.worker_id, queues, concurrency)
        return cls(store, registration, worker._reporter, worker._counts)

    async def start(self, supervisor: Supervisor) -> None:
        """Start :func:`serve_registry` under the worker's supervisor (as
        ``"registry"``, restarted like the sweeper); it has registered (or failed to,
        logged) when this returns."""
        await supervisor.start(serve_registry, self, name="registry")

    async def write(self, phase: BeatPhase) -> bool:
        """One ``beat_worker``; a failure is logged and counted, never raised."""
        try:
            await self.store.beat_worker(self.registration, phase)
        except StoreClosed:
            return False  # the worker is ending with its store: nothing to write to
        except Exception as exc:
            self.counts["engine_errors"] += isinstance(exc, EngineError)
            self.reporter.log(
                logging.WARNING,
                "worker_beat_failed",
                None,
                "writing the worker registry (%s) failed (%s: %s); next try in %gs",
                phase,
                type(exc).__name__,
                exc,
                WORKER_BEAT_S,
                error=describe(exc),
            )
            return False
        return True

    async def stop(self) -> None:
        """Q21.3: on the way out of ``run``, mark the row stopped: shielded, for at most
        :data:`WORKER_STOP_WRITE_S`."""
        if not self.tried:
            return
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + WORKER_STOP_WRITE_S
            await self.write("stop")


async def serve_registry(actor: RegistryActor, *, task_status: trio.TaskStatus[None]) -> None:
    """Q21.3: register (``"start"``), report started, then beat every
    :data:`WORKER_BEAT_S` (a start again while no start has succeeded)."""
    if not actor.registered:
        actor.tried = True
        actor.registered = await actor.write("start")
    task_status.started()
    while True:
        await trio.sleep(WORKER_BEAT_S)
        phase: BeatPhase = "beat" if actor.registered else "start"
        actor.registered = await actor.write(phase) or actor.registered
