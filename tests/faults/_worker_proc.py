"""A worker process for the fault tests in this folder (not a test module).

Usage: ``python _worker_proc.py DSN SCHEMA QUEUE RECORDS [options]`` (see ``--help``).

Opens its own store on an existing schema (``migrate="check"``) under the given
``application_name`` (its LISTEN session is ``<name>:listen``; ``--no-listen`` opens none:
poll-only mode), runs one :class:`alkstore_trio.Worker` on ``QUEUE`` whose handler sleeps
``--sleep-s`` seconds, and stops gracefully (``worker.stop()``) on SIGTERM or SIGINT, then
exits 0; a second signal cuts the grace short (``worker.stop(grace_s=0)``).

A payload may tell its handler what to do: ``<command>`` or ``<command>|<anything>`` (the
rest is opaque: tests put sentinels there), where the command is ``sleep=<seconds>``
(sleep that long instead of ``--sleep-s``), ``retry=<seconds>`` (on the first attempt,
``raise Retry(delay_s=<seconds>)``; later attempts succeed), ``raise`` (raise a
``ValueError`` whose text is not the payload, on every attempt), ``fail`` (``raise
Fail``) or ``txeffect=<table>`` (R16/Q19.6: in ``current_job().transaction()``, insert
``(job_id, claim_token, pid)`` into the table, write a ``tx_effect`` record, sleep
``--sleep-s``, and complete the job as the transaction's last statement; ``handler_end``'s
outcome is then ``"completed_in_tx"`` or ``"claim_lost"``). Any other payload just
sleeps ``--sleep-s``.

``--freeze-in-tx N`` stops the whole process with SIGSTOP once ``N`` ``txeffect`` handlers
have written their rows, their transactions open (a ``frozen_in_tx`` record says so
first): a worker frozen inside its transactions, before their completions.

``--hold`` opens the store, then waits for SIGUSR1 before the worker runs (a ``held``
record says it waits): a test starts such processes early, alongside others, and lets
them work only when it wants to (cheaper and safer than freezing a running worker, whose
claim already sent may be answered after the freeze).

``--debug-log`` writes every log record of the process (root logger at DEBUG: the
library's, psycopg's...) to stderr with all its attributes, the ``repr`` of every worker
event, and at the end the ``repr`` of the store, the worker and its statistics: the
secrets tests scan all of it.

``--freeze-in-fire PATH`` is the stalled-scheduler hook (Q17.9): once ``PATH`` exists,
the first ``fire_periodic`` transaction that holds a schedule row (the engine planned a
row, which it does only for rows its transaction locked) runs all its statements, writes
a ``frozen_in_fire`` record (``fired``: the fire times it enqueued, uncommitted) and
stops the whole process with SIGSTOP *before its commit*, holding the rows' locks.
``--fire-idle-timeout-s`` sets how long PostgreSQL lets that transaction sit idle
(the engine's ``FIRE_IDLE_TIMEOUT_S``), so a test need not wait out the default.

Every line of ``RECORDS`` is one JSON object, written and flushed at once (so a
``kill -9`` loses at most the line being written). ``ev`` says what happened:

- the worker's events (R9), written by :class:`alkstore_trio.testing.HistoryRecorder`
  (``claim``, ``start``, ``heartbeat``, ``finish``, ``ack``, ``retry``, ``release``,
  ``dead``, ``lease_lost``, ``engine_error``, ``draining``, ``worker_start``,
  ``worker_stop``...; see :func:`alkstore_trio.testing._history.event_record` for the
  keys): :func:`alkstore_trio.testing.load_history` reads them back for
  :func:`~alkstore_trio.testing.check_history`. They are written by a task of their own,
  so they may trail the worker by a scheduling step; their ``t`` is when the worker
  logged the event (just after the store answered), not when the line was written.
- ``handler_start`` / ``handler_end``: written *synchronously by the handler* when it
  starts / finishes (``id``, ``attempt``, ``claimed_at``, ``claim_expires_at``;
  ``handler_end`` has ``outcome``: ``"returned"``, ``"cancelled"``, or for the payload
  commands ``"raised"``, ``"failed"`` and ``"retried"``, which the worker's ``finish``
  event does not say). Being synchronous, a ``handler_start`` without its
  ``handler_end`` in the file of a stopped (SIGSTOP) process means the handler was running
  at that moment. ``--no-handler-records`` turns them off (long runs).
- ``ready``: the worker runs and listens for wakes (``worker_id``, ``app``, and
  ``clocks``: the process's local wall-clock readings, ``time.time()``,
  ``datetime.now(UTC)`` and ``date.today()``, for the clock-skew tests).
- ``pg``: a warning of the PostgreSQL engine (e.g. the LISTEN connection lost), with its
  log message (never a payload).
- ``stopped``: ``run()`` returned; ``stats`` is :meth:`Worker.statistics`.

Every record has ``pid`` and ``t`` (``time.time()``, comparable across processes).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import os
import random
import signal
import sys
import time
from datetime import UTC, date, datetime
from typing import Any, TextIO

import trio

from alkstore_trio import ClaimLost, Fail, Job, Periodic, Retry, Worker, current_job, open_store
from alkstore_trio.testing import HistoryRecorder

#: The text of the exception a ``raise`` payload's handler raises (never the payload).
HANDLER_ERROR = "the handler failed on purpose"


class Records:
    """Appends one JSON object per line to a stream, flushed per line."""

    def __init__(self, stream: TextIO, worker_id: str | None = None) -> None:
        self._stream = stream
        self._pid = os.getpid()
        self.worker_id = worker_id

    def write(self, ev: str, **fields: Any) -> None:
        record = {"ev": ev, "pid": self._pid, "t": time.time(), **fields}
        if self.worker_id is not None:
            record.setdefault("worker_id", self.worker_id)
        self._stream.write(json.dumps(record) + "\n")
        self._stream.flush()


class EngineWarnings(logging.Handler):
    """Writes the PostgreSQL engine's warnings as ``pg`` records."""

    def __init__(self, records: Records) -> None:
        super().__init__(logging.WARNING)
        self._records = records

    def emit(self, record: logging.LogRecord) -> None:
        self._records.write("pg", message=record.getMessage())


