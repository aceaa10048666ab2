"""Clock skew (issue 5, item 12): workers whose local clock is an hour wrong behave
exactly like workers with a right one, because every timing decision about a job is made
on the database's clock (Q2-Q5; docs/explanation/leases-and-the-database-clock.md); and a
naive datetime is refused wherever the API takes a datetime.

How the clock is skewed: ``_skew/sitecustomize.py`` on the worker process's
``PYTHONPATH`` shifts its wall clock (``time.time``, ``time.time_ns``, ``datetime.now``,
``utcnow``, ``today``, ``date.today``) by ``ALKSTORE_TEST_CLOCK_SKEW_S`` seconds before the
program imports anything (no libfaketime on the machines that run this). Trio's clock is
monotonic and stays right, as it would on a skewed host. Each process proves the shift in
its ``ready`` record (its local clock readings) and in every handler record, whose ``t``
is its skewed ``time.time()`` while the claim times it carries come from the database.

The run: two fleets side by side on one schema, each on its own queue with the same jobs,
same timings and same faults: the *skewed* fleet (a victim at -1 h, survivors at +1 h and
unskewed) and an all-unskewed *control* fleet. In each, the victim alone claims two
delayed jobs (so a slow clock must not keep it from claiming them once due) and is
killed with SIGKILL mid-job; the survivors run immediate, delayed (``delay_s``),
scheduled (``run_at``), retried (``Retry(delay_s=1)``), failing (backoff, then dead) and
``Fail`` jobs, and reclaim the victim's jobs once its lease lapsed by the database clock
(a fast clock must not reclaim early, which the history checker would see as overlapping
leases; a slow one must not reclaim late). Checked in each fleet: the history checker
(no overlapping leases, no stale operation accepted, nothing lost); every lease is exactly
the visibility timeout long on the database clock; no job started before its ``run_at``
nor more than a poll interval (plus a loaded machine's slack) after it; retry and
backoff delays were honoured; the reclaim came after the victim's lease deadline and
within visibility timeout + poll + slack of the kill. Then the two fleets are compared:
identical outcomes job by job, and every timing within a tolerance of the control's (an
hour's error could not hide in it).

Recording clocks: the history checker orders events of different processes by their
wall time, so the skewed workers' records are shifted back by their (known) skew before
the check; the database times in them are used as they are.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import time
from collections import Counter, defaultdict
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import trio
from _figures import history_figures

from alkstore_trio import InvalidArgument, QueueOpts, open_store
from alkstore_trio.testing import HistoryReport, check_history, load_history

pytest.importorskip("psycopg", reason="the fault tests need psycopg 3")

SKEW_DIR = Path(__file__).with_name("_skew")
SKEW_ENV = "ALKSTORE_TEST_CLOCK_SKEW_S"
HOUR_S = 3600.0
#: The skews of (victim, survivor, survivor) in each fleet.
FLEETS = {"skewed": (-HOUR_S, +HOUR_S, 0.0), "control": (0.0, 0.0, 0.0)}

VT_S = 2.0
POLL_S = 0.5
#: The victim's jobs' delay, the other delays and the retry/backoff delays (seconds).
VICTIM_DELAY_S = 1.0
DELAY_S = 1.5
RUN_AT_AFTER_S = 2.0
RETRY_DELAY_S = 1.0
BACKOFF_BASE_S = 1.0  # the first backoff (Q5, equal jitter) is exactly 1 s
#: How much later than due a loaded 2-core machine may start a job (scheduling, a busy
#: database, six worker processes starting up).
LATE_SLACK_S = 3.0
#: The most a timing of the skewed fleet may differ from the control's.
TOLERANCE_S = 3.0
#: How far apart the recording clocks of two processes may be (seconds).
HISTORY_SLACK_S = 1.0
#: How close to its skew a process's clock must read (a loaded machine may delay a
#: record by seconds; the skew is an hour).
SKEW_SEEN_S = 60.0

#: What each job's handler does (``_worker_proc.py``'s payload commands), and its
#: expected outcome: (final state, attempts).
WORK = b"work"
EXPECTED = {
    "lease": ("acked", 2),  # the victim's, reclaimed after the kill
    "work": ("acked", 1),
    "delay": ("acked", 1),
    "run_at": ("acked", 1),
    "retry": ("acked", 2),
    "raise": ("dead", 2),  # max_attempts=2: a backoff, then dead
    "fail": ("dead", 1),
}


@dataclasses.dataclass
class Fleet:
    """One fleet's jobs, processes and measurements."""

    name: str
    queue: str
    skews: dict[int, float] = dataclasses.field(default_factory=dict)  # pid -> skew
    procs: list[Any] = dataclasses.field(default_factory=list)
    labels: dict[int, str] = dataclasses.field(default_factory=dict)  # id -> kind-n
    run_at: dict[int, float] = dataclasses.field(default_factory=dict)  # id -> epoch
    victim: Any = None  # conftest.WorkerProc
    killed_at: float = 0.0
    lease_deadlines: dict[int, float] = dataclasses.field(default_factory=dict)
    report: HistoryReport | None = None
    outcomes: dict[str, tuple[str, int]] = dataclasses.field(default_factory=dict)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)


