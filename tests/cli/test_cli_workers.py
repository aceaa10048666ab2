"""Q21.4 on the command line: ``alkstore-trio workers`` lists every registered worker
(idle ones too) with its heartbeat age and state, as a table or ``--json``; bad
arguments are usage errors."""

from __future__ import annotations

import json

import trio

from alkstore_trio import WorkerRegistration, open_store
from alkstore_trio._cli import EXIT_OK, EXIT_USAGE


def reg(worker_id, queues=("emails",)):
    return WorkerRegistration(worker_id, "host-a", 41, queues, 10, "1.0")


def test_q21_4_workers_lists_running_stopped_and_gone_workers(cli, pg_dsn, schema):
    async def seed() -> None:
        async with open_store(pg_dsn, schema=schema, listen=False) as store:
            await store.beat_worker(reg("idle-1"), "start")
            await store.beat_worker(reg("done-2"), "start")
            await store.beat_worker(reg("done-2"), "stop")
            await store.beat_worker(reg("crashed-3", queues=()), "start")
            async with store.transaction() as tx:  # back-date: its last beat 5 minutes ago
                await tx.execute(
                    f'UPDATE "{schema}".workers SET heartbeat_at = heartbeat_at - '
                    "interval '5 minutes', started_at = started_at - interval '1 hour' "
                    "WHERE worker_id = 'crashed-3'"
                )

    status, _, err = cli("workers")
    assert (status, err) == (EXIT_OK, "no registered workers\n")
    trio.run(seed)
    status, out, _ = cli("workers")
    assert status == EXIT_OK
    header, *lines = out.splitlines()
    assert header.split() == [
        "WORKER", "HOST", "PID", "QUEUES", "SLOTS", "STARTED", "HEARTBEAT", "STATE"
    ]  # fmt: skip
    by_id = {line.split()[0]: line.split() for line in lines}
    assert set(by_id) == {"idle-1", "done-2", "crashed-3"}
    assert by_id["idle-1"][1:5] == ["host-a", "41", "emails", "10"]
    assert by_id["idle-1"][-1] == "RUNNING"
    assert by_id["done-2"][-1] == "STOPPED"
    assert by_id["crashed-3"][3] == "-"
    assert by_id["crashed-3"][-3:] == ["5.0m", "ago", "GONE"]
    status, out, _ = cli("workers", "--json", "--gone-after-s", "3600")
    rows = {r["worker_id"]: r for r in map(json.loads, out.splitlines())}
    assert rows["crashed-3"]["state"] == "running"  # 5 minutes < an hour
    assert 300 <= rows["crashed-3"]["heartbeat_age_s"] < 360
    assert rows["done-2"]["stopped_at"] is not None
    assert rows["idle-1"]["queues"] == ["emails"]
    assert rows["idle-1"]["version"] == "1.0"
    assert rows["idle-1"]["started_at"].endswith("Z")
    status, out, _ = cli("workers", "--json", "--limit", "1")
    assert len(out.splitlines()) == 1
    for bad in (["--gone-after-s", "0"], ["--limit", "0"], ["--limit", "10001"]):
        assert cli("workers", *bad)[0] == EXIT_USAGE, bad
