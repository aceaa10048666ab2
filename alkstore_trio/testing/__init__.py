"""Public test helpers for users of alkstore_trio and for engine authors.

- :class:`ManualClock`: a clock that moves only when told to; :class:`TrioClock`: one
  that follows trio's (mock) clock, for workers under ``MockClock``.
- :class:`EngineHarness` / :class:`MemoryHarness`: how the suites drive one engine.
- :func:`check_conformance` / :data:`CONFORMANCE_CHECKS`: the contract (Q1-Q13) as one
  suite every engine must pass.
- :class:`ReferenceModel`: a naive, obviously-correct oracle of the contract.
- :class:`HistoryRecorder` / :func:`check_history`: record workers' events and check a
  run job by job (leases, claim tokens, nothing lost).
- :func:`check_engine_against_model` / :func:`engine_vs_model_test`: model-check an
  engine against the :class:`ReferenceModel` (needs Hypothesis; imported on first use).
- :func:`perform`, :func:`drain`, :func:`enqueued_jobs`, :func:`assert_enqueued` and
  :class:`TaskOutcome`: test helpers for typed tasks (need the ``tasks`` extra; imported
  on first use).
- :class:`PostgresHarness`: the PostgreSQL engine on throwaway schemas with a frozen
  database clock (needs the ``postgres`` extra; imported on first use).
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._clock import ManualClock as ManualClock
from ._clock import TrioClock as TrioClock
from ._conformance import CONFORMANCE_CHECKS as CONFORMANCE_CHECKS
from ._conformance import check_conformance as check_conformance
from ._harness import EngineHarness as EngineHarness
from ._harness import MemoryHarness as MemoryHarness
from ._history import FinalState as FinalState
from ._history import HistoryEvent as HistoryEvent
from ._history import HistoryRecorder as HistoryRecorder
from ._history import HistoryReport as HistoryReport
from ._history import Violation as Violation
from ._history import check_history as check_history
from ._history import read_final_state as read_final_state
from ._history_files import load_history as load_history
from ._model import ReferenceModel as ReferenceModel

# The state machine needs Hypothesis and PostgresHarness needs psycopg, both optional
# dependencies: import them on first use.
_STATEMACHINE_NAMES = frozenset({"check_engine_against_model", "engine_vs_model_test"})
#: The task helpers need msgspec (the ``tasks`` extra).
_TASK_NAMES = frozenset({"TaskOutcome", "assert_enqueued", "drain", "enqueued_jobs", "perform"})
if _TYPE_CHECKING:
    from ._postgres import PostgresHarness as PostgresHarness
    from ._statemachine import check_engine_against_model as check_engine_against_model
    from ._statemachine import engine_vs_model_test as engine_vs_model_test
    from ._tasks import TaskOutcome as TaskOutcome
    from ._tasks import assert_enqueued as assert_enqueued
    from ._tasks import drain as drain
    from ._tasks import enqueued_jobs as enqueued_jobs
    from ._tasks import perform as perform


def __getattr__(name: str) -> object:
    if name in _STATEMACHINE_NAMES:
        from . import _statemachine

        return getattr(_statemachine, name)
    if name in _TASK_NAMES:
        from . import _tasks

        return getattr(_tasks, name)
    if name == "PostgresHarness":
        from ._postgres import PostgresHarness

        return PostgresHarness
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
