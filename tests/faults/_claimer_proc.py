"""A claiming process for the pause race tests (not a test module).

Usage: ``python _claimer_proc.py DSN SCHEMA QUEUE STOPFILE APP``. Opens its own store on
an existing schema and claims one job at a time (``claim_batch(APP, 1)``), never acking,
as fast as it can, until ``STOPFILE`` exists; then prints one JSON line
``{"claims": <statements>, "jobs": <jobs handed out>}`` and exits 0. Several of these
keep claim statements in flight all the time, which is what a pause has to wait for.
"""

from __future__ import annotations

import json
import sys

import trio

from alkstore_trio import open_store


async def main(dsn: str, schema: str, queue_name: str, stopfile: str, app: str) -> None:
    stop = trio.Path(stopfile)
    claims = jobs = 0
    async with open_store(
        dsn, schema=schema, pool_size=1, application_name=app, listen=False
    ) as store:
        queue = store.queue(queue_name)
        print(json.dumps({"ready": True}), flush=True)
        while not await stop.exists():
            jobs += len(await queue.claim_batch(app, 1))
            claims += 1
    print(json.dumps({"claims": claims, "jobs": jobs}), flush=True)


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:6])
