"""R1: the supervision primitive — one-for-one restarts, the three restart policies, a
sliding-window restart budget and escalation past it, statistics and logging.

Every test runs on trio's ``MockClock(autojump_threshold=0)`` (the ``autojump_clock``
fixture): when every task is blocked, the clock jumps to the next deadline, so children
crash "after 6 seconds" instantly and the times asserted below are exact.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import math
import pickle
from pathlib import Path

import pytest
import trio

from alkstore_trio import AlkstoreError, InvalidArgument
from alkstore_trio._runtime import (
    ChildStatistics,
    Supervisor,
    SupervisorEscalated,
    SupervisorStatistics,
    open_supervisor,
)

LOGGER = "alkstore_trio.supervisor"
RUNTIME = Path(__file__).resolve().parents[2] / "alkstore_trio" / "_runtime"


class Boom(Exception):
    """A child's crash; each one carries the number of the run that raised it."""


class Child:
    """A configurable child: run ``n`` (from 1) calls ``started(f"run {n}")``, sleeps
    ``lifetimes[n - 1]`` seconds and then ends as ``ending`` says; once ``lifetimes`` is
    exhausted it runs until cancelled. Records each run's start time, each crash it raised
    and whether it saw a cancellation."""

    def __init__(self, lifetimes=(), ending="crash"):
        self.lifetimes = list(lifetimes)
        self.ending = ending
        self.starts: list[float] = []
        self.crashes: list[Boom] = []
        self.cancelled = False

    @property
    def runs(self):
        return len(self.starts)

    async def __call__(self, *, task_status=trio.TASK_STATUS_IGNORED):
        self.starts.append(trio.current_time())
        run = self.runs
        task_status.started(f"run {run}")
        try:
            if run > len(self.lifetimes):
                await trio.sleep_forever()
            await trio.sleep(self.lifetimes[run - 1])
        except trio.Cancelled:
            self.cancelled = True
            raise
        if self.ending == "crash":
            crash = Boom(f"crash of run {run}")
            self.crashes.append(crash)
            raise crash


def forever():
    return Child()


class Scenario:
    """Open a supervisor with ``options``, start ``children`` (name → child, or name →
    (child, restart policy)), then run the block for ``block_s`` seconds (until the
    supervisor stops it, by default) and raise ``block_raises`` if given. Keeps the
    supervisor for inspection. A scenario that never ends fails with ``trio.TooSlowError``
    after an hour of mock time, instead of hanging the test run."""

    def __init__(self, children, *, block_s=math.inf, block_raises=None, **options):
        self.children = children
        self.block_s = block_s
        self.block_raises = block_raises
        self.options = options
        self.supervisor = None
        self.block_finished = False

    async def run(self):
        with trio.fail_after(3600):
            await self._run()

    async def _run(self):
        async with open_supervisor(**self.options) as supervisor:
            self.supervisor = supervisor
            for name, spec in self.children.items():
                child, restart = spec if isinstance(spec, tuple) else (spec, "permanent")
                await supervisor.start(child, name=name, restart=restart)
            await trio.sleep(self.block_s)
            if self.block_raises is not None:
                raise self.block_raises
            self.block_finished = True


# --- one-for-one restarts ---------------------------------------------------------------


async def test_r1_a_crashed_child_is_restarted_and_its_sibling_is_not(autojump_clock):
    flaky, steady = Child([1, 1]), forever()
    async with open_supervisor(max_restarts=5, restart_window_s=10) as supervisor:
        await supervisor.start(flaky, name="flaky")
        await supervisor.start(steady, name="steady")
        await trio.sleep(10)

        assert flaky.runs == 3
        assert steady.runs == 1
        assert not steady.cancelled
        stats = supervisor.statistics()
        assert stats.child("flaky").restarts == 2
        assert stats.child("flaky").last_crash is Boom
        assert stats.child("steady").restarts == 0
        assert stats.child("steady").last_crash is None
        assert stats.restarts_total == 2
        assert stats.crashes_total == 2
        assert stats.children_running == 2
    assert steady.cancelled  # only because the block ended


async def test_r1_restarts_are_counted_per_child_and_in_total(autojump_clock):
    a, b = Child([1, 1, 1]), Child([2])
    async with open_supervisor(max_restarts=10, restart_window_s=10) as supervisor:
        await supervisor.start(a, name="a")
        await supervisor.start(b, name="b")
        await trio.sleep(5)
        stats = supervisor.statistics()
    assert [(c.name, c.restarts) for c in stats.children] == [("a", 3), ("b", 1)]
    assert stats.restarts_total == 4
    assert stats.crashes_total == 4
    assert stats.restarts_in_window == 4


