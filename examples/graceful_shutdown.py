"""Graceful shutdown, as ``systemctl stop`` does it, checked end to end.

``examples/systemd/alkstore-worker.service`` relies on one behaviour of the worker: on a
SIGTERM it stops claiming, lets the running handlers finish for up to
``--shutdown-grace-s``, cancels the rest and releases their jobs (back to pending at
once, ``last_error`` ``"worker stopped"``, the attempt given back), and exits with
status 0, well before ``TimeoutStopSec`` runs out. This script shows it twice:

1. **In your own trio program** (in-memory store): a task receives SIGTERM with
   ``trio.open_signal_receiver`` and calls ``worker.stop()``; the script sends itself
   the SIGTERM that ``systemctl stop`` would send.
2. **The command the unit runs**: it starts ``alkstore-trio worker`` as a subprocess on
   PostgreSQL (``python -m alkstore_trio worker``, with ``ALKSTORE_DSN`` and
   ``ALKSTORE_SCHEMA`` in its environment as ``EnvironmentFile=`` would put them), waits
   until it runs four slow handlers, then plays systemd: SIGTERM, wait up to
   ``TimeoutStopSec``, SIGKILL only if it is still running. Then it checks the database:
   the two jobs that finished within the grace are acked, the two that could not are
   pending again, none is left processing, and the worker exited with status 0.

It needs a PostgreSQL server: set ``ALKSTORE_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/test``). Without one it says so and exits with
status 1. It works in a schema of its own, created at the start and dropped at the end.
The grace here is 2 seconds (30 in the unit), so the run takes a few seconds.

Run it with ``python examples/graceful_shutdown.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

from alkstore_trio import EngineError, Job, Queue, Worker, open_store

DSN = os.environ.get("ALKSTORE_DSN", "postgresql://postgres@127.0.0.1:5432/test")
# A schema of this run's own (the pid keeps two runs apart), dropped at the end. Not
# ALKSTORE_SCHEMA, unlike the README and the tutorial: this program claims every job of
# its queue and drops its schema, which must never be one you use.
SCHEMA = f"example_graceful_{os.getpid()}"
#: The worker's --shutdown-grace-s (the unit: 30).
GRACE_S = 2.0
#: systemd's TimeoutStopSec (the unit: 45): the grace plus time to release the jobs.
TIMEOUT_STOP_S = GRACE_S + 15
#: The handlers' run times: two finish within the grace, two never would.
QUICK_S, STUCK_S = 0.5, 600.0
#: The directory of this file: the worker imports ``graceful_shutdown`` from here, as
#: the unit's WorkingDirectory= makes ``--queue`` modules importable.
HERE = Path(__file__).resolve().parent


async def export_report(job: Job) -> None:
    """The handler: takes as many seconds as the payload says (stands for real work)."""
    await trio.sleep(float(job.payload))


# --- 1. in your own trio program ------------------------------------------------------


async def stop_on_signals(
    worker: Worker, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """What the command does: the first SIGTERM or SIGINT stops the worker gracefully,
    a second one cancels the running handlers at once (their jobs are still released)."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        received = 0
        async for signum in signals:
            received += 1
            print(f"  received {signal.Signals(signum).name}: stopping the worker")
            worker.stop(grace_s=None if received == 1 else 0)


async def in_process() -> None:
    print("1. a Worker in this process, stopped by SIGTERM:")
    async with open_store("memory://") as store:
        reports = store.queue("reports")
        quick = await reports.enqueue_many([str(QUICK_S).encode()] * 2)
        stuck = await reports.enqueue_many([str(STUCK_S).encode()] * 2)
        worker = Worker(store, {reports: export_report}, shutdown_grace_s=GRACE_S)
        async with trio.open_nursery() as nursery:
            await nursery.start(stop_on_signals, worker)
            async with trio.open_nursery() as worker_nursery:
                await worker_nursery.start(worker.run)
                while worker.statistics().started < 4:  # noqa: ASYNC110 - a demo's wait
                    await trio.sleep(0.01)
                os.kill(os.getpid(), signal.SIGTERM)  # what `systemctl stop` sends
            # worker.run returned: the running handlers finished or their jobs were
            # released. Stop listening for signals.
            nursery.cancel_scope.cancel()
        stats = worker.statistics()
        print(f"  acked {stats.acked}, released {stats.released}, in flight {stats.in_flight}")
        assert (stats.acked, stats.released, stats.in_flight) == (2, 2, 0)
        await check_drained(reports, quick, stuck)


