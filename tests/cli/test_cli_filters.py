"""D26.1 in the command line: ``jobs list --key K --header NAME=VALUE`` (exact matches),
and the note that says where a bounded header search stopped."""

from __future__ import annotations

import json

from alkstore_trio import HEADER_SCAN_ROWS
from alkstore_trio._cli import EXIT_OK, EXIT_USAGE


def test_d26_1_jobs_list_filters_by_key_and_header_exactly(cli, on_store):
    async def seed(store):
        queue = store.queue("filtered")
        keyed = await queue.enqueue(b"a", unique_key="user_42", headers={"tenant": "50%"})
        grouped = await queue.enqueue(b"b", concurrency_key="user_42", headers={"tenant": "x"})
        await queue.enqueue(b"c", unique_key="user-42", headers={"tenant": "50"})
        return [keyed, grouped]

    ids = on_store(seed)
    base = ("jobs", "list", "--queue", "filtered", "--state", "pending")
    status, out, _ = cli(*base, "--key", "user_42")
    assert status == EXIT_OK
    assert [int(row.split()[0]) for row in out.splitlines()[1:]] == ids
    status, out, _ = cli(*base, "--header", "tenant=50%", "--json")
    assert status == EXIT_OK
    assert [json.loads(line)["id"] for line in out.splitlines()] == ids[:1]
    status, out, err = cli(*base, "--key", "user_42", "--header", "tenant=x", "--json")
    assert [json.loads(line)["id"] for line in out.splitlines()] == ids[1:]
    status, out, err = cli(*base, "--key", "user%")
    assert (status, out) == (EXIT_OK, "")
    assert "no pending jobs" in err
    status, _, err = cli(*base, "--header", "tenant")
    assert status == EXIT_USAGE
    assert "NAME=VALUE" in err


def test_d26_1_jobs_list_says_where_a_header_search_stopped(cli, on_store):
    async def seed(store):
        queue = store.queue("scan")
        ids = []
        for _ in range(HEADER_SCAN_ROWS // 1000):
            ids += await queue.enqueue_many([b"x"] * 1000)
        rare = await queue.enqueue(b"rare", headers={"kind": "rare"})
        return ids[-1], rare

    last, rare = on_store(seed)
    base = ("jobs", "list", "--queue", "scan", "--state", "pending", "--header", "kind=rare")
    status, out, err = cli(*base)
    assert (status, out) == (EXIT_OK, "")
    assert f"searched up to id {last}; continue with --after-id {last}" in err
    status, out, err = cli(*base, "--after-id", str(last), "--json")
    assert [json.loads(line)["id"] for line in out.splitlines()] == [rare]
    assert "searched" not in err