# --- the restart budget: a sliding window -------------------------------------------------


async def test_r1_crashes_spread_beyond_the_window_never_escalate(autojump_clock):
    child = Child([6] * 20)
    async with open_supervisor(max_restarts=1, restart_window_s=5) as supervisor:
        await supervisor.start(child)
        await trio.sleep(6 * 20 + 1)
        assert supervisor.statistics().restarts_total == 20
    assert child.runs == 21


async def test_r1_a_restart_is_forgotten_restart_window_s_after_it(autojump_clock):
    # Crashes at t=1, 2, 11, 12: at t=11 the restart of t=1 is exactly 10 s old and no
    # longer counts, at t=12 the one of t=2; never more than 2 in the window.
    child = Child([1, 1, 9, 1])
    async with open_supervisor(max_restarts=2, restart_window_s=10) as supervisor:
        await supervisor.start(child)
        await trio.sleep(20)
        assert supervisor.statistics().restarts_total == 4


async def test_r1_the_window_slides_rather_than_resetting_on_a_boundary(autojump_clock):
    # Crashes at t=9, 11, 13: a fixed 10 s bucket would see 1 + 2 restarts and let them
    # through; the sliding window sees 3 within 10 s and escalates at t=13.
    t0 = trio.current_time()
    child = Child([9, 2, 2])
    scenario = Scenario({"child": child}, max_restarts=2, restart_window_s=10)
    with pytest.raises(SupervisorEscalated):
        await scenario.run()
    assert trio.current_time() - t0 == 13
    assert child.runs == 3


# --- escalation -------------------------------------------------------------------------------


@pytest.mark.parametrize("max_restarts", [0, 1, 3])
async def test_r1_exceeding_the_budget_escalates_with_the_last_crash_as_cause(
    autojump_clock, max_restarts
):
    child = Child([1] * 10)
    scenario = Scenario(
        {"flaky": child}, name="sup", max_restarts=max_restarts, restart_window_s=60
    )
    with pytest.raises(SupervisorEscalated) as excinfo:
        await scenario.run()

    escalation = excinfo.value
    assert type(escalation) is SupervisorEscalated  # unwrapped, not in an ExceptionGroup
    assert isinstance(escalation, AlkstoreError)
    assert child.runs == max_restarts + 1
    assert escalation.__cause__ is child.crashes[-1]
    assert (escalation.supervisor, escalation.child) == ("sup", "flaky")
    assert f"max_restarts={max_restarts}" in str(escalation)
    stats = scenario.supervisor.statistics()
    assert stats.restarts_total == max_restarts
    assert stats.crashes_total == max_restarts + 1
    assert stats.children == ()


async def test_r1_escalation_cancels_the_other_children_and_the_block(autojump_clock):
    flaky, steady, late = Child([1] * 10), forever(), forever()
    scenario = Scenario(
        {"steady": steady, "flaky": flaky, "late": late},
        block_s=100,
        max_restarts=2,
        restart_window_s=60,
    )
    with pytest.raises(SupervisorEscalated):
        await scenario.run()
    assert steady.cancelled
    assert late.cancelled
    assert (steady.runs, late.runs) == (1, 1)
    assert not scenario.block_finished


async def test_r1_a_permanent_child_returning_too_often_escalates_without_a_cause(
    autojump_clock,
):
    child = Child([1] * 10, ending="return")
    scenario = Scenario({"child": child}, max_restarts=2, restart_window_s=60)
    with pytest.raises(SupervisorEscalated) as excinfo:
        await scenario.run()
    assert excinfo.value.__cause__ is None
    assert "returned" in str(excinfo.value)


async def test_r1_escalation_wins_over_an_exception_the_block_raises_when_cancelled(
    autojump_clock,
):
    async def messy_block(supervisor):
        await supervisor.start(Child([1] * 5), name="flaky")
        try:
            await trio.sleep_forever()
        finally:
            raise KeyError("cleanup of the block failed")  # the misbehaviour under test

    with pytest.raises(SupervisorEscalated) as excinfo:
        async with open_supervisor(max_restarts=1) as supervisor:
            await messy_block(supervisor)
    assert isinstance(excinfo.value.__cause__, Boom)
    assert isinstance(excinfo.value.__context__, KeyError)


