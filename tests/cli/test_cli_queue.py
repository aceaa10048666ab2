"""Q18 in the CLI: ``queue pause NAME``, ``queue resume NAME`` and ``queue list``, run
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
    assert lines[0].split()[:3] == ["QUEUE", "STATE", "READY"]
    assert lines[1].split()[:3] == ["payments", "paused", "1"]
    status, out, _ = cli("stats")
    assert "payments (paused)" in out
    status, out, _ = cli("queue", "list", "--json")
    assert json.loads(out) == {
        "queue": "payments",
        "paused": True,
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
    assert out.strip() == "no queues (no jobs, none paused)"
