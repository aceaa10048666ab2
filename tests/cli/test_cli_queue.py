"""Q18 in the CLI: ``queue pause NAME``, ``queue resume NAME``, ``queue limits NAME`` and
``queue list``, run
in-process through ``main([...])`` against a throwaway PostgreSQL schema; ``stats``
marks a paused queue."""

from __future__ import annotations

import json

import trio

from alkstore_trio import open_store
from alkstore_trio._cli import EXIT_OK, EXIT_USAGE


def _claim_and_enqueue(pg_dsn: str, schema: str) -> int:
    """Enqueue one job on ``payments`` and try to claim it: how many were handed out."""

    async def go() -> int:
        async with open_store(pg_dsn, schema=schema, listen=False) as store:
            queue = store.queue("payments")
            await queue.enqueue(b"charge")
            return len(await queue.claim_batch("w", 10))

    return trio.run(go)


def test_q18_queue_pause_resume_and_list(cli, pg_dsn, schema):
    status, out, _ = cli("queue", "pause", "payments")
    assert status == EXIT_OK
    assert "paused queue 'payments'" in out
    assert _claim_and_enqueue(pg_dsn, schema) == 0
    status, out, _ = cli("queue", "list")
    assert status == EXIT_OK
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["QUEUE", "STATE", "LIMITS", "READY"]
    assert lines[1].split()[:4] == ["payments", "paused", "-", "1"]
    status, out, _ = cli("stats")
    assert "payments (paused)" in out
    status, out, _ = cli("queue", "list", "--json")
    assert json.loads(out) == {
        "queue": "payments",
        "paused": True,
        "limits": None,
        "throttled": {"running": 0, "rate": 0, "per_key": 0},
        "ready": 1,
        "delayed": 0,
        "processing": 0,
        "dead": 0,
        "oldest_ready_age_s": json.loads(out)["oldest_ready_age_s"],
    }
    status, out, _ = cli("queue", "resume", "payments")
    assert status == EXIT_OK
    assert _claim_and_enqueue(pg_dsn, schema) == 2
    status, out, _ = cli("queue", "list", "--json")
    assert json.loads(out)["paused"] is False


def test_q18_queue_commands_check_the_name(cli):
    status, _, err = cli("queue", "pause", "alk_reserved")
    assert status == EXIT_USAGE
    assert "alk_reserved" in err
    status, out, _ = cli("queue", "list")
    assert status == EXIT_OK
    assert out.strip() == "no queues (no jobs, none paused or limited)"


def _claim_batch(pg_dsn: str, schema: str, queue: str, n: int, enqueue: int = 0) -> int:
    """Enqueue ``enqueue`` jobs on ``queue``, then claim up to ``n``: how many came."""

    async def go() -> int:
        async with open_store(pg_dsn, schema=schema, listen=False) as store:
            await store.queue(queue).enqueue_many([b"j"] * enqueue)
            return len(await store.queue(queue).claim_batch("w", n))

    return trio.run(go)


def test_q18_11_queue_limits_sets_shows_and_clears(cli, pg_dsn, schema):
    status, out, _ = cli("queue", "limits", "api")
    assert status == EXIT_OK
    assert out.strip() == "queue 'api' limits: none"
    status, out, _ = cli("queue", "limits", "api", "--max-running", "2", "--rate", "5/s")
    assert status == EXIT_OK
    assert out.strip() == "queue 'api' limits set: max 2 running, 5/s burst 5"
    assert _claim_and_enqueue(pg_dsn, schema) == 1  # another queue: not limited
    assert _claim_batch(pg_dsn, schema, "api", 10, enqueue=3) == 2
    assert _claim_batch(pg_dsn, schema, "api", 10) == 0
    status, out, _ = cli("queue", "limits", "api", "--json")
    assert json.loads(out) == {
        "queue": "api",
        "limits": {"max_running": 2, "rate_per_s": 5.0, "burst": 5, "max_running_per_key": None},
        "throttled": {"running": 2, "rate": 0, "per_key": 0},
    }
    status, out, _ = cli("queue", "limits", "api")
    assert "claims throttled so far: 2 by max running, 0 by the rate, 0 by the per-key" in out
    status, out, _ = cli("queue", "list")
    assert "max 2 running, 5/s burst 5" in out
    status, out, _ = cli("stats")
    assert "limits of api: max 2 running, 5/s burst 5; claims throttled: 2 by" in out
    status, out, _ = cli("stats", "--json")
    (api,) = [q for q in json.loads(out)["queues"] if q["queue"] == "api"]
    assert api["limits"] == {
        "max_running": 2, "rate_per_s": 5.0, "burst": 5, "max_running_per_key": None,
    }  # fmt: skip
    status, out, _ = cli("queue", "limits", "api", "--max-running", "none", "--rate", "none")
    assert status == EXIT_OK
    assert out.strip().startswith("queue 'api' limits set: none")
    assert _claim_batch(pg_dsn, schema, "api", 10) == 1


def test_q18_11_queue_limits_refuses_bad_values_without_effect(cli):
    for argv in (
        ["--max-running", "0"],
        ["--max-running", "many"],
        ["--rate", "fast"],
        ["--rate", "0/s"],
        ["--burst", "3"],
        ["--rate", "5/s", "--burst", "0"],
        ["--per-key", "0"],
        ["--per-key", "some"],
    ):
        status, _, err = cli("queue", "limits", "api", *argv)
        assert status == EXIT_USAGE, (argv, err)
        assert err.strip(), argv
    status, out, _ = cli("queue", "limits", "api")
    assert out.strip() == "queue 'api' limits: none"


def _claim_keys(pg_dsn: str, schema: str, keys: list[str]) -> list[str | None]:
    """Enqueue one job per key on ``tenants``, then claim up to 10: their keys."""

    async def go() -> list[str | None]:
        async with open_store(pg_dsn, schema=schema, listen=False) as store:
            queue = store.queue("tenants")
            await queue.enqueue_many([b"j"] * len(keys), concurrency_keys=keys)
            return [h.job.concurrency_key for h in await queue.claim_batch("w", 10)]

    return trio.run(go)


def test_q18_8_queue_limits_per_key_sets_shows_and_clears(cli, pg_dsn, schema):
    status, out, _ = cli("queue", "limits", "tenants", "--per-key", "1")
    assert status == EXIT_OK
    assert out.strip() == "queue 'tenants' limits set: max 1 per key"
    assert _claim_keys(pg_dsn, schema, ["a", "a", "b"]) == ["a", "b"]
    status, out, _ = cli("queue", "limits", "tenants", "--json")
    assert json.loads(out) == {
        "queue": "tenants",
        "limits": {
            "max_running": None, "rate_per_s": None, "burst": None, "max_running_per_key": 1,
        },
        "throttled": {"running": 0, "rate": 0, "per_key": 1},  # a's second job held back
    }  # fmt: skip
    assert _claim_keys(pg_dsn, schema, []) == []  # and again
    status, out, _ = cli("queue", "limits", "tenants")
    assert "0 by the rate, 2 by the per-key limit" in out
    status, out, _ = cli("queue", "list")
    assert "max 1 per key" in out
    status, out, _ = cli("queue", "limits", "tenants", "--per-key", "none")
    assert out.splitlines()[0] == "queue 'tenants' limits set: none"
    assert _claim_keys(pg_dsn, schema, []) == ["a"]
