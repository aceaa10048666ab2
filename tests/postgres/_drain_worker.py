"""A drain worker process for ``test_engine_concurrency.py`` (not a test module).

Usage: ``python _drain_worker.py DSN SCHEMA QUEUE TASKS BATCH``

Opens its own store (its own ``trio.run``, its own connection pool) on an existing
schema, prints ``ready``, waits for a line on stdin (the start signal, so every process
starts draining at the same moment), then runs ``TASKS`` trio tasks that each loop
``claim_batch(BATCH)`` + ``ack_batch`` until no pending row is left in the queue. The
last line of stdout is one JSON object: every ``[job id, attempts]`` this process was
handed, how many rows its ``ack_batch`` calls deleted, and a few counters.
"""

from __future__ import annotations

import json
import os
import sys
import time

import trio

from alkstore_trio import open_store


async def _pending(store, schema: str, queue: str) -> int:
    async with store.transaction() as tx:
        ((count,),) = await tx.fetch(
            f'SELECT count(*) FROM "{schema}".jobs WHERE queue = %s AND state = %s',
            [queue, "pending"],
        )
    return int(count)


async def _main(dsn: str, schema: str, queue_name: str, tasks: int, batch: int) -> None:
    async with open_store(
        dsn,
        schema=schema,
        migrate="check",
        pool_size=tasks,
        application_name="alkstore-trio-tests:drain",
    ) as store:
        queue = store.queue(queue_name)
        handled: list[list[int]] = []
        stats = {"acked": 0, "claims": 0, "empty_claims": 0, "max_batch": 0}
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)
        started = time.perf_counter()

        async def drain(worker_id: str) -> None:
            while True:
                handles = await queue.claim_batch(worker_id, batch)
                stats["claims"] += 1
                if not handles:
                    stats["empty_claims"] += 1
                    # Rows locked by another claimer in flight are skipped, not waited
                    # for: only stop once nothing is pending any more.
                    if await _pending(store, schema, queue_name) == 0:
                        return
                    continue
                stats["max_batch"] = max(stats["max_batch"], len(handles))
                handled.extend([h.id, h.job.attempts] for h in handles)
                deleted = await queue.ack_batch([h.id for h in handles])
                stats["acked"] += deleted  # not `+= await`: that would lose concurrent updates

        async with trio.open_nursery() as nursery:
            for number in range(tasks):
                nursery.start_soon(drain, f"proc-{os.getpid()}-{number}")
        stats["drain_s"] = time.perf_counter() - started
    print(json.dumps({"handled": handled, **stats}), flush=True)


if __name__ == "__main__":
    dsn, schema, queue_name, tasks, batch = sys.argv[1:6]
    trio.run(_main, dsn, schema, queue_name, int(tasks), int(batch))