def _epoch(value: datetime) -> float:
    return value.timestamp()


async def _db_now(fleet) -> datetime:
    ((now,),) = await fleet.fetch("SELECT statement_timestamp()")
    return now


def _check_local_clock(proc, skew_s: float, seen_at: float) -> None:
    """The process's ``ready`` record shows its clocks shifted by ``skew_s``."""
    (ready,) = proc.events("ready")
    clocks = ready["clocks"]
    # Read by the parent within moments of being written (a loaded machine: seconds).
    assert abs(clocks["time"] - skew_s - seen_at) < 30, (proc.app, skew_s, clocks, seen_at)
    assert abs(clocks["datetime_now"] - clocks["time"]) < 5, clocks
    days = {date.fromtimestamp(clocks["time"] + d).isoformat() for d in (-5, 0)}
    assert clocks["date_today"] in days, clocks


async def _spawn(fleet_db, fleet: Fleet, skew_s: float, *, hold: bool = False, **options):
    """Start a worker of the fleet with its clock shifted by ``skew_s``; returns once
    it is ready (once started, if ``hold``)."""
    env = None
    if skew_s:
        path = os.pathsep.join(filter(None, [str(SKEW_DIR), os.environ.get("PYTHONPATH")]))
        env = {"PYTHONPATH": path, SKEW_ENV: repr(skew_s)}
    proc = await fleet_db.spawn(
        fleet.queue, env=env, poll_interval_s=POLL_S, hold=hold, wait_ready=not hold, **options
    )
    fleet.skews[proc.pid] = skew_s
    fleet.procs.append(proc)
    if not hold:
        _check_local_clock(proc, skew_s, time.time())
    return proc


async def _enqueue(queue, fleet: Fleet, kind: str, payloads: list[bytes], **options) -> list[int]:
    """Enqueue and label the jobs; for delayed ones, note their ``run_at`` (read while
    they are surely still pending: their delay is seconds, the read takes milliseconds)."""
    ids = await queue.enqueue_many(payloads, **options)
    for n, job_id in enumerate(ids):
        fleet.labels[job_id] = f"{kind}-{n}"
        if "delay_s" in options or "run_at" in options:
            job = await queue.get_job(job_id)
            assert job is not None
            assert (job.state, job.attempts) == ("pending", 0)
            fleet.run_at[job_id] = _epoch(job.run_at)
    return ids