class EverythingFormatter(logging.Formatter):
    """A log line with every attribute of the record (``--debug-log``), so that a
    secret in any of them (its arguments, ``extra`` fields, exception) shows."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{super().format(record)} {vars(record)!r}"


def local_clocks() -> dict[str, Any]:
    """This process's wall-clock readings (shifted under the clock-skew tests)."""
    return {
        "time": time.time(),
        "datetime_now": datetime.now(UTC).timestamp(),
        "date_today": date.today().isoformat(),
    }


async def record_promptly(
    recorder: HistoryRecorder,
    worker: Worker,
    *,
    debug_log: bool = False,
    task_status: trio.TaskStatus[None],
) -> None:
    """:meth:`HistoryRecorder.record_worker`, but writing every event waiting at each
    wake-up: ``record_worker`` takes one event per scheduling step while one dispatcher
    step may publish dozens (a batch of acks), so under load its file trails the worker by
    hundreds of events, which a ``kill -9`` then loses. This keeps the lag to one step.
    With ``debug_log``, each event's ``repr`` also goes to stderr."""

    def record(event: Any) -> None:
        recorder.record(event)
        if debug_log:
            print(f"event {event!r}", file=sys.stderr, flush=True)

    with worker.events(buffer=None) as events:
        task_status.started()
        async for event in events:
            record(event)
            while True:
                try:
                    record(events.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break


def _epoch(value: Any) -> float | None:
    return None if value is None else value.timestamp()


def freeze_in_fire(trigger: str, records: Records) -> None:
    """``--freeze-in-fire``: wrap the PostgreSQL engine's fire step (see the module's
    docstring). The wrappers replace module globals the engine looks up at each call."""
    from alkstore_trio._core._periodic import format_fire_at
    from alkstore_trio._engines._postgres import _periodic

    real_fire, real_plan = _periodic.fire, _periodic.plan_fires
    state = {"held": False, "frozen": False}

    def triggered() -> bool:
        return os.path.exists(trigger)

    def plan_fires(*args: Any) -> Any:
        state["held"] = True  # called only for a row this transaction locked
        return real_plan(*args)

    async def fire(*args: Any) -> Any:
        state["held"] = False
        tick = await real_fire(*args)
        if state["held"] and not state["frozen"] and triggered():
            state["frozen"] = True
            records.write("frozen_in_fire", fired=[format_fire_at(f.fire_at) for f in tick.fired])
            os.kill(os.getpid(), signal.SIGSTOP)  # the transaction is still open
        return tick

    _periodic.plan_fires, _periodic.fire = plan_fires, fire


async def main(args: argparse.Namespace, stream: TextIO) -> None:
    records = Records(stream)
    if args.freeze_in_fire:
        freeze_in_fire(args.freeze_in_fire, records)
    if args.fire_idle_timeout_s is not None:
        from alkstore_trio._engines._postgres import _periodic

        _periodic.FIRE_IDLE_TIMEOUT_S = args.fire_idle_timeout_s  # type: ignore[misc]
    logger = logging.getLogger("alkstore_trio.postgres")
    logger.addHandler(EngineWarnings(records))
    if args.debug_log:
        everything = logging.StreamHandler(sys.stderr)
        everything.setFormatter(EverythingFormatter("%(levelname)s %(name)s %(message)s"))
        logging.getLogger().addHandler(everything)
        logging.getLogger().setLevel(logging.DEBUG)
    else:
        logger.setLevel(logging.WARNING)

    in_tx = [0]

    async def tx_effect(job: Job, table: str, sleep_s: float, fields: dict[str, Any]) -> None:
        """``txeffect=``: the effect row and the completion in one transaction."""
        async with current_job().transaction() as tx:
            await tx.execute(
                f"INSERT INTO {table} (job_id, token, pid) VALUES (%s, %s, %s)",
                [job.id, job.claim_token, os.getpid()],
            )
            records.write("tx_effect", **fields)
            in_tx[0] += 1
            if in_tx[0] == args.freeze_in_tx:
                records.write("frozen_in_tx", n=in_tx[0])
                os.kill(os.getpid(), signal.SIGSTOP)  # the transactions are still open
            await trio.sleep(sleep_s)

    async def handler(job: Job) -> bytes | None:
        fields = {
            "id": job.id,
            "attempt": job.attempts,
            "claim_token": job.claim_token,
            "claimed_at": _epoch(job.claimed_at),
            "claim_expires_at": _epoch(job.claim_expires_at),
        }
        if args.handler_records:
            records.write("handler_start", **fields)
        outcome = "cancelled"
        sleep_s = args.sleep_s * (1 + args.sleep_jitter * random.uniform(-1, 1))
        command = job.payload.partition(b"|")[0]
        if command.startswith(b"sleep="):
            sleep_s = float(command.removeprefix(b"sleep="))
        try:
            if command == b"raise":
                outcome = "raised"
                raise ValueError(HANDLER_ERROR)
            if command == b"fail":
                outcome = "failed"
                raise Fail("failed on purpose")
            if command.startswith(b"retry=") and job.attempts == 1:
                outcome = "retried"
                raise Retry(
                    delay_s=float(command.removeprefix(b"retry=")), error="retry on purpose"
                )
            if command.startswith(b"txeffect="):
                await tx_effect(job, command.removeprefix(b"txeffect=").decode(), sleep_s, fields)
                outcome = "completed_in_tx"
                return None
            await trio.sleep(sleep_s)
            outcome = "returned"
            # Q19.4's fault test: a kept job's result says which job and attempt it was.
            return b"result of %d" % job.id if job.keep_completed_s is not None else None
        except ClaimLost:
            outcome = "claim_lost"
            raise
        finally:
            if args.handler_records:
                records.write("handler_end", outcome=outcome, **fields)

    async with open_store(
        args.dsn,
        schema=args.schema,
        migrate="check",
        pool_size=args.pool_size,
        connect_timeout_s=args.connect_timeout_s,
        application_name=args.app,
        listen=args.listen,
    ) as store:
        worker = Worker(
            store,
            {args.queue: handler},
            concurrency=args.concurrency,
            poll_interval_s=args.poll_interval_s,
            shutdown_grace_s=args.shutdown_grace_s,
            heartbeat_interval_s=args.heartbeat_interval_s,
            sweep_interval_s=args.sweep_interval_s,
            # Q17: --periodic NAME:QUEUE:EVERY_S[:CATCH_UP] declares
            # Periodic(NAME, QUEUE, every_s=..., catch_up=...).
            periodic=[periodic_of(spec) for spec in args.periodic],
        )
        records.worker_id = worker.worker_id
        recorder = HistoryRecorder(stream, keep=False, time_base="wall")
        if args.hold:
            with trio.open_signal_receiver(signal.SIGUSR1) as released:
                records.write("held", app=args.app)
                async for _ in released:
                    break
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                # Subscribed before the worker runs: no event is missed. The recorder
                # ends by itself after worker_stop.
                await nursery.start(
                    functools.partial(record_promptly, debug_log=args.debug_log),
                    recorder,
                    worker,
                )
                watcher = trio.CancelScope()

                async def run_worker(*, task_status: trio.TaskStatus[None]) -> None:
                    await worker.run(task_status=task_status)
                    watcher.cancel()  # the signal watcher stops with the worker

                await nursery.start(run_worker)
                records.write("ready", app=args.app, clocks=local_clocks())
                stopping = False
                with watcher:
                    async for _ in signals:
                        # The first signal stops gracefully; another one cuts the grace
                        # short (cancels the running handlers at once, releases their jobs).
                        worker.stop(grace_s=0 if stopping else None)
                        stopping = True
        records.write("stopped", stats=dataclasses.asdict(worker.statistics()))
        if args.debug_log:
            for name, value in (("store", store), ("worker", worker)):
                print(f"repr {name} {value!r}", file=sys.stderr, flush=True)
            print(f"repr statistics {worker.statistics()!r}", file=sys.stderr, flush=True)


def periodic_of(spec: str) -> Periodic:
    """``NAME:QUEUE:EVERY_S[:CATCH_UP]`` as a ``Periodic`` (catch-up default ``"one"``)."""
    name, queue, every, *rest = spec.split(":")
    catch_up: Any = int(rest[0]) if rest else "one"
    return Periodic(name, queue, every_s=float(every), catch_up=catch_up)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dsn")
    parser.add_argument("schema")
    parser.add_argument("queue")
    parser.add_argument("records", help="the JSON-lines file to append to")
    parser.add_argument("--app", required=True, help="application_name (unique per process)")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--poll-interval-s", type=float, default=1.0)
    parser.add_argument("--heartbeat-interval-s", type=float, default=None)
    parser.add_argument("--sweep-interval-s", type=float, default=60.0)
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
    parser.add_argument(
        "--listen",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="open a LISTEN session (--no-listen: poll-only mode)",
    )
    parser.add_argument(
        "--hold",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="open the store, then wait for SIGUSR1 before the worker runs",
    )
    parser.add_argument(
        "--debug-log",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="log everything at DEBUG to stderr, with event and object reprs",
    )
    parser.add_argument(
        "--handler-records",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write handler_start/handler_end records",
    )
    parser.add_argument(
        "--periodic",
        action="append",
        default=[],
        metavar="NAME:QUEUE:EVERY_S[:CATCH_UP]",
        help="declare a periodic schedule (Q17); repeatable",
    )
    parser.add_argument(
        "--freeze-in-tx",
        type=int,
        default=None,
        help="SIGSTOP the process once N txeffect handlers wrote their rows (R16)",
    )
    parser.add_argument(
        "--freeze-in-fire",
        default=None,
        metavar="PATH",
        help="once PATH exists, SIGSTOP inside the next fire transaction that holds a row",
    )
    parser.add_argument(
        "--fire-idle-timeout-s",
        type=float,
        default=None,
        help="the fire transaction's idle_in_transaction_session_timeout (Q17.9)",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args()
    with open(arguments.records, "a", encoding="utf-8") as output:
        trio.run(main, arguments, output)