# --- 2. the command, under a stand-in for systemd -------------------------------------


def worker_command() -> list[str]:
    """The unit's ExecStart, with this file's handler and a short grace."""
    return [
        sys.executable,
        "-m",
        "alkstore_trio",
        "worker",
        "--queue",
        "reports=graceful_shutdown:export_report",
        "--concurrency",
        "4",
        "--shutdown-grace-s",
        f"{GRACE_S:g}",
        "--poll-interval-s",
        "1",
        "--worker-id",
        "example-worker",
        "--status-interval-s",
        "0",
        "--log-level",
        "info",
    ]


async def under_systemd(queue: Queue) -> None:
    print("2. `alkstore-trio worker` in a subprocess, stopped as systemd stops it:")
    quick = await queue.enqueue_many([str(QUICK_S).encode()] * 2)
    stuck = await queue.enqueue_many([str(STUCK_S).encode()] * 2)
    # EnvironmentFile=: the DSN and the schema reach the worker in its environment.
    env = {**os.environ, "ALKSTORE_DSN": DSN, "ALKSTORE_SCHEMA": SCHEMA, "PYTHONUNBUFFERED": "1"}
    process = await trio.lowlevel.open_process(
        worker_command(), cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    output: list[str] = []
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect_output, process, output)
            with trio.fail_after(30):
                while not await all_claimed(queue, quick + stuck):
                    if process.poll() is not None:
                        raise RuntimeError(f"the worker exited early:\n{''.join(output)}")
                    await trio.sleep(0.05)
            process.send_signal(signal.SIGTERM)  # KillSignal=SIGTERM, KillMode=mixed
            with trio.move_on_after(TIMEOUT_STOP_S):  # TimeoutStopSec=
                await process.wait()
            if process.returncode is None:
                process.kill()  # what systemd would do now: SIGKILL
                await process.wait()
                raise AssertionError(f"the worker outlived TimeoutStopSec:\n{''.join(output)}")
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    print("  what the journal shows:")
    for line in output:
        print("   ", line.rstrip())
    print(f"  the worker exited with status {process.returncode}")
    assert process.returncode == 0, "a graceful stop exits with status 0"
    await check_drained(queue, quick, stuck)


async def all_claimed(queue: Queue, ids: list[int]) -> bool:
    """Whether the worker claimed every job (running now, or already acked)."""
    for job_id in ids:
        job = await queue.get_job(job_id)
        if job is not None and job.state != "processing":
            return False
    return True


async def collect_output(process: trio.Process, output: list[str]) -> None:
    assert process.stdout is not None
    buffer = b""
    async for chunk in process.stdout:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        output.extend(line.decode(errors="replace") + "\n" for line in lines)
    if buffer:
        output.append(buffer.decode(errors="replace"))


async def check_drained(queue: Queue, quick: list[int], stuck: list[int]) -> None:
    """The jobs that finished within the grace are acked; the others are pending again,
    ready now, with ``last_error`` ``"worker stopped"`` and their attempt given back (0
    attempts: a stop spends none, Q19.8); nothing is left processing."""
    assert await queue.list_jobs("processing") == []
    for job_id in quick:
        assert await queue.get_job(job_id) is None  # acked: the row is gone
    for job_id in stuck:
        job = await queue.get_job(job_id)
        assert job is not None
        assert (job.state, job.attempts, job.last_error) == ("pending", 0, "worker stopped")
    print(f"  jobs {quick} acked; jobs {stuck} pending again: 'worker stopped'")


async def main() -> None:
    await in_process()
    connected = False
    try:
        # migrate="apply" creates the schema; a deployment runs `alkstore-trio migrate`.
        async with open_store(DSN, schema=SCHEMA, migrate="apply", connect_timeout_s=5) as store:
            connected = True
            try:
                await under_systemd(store.queue("reports"))
            finally:
                with trio.CancelScope(shield=True):
                    async with store.transaction() as tx:
                        await tx.execute(f'DROP SCHEMA "{SCHEMA}" CASCADE')
    except EngineError:
        if connected:
            raise
        print(
            "graceful_shutdown.py: part 2 needs a PostgreSQL server and none answered; "
            "set ALKSTORE_DSN=postgresql://user@host:port/db",
            file=sys.stderr,
        )
        raise SystemExit(1) from None


if __name__ == "__main__":
    trio.run(main)
