"""``alkstore-trio workers`` (Q21.4): every registered worker, idle or busy, with its
host and pid, queues, slots, heartbeat age and state (running, stopped, gone)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from .._core._workers import WORKER_GONE_AFTER_S, WORKERS_LIST_DEFAULT, WORKERS_LIST_MAX
from .._util import age
from ._args import EXIT_OK, seconds
from ._operator import add_command, operator_store
from ._output import iso, say, table

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._core import WorkerInfo


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``workers``."""
    parser = add_command(
        commands,
        env,
        "workers",
        list_workers,
        title="workers",
        help="list the registered workers: host, pid, queues, heartbeat age, state",
        description=(
            "List the workers in the store's registry, the latest heartbeat first: worker "
            "id (the claimed_by of its jobs), host, pid, queues, concurrency, library "
            "version, when it started and how long ago it last beat (every 15 s). STATE "
            "is running, stopped (a graceful stop) or gone (no beat for --gone-after-s: "
            "it crashed or lost the database). Rows are purged a day after their last "
            "beat. Workers of a schema before version 15 do not register."
        ),
        examples=[
            "alkstore-trio workers",
            "alkstore-trio workers --json",
            "alkstore-trio workers --gone-after-s 120",
        ],
    )
    parser.add_argument(
        "--gone-after-s",
        metavar="S",
        type=seconds(zero_ok=False),
        default=WORKER_GONE_AFTER_S,
        help="a worker silent for longer than this is gone (default 60)",
    )
    parser.add_argument(
        "--limit",
        metavar="N",
        type=_limit,
        default=WORKERS_LIST_DEFAULT,
        help=f"list at most N workers (1-{WORKERS_LIST_MAX}; default {WORKERS_LIST_DEFAULT})",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per worker")


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer; got {text!r}") from None
    if not 1 <= value <= WORKERS_LIST_MAX:
        raise argparse.ArgumentTypeError(f"must be 1-{WORKERS_LIST_MAX}; got {value}")
    return value


async def list_workers(args: argparse.Namespace) -> int:
    async with operator_store(args) as store:
        rows = await store.list_workers(gone_after_s=args.gone_after_s, limit=args.limit)
    if args.json:
        for row in rows:
            say(json.dumps(_as_json(row), ensure_ascii=False))
        return EXIT_OK
    if not rows:
        print("no registered workers", file=sys.stderr)
        return EXIT_OK
    header = ["WORKER", "HOST", "PID", "QUEUES", "SLOTS", "STARTED", "HEARTBEAT", "STATE"]
    cells = [
        [
            row.worker_id,
            row.host,
            str(row.pid),
            ",".join(row.queues) or "-",
            str(row.concurrency),
            iso(row.started_at),
            f"{age(row.heartbeat_age_s)} ago",
            row.state.upper(),
        ]
        for row in rows
    ]
    for line in table(header, cells, "llrlrlrl"):
        say(line)
    return EXIT_OK


def _as_json(row: WorkerInfo) -> dict[str, object]:
    return {
        "worker_id": row.worker_id,
        "host": row.host,
        "pid": row.pid,
        "queues": list(row.queues),
        "concurrency": row.concurrency,
        "version": row.version,
        "started_at": iso(row.started_at),
        "heartbeat_at": iso(row.heartbeat_at),
        "heartbeat_age_s": row.heartbeat_age_s,
        "stopped_at": None if row.stopped_at is None else iso(row.stopped_at),
        "state": row.state,
        "now": iso(row.now),
    }