async def _run_fleet(fleet_db, fleet: Fleet, skews: tuple[float, float, float]) -> None:
    """Everything but the comparison: jobs, the kill, the wait, the per-fleet checks."""
    opts = QueueOpts(visibility_timeout_s=VT_S, max_attempts=3, backoff_base_s=BACKOFF_BASE_S)
    queue = fleet_db.store.queue(fleet.queue, opts)
    victim_skew, *survivor_skews = skews

    # All three start at once (process start-up is most of this test's time), the
    # survivors held (store open, worker not running) until the victim holds its jobs.
    async def start_victim() -> None:
        # Its handlers would sleep for an hour.
        fleet.victim = await _spawn(fleet_db, fleet, victim_skew, concurrency=2, sleep_s=3600)

    async def start_survivor(skew_s: float) -> None:
        proc = await _spawn(fleet_db, fleet, skew_s, concurrency=4, sleep_s=0.2, hold=True)
        await proc.wait_held()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(start_victim)
        for skew_s in survivor_skews:
            nursery.start_soon(start_survivor, skew_s)
    victim = fleet.victim
    survivors = [proc for proc in fleet.procs if proc is not victim]

    # The victim alone claims two delayed jobs once due, and holds them.
    lease_ids = await _enqueue(queue, fleet, "lease", [WORK] * 2, delay_s=VICTIM_DELAY_S)
    await fleet_db.wait_until(
        lambda: len(victim.in_flight()) == 2, timeout_s=30, what=f"{fleet.name}: victim busy"
    )
    for proc in survivors:
        proc.release()
    for proc in survivors:
        await proc.wait_ready()
        _check_local_clock(proc, fleet.skews[proc.pid], time.time())
    db_now = await _db_now(fleet_db)
    await _enqueue(queue, fleet, "work", [WORK] * 6)
    await _enqueue(queue, fleet, "delay", [WORK] * 2, delay_s=DELAY_S)
    run_at = db_now + timedelta(seconds=RUN_AT_AFTER_S)
    await _enqueue(queue, fleet, "run_at", [WORK] * 2, run_at=run_at)
    await _enqueue(queue, fleet, "retry", [b"retry=%g" % RETRY_DELAY_S] * 2)
    await _enqueue(queue, fleet, "raise", [b"raise"], max_attempts=2)
    await _enqueue(queue, fleet, "fail", [b"fail"])

    # Killed mid-job: frozen first, so its records are complete and it renews nothing
    # more, then SIGKILL. Its leases' deadlines are read in between (a renewal sent just
    # before the freeze could only move them later).
    await victim.pause()
    assert {job_id for job_id, _ in victim.in_flight()} == set(lease_ids)
    rows = await fleet_db.fetch(
        "SELECT id, claim_expires_at, attempts FROM {schema}.jobs WHERE id = ANY(%s)",
        [lease_ids],
    )
    victim.kill()
    fleet.killed_at = time.time()
    assert await victim.wait_exit() == -9
    assert {(job_id, attempts) for job_id, _, attempts in rows} == {(i, 1) for i in lease_ids}
    fleet.lease_deadlines = {job_id: _epoch(deadline) for job_id, deadline, _ in rows}

    async def settled() -> bool:
        where = f"queue = '{fleet.queue}'"
        return await fleet_db.count("jobs", where) == 0 and await fleet_db.count(
            "dead_jobs", where
        ) == sum(1 for kind, _ in EXPECTED.values() if kind == "dead")

    await fleet_db.wait_until(settled, timeout_s=60, step_s=0.1, what=f"{fleet.name}: settled")
    for proc in survivors:
        proc.terminate()
    for proc in survivors:
        assert await proc.wait_exit() == 0, proc.stderr()
    await _check_fleet(fleet_db, fleet, queue)


def _history(fleet: Fleet):
    """The fleet's records, each process's wall times shifted back by its skew."""
    events = []
    for proc in fleet.procs:
        skew_s = fleet.skews[proc.pid]
        events += [
            dataclasses.replace(event, t=event.t - skew_s)
            for event in load_history([proc.records_path], time_base="wall")
        ]
    return events


def _handler_runs(fleet: Fleet) -> dict[int, list[dict]]:
    """Every handler start per job, by attempt, with ``skew`` and ``pid``."""
    runs: dict[int, list[dict]] = defaultdict(list)
    for proc in fleet.procs:
        for record in proc.events("handler_start"):
            runs[record["id"]].append({**record, "skew": fleet.skews[proc.pid]})
    for job_runs in runs.values():
        job_runs.sort(key=lambda run: run["attempt"])
    return runs