async def test_r1_escalation_survives_pickling():
    escalation = SupervisorEscalated("gave up", supervisor="sup", child="flaky")
    copy = pickle.loads(pickle.dumps(escalation))
    assert (str(copy), copy.supervisor, copy.child) == ("gave up", "sup", "flaky")


# --- what is (not) a crash ----------------------------------------------------------------


async def test_r1_cancellation_is_never_a_crash(autojump_clock, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    children = [forever(), forever()]
    with trio.move_on_after(5) as scope:
        async with open_supervisor() as supervisor:
            await supervisor.start(children[0], name="permanent", restart="permanent")
            await supervisor.start(children[1], name="transient", restart="transient")
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert all(child.cancelled and child.runs == 1 for child in children)
    stats = supervisor.statistics()
    assert (stats.crashes_total, stats.restarts_total) == (0, 0)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_r1_a_child_cancelling_its_own_scope_is_not_a_crash(autojump_clock):
    async def polite(*, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        with trio.move_on_after(1):
            await trio.sleep_forever()
        await trio.sleep_forever()

    async with open_supervisor() as supervisor:
        await supervisor.start(polite)
        await trio.sleep(5)
        assert supervisor.statistics().crashes_total == 0


async def test_r1_keyboard_interrupt_is_never_a_crash_and_propagates_untouched(
    autojump_clock,
):
    runs = 0
    steady = forever()

    async def interrupted(*, task_status=trio.TASK_STATUS_IGNORED):
        nonlocal runs
        runs += 1
        task_status.started()
        await trio.sleep(1)
        raise KeyboardInterrupt

    scenario = Scenario({"steady": steady, "interrupted": interrupted}, max_restarts=5)
    with pytest.raises(KeyboardInterrupt) as excinfo:
        await scenario.run()
    assert type(excinfo.value) is KeyboardInterrupt
    assert runs == 1
    assert steady.cancelled
    assert scenario.supervisor.statistics().crashes_total == 0


# --- restart policies ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("restart", "ending", "restarted"),
    [
        ("permanent", "crash", True),
        ("permanent", "return", True),
        ("transient", "crash", True),
        ("transient", "return", False),
        ("temporary", "crash", False),
        ("temporary", "return", False),
    ],
)
async def test_r1_restart_policies(autojump_clock, restart, ending, restarted):
    child = Child([1], ending=ending)
    async with open_supervisor() as supervisor:
        await supervisor.start(child, name="child", restart=restart)
        await trio.sleep(5)
        stats = supervisor.statistics()
    assert child.runs == (2 if restarted else 1)
    assert stats.restarts_total == (1 if restarted else 0)
    assert stats.crashes_total == (1 if ending == "crash" else 0)
    if restarted:
        assert stats.child("child") == ChildStatistics(
            name="child",
            restart=restart,
            running=True,
            restarts=1,
            last_crash=Boom if ending == "crash" else None,
        )
    else:
        assert stats.children == ()  # a child that is not restarted leaves


async def test_r1_a_transient_child_leaves_when_it_returns_after_restarts(autojump_clock):
    child = Child([1, 1, 1])
    async with open_supervisor(max_restarts=5) as supervisor:
        await supervisor.start(child, restart="transient")
        await trio.sleep(2.5)
        child.ending = "return"
        await trio.sleep(5)
        assert supervisor.statistics().children == ()
    assert child.runs == 3


# --- start() --------------------------------------------------------------------------------


async def test_r1_start_returns_the_value_of_the_first_runs_started(autojump_clock):
    child = Child([1, 1])
    async with open_supervisor() as supervisor:
        assert await supervisor.start(child) == "run 1"
        await trio.sleep(5)
    assert child.runs == 3  # the later runs called started() too; their values are dropped


async def test_r1_a_crash_before_started_is_raised_by_start_at_once(autojump_clock, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    runs = 0
    steady = forever()

    async def broken(*, task_status=trio.TASK_STATUS_IGNORED):
        nonlocal runs
        runs += 1
        await trio.sleep(1)
        raise Boom("cannot initialise")

    async with open_supervisor(max_restarts=5) as supervisor:
        await supervisor.start(steady, name="steady")
        with pytest.raises(Boom) as excinfo:
            await supervisor.start(broken, name="broken")
        assert type(excinfo.value) is Boom  # unwrapped
        await trio.sleep(10)
        assert runs == 1  # not retried
        stats = supervisor.statistics()
        assert [c.name for c in stats.children] == ["steady"]
        assert (stats.crashes_total, stats.restarts_total) == (1, 0)
        assert not steady.cancelled
        # The name is free again, and the supervisor still works.
        assert await supervisor.start(Child(), name="broken") == "run 1"
    [record] = [r for r in caplog.records if r.event == "start_failed"]
    assert record.child == "broken"
    assert record.levelno == logging.WARNING


async def test_r1_returning_before_started_is_a_runtime_error(autojump_clock):
    async def lazy(*, task_status=trio.TASK_STATUS_IGNORED):
        await trio.sleep(1)

    async with open_supervisor() as supervisor:
        with pytest.raises(RuntimeError, match=r"without calling task_status\.started"):
            await supervisor.start(lazy, name="lazy")
        assert supervisor.statistics().children == ()


async def test_r1_cancelling_start_cancels_the_child(autojump_clock):
    runs = 0

    async def slow_to_start(*, task_status=trio.TASK_STATUS_IGNORED):
        nonlocal runs
        runs += 1
        await trio.sleep(10)
        task_status.started()

    async with open_supervisor() as supervisor:
        with trio.move_on_after(1):
            await supervisor.start(slow_to_start, name="slow")
        await trio.sleep(20)
        assert runs == 1
        assert supervisor.statistics().children == ()


async def test_r1_a_child_can_start_siblings(autojump_clock):
    # As the worker's dispatcher will start job actors under the worker's supervisor.
    jobs = [Child([1], ending="return") for _ in range(3)]

    async def dispatcher(supervisor, *, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        for n, job in enumerate(jobs):
            await supervisor.start(job, name=f"job-{n}", restart="temporary")
        await trio.sleep_forever()

    async with open_supervisor() as supervisor:
        await supervisor.start(dispatcher, supervisor, name="dispatcher")
        await trio.sleep(0.5)
        assert supervisor.statistics().children_running == 4
        await trio.sleep(1)
        assert [c.name for c in supervisor.statistics().children] == ["dispatcher"]
    assert all(job.runs == 1 for job in jobs)


async def test_r1_child_names_default_to_the_function_and_must_be_unique(autojump_clock):
    async def listener(*, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        await trio.sleep_forever()

    async with open_supervisor(name="sup") as supervisor:
        await supervisor.start(listener)
        [child] = supervisor.statistics().children
        assert child.name.endswith("listener")
        with pytest.raises(InvalidArgument, match="already taken"):
            await supervisor.start(listener)
        await supervisor.start(listener, name="listener-2")
        assert supervisor.statistics().children_running == 2


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [({"name": ""}, "name"), ({"restart": "sometimes"}, "restart")],
)
async def test_r1_start_rejects_bad_arguments(kwargs, param):
    async with open_supervisor() as supervisor:
        with pytest.raises(InvalidArgument, match=param):
            await supervisor.start(forever(), **kwargs)
        assert supervisor.statistics().children == ()


async def test_r1_start_after_the_block_is_refused():
    async with open_supervisor() as supervisor:
        pass
    with pytest.raises(RuntimeError, match="stopping or closed"):
        await supervisor.start(forever())


# --- the block, cancel(), restart delays ------------------------------------------------------


async def test_r1_leaving_the_block_cancels_the_children(autojump_clock, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    t0 = trio.current_time()
    children = [forever(), forever()]
    async with open_supervisor() as supervisor:
        for child in children:
            await supervisor.start(child, restart="permanent")
            await trio.sleep(1)
    assert trio.current_time() - t0 == 2
    assert all(child.cancelled and child.runs == 1 for child in children)
    assert supervisor.statistics().children == ()
    assert caplog.records == []


async def test_r1_an_exception_from_the_block_comes_out_unwrapped(autojump_clock):
    steady = forever()
    scenario = Scenario({"steady": steady}, block_s=1, block_raises=KeyError("from the block"))
    with pytest.raises(KeyError) as excinfo:
        await scenario.run()
    assert type(excinfo.value) is KeyError
    assert excinfo.value.args == ("from the block",)
    assert steady.cancelled


async def test_r1_cancel_stops_every_child_and_the_block(autojump_clock):
    children = [forever(), Child([1] * 5)]
    reached = False
    async with open_supervisor(max_restarts=10) as supervisor:
        for child in children:
            await supervisor.start(child)
        await trio.sleep(2.5)
        supervisor.cancel()
        await trio.sleep(1)
        reached = True
    assert not reached
    assert all(child.cancelled for child in children)
    with pytest.raises(RuntimeError, match="stopping or closed"):
        await supervisor.start(forever())


@pytest.mark.parametrize("stop", ["leave the block", "cancel from outside"])
async def test_r1_a_crash_while_stopping_is_logged_not_restarted(autojump_clock, caplog, stop):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    runs = 0

    async def messy(*, task_status=trio.TASK_STATUS_IGNORED):
        nonlocal runs
        runs += 1
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            raise Boom("cleanup failed")  # the misbehaviour under test

    with trio.move_on_after(1):
        async with open_supervisor() as supervisor:
            await supervisor.start(messy, name="messy")
            if stop == "cancel from outside":
                await trio.sleep_forever()
    assert runs == 1
    [record] = caplog.records
    assert (record.event, record.levelno, record.child) == ("crash", logging.ERROR, "messy")
    assert "stopping" in record.getMessage()


async def test_r1_restart_delay_is_honoured(autojump_clock):
    t0 = trio.current_time()
    child = Child([1, 1])
    async with open_supervisor(restart_delay_s=2.5) as supervisor:
        await supervisor.start(child)
        await trio.sleep(2)
        stats = supervisor.statistics()  # t=2: crashed at t=1, waiting until t=3.5
        assert stats.children_running == 0
        assert stats.child(stats.children[0].name).running is False
        await trio.sleep(10)
    assert [start - t0 for start in child.starts] == [0, 3.5, 7]


async def test_r1_restart_delay_backs_off_up_to_the_cap(autojump_clock):
    t0 = trio.current_time()
    child = Child([0, 0, 0, 0, 0])
    async with open_supervisor(
        max_restarts=10, restart_window_s=100, restart_delay_s=1, restart_delay_max_s=4
    ) as supervisor:
        await supervisor.start(child)
        await trio.sleep(20)
    # Waits of 1, 2, 4, then 4 (capped), 4.
    assert [start - t0 for start in child.starts] == [0, 1, 3, 7, 11, 15]


async def test_r1_backoff_falls_back_once_restarts_leave_the_window(autojump_clock):
    t0 = trio.current_time()
    child = Child([0, 20])
    async with open_supervisor(
        restart_window_s=10, restart_delay_s=1, restart_delay_max_s=8
    ) as supervisor:
        await supervisor.start(child)
        await trio.sleep(30)
    # The crash at t=21 finds no restart of this child in the window: the wait is 1 again.
    assert [start - t0 for start in child.starts] == [0, 1, 22]


# --- statistics and logging ---------------------------------------------------------------------


async def test_r1_statistics_are_a_frozen_snapshot(autojump_clock):
    child = Child([1, 1])
    async with open_supervisor(name="sup", restart_window_s=5) as supervisor:
        await supervisor.start(child, name="flaky")
        await trio.sleep(1.5)
        before = supervisor.statistics()
        await trio.sleep(10)
        after = supervisor.statistics()

    assert isinstance(before, SupervisorStatistics)
    assert before == SupervisorStatistics(
        name="sup",
        children=(ChildStatistics("flaky", "permanent", True, 1, Boom),),
        children_running=1,
        restarts_total=1,
        crashes_total=1,
        restarts_in_window=1,
    )
    assert (after.restarts_total, after.restarts_in_window) == (2, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.restarts_total = 5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.children[0].restarts = 5  # type: ignore[misc]
    assert isinstance(before.children, tuple)
    with pytest.raises(KeyError):
        before.child("nobody")
    hash(before)


async def test_r1_crashes_and_restarts_are_logged_with_structured_fields(autojump_clock, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    child = Child([1] * 5)
    scenario = Scenario(
        {"flaky": child}, name="sup", max_restarts=1, restart_window_s=60, restart_delay_s=0.5
    )
    with pytest.raises(SupervisorEscalated):
        await scenario.run()

    records = [r for r in caplog.records if r.name == LOGGER]
    assert [(r.event, r.levelno) for r in records] == [
        ("crash", logging.WARNING),
        ("restart", logging.INFO),
        ("escalate", logging.ERROR),  # the crash that would need one restart too many
    ]
    for record in records:
        assert record.supervisor == "sup"
        assert record.child == "flaky"
        assert record.restart_policy == "permanent"
    crash, restart, escalate = records
    assert crash.restarts == 1
    assert crash.exc_type == f"{Boom.__module__}.Boom"
    assert crash.delay_s == 0.5
    assert crash.exc_info[1] is child.crashes[0]
    assert "crash of run 1" in crash.getMessage()
    assert restart.restarts == 1
    assert restart.exc_type is None
    assert escalate.exc_type == f"{Boom.__module__}.Boom"
    assert escalate.exc_info[1] is child.crashes[-1]
    assert "crash of run 2" in escalate.getMessage()
    assert "max_restarts=1" in escalate.getMessage()


async def test_r1_builtin_exception_types_are_logged_by_their_bare_name(autojump_clock, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)

    async def fussy(*, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        await trio.sleep(1)
        raise ValueError("bad value")

    async with open_supervisor() as supervisor:
        await supervisor.start(fussy, restart="temporary")
        await trio.sleep(2)
    [record] = caplog.records
    assert (record.event, record.exc_type, record.delay_s) == ("crash", "ValueError", None)
    assert "not restarted (temporary)" in record.getMessage()


# --- construction and arguments ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"name": ""}, "name"),
        ({"max_restarts": -1}, "max_restarts"),
        ({"max_restarts": 1.5}, "max_restarts"),
        ({"max_restarts": True}, "max_restarts"),
        ({"restart_window_s": 0}, "restart_window_s"),
        ({"restart_window_s": math.inf}, "restart_window_s"),
        ({"restart_window_s": math.nan}, "restart_window_s"),
        ({"restart_delay_s": -0.1}, "restart_delay_s"),
        ({"restart_delay_s": "1"}, "restart_delay_s"),
        ({"restart_delay_s": 2, "restart_delay_max_s": 1}, "restart_delay_max_s"),
    ],
)
async def test_r1_open_supervisor_rejects_bad_arguments(kwargs, param):
    with pytest.raises(InvalidArgument, match=param) as excinfo:
        async with open_supervisor(**kwargs):
            pytest.fail("the block must not run")
    assert isinstance(excinfo.value, ValueError)


def test_r1_supervisor_has_no_public_constructor():
    with pytest.raises(TypeError, match="no public constructor"):
        Supervisor(
            object(),
            None,  # type: ignore[arg-type]
            name="x",
            max_restarts=1,
            restart_window_s=1.0,
            restart_delay_s=0.0,
            restart_delay_max_s=None,
        )


def imports_of(path):
    """The modules a source file imports (relative ones with their leading dots)."""
    imported = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    return imported


def test_r1_the_runtime_imports_no_engine():
    for path in RUNTIME.glob("*.py"):
        assert not [name for name in imports_of(path) if "_engines" in name], path.name


def test_r1_the_supervisor_needs_only_trio_and_the_errors():
    # The errors and the pure shared helpers (no trio, no engine): nothing of the store.
    imported = imports_of(RUNTIME / "_supervisor.py")
    assert {name for name in imported if name.startswith(".")} == {".._errors", ".._util"}
    assert "trio" in imported


# --- supervision trees --------------------------------------------------------------------------


async def test_r1_a_nested_supervisor_restarts_its_group_as_one(autojump_clock):
    # An inner supervisor with max_restarts=0 escalates on its first crash; the outer one
    # sees that as a crash of the child "group" and restarts the whole group: one-for-all
    # built from one-for-one, as in an OTP supervision tree.
    flaky, partner = Child([1, 1]), forever()
    partner_runs = []

    async def group(*, task_status=trio.TASK_STATUS_IGNORED):
        async with open_supervisor(name="inner", max_restarts=0) as inner:
            await inner.start(flaky, name="flaky")
            await inner.start(partner, name="partner")
            partner_runs.append(trio.current_time())
            task_status.started()
            await trio.sleep_forever()

    t0 = trio.current_time()
    async with open_supervisor(name="outer", max_restarts=5) as outer:
        await outer.start(group, name="group")
        await trio.sleep(10)
        stats = outer.statistics()
    assert flaky.runs == 3
    assert [t - t0 for t in partner_runs] == [0, 1, 2]  # restarted with its crashing peer
    assert stats.child("group").restarts == 2
    assert stats.child("group").last_crash is SupervisorEscalated
