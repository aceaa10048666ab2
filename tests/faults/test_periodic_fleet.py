"""Q17.2 across processes: a fleet of four worker processes declaring the same
``Periodic(every_s=1)`` enqueues exactly one job per fire time, with no duplicate and no
gap, while one of them is killed with SIGKILL and restarted, and while their hosts'
clocks disagree by an hour (two of the four run with their wall clock shifted by -1 h
and +1 h through ``_skew/sitecustomize.py``, the clock-skew harness): fire times are
the database's, and the schedule row's lock serializes the fleet.

The default run is short (about 8 s of firing); the 30 s run is marked ``slow``.

How it is checked: the jobs of the schedule's queue, read after the fleet stopped (no
worker serves that queue, so every job the fleet enqueued is still there), each carry
their fire time in ``alk-periodic-fire-at``. The fire times must be distinct, exactly
one second apart from the first to the last, and cover the run.
"""

from __future__ import annotations

import itertools
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import trio

pytest.importorskip("psycopg", reason="the fault tests need psycopg 3")

SKEW_DIR = Path(__file__).with_name("_skew")
HOUR_S = 3600.0
#: Each process's wall-clock skew: two hosts an hour apart each way, two right.
SKEWS = (-HOUR_S, +HOUR_S, 0.0, 0.0)


def _skew_env(skew_s: float) -> dict[str, str]:
    if not skew_s:
        return {}
    return {"PYTHONPATH": str(SKEW_DIR), "ALKSTORE_TEST_CLOCK_SKEW_S": str(skew_s)}


async def _fire_times(fleet) -> list[datetime]:
    rows = await fleet.fetch(
        "SELECT headers->>'alk-periodic-fire-at' FROM {schema}.jobs WHERE queue = 'ticks'"
    )
    return sorted(datetime.fromisoformat(at) for (at,) in rows)


async def _run_fleet(pg_dsn: str, schema: str, open_fleet, run_s: float) -> None:
    async with open_fleet(pg_dsn, schema) as fleet:
        options = {"periodic": "tick:ticks:1", "pool_size": 2, "handler_records": False}

        async def spawn(skew_s: float):
            return await fleet.spawn("unused", env=_skew_env(skew_s), **options)

        procs = []
        for skew_s in SKEWS:
            procs.append(await spawn(skew_s))
        for proc, skew_s in zip(procs, SKEWS, strict=True):
            (ready,) = proc.events("ready")  # the process's clock reads the skew
            assert abs(ready["clocks"]["time"] - time.time() - skew_s) < 60, ready
        start = trio.current_time()
        await trio.sleep(run_s / 3)
        victim = procs[1]  # the +1 h one: killed mid-run, then restarted
        victim.kill()
        await victim.wait_exit()
        await trio.sleep(run_s / 6)
        procs.append(await spawn(SKEWS[1]))
        await trio.sleep(max(0.0, run_s - (trio.current_time() - start)))
        for proc in procs:
            if proc.process.returncode is None:
                proc.terminate()
        for proc in procs:
            await proc.wait_exit()
        fired = await _fire_times(fleet)
        ((rows,),) = await fleet.fetch("SELECT count(*) FROM {schema}.jobs WHERE queue = 'ticks'")
    assert rows == len(fired)
    duplicates = len(fired) - len(set(fired))
    gaps = [b - a for a, b in itertools.pairwise(fired) if b - a != timedelta(seconds=1)]
    assert duplicates == 0, f"{duplicates} fire times enqueued twice"
    assert gaps == [], f"fire times not one second apart: {gaps}"
    # Every second of the run fired (a loaded machine may start the fleet late).
    assert len(fired) >= run_s - 3, f"only {len(fired)} fire times in {run_s:g} s"


async def test_q17_2_four_skewed_processes_fire_each_second_once_through_a_kill(
    pg_dsn, schema, open_fleet
):
    await _run_fleet(pg_dsn, schema, open_fleet, run_s=8.0)


@pytest.mark.slow
async def test_q17_2_four_skewed_processes_fire_each_second_once_for_30_s(
    pg_dsn, schema, open_fleet
):
    await _run_fleet(pg_dsn, schema, open_fleet, run_s=30.0)