async def _check_fleet(fleet_db, fleet: Fleet, queue) -> None:
    fleet.report = check_history(
        _history(fleet),
        enqueued=list(fleet.labels),
        final=await fleet_db.final_state(),
        slack_s=HISTORY_SLACK_S,
    )
    fleet.report.assert_ok()
    runs = _handler_runs(fleet)
    victim_pid = fleet.victim.pid

    for job_id, job_runs in runs.items():
        assert [run["attempt"] for run in job_runs] == list(range(1, len(job_runs) + 1))
        for run in job_runs:
            # The lease is the database's: exactly the visibility timeout after the claim.
            assert run["claim_expires_at"] - run["claimed_at"] == pytest.approx(VT_S, abs=1e-3)
            # The process's clock was skewed while it ran the job (its record's t), the
            # claim time it got is the database's (the same host: the right time).
            assert run["t"] - run["claimed_at"] == pytest.approx(run["skew"], abs=SKEW_SEEN_S)
        # A delayed job started neither before it was due nor much later (a poll, and
        # slack).
        if job_id in fleet.run_at:
            late_s = job_runs[0]["claimed_at"] - fleet.run_at[job_id]
            assert 0 <= late_s <= POLL_S + LATE_SLACK_S, (fleet.labels[job_id], late_s)
            fleet.timings[f"{fleet.labels[job_id]}: due -> claimed"] = late_s

    dead = {
        job.id: job for job in await queue.list_jobs("dead", limit=100) if job.id in fleet.labels
    }
    acks = Counter(r["id"] for proc in fleet.procs for r in proc.events("ack"))
    dead_letters = Counter(r["id"] for proc in fleet.procs for r in proc.events("dead"))
    for job_id, label in fleet.labels.items():
        if job_id in dead:
            fleet.outcomes[label] = ("dead", dead[job_id].attempts)
        else:
            fleet.outcomes[label] = ("acked", len(runs[job_id]))
        kind = label.rsplit("-", 1)[0]
        assert fleet.outcomes[label] == EXPECTED[kind], (fleet.name, label, fleet.outcomes)
        # Acked exactly once, or dead-lettered exactly once (and never both).
        final = fleet.outcomes[label][0]
        assert (acks[job_id], dead_letters[job_id]) == ((1, 0) if final == "acked" else (0, 1))
        if kind in ("retry", "raise"):
            # The retry (or backoff) delay counted on the database clock.
            gap_s = runs[job_id][1]["claimed_at"] - runs[job_id][0]["claimed_at"]
            delay_s = RETRY_DELAY_S if kind == "retry" else BACKOFF_BASE_S
            assert delay_s <= gap_s <= delay_s + POLL_S + LATE_SLACK_S, (label, gap_s)
            fleet.timings[f"{label}: claim -> reclaim after the delay"] = gap_s
        if kind == "lease":
            held, again = runs[job_id]
            assert held["pid"] == victim_pid
            assert again["pid"] != victim_pid
            # Reclaimed only once the victim's lease had lapsed on the database's clock
            # (not an hour early), and soon after (not an hour late).
            assert again["claimed_at"] > fleet.lease_deadlines[job_id]
            after_kill_s = (again["t"] - again["skew"]) - fleet.killed_at
            assert after_kill_s <= VT_S + POLL_S + LATE_SLACK_S, (label, after_kill_s)
            fleet.timings[f"{label}: kill -> reclaim"] = after_kill_s
            fleet.timings[f"{label}: lease end -> reclaim"] = (
                again["claimed_at"] - fleet.lease_deadlines[job_id]
            )


async def test_q3_q4_q5_workers_with_a_local_clock_an_hour_off_behave_like_a_control_fleet(
    pg_dsn, schema, open_fleet, figures
):
    started = time.monotonic()
    fleets = {name: Fleet(name, queue=name) for name in FLEETS}
    async with open_fleet(pg_dsn, schema) as fleet_db, trio.open_nursery() as nursery:
        for name, skews in FLEETS.items():
            nursery.start_soon(_run_fleet, fleet_db, fleets[name], skews)
    wall_s = time.monotonic() - started

    skewed, control = fleets["skewed"], fleets["control"]
    # Both fleets really ran with the clocks they were given.
    assert sorted(skewed.skews.values()) == [-HOUR_S, 0.0, HOUR_S]
    assert set(control.skews.values()) == {0.0}
    # Identical outcomes, job by job (the same labels in both fleets).
    assert skewed.outcomes == control.outcomes
    # Identical timings, within a tolerance far below the skew.
    assert skewed.timings.keys() == control.timings.keys()
    apart = {
        key: round(skewed.timings[key] - control.timings[key], 3)
        for key in skewed.timings
        if abs(skewed.timings[key] - control.timings[key]) > TOLERANCE_S
    }
    assert apart == {}

    assert skewed.report is not None
    assert control.report is not None
    figures.record(
        control_jobs_checked=control.report.jobs,
        control_violations=len(control.report.violations),
        skews_s=" ".join(f"{skew:+g}" for skew in sorted(skewed.skews.values())),
        processes=len(skewed.procs) + len(control.procs),
        faults_injected=2,  # a SIGKILL in each fleet
        timings_compared=len(skewed.timings),
        largest_timing_difference_s=max(
            abs(skewed.timings[key] - control.timings[key]) for key in skewed.timings
        ),
        wall_s=wall_s,
        **history_figures(skewed.report),
    )

    def spread(fleet: Fleet, what: str) -> str:
        values = [v for k, v in fleet.timings.items() if k.endswith(what)]
        return f"{min(values):.2f}..{max(values):.2f}s"

    print(
        f"\nclock skew: fleets {FLEETS} in {wall_s:.1f}s; "
        + "; ".join(
            f"{fleet.name}: {fleet.report.summary()}, due->claimed "
            f"{spread(fleet, 'due -> claimed')}, kill->reclaim {spread(fleet, 'kill -> reclaim')}"
            f", lease end->reclaim {spread(fleet, 'lease end -> reclaim')}, retry gaps "
            f"{spread(fleet, 'after the delay')}"
            for fleet in fleets.values()
            if fleet.report is not None
        )
    )


# --- naive datetimes -------------------------------------------------------------------------


NAIVE = datetime(2030, 1, 1, 12)


