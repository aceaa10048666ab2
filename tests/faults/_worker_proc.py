"""A worker process for the fault tests in this folder (not a test module).

Usage: ``python _worker_proc.py DSN SCHEMA QUEUE RECORDS [options]`` (see ``--help``).

Opens its own store on an existing schema (``migrate="check"``) under the given
``application_name`` (its LISTEN session is ``<name>:listen``), runs one
:class:`alkstore_trio.Worker` on ``QUEUE`` whose handler sleeps ``--sleep-s`` seconds, and
stops gracefully (``worker.stop()``) on SIGTERM or SIGINT, then exits 0; a second
signal cuts the grace short (``worker.stop(grace_s=0)``). A payload
``b"sleep=<seconds>"`` makes that job's handler sleep that long instead.

Every line of ``RECORDS`` is one JSON object, written and flushed at once (so a
``kill -9`` loses at most the line being written). ``ev`` says what happened:

- ``ready``: the worker runs and listens for wakes (``worker_id``, ``app``).
- ``start`` / ``end``: a handler started / finished (``id``, ``attempt``,
  ``claimed_at`` and ``claim_expires_at`` from the claim's snapshot, on the database's
  clock, as epoch seconds; ``end`` has ``outcome``: ``"returned"`` or ``"cancelled"``).
- ``ack``, ``retry``, ``release``, ``dead``, ``lease_lost``, ``engine_error``: the
  worker's own log records of those transitions (``id``, ``attempt``), written after the
  store answered; ``draining``: it stopped claiming and waits for running handlers.
  ``engine_error`` and ``pg`` (the engine's warnings, e.g. the LISTEN connection lost)
  carry the log message, which never holds a payload.
- ``stopped``: ``run()`` returned; ``stats`` is :meth:`Worker.statistics`.

Every record has ``pid`` and ``t`` (``time.time()``, comparable across processes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import random
import signal
import time
from typing import Any, TextIO

import trio

from alkstore_trio import Job, Worker, open_store

#: The worker's log events written to the records (the rest are not needed).
WORKER_EVENTS = frozenset(
    {"ack", "retry", "release", "dead", "lease_lost", "engine_error", "draining"}
)


class Records:
    """Appends one JSON object per line to a file, flushed per line."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._pid = os.getpid()

    def write(self, ev: str, **fields: Any) -> None:
        record = {"ev": ev, "pid": self._pid, "t": time.time(), **fields}
        self._stream.write(json.dumps(record) + "\n")
        self._stream.flush()


class RecordingLogHandler(logging.Handler):
    """Writes the worker's transition log records (and the engine's warnings)."""

    def __init__(self, records: Records) -> None:
        super().__init__(logging.DEBUG)
        self._records = records

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "event", None)
        if record.name == "alkstore_trio.worker" and event in WORKER_EVENTS:
            fields: dict[str, Any] = {
                "id": getattr(record, "job_id", None),
                "attempt": getattr(record, "attempt", None),
            }
            if event == "engine_error":
                fields["message"] = record.getMessage()
            self._records.write(event, **fields)
        elif record.name == "alkstore_trio.postgres" and record.levelno >= logging.WARNING:
            self._records.write("pg", message=record.getMessage())


def _epoch(value: Any) -> float | None:
    return None if value is None else value.timestamp()


async def main(args: argparse.Namespace, records: Records) -> None:
    handler_log = RecordingLogHandler(records)
    for name in ("alkstore_trio.worker", "alkstore_trio.postgres"):
        logger = logging.getLogger(name)
        logger.addHandler(handler_log)
        logger.setLevel(logging.INFO)

    async def handler(job: Job) -> None:
        fields = {
            "id": job.id,
            "attempt": job.attempts,
            "claimed_at": _epoch(job.claimed_at),
            "claim_expires_at": _epoch(job.claim_expires_at),
        }
        records.write("start", **fields)
        outcome = "cancelled"
        sleep_s = args.sleep_s * (1 + args.sleep_jitter * random.uniform(-1, 1))
        if job.payload.startswith(b"sleep="):
            sleep_s = float(job.payload.removeprefix(b"sleep="))
        try:
            await trio.sleep(sleep_s)
            outcome = "returned"
        finally:
            records.write("end", outcome=outcome, **fields)

    async with open_store(
        args.dsn,
        schema=args.schema,
        migrate="check",
        pool_size=args.pool_size,
        connect_timeout_s=args.connect_timeout_s,
        application_name=args.app,
    ) as store:
        worker = Worker(
            store,
            {args.queue: handler},
            concurrency=args.concurrency,
            poll_interval_s=args.poll_interval_s,
            shutdown_grace_s=args.shutdown_grace_s,
        )
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:

                async def run_worker(*, task_status: trio.TaskStatus[None]) -> None:
                    await worker.run(task_status=task_status)
                    nursery.cancel_scope.cancel()  # and the signal watcher with it

                await nursery.start(run_worker)
                stopping = False
                records.write("ready", worker_id=worker.worker_id, app=args.app)
                async for _ in signals:
                    # The first signal stops gracefully; another one cuts the grace short
                    # (cancels the running handlers at once and releases their jobs).
                    worker.stop(grace_s=0 if stopping else None)
                    stopping = True
        records.write("stopped", stats=dataclasses.asdict(worker.statistics()))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dsn")
    parser.add_argument("schema")
    parser.add_argument("queue")
    parser.add_argument("records", help="the JSON-lines file to append to")
    parser.add_argument("--app", required=True, help="application_name (unique per process)")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--poll-interval-s", type=float, default=1.0)
    parser.add_argument("--shutdown-grace-s", type=float, default=5.0)
    parser.add_argument("--sleep-s", type=float, default=0.0, help="each handler's sleep")
    parser.add_argument(
        "--sleep-jitter",
        type=float,
        default=0.0,
        help="vary each sleep by up to this fraction (so a batch's handlers end apart)",
    )
    parser.add_argument("--pool-size", type=int, default=3)
    parser.add_argument("--connect-timeout-s", type=float, default=10.0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args()
    with open(arguments.records, "a", encoding="utf-8") as stream:
        trio.run(main, arguments, Records(stream))
