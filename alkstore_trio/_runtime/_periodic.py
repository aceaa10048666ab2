"""Q17.8: the periodic actor, which fires a worker's ``periodic=`` schedules.

Why it holds no schedule state of its own: exactly-once firing is the store's
(``store.fire_periodic`` is atomic and serialized per schedule name on the engine's
clock), so every worker of a fleet may call it at any time and at most one of them
enqueues a given fire time. The actor only decides *when* to ask: at start, then when
the answer says the earliest next fire time has come. That answer is a delay on the
engine's clock; the actor waits it out on trio's (monotonic) clock, so a worker whose
wall clock is off by an hour still asks on time. It asks again at least every
:data:`~alkstore_trio._core._periodic.PERIODIC_RECHECK_S` seconds: the safety re-check,
which also picks up a definition another deploy wrote and keeps ``last_seen_at`` fresh
(Q17.6).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import trio

from .._core._periodic import PERIODIC_RECHECK_S, check_schedules, format_fire_at
from .._errors import EngineError
from ._events import describe

if TYPE_CHECKING:
    from .._core import Periodic
    from .._store import Store
    from ._events import Reporter
    from ._supervisor import Supervisor

#: How long a failed ``fire_periodic`` waits before it is tried again; each further
#: failure in a row doubles the wait, up to :data:`PERIODIC_RETRY_MAX_S`.
PERIODIC_RETRY_S: Final = 1.0
#: The longest wait between two failed ``fire_periodic`` calls.
PERIODIC_RETRY_MAX_S: Final = 16.0


def retry_delay_s(failures: int) -> float:
    """Q17.8: the wait after ``failures`` (>= 1) failed calls in a row: 1, 2, 4, 8, 16,
    16... seconds."""
    return min(PERIODIC_RETRY_S * 2.0 ** min(failures - 1, 32), PERIODIC_RETRY_MAX_S)


@dataclass(frozen=True)
class PeriodicActor:
    """A worker's schedules (``periodic=``), checked when the worker is made."""

    store: Store
    schedules: tuple[Periodic, ...]

    @classmethod
    def of(cls, store: Store, schedules: object) -> PeriodicActor:
        """Check ``Worker(periodic=...)``: schedules with distinct names (empty: none).

        Raises:
            InvalidArgument: ``schedules`` is not an iterable of distinct ``Periodic``.
        """
        return cls(store, check_schedules(schedules))

    async def start(
        self, supervisor: Supervisor, reporter: Reporter, counts: dict[str, int]
    ) -> None:
        """Start :func:`serve_periodic` under the worker's supervisor (as ``"periodic"``,
        restarted like the sweeper), when there are schedules."""
        if self.schedules:
            await supervisor.start(
                serve_periodic, self.store, self.schedules, reporter, counts, name="periodic"
            )


async def serve_periodic(
    store: Store,
    schedules: tuple[Periodic, ...],
    reporter: Reporter,
    counts: dict[str, int],
    *,
    task_status: trio.TaskStatus[None],
) -> None:
    """Q17.8: ``fire_periodic`` now, then whenever the earliest next fire time comes
    (at most :data:`PERIODIC_RECHECK_S` apart). A failing call (an ``EngineError``: the
    database away, a lock wait past its bound, a session PostgreSQL ended, Q17.9) is
    logged and retried with a doubling wait (:func:`retry_delay_s`); the actor never
    ends the worker over it."""
    task_status.started()
    failures = 0
    while True:
        try:
            tick = await store.fire_periodic(schedules)
        except Exception as exc:
            failures += 1
            delay_s = retry_delay_s(failures)
            counts["engine_errors"] += isinstance(exc, EngineError)
            reporter.log(
                logging.WARNING,
                "periodic_failed",
                None,
                "firing periodic schedules failed (%s: %s); next try in %gs",
                type(exc).__name__,
                exc,
                delay_s,
                error=describe(exc),
            )
        else:
            failures = 0
            queue_of = {p.name: p.queue for p in schedules}
            for fired in tick.fired:
                reporter.log(
                    logging.INFO,
                    "periodic_fired",
                    None,
                    "schedule %r enqueued job %d for its fire time %s",
                    fired.name,
                    fired.job_id,
                    format_fire_at(fired.fire_at),
                    queue=queue_of[fired.name],
                )
            delay_s = tick.next_in_s
        await trio.sleep(min(delay_s, PERIODIC_RECHECK_S))