def _datetime_parameters() -> set[str]:
    """Every parameter of the public API annotated with a datetime, as
    ``Class.method.param`` (public classes and functions of ``alkstore_trio`` and
    ``alkstore_trio.testing``)."""
    import alkstore_trio
    from alkstore_trio import testing
    from alkstore_trio.testing import PostgresHarness

    found = set()
    names = [(alkstore_trio, n) for n in dir(alkstore_trio) if not n.startswith("_")]
    names += [(testing, n) for n in dir(testing) if not n.startswith("_")]
    objects = {getattr(module, name) for module, name in names}
    objects.add(PostgresHarness)  # imported on first use
    for obj in objects:
        members = (
            [(f"{obj.__name__}.{k}", v) for k, v in vars(obj).items()]
            if inspect.isclass(obj)
            else [(getattr(obj, "__name__", ""), obj)]
        )
        for qualname, member in members:
            function = getattr(member, "__func__", member)  # classmethods
            if not inspect.isfunction(function):
                continue
            if qualname.rsplit(".", 1)[-1].startswith("_") and not qualname.endswith("__init__"):
                continue
            for param in inspect.signature(function).parameters.values():
                if "datetime" in str(param.annotation):
                    found.add(f"{qualname}.{param.name}")
    return found


async def test_q12_a_naive_datetime_is_invalid_argument_wherever_the_api_takes_a_datetime():
    """Every datetime parameter of the public API, found by its annotation, refuses a
    naive datetime with InvalidArgument and no effect. Also pinned elsewhere, on every
    engine: the conformance check ``q2_run_at_must_be_timezone_aware`` (enqueue and
    enqueue_many) and the transaction validation check (``tx.enqueue``),
    ``tests/security/test_input_abuse.py::test_q2_run_at_naive_or_not_a_datetime_is_rejected``,
    ``tests/unit/test_validate.py`` (the validator), ``tests/unit/test_trio_clock.py``
    (``TrioClock``) and, for a clock that answers a naive time,
    ``tests/engines/test_memory_engine.py::test_q12_naive_clock_is_an_engine_error_and_nothing_happens``.
    """
    from alkstore_trio.testing import ManualClock, PostgresHarness, TrioClock

    covered = {
        "Queue.enqueue.run_at",
        "Queue.enqueue_many.run_at",
        "Transaction.enqueue.run_at",
        "Queue.reschedule.run_at",  # Q16
        "ManualClock.__init__.start",
        "ManualClock.set.when",
        "TrioClock.__init__.start",
        "PostgresHarness.__init__.start",
    }
    # Not inputs: records the engines build (their datetimes come from the store's
    # clock), and the reference model, which by design validates nothing (it is fed only
    # what the public API already accepted).
    not_inputs = {"Job", "StoreStats", "ReferenceModel"}
    not_inputs |= {"PeriodicFired", "PeriodicInfo", "PeriodicTick"}  # Q17: engine answers
    not_inputs |= {"WorkerInfo"}  # Q21: an engine answer
    found = {name for name in _datetime_parameters() if name.split(".")[0] not in not_inputs}
    # A new datetime parameter must be added here (and tested below).
    assert found == covered

    async with open_store("memory://", clock=ManualClock()) as store:
        queue = store.queue("naive")
        with pytest.raises(InvalidArgument, match="run_at"):
            await queue.enqueue(b"x", run_at=NAIVE)
        with pytest.raises(InvalidArgument, match="run_at"):
            await queue.enqueue_many([b"x", b"y"], run_at=NAIVE)
        async with store.transaction() as tx:
            with pytest.raises(InvalidArgument, match="run_at"):
                await tx.enqueue(queue, b"x", run_at=NAIVE)
        stats = await store.stats()
        assert (stats.ids_issued, stats.queues) == (0, ())  # nothing enqueued
        with pytest.raises(InvalidArgument, match="run_at"):
            await queue.reschedule(1, run_at=NAIVE)

    with pytest.raises(InvalidArgument, match="start"):
        ManualClock(NAIVE)
    clock = ManualClock()
    before = clock.now()
    with pytest.raises(InvalidArgument, match="when"):
        clock.set(NAIVE)
    assert clock.now() == before  # no effect
    with pytest.raises(InvalidArgument, match="start"):
        TrioClock(NAIVE)
    with pytest.raises(InvalidArgument, match="start"):
        PostgresHarness("postgresql://nobody@127.0.0.1:1/none", start=NAIVE)
    # An aware datetime at any offset is accepted (and kept as the same instant).
    plus2 = NAIVE.replace(tzinfo=timezone(timedelta(hours=2)))
    assert ManualClock(plus2).now() == plus2
    assert ManualClock(plus2).now().tzinfo is UTC
