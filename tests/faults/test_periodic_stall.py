"""Q17.9 across processes: a worker frozen with SIGSTOP inside its fire transaction,
holding the schedule row's lock with its jobs enqueued and not committed, does not stop
the fleet's schedule. The other workers skip the held row instead of waiting on it;
PostgreSQL ends the frozen session once it has sat idle in the transaction for the fire
transaction's ``idle_in_transaction_session_timeout`` and rolls it back; the others then
fire what the row owes (``catch_up`` backfills the stall) and keep firing. Resumed, the
frozen worker's commit fails (``periodic_failed``), its fire left nothing, and it goes
on serving. Over the whole run: one job per fire time, no duplicate and no gap.

The hook (``_worker_proc.py --freeze-in-fire``) freezes the process inside the engine's
fire step, after every statement and before the commit, in a transaction that holds the
row; the test checks in ``pg_stat_activity`` that the frozen session is idle in its
transaction. ``--fire-idle-timeout-s 2`` shortens the server's bound from its default
(5 s) so that the default run stays short.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import trio

pytest.importorskip("psycopg", reason="the fault tests need psycopg 3")

#: Every second, backfilling up to 100 missed fire times (the stall's).
SCHEDULE = "tick:ticks:1:100"
#: The frozen transaction's bound, shortened for the test (the engine's default is 5 s).
IDLE_TIMEOUT_S = 2.0


async def _fire_times(fleet) -> list[datetime]:
    rows = await fleet.fetch(
        "SELECT headers->>'alk-periodic-fire-at' FROM {schema}.jobs WHERE queue = 'ticks'"
    )
    return sorted(datetime.fromisoformat(at) for (at,) in rows)


async def _session_states(fleet, app: str) -> list[str]:
    """The states of the process's sessions (its pool's connections)."""
    rows = await fleet.fetch(
        "SELECT state FROM pg_stat_activity WHERE application_name = %s", [app]
    )
    return sorted(state for (state,) in rows)


async def test_q17_9_a_worker_frozen_in_its_fire_transaction_does_not_stop_the_schedule(
    pg_dsn, schema, open_fleet, tmp_path: Path
):
    trigger = tmp_path / "freeze-now"
    common = {"periodic": SCHEDULE, "pool_size": 2, "handler_records": False, "listen": False}
    async with open_fleet(pg_dsn, schema) as fleet:
        procs = []

        async def spawn(**options) -> None:
            procs.append(await fleet.spawn("unused", **common, **options))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: spawn(freeze_in_fire=trigger, fire_idle_timeout_s=IDLE_TIMEOUT_S)
            )
            nursery.start_soon(spawn)
            nursery.start_soon(spawn)
        (victim,) = [p for p in procs if "--freeze-in-fire" in " ".join(p.process.args)]
        others = [p for p in procs if p is not victim]
        # The fleet fires for a moment, then the victim freezes in its next held fire.
        await fleet.wait_until(lambda: _fire_times(fleet), timeout_s=15, what="a first fire")
        trigger.touch()
        (frozen,) = await fleet.wait_until(
            lambda: victim.events("frozen_in_fire"), timeout_s=15, what="the freeze"
        )
        await victim.pause()  # already stopped by its own SIGSTOP: wait for the state
        states = await _session_states(fleet, victim.app)
        assert "idle in transaction" in states, f"the frozen sessions are {states}"
        frozen_at = max(await _fire_times(fleet))

        # The others keep firing: the server ends the frozen session, and the fire
        # times after the freeze get their jobs while the victim is still stopped (the
        # second one after the last committed can only commit once the row is free).
        async def fired_past_the_freeze() -> bool:
            return max(await _fire_times(fleet)) >= frozen_at + timedelta(seconds=2)

        await fleet.wait_until(fired_past_the_freeze, timeout_s=IDLE_TIMEOUT_S + 15)
        states = await _session_states(fleet, victim.app)
        assert "idle in transaction" not in states, f"the frozen session lives: {states}"
        victim.resume()
        await fleet.wait_until(
            lambda: victim.events("periodic_failed"), timeout_s=15, what="the failed commit"
        )
        # The victim serves again: a fire time after its resume gets its job.
        resumed_at = max(await _fire_times(fleet))

        async def fired_after_resume() -> bool:
            return max(await _fire_times(fleet)) >= resumed_at + timedelta(seconds=1)

        await fleet.wait_until(fired_after_resume, timeout_s=15)
        for proc in procs:
            proc.terminate()
        for proc in procs:
            assert await proc.wait_exit() == 0, proc.stderr()
        fired = await _fire_times(fleet)
    assert victim.process.returncode == 0
    (stopped,) = victim.events("stopped")
    assert stopped["stats"]["engine_errors"] >= 1, stopped["stats"]
    assert all(p.events("stopped") for p in others)
    duplicates = len(fired) - len(set(fired))
    gaps = [b - a for a, b in itertools.pairwise(fired) if b - a != timedelta(seconds=1)]
    assert duplicates == 0, f"{duplicates} fire times enqueued twice"
    assert gaps == [], f"fire times not one second apart: {gaps}"
    # What the frozen transaction had enqueued (rolled back) was fired once by others.
    assert set(map(datetime.fromisoformat, frozen["fired"])) <= set(fired), frozen
