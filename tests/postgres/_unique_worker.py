"""An enqueuer process for ``test_unique_keys.py`` (not a test module).

Usage: ``python _unique_worker.py DSN SCHEMA QUEUE KEY TASKS``

Opens its own store (its own ``trio.run``, its own connection pool) on an existing
schema, prints ``ready``, waits for a line on stdin (the start signal, so that every
process starts at the same moment), then runs ``TASKS`` trio tasks that each enqueue one
job with the unique key ``KEY``. The last line of stdout is one JSON object: every
``[id, created]`` its enqueues returned.
"""

from __future__ import annotations

import json
import sys

import trio

from alkstore_trio import open_store


async def _main(dsn: str, schema: str, queue_name: str, key: str, tasks: int) -> None:
    async with open_store(
        dsn,
        schema=schema,
        migrate="check",
        pool_size=10,
        application_name="alkstore-trio-tests:unique",
    ) as store:
        queue = store.queue(queue_name)
        results: list[list[object]] = []
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)

        async def enqueue(n: int) -> None:
            got = await queue.enqueue(f"task {n}".encode(), unique_key=key)
            results.append([int(got), got.created])

        async with trio.open_nursery() as nursery:
            for n in range(tasks):
                nursery.start_soon(enqueue, n)
        print(json.dumps({"results": results}), flush=True)


if __name__ == "__main__":
    dsn, schema, queue_name, key, tasks = sys.argv[1:]
    trio.run(_main, dsn, schema, queue_name, key, int(tasks))
