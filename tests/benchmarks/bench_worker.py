"""``Worker`` end to end on PostgreSQL, beside raw psycopg loops and the peers (``just bench``).

Three measurements, each with its raw baselines in the same run:

- **Burn-down.** ``enqueue_many`` puts N no-op jobs (20,000) into a fresh schema; then
  one or two worker *processes* drain them and the clock stops at the last ack. Worker
  variants: ``alkstore_trio.Worker`` at concurrency 10 and 100 (``claim_batch_max=100``),
  in one process and in two. Baselines, each its own process with a plain sync psycopg
  connection: ``SELECT … FOR UPDATE SKIP LOCKED LIMIT 100`` + ``DELETE … WHERE id =
  ANY(…)`` in one transaction (the baseline of the ratios; also with two processes), and
  two loops with our lease semantics: the ``UPDATE`` claim that commits a lease + a
  ``DELETE`` (two autocommit statements per batch), and the library's own ``claim`` +
  ``ack_claims`` statements (``raw, library SQL``: the cost of our SQL without our
  client). Reported: jobs/s (N / wall time from the start signal to the last ack), and
  client CPU per job (the worker processes' user + system CPU from the start signal to
  the last ack, ``resource.getrusage`` in each process, over N). Ratios are per round
  (variant rate / baseline rate of the same round), their median over the rounds.
- **Steady state.** A producer process enqueues (4 trio tasks, one store,
  ``enqueue_many`` of 10 jobs per call) at a fixed rate (2,000/s), or as fast as it can
  (100 jobs per call), for a fixed time, while one consumer
  process drains: a ``Worker`` (concurrency 10), or the raw transaction loop that waits
  on ``LISTEN`` when the queue is empty. Reported: the rate offered and reached by the
  producer, the drain rate over the window (jobs enqueued minus the backlog left at its
  end, over the window), and the backlog (rows in the table, sampled every 0.25 s:
  mean, max, at the end); then the consumer gets 20 s to finish the backlog, and the
  jobs it acked plus the rows left must equal the jobs enqueued (a consumer that falls
  behind leaves rows: the ``left`` column).
- **Latency.** An idle consumer process; this process enqueues one job at a time with
  the library (``queue.enqueue``), waits until the consumer reports that the job's
  handler started, pauses 2–5 ms, and goes on. Latency = handler start (the handler's
  first line takes ``time.perf_counter()``) − the moment ``enqueue`` returned here. Both
  clocks are ``CLOCK_MONOTONIC``, which is one clock for every process on Linux. The
  baseline consumer is a sync psycopg loop blocked in ``select()`` on a ``LISTEN``
  connection that claims with the lease ``UPDATE`` on a second connection; its "handler
  start" is the moment that claim returned.

Peers. When a separate virtualenv with pgqueuer and procrastinate exists
(``ALKSTORE_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``), ``bench_peers.py``
runs under it (their burn-down and idle pickup latency, in databases of their own) and
its rows join the tables; otherwise the peers are skipped with a line saying so.

Before/after. ``--ab REF[,REF…]`` adds, for each git commit ``REF`` of this repository,
the one-process Worker variants run on that commit's code (checked out once into
``/tmp/alkstore-bench-ab-<REF>`` as a detached worktree; the child gets it on
``PYTHONPATH``), so old and new code alternate round by round in one run (the variants
rotate each round) — the way to measure a change on a shared, noisy machine.

Every variant gets a fresh schema (dropped afterwards), and every run is checked: each
consumer acked exactly the jobs it claimed (no retry, no lost lease), the acks add up to
the jobs enqueued, and the table is empty at the end.

Run it as ``python tests/benchmarks/bench_worker.py [--quick] [--jobs N] [--rounds R]
[--only SUBSTRING]`` (``--only`` picks sections or variants by name: ``burn-down``,
``steady``, ``latency``, ``peers``, ``c=100``, …) or through pytest (``pytest
tests/benchmarks/test_bench_worker.py -m bench -s``; quick unless
``ALKSTORE_BENCH_FULL=1``). The server comes from ``ALKSTORE_BENCH_DSN``, else
``ALKSTORE_TEST_DSN``, else the local default. Results: ``docs/explanation/performance.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import resource
import select
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import trio

import alkstore_trio


def _load_sibling(file: str, name: str) -> Any:
    # By path (and, for bench_postgres, under the name its pytest wrapper uses), so that
    # it works as a script, under pytest whatever its import mode, and in the child
    # processes.
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).with_name(file)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bp = _load_sibling("bench_postgres.py", "alkstore_bench_postgres")

QUEUE = bp.QUEUE
PAYLOAD = bp.PAYLOAD
#: Jobs per ``enqueue_many`` call of the prefill.
PREFILL_CALL = 1000
CLAIM_BATCH = 100
#: The virtualenv's python that runs ``bench_peers.py``.
PEERS_PYTHON = bp.PEERS_PYTHON
#: Producer tasks of the steady-state case.
PRODUCER_TASKS = 4
#: The pause before each latency sample (uniform, seconds): the consumer is idle.
LATENCY_GAP_S = (0.002, 0.005)
LATENCY_WARMUP = 10
#: How long a child may take to say ``ready`` / a run may take before the bench gives up.
CHILD_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Sizes:
    jobs: int  # burn-down jobs
    rounds: int  # burn-down rounds
    steady_s: float  # producer window of each steady-state run
    samples: int  # latency samples per consumer


FULL = Sizes(jobs=20_000, rounds=3, steady_s=10.0, samples=300)
QUICK = Sizes(jobs=2_000, rounds=1, steady_s=3.0, samples=60)


# -- child processes ----------------------------------------------------------------------
#
# Every consumer and producer is a child process running this file with ``--child``. A
# child prints ``ready`` once it is set up (store open, statements not yet prepared),
# waits for ``go`` on stdin, and ends with one JSON line. Worker children also print
# ``acked N`` progress lines (every 50 ms) and stop on ``stop``; latency children print
# ``t <perf_counter>`` per handler start.


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _child_worker(
    schema: str,
    concurrency: int,
    batch: int,
    latency: bool,
    poll_interval_s: float,
    prefetch: int = 0,
) -> None:
    async def noop(job: alkstore_trio.Job) -> None:
        pass

    async def report_start(job: alkstore_trio.Job) -> None:
        t = time.perf_counter()
        _emit(f"t {t!r}")

    async with alkstore_trio.open_store(
        bp.dsn(), schema=schema, migrate="check", application_name="alkstore_trio:bench-worker"
    ) as store:
        worker = alkstore_trio.Worker(
            store,
            {QUEUE: report_start if latency else noop},
            concurrency=concurrency,
            claim_batch_max=batch,
            poll_interval_s=poll_interval_s,
            shutdown_grace_s=5.0,
            # Only when asked: the code of an --ab commit may not know the option.
            **({"prefetch": prefetch} if prefetch else {}),
        )
        _emit("ready")
        await trio.to_thread.run_sync(sys.stdin.readline)
        cpu0, t_go = _cpu_s(), time.perf_counter()
        last = {"acked": 0, "t": t_go, "cpu": cpu0}

        async def monitor() -> None:
            reported = 0
            next_report = trio.current_time()
            while True:
                acked = worker.statistics().acked
                if acked != last["acked"]:
                    last.update(acked=acked, t=time.perf_counter(), cpu=_cpu_s())
                now = trio.current_time()
                if now >= next_report and acked != reported:
                    _emit(f"acked {acked}")
                    reported, next_report = acked, now + 0.05
                await trio.sleep(0.005)

        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            async with trio.open_nursery() as watching:
                watching.start_soon(monitor)
                await trio.to_thread.run_sync(sys.stdin.readline)  # "stop"
                watching.cancel_scope.cancel()
            worker.stop()
        stats = worker.statistics()
    _emit(
        json.dumps(
            {
                "acked": stats.acked,
                "claimed": stats.claimed,
                "retried": stats.retried,
                "dead_lettered": stats.dead_lettered,
                "released": stats.released,
                "lease_lost": stats.lease_lost,
                "handler_errors": stats.handler_errors,
                "engine_errors": stats.engine_errors,
                "t_go": t_go,
                "t_last": last["t"],
                "cpu_s": last["cpu"] - cpu0,
            }
        )
    )


def _child_raw(schema: str, how: str, batch: int, listen: bool, latency: bool) -> None:
    """A raw sync psycopg consumer. ``how``: ``tx`` (SELECT … FOR UPDATE SKIP LOCKED +
    DELETE, one transaction), ``lease`` (UPDATE claim + DELETE), ``lib-sql`` (the
    library's ``claim`` + ``ack_claims``). Without ``listen`` it drains until a claim
    comes back empty, then exits; with it, it waits on LISTEN when the queue is empty and
    stops on ``stop``."""
    q = bp.RawSql(schema)
    name = "alkstore_trio:bench-raw"
    conn = psycopg.connect(bp.dsn(), autocommit=True, application_name=name)
    if how == "lib-sql":
        conn.prepare_threshold = bp._driver.PREPARE_THRESHOLD
    if how == "tx":
        conn.autocommit = False
    cur = conn.cursor()
    listener = None
    if listen:
        listener = psycopg.connect(bp.dsn(), autocommit=True, application_name=name)
        listener.execute(f'LISTEN "{q.channel}"')

    def step() -> int:
        if how == "tx":
            cur.execute(q.select_locked, (QUEUE, batch))
            rows = cur.fetchall()
            t = time.perf_counter()
            if rows:
                cur.execute(q.delete, ([row[0] for row in rows],))
            conn.commit()
        elif how == "lease":
            cur.execute(q.claim_lease, (bp.WORKER, QUEUE, batch))
            rows = cur.fetchall()
            t = time.perf_counter()
            if rows:
                cur.execute(q.delete_claimed, ([row[0] for row in rows], QUEUE))
        else:
            params = {
                "queue": QUEUE,
                "worker_id": bp.WORKER,
                "n": batch,
                "token_base": bp.token_base(),
            }
            cur.execute(q.lib["claim"], params)
            rows = cur.fetchall()
            t = time.perf_counter()
            if rows:
                params = {
                    "queue": QUEUE,
                    "ids": [r[0] for r in rows],
                    "tokens": [r[19] for r in rows],  # Q19.8: the claim_token column
                }
                cur.execute(q.lib["ack_claims"], params)
                if len(cur.fetchall()) != len(rows):
                    raise AssertionError("ack_claims refused a claim")
        if latency:
            for _ in rows:
                _emit(f"t {t!r}")
        return len(rows)

    _emit("ready")
    sys.stdin.readline()
    cpu0 = _cpu_s()
    t_go = t_last = time.perf_counter()
    cpu_last = cpu0
    acked = 0
    reported = 0
    next_report = t_go
    stdin_fd = sys.stdin.fileno()
    while True:
        n = step()
        if listener is not None and n and select.select([stdin_fd], [], [], 0)[0]:
            acked += n
            t_last, cpu_last = time.perf_counter(), _cpu_s()
            sys.stdin.readline()
            break
        if n:
            acked += n
            t_last, cpu_last = time.perf_counter(), _cpu_s()
            if t_last >= next_report:
                _emit(f"acked {acked}")
                reported, next_report = acked, t_last + 0.05
            continue
        if listener is None:
            break
        if acked != reported:
            _emit(f"acked {acked}")
            reported = acked
        readable, _, _ = select.select([listener.fileno(), stdin_fd], [], [], 0.5)
        if stdin_fd in readable:
            sys.stdin.readline()
            break
        if readable:
            listener.pgconn.consume_input()
            while listener.pgconn.notifies() is not None:
                pass
    _emit(
        json.dumps(
            {
                "acked": acked,
                "claimed": acked,
                "t_go": t_go,
                "t_last": t_last,
                "cpu_s": cpu_last - cpu0,
            }
        )
    )
    conn.close()
    if listener is not None:
        listener.close()


async def _child_producer(
    schema: str, rate: float, seconds: float, tasks: int, per_call: int
) -> None:
    """``enqueue_many`` calls of ``per_call`` jobs (``enqueue`` when it is 1) from
    ``tasks`` tasks for ``seconds``: paced to ``rate`` jobs/s in all, or as fast as
    possible when ``rate`` is 0."""
    async with alkstore_trio.open_store(
        bp.dsn(),
        schema=schema,
        migrate="check",
        pool_size=tasks,
        application_name="alkstore_trio:bench-producer",
    ) as store:
        queue = store.queue(QUEUE)
        for _ in range(3):  # prepare the statement on every connection (untimed)
            async with trio.open_nursery() as nursery:
                for _ in range(tasks):
                    nursery.start_soon(queue.enqueue, PAYLOAD)
        # The warm-up jobs are part of the stream the consumer drains.
        count = {"n": 3 * tasks, "late": 0}
        _emit("ready")
        await trio.to_thread.run_sync(sys.stdin.readline)
        start = trio.current_time()
        end = start + seconds

        async def produce(offset: int) -> None:
            k = 0
            while True:
                if rate:
                    due = start + (offset + k * tasks) * per_call / rate
                    if due >= end:
                        return
                    if due > trio.current_time():
                        await trio.sleep_until(due)
                    else:
                        count["late"] += 1
                elif trio.current_time() >= end:
                    return
                if per_call == 1:
                    await queue.enqueue(PAYLOAD)
                else:
                    await queue.enqueue_many([PAYLOAD] * per_call)
                count["n"] += per_call
                k += 1

        async with trio.open_nursery() as nursery:
            for i in range(tasks):
                nursery.start_soon(produce, i)
        elapsed = trio.current_time() - start
    _emit(json.dumps({"enqueued": count["n"], "seconds": elapsed, "late": count["late"]}))


def child_main(argv: list[str]) -> None:
    kind, schema, *rest = argv
    if kind == "worker":
        concurrency, batch, latency, poll, *more = rest
        prefetch = int(more[0]) if more else 0
        trio.run(
            _child_worker,
            schema,
            int(concurrency),
            int(batch),
            latency == "1",
            float(poll),
            prefetch,
        )
    elif kind == "raw":
        how, batch, listen, latency = rest
        _child_raw(schema, how, int(batch), listen == "1", latency == "1")
    elif kind == "producer":
        rate, seconds, tasks, per_call = rest
        trio.run(_child_producer, schema, float(rate), float(seconds), int(tasks), int(per_call))
    else:
        raise SystemExit(f"unknown child kind {kind!r}")


class Child:
    """A child process of this file, its stdout read by a thread."""

    def __init__(self, *args: object, pythonpath: str | None = None) -> None:
        env = None
        if pythonpath is not None:
            env = {**os.environ, "PYTHONPATH": pythonpath}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", *map(str, args)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.acked = 0
        self.times: list[float] = []
        self.result: dict[str, Any] | None = None
        self.ready = threading.Event()
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.changed:
                if line == "ready\n":
                    self.ready.set()
                elif line.startswith("acked "):
                    self.acked = int(line.split()[1])
                elif line.startswith("t "):
                    self.times.append(float(line.split()[1]))
                elif line.startswith("{"):
                    self.result = json.loads(line)
                    self.acked = self.result.get("acked", self.acked)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()

    def wait_ready(self) -> None:
        if not self.ready.wait(CHILD_TIMEOUT_S):
            raise RuntimeError(f"child {self.proc.args[3:]} did not get ready")

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self.thread.is_alive()):
                    return predicate()
                self.changed.wait(min(left, 0.1))
        return True

    def finish(self, timeout: float = 60.0) -> dict[str, Any]:
        """Send ``stop`` (if it still runs) and wait for its result line."""
        if self.result is None:
            self.send("stop")
        self.proc.wait(timeout)
        self.thread.join(timeout)
        if self.proc.returncode != 0 or self.result is None:
            raise RuntimeError(f"child {self.proc.args[3:]} failed ({self.proc.returncode})")
        return self.result

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def children(*specs: tuple[object, ...], pythonpath: str | None = None) -> Iterator[list[Child]]:
    kids = [Child(*spec, pythonpath=pythonpath) for spec in specs]
    try:
        for kid in kids:
            kid.wait_ready()
        yield kids
    finally:
        for kid in kids:
            kid.kill()
            if kid.proc.stdin is not None:
                with contextlib.suppress(BrokenPipeError):
                    kid.proc.stdin.close()
            if kid.proc.stdout is not None:
                kid.proc.stdout.close()


def table_rows(schema: str) -> int:
    with bp._admin() as admin:
        row = admin.execute(f"SELECT count(*) FROM {bp._sql.quote_ident(schema)}.jobs").fetchone()
    assert row is not None
    return int(row[0])


def prefill(schema: str, jobs: int, keep_completed_s: float | None = None) -> float:
    """Enqueue ``jobs`` jobs with ``enqueue_many`` (calls of 1,000), stamped with
    ``keep_completed_s`` (Q19.2: their acks keep them); the seconds it took."""

    async def run() -> float:
        async with alkstore_trio.open_store(
            bp.dsn(), schema=schema, migrate="check", application_name="alkstore_trio:bench-prefill"
        ) as store:
            opts = alkstore_trio.QueueOpts(keep_completed_s=keep_completed_s)
            queue = store.queue(QUEUE, opts)
            started = time.perf_counter()
            left = jobs
            while left:
                n = min(PREFILL_CALL, left)
                ids = await queue.enqueue_many([PAYLOAD] * n)
                assert len(ids) == n
                left -= n
            return time.perf_counter() - started

    seconds = trio.run(run)
    with bp._admin() as admin:
        admin.execute(f"ANALYZE {bp._sql.quote_ident(schema)}.jobs")
    return seconds


def check_clean(results: list[dict[str, Any]], jobs: int, schema: str, label: str) -> None:
    """Every job acked exactly once, nothing retried or lost, the table empty."""
    acked = sum(r["acked"] for r in results)
    for r in results:
        bad = {
            k: r[k]
            for k in (
                "retried",
                "dead_lettered",
                "released",
                "lease_lost",
                "handler_errors",
                "engine_errors",
            )
            if r.get(k)
        }
        if bad or r["acked"] != r["claimed"]:
            raise AssertionError(f"{label}: a consumer did not ack all it claimed: {r}")
    left = table_rows(schema)
    if acked != jobs or left != 0:
        raise AssertionError(f"{label}: {acked} acked of {jobs} jobs, {left} rows left")


# -- burn-down --------------------------------------------------------------------------


@dataclass
class BurnVariant:
    name: str
    kind: str  # "baseline", "reference", "raw-lib-sql", "library"
    specs: Callable[[str], list[tuple[object, ...]]]  # schema -> child specs
    runs: list[dict[str, float]] = field(default_factory=list)  # per round: rate, wall, cpu
    pythonpath: str | None = None  # the code of another commit (--ab)
    procs: int = 1
    keep_completed_s: float | None = None  # Q19.2: the jobs' acks keep them (history on)

    def rate(self) -> float:
        return statistics.median(r["rate"] for r in self.runs)

    def wall(self) -> float:
        return statistics.median(r["wall_s"] for r in self.runs)

    def cpu_us(self) -> float:
        return statistics.median(r["cpu_us"] for r in self.runs)


def burn_variants() -> list[BurnVariant]:
    def raw(how: str, procs: int = 1) -> Callable[[str], list[tuple[object, ...]]]:
        return lambda s: [("raw", s, how, CLAIM_BATCH, 0, 0)] * procs

    return [
        BurnVariant("raw SELECT FOR UPDATE SKIP LOCKED + DELETE, 1 tx", "baseline", raw("tx")),
        BurnVariant("raw, same, 2 processes", "reference", raw("tx", 2), procs=2),
        BurnVariant(LEASE_LOOP, "reference", raw("lease")),
        BurnVariant("raw, library SQL (claim + ack_claims)", "raw-lib-sql", raw("lib-sql")),
        *(
            BurnVariant(name, "library", _worker_specs(c, procs, prefetch), procs=procs)
            for name, c, procs, prefetch in WORKER_VARIANTS
        ),
        # Q19.2, history on: every ack moves its row to completed_jobs (kept an hour).
        BurnVariant(KEPT, "library", _worker_specs(100, 1, 0), keep_completed_s=3600.0),
    ]


#: The Worker burn-down with completed-job history on (issue 15: "report the cost").
KEPT = "Worker c=100, 1 process, completed jobs kept"
#: The raw loop with the library's lease semantics: item 4's yardstick.
LEASE_LOOP = "raw UPDATE lease claim + DELETE, 2 tx"
#: (name, concurrency, processes, prefetch) of the Worker burn-down variants.
WORKER_VARIANTS = (
    ("Worker c=10, 1 process", 10, 1, 0),
    ("Worker c=100, 1 process", 100, 1, 0),
    ("Worker c=100 prefetch=100, 1 process", 100, 1, 100),
    ("Worker c=10, 2 processes", 10, 2, 0),
    ("Worker c=100, 2 processes", 100, 2, 0),
    ("Worker c=100 prefetch=100, 2 processes", 100, 2, 100),
)


def _worker_specs(
    concurrency: int, procs: int, prefetch: int
) -> Callable[[str], list[tuple[object, ...]]]:
    return lambda s: [("worker", s, concurrency, CLAIM_BATCH, 0, 5.0, prefetch)] * procs


def ab_variants(refs: list[str]) -> list[BurnVariant]:
    """The one-process Worker variants on the code of other commits (``--ab``), each
    checked out once as a detached worktree of this repository under /tmp."""
    probe = _load_sibling("probe_worker_instructions.py", "alkstore_probe_instructions")
    out = []
    for ref in refs:
        sha, tree = probe.checkout(ref)
        for name, c, procs, prefetch in WORKER_VARIANTS:
            if procs == 1 and not prefetch:
                out.append(
                    BurnVariant(
                        f"{name} @{sha}",
                        "before",
                        _worker_specs(c, procs, 0),
                        pythonpath=str(tree),
                    )
                )
    return out


def prefill_with(tree: Path, schema: str, jobs: int) -> float:
    """:func:`prefill` run by another commit's checkout (``--ab``), in a process of its
    own: this code's enqueue writes columns (``keep_completed_s``, version 11) that an
    older schema does not have. The seconds it took."""
    code = (
        "import time, trio, alkstore_trio\n"
        "async def run():\n"
        f"    async with alkstore_trio.open_store({bp.dsn()!r}, schema={schema!r}) as store:\n"
        f"        queue, left = store.queue({QUEUE!r}), {jobs}\n"
        "        started = time.perf_counter()\n"
        "        while left:\n"
        f"            n = min({PREFILL_CALL}, left)\n"
        f"            assert len(await queue.enqueue_many([{PAYLOAD!r}] * n)) == n\n"
        "            left -= n\n"
        "        return time.perf_counter() - started\n"
        "print(trio.run(run))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # Run from the other checkout: `-c` puts the working directory first on sys.path.
    args = [sys.executable, "-c", code]
    out = subprocess.run(args, env=env, cwd=tree, capture_output=True, check=True)
    with bp._admin() as admin:
        admin.execute(f"ANALYZE {bp._sql.quote_ident(schema)}.jobs")
    return float(out.stdout.decode().split()[-1])


def _schema_template(tree: Path) -> str:
    """The ``schema.sql`` of another commit's checkout (``--ab``): its code runs on a
    schema of its own making, so a migration in between (version 9 refuses claims
    without a token) never meets the older statements."""
    return (tree / "alkstore_trio" / "_engines" / "_postgres" / "sql" / "schema.sql").read_text()


def burn_once(variant: BurnVariant, jobs: int, log: Callable[[str], None]) -> dict[str, float]:
    tree = None if variant.pythonpath is None else Path(variant.pythonpath)
    with bp.fresh_schema(template=None if tree is None else _schema_template(tree)) as schema:
        # The other commit's own enqueue: a later version writes columns it lacks.
        enqueue_s = (
            prefill(schema, jobs, variant.keep_completed_s)
            if tree is None
            else prefill_with(tree, schema, jobs)
        )
        with children(*variant.specs(schema), pythonpath=variant.pythonpath) as kids:
            t_go = time.perf_counter()
            for kid in kids:
                kid.send("go")

            def done() -> bool:
                return sum(k.acked for k in kids) >= jobs

            deadline = time.monotonic() + RUN_TIMEOUT_S
            while not done():
                if time.monotonic() > deadline or any(
                    k.proc.poll() is not None and k.result is None for k in kids
                ):
                    raise RuntimeError(f"{variant.name}: the drain did not finish")
                kids[0].wait_for(done, 0.05)
            results = [kid.finish() for kid in kids]
        check_clean(results, jobs, schema, variant.name)
    wall = max(r["t_last"] for r in results) - t_go
    cpu = sum(r["cpu_s"] for r in results)
    run = {"rate": jobs / wall, "wall_s": wall, "cpu_us": cpu / jobs * 1e6, "enqueue_s": enqueue_s}
    log(
        f"  {variant.name:<50} {run['rate']:>9,.0f} jobs/s  {run['cpu_us']:6.1f} µs CPU/job "
        f"(enqueue_many: {jobs / enqueue_s:,.0f} jobs/s)"
    )
    return run


def run_burn_down(
    variants: list[BurnVariant], jobs: int, rounds: int, log: Callable[[str], None]
) -> None:
    for r in range(rounds):
        log(f"burn-down {jobs:,} jobs, round {r + 1}/{rounds}")
        shift = r % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            variant.runs.append(burn_once(variant, jobs, log))


def burn_ratio(variant: BurnVariant, base: BurnVariant) -> float:
    return statistics.median(
        a["rate"] / b["rate"] for a, b in zip(variant.runs, base.runs, strict=True)
    )


# -- steady state -----------------------------------------------------------------------


@dataclass
class SteadyRun:
    consumer: str
    offered: float  # jobs/s asked of the producer (0: as fast as possible)
    per_call: int  # jobs per enqueue_many call of the producer
    enqueued: int = 0
    produced_rate: float = 0.0
    drained_rate: float = 0.0
    backlog_mean: float = 0.0
    backlog_max: int = 0
    backlog_end: int = 0
    cpu_us: float = 0.0
    left: int = 0  # jobs still in the table STEADY_FINISH_S after the window


STEADY_CONSUMERS: dict[str, Callable[[str], tuple[object, ...]]] = {
    "Worker c=10": lambda s: ("worker", s, 10, CLAIM_BATCH, 0, 5.0),
    "Worker c=100": lambda s: ("worker", s, 100, CLAIM_BATCH, 0, 5.0),
    "raw tx loop + LISTEN": lambda s: ("raw", s, "tx", CLAIM_BATCH, 1, 0),
}
#: (jobs/s asked of the producer or 0 for as fast as it can, jobs per enqueue_many call).
#: Not single enqueues: one commit (an fsync) per job caps a producer of 4 tasks below
#: 2,000/s on this machine under load, which would measure the producer, not the worker.
STEADY_LOADS = ((2000.0, 10), (0.0, 100))
#: After the window, how long the consumer may take to finish the backlog.
STEADY_FINISH_S = 20.0


def steady_once(
    consumer: str, rate: float, per_call: int, seconds: float, log: Callable[[str], None]
) -> SteadyRun:
    run = SteadyRun(consumer, rate, per_call)
    with bp.fresh_schema() as schema, bp._admin() as admin:
        count_sql = f"SELECT count(*) FROM {bp._sql.quote_ident(schema)}.jobs"
        specs = [
            STEADY_CONSUMERS[consumer](schema),
            ("producer", schema, rate, seconds, PRODUCER_TASKS, per_call),
        ]
        with children(*specs) as (cons, prod):
            cons.send("go")
            prod.send("go")
            t0 = time.perf_counter()
            samples: list[int] = []
            while prod.result is None:
                prod.wait_for(lambda: prod.result is not None, 0.25)
                if prod.result is None:
                    row = admin.execute(count_sql).fetchone()
                    samples.append(int(row[0]))  # type: ignore[index]
                if time.perf_counter() - t0 > seconds + 60:
                    raise RuntimeError("the producer did not finish")
            row = admin.execute(count_sql).fetchone()
            run.backlog_end = int(row[0])  # type: ignore[index]
            produced = prod.finish()
            run.enqueued = produced["enqueued"]
            window = produced["seconds"]
            run.produced_rate = run.enqueued / window
            run.drained_rate = (run.enqueued - run.backlog_end) / window
            samples.append(run.backlog_end)
            run.backlog_mean = statistics.fmean(samples)
            run.backlog_max = max(samples)
            cons.wait_for(lambda: cons.acked >= run.enqueued, STEADY_FINISH_S)
            result = cons.finish()
        # Every job acked once or still in the table (a backlog the consumer did not
        # finish in STEADY_FINISH_S; a stopped Worker releases its claims back to pending).
        run.left = table_rows(schema)
        acked = result["acked"]
        bad = {k: result.get(k) for k in ("lease_lost", "handler_errors", "engine_errors")}
        if acked + run.left != run.enqueued or any(bad.values()):
            raise AssertionError(
                f"steady {consumer}: {acked} acked + {run.left} left != {run.enqueued}; {bad}"
            )
        run.cpu_us = result["cpu_s"] / max(1, acked) * 1e6
    label = "max" if not rate else f"{rate:,.0f}/s"
    log(
        f"  {consumer:<22} producer {label:>8}: drained {run.drained_rate:>8,.0f} jobs/s, "
        f"backlog mean {run.backlog_mean:,.0f} max {run.backlog_max:,}"
    )
    return run


# -- latency -----------------------------------------------------------------------------


LATENCY_CONSUMERS: dict[str, tuple[str, Callable[[str], tuple[object, ...]]]] = {
    "raw LISTEN + select() + lease claim": (
        "baseline",
        lambda s: ("raw", s, "lease", 10, 1, 1),
    ),
    "Worker c=10": ("library", lambda s: ("worker", s, 10, CLAIM_BATCH, 1, 5.0)),
}


def latency_once(consumer: str, samples: int, log: Callable[[str], None]) -> list[float]:
    _, spec = LATENCY_CONSUMERS[consumer]
    rng = random.Random(1)
    with bp.fresh_schema() as schema:
        with children(spec(schema)) as (kid,):
            kid.send("go")

            async def produce() -> list[float]:
                out: list[float] = []
                async with alkstore_trio.open_store(
                    bp.dsn(),
                    schema=schema,
                    migrate="check",
                    pool_size=1,
                    application_name="alkstore_trio:bench-enqueuer",
                ) as store:
                    queue = store.queue(QUEUE)
                    for i in range(LATENCY_WARMUP + samples):
                        await trio.sleep(rng.uniform(*LATENCY_GAP_S))
                        await queue.enqueue(PAYLOAD)
                        t0 = time.perf_counter()
                        want = i + 1
                        started = await trio.to_thread.run_sync(
                            kid.wait_for, lambda want=want: len(kid.times) >= want, 10.0
                        )
                        if not started:
                            raise RuntimeError(f"{consumer}: job {want} was not picked up")
                        if i >= LATENCY_WARMUP:
                            out.append(kid.times[i] - t0)
                return out

            latencies = trio.run(produce)
            if not kid.wait_for(lambda: kid.acked >= LATENCY_WARMUP + samples, 10.0):
                raise RuntimeError(f"{consumer}: not every job was acked")
            result = kid.finish()
        check_clean([result], LATENCY_WARMUP + samples, schema, f"latency {consumer}")
    log(
        f"  {consumer:<40} p50 {bp.percentile(latencies, 50) * 1e3:6.3f} ms  "
        f"p99 {bp.percentile(latencies, 99) * 1e3:6.3f} ms"
    )
    return latencies


# -- peers -------------------------------------------------------------------------------


def run_peers(jobs: int, samples: int, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """``bench_peers.py`` under the peers' virtualenv; ``{"skipped": why}`` without it."""
    if not Path(PEERS_PYTHON).exists():
        return {"skipped": f"no peers virtualenv at {PEERS_PYTHON} (see bench_peers.py)"}
    args = ["--jobs", str(jobs), "--samples", str(samples), *(["--quick"] if quick else [])]
    return bp.run_bench_peers(args, log)


# -- reporting ---------------------------------------------------------------------------


@dataclass
class Report:
    jobs: int
    rounds: int
    burn: list[BurnVariant] = field(default_factory=list)
    steady: list[SteadyRun] = field(default_factory=list)
    latency: dict[str, list[float]] = field(default_factory=dict)
    peers: dict[str, Any] = field(default_factory=dict)

    def burn_base(self) -> BurnVariant | None:
        return next((v for v in self.burn if v.kind == "baseline" and v.runs), None)

    def peer_burn(self) -> list[dict[str, Any]]:
        return list(self.peers.get("burn_down", []))

    def best_worker(self) -> BurnVariant | None:
        """The fastest Worker variant in one process (item 4's targets are per process)."""
        lib = [
            v
            for v in self.burn
            if v.kind == "library" and v.procs == 1 and v.runs and v.keep_completed_s is None
        ]
        return max(lib, key=BurnVariant.rate) if lib else None

    def variant(self, name: str) -> BurnVariant | None:
        return next((v for v in self.burn if v.name == name and v.runs), None)


def format_tables(report: Report) -> str:
    lines: list[str] = []
    base = report.burn_base()
    if report.burn:
        lines += [
            f"Burn-down of {report.jobs:,} no-op jobs ({report.rounds} round(s); median)",
            "",
            "| consumer | jobs/s | wall s | client CPU µs/job | × raw baseline |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for v in report.burn:
            if not v.runs:
                continue
            ratio = "—" if v is base or base is None else f"{burn_ratio(v, base):.2f}"
            label = f"**{v.name}**" if v.kind == "baseline" else v.name
            lines.append(
                f"| {label} | {v.rate():,.0f} | {v.wall():.2f} | {v.cpu_us():.1f} | {ratio} |"
            )
        for p in report.peer_burn():
            ratio = f"{p['rate'] / base.rate():.2f}" if base is not None else ""
            lines.append(
                f"| {p['name']} (peer, separate run) | {p['rate']:,.0f} | {p['wall_s']:.2f} | "
                f"{p['cpu_us']:.1f} | {ratio} |"
            )
        lines.append("")
        kept, plain = report.variant(KEPT), report.variant("Worker c=100, 1 process")
        if kept is not None and plain is not None:
            lines += [
                f"History on (Q19.2, every ack keeps its job): {burn_ratio(kept, plain):.2f}x "
                f"the jobs/s of {plain.name}, client CPU {plain.cpu_us():.1f} -> "
                f"{kept.cpu_us():.1f} µs/job.",
                "",
            ]
    if report.steady:
        lines += [
            f"Steady state: a producer process ({PRODUCER_TASKS} tasks calling enqueue_many) "
            "and one consumer process",
            "",
            "| consumer | producer asked | enqueued/s | drained/s | backlog mean | backlog max | "
            f"backlog at end | left {STEADY_FINISH_S:g} s later | client CPU µs/job |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for s in report.steady:
            asked = "as fast as possible" if not s.offered else f"{s.offered:,.0f}/s"
            asked += f", {s.per_call} per call"
            lines.append(
                f"| {s.consumer} | {asked} | {s.produced_rate:,.0f} | {s.drained_rate:,.0f} | "
                f"{s.backlog_mean:,.0f} | {s.backlog_max:,} | {s.backlog_end:,} | {s.left:,} | "
                f"{s.cpu_us:.1f} |"
            )
        lines.append("")
    peer_lat = list(report.peers.get("latency", []))
    if report.latency or peer_lat:
        lines += [
            "Idle pickup latency: enqueue returned → handler started",
            "",
            "| consumer | samples | p50 ms | p95 ms | p99 ms | max ms |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for name, lat in report.latency.items():
            kind, _ = LATENCY_CONSUMERS[name]
            label = f"**{name}**" if kind == "baseline" else name
            lines.append(
                f"| {label} | {len(lat)} | {bp.percentile(lat, 50) * 1e3:.3f} | "
                f"{bp.percentile(lat, 95) * 1e3:.3f} | {bp.percentile(lat, 99) * 1e3:.3f} | "
                f"{max(lat) * 1e3:.3f} |"
            )
        for p in peer_lat:
            lines.append(
                f"| {p['name']} (peer) | {p['samples']} | {p['p50_ms']:.3f} | {p['p95_ms']:.3f} | "
                f"{p['p99_ms']:.3f} | {p['max_ms']:.3f} |"
            )
        lines.append("")
    if "skipped" in report.peers:
        lines.append(f"Peers skipped: {report.peers['skipped']}.")
    elif report.peers.get("versions"):
        lines.append(
            "Peers: "
            + ", ".join(f"{k} {v}" for k, v in report.peers["versions"].items())
            + "; "
            + str(report.peers.get("settings", ""))
        )
    return "\n".join(lines).rstrip()


def targets(report: Report) -> list[str]:
    """Issue item 4's targets, each with the measured value and whether it is met, then
    the before/after ratios of an ``--ab`` run."""
    out: list[str] = []

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    lease = report.variant(LEASE_LOOP)
    best = report.best_worker()
    if best is not None and lease is not None:
        r = burn_ratio(best, lease)
        out.append(
            f"drain >= 0.6x {LEASE_LOOP} (same rounds), one process, {best.name}: "
            f"{r:.2f}x ({verdict(r >= 0.6)})"
        )
    if best is not None:
        for p in report.peer_burn():
            if p["name"].startswith("pgqueuer") and "batch 100" in p["name"]:
                need = 2.0
            elif p["name"].startswith("procrastinate"):
                need = 20.0
            else:
                continue
            r = best.rate() / p["rate"]
            out.append(
                f"drain >= {need:g}x {p['name']}, one process, {best.name}: {r:.2f}x "
                f"({verdict(r >= need)}; the peer ran after the burn-down rounds)"
            )
        out.append(f"client CPU per job, {best.name}: {best.cpu_us():.1f} µs")
    for name, lat in report.latency.items():
        if LATENCY_CONSUMERS[name][0] != "library":
            continue
        p50, p99 = bp.percentile(lat, 50) * 1e3, bp.percentile(lat, 99) * 1e3
        out.append(f"pickup latency p50 <= 1.0 ms, {name}: {p50:.3f} ms ({verdict(p50 <= 1.0)})")
        out.append(f"pickup latency p99 <= 3 ms, {name}: {p99:.3f} ms ({verdict(p99 <= 3)})")
    for old in report.burn:
        if old.kind != "before" or not old.runs:
            continue
        new = report.variant(old.name.rpartition(" @")[0])
        if new is None:
            continue
        r = burn_ratio(new, old)
        out.append(
            f"after/before, {old.name}: {r:.2f}x jobs/s, client CPU/job "
            f"{old.cpu_us():.1f} -> {new.cpu_us():.1f} µs (median of {len(old.runs)} rounds)"
        )
    return out


def machine() -> str:
    """One line on the machine, the client and the server."""
    return bp.machine()


def selected(name: str, only: str | None) -> bool:
    return only is None or only.lower() in name.lower()


def run_all(
    sizes: Sizes,
    *,
    jobs: int | None = None,
    rounds: int | None = None,
    only: str | None = None,
    quick: bool = False,
    ab: list[str] | None = None,
    log: Callable[[str], None] = print,
) -> Report:
    """Run every selected section; ``only`` matches a section name (``burn-down``,
    ``steady``, ``latency``, ``peers``) or, within the sections, a variant's name."""
    jobs = jobs or sizes.jobs
    rounds = rounds or sizes.rounds
    report = Report(jobs=jobs, rounds=rounds)

    def pick(section: str, name: str) -> bool:
        return only is None or selected(section, only) or selected(name, only)

    report.burn = [v for v in burn_variants() if pick("burn-down", v.name)]
    if ab:
        report.burn += [v for v in ab_variants(ab) if pick("burn-down", v.name)]
    if report.burn and not any(v.kind == "baseline" for v in report.burn):
        report.burn.insert(0, burn_variants()[0])  # the ratios need their baseline
    if report.burn:
        run_burn_down(report.burn, jobs, rounds, log)
    steady = [(c, load) for c in STEADY_CONSUMERS for load in STEADY_LOADS if pick("steady", c)]
    if steady:
        log(f"steady state, {sizes.steady_s:g} s per run")
    for consumer, (rate, per_call) in steady:
        report.steady.append(steady_once(consumer, rate, per_call, sizes.steady_s, log))
    consumers = [c for c in LATENCY_CONSUMERS if pick("latency", c)]
    if consumers:
        log(f"idle pickup latency, {sizes.samples} samples per consumer")
    for consumer in consumers:
        report.latency[consumer] = latency_once(consumer, sizes.samples, log)
    if (
        only is None
        or selected("peers", only)
        or selected("pgqueuer", only)
        or selected("procrastinate", only)
    ):
        log("peers")
        report.peers = run_peers(jobs, sizes.samples, quick, log)
    else:
        report.peers = {"skipped": "not selected (--only)"}
    return report


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child_main(argv[1:])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one round")
    parser.add_argument("--jobs", type=int, default=None, help="burn-down jobs (default 20,000)")
    parser.add_argument("--rounds", type=int, default=None, help="burn-down rounds")
    parser.add_argument("--only", default=None, help="only sections/variants containing this")
    parser.add_argument(
        "--ab",
        default=None,
        help="comma-separated git commits whose one-process Worker variants run interleaved "
        "with this code's (before/after)",
    )
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    print(machine())
    started = time.perf_counter()
    report = run_all(
        sizes,
        jobs=args.jobs,
        rounds=args.rounds,
        only=args.only,
        quick=args.quick,
        ab=args.ab.split(",") if args.ab else None,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(f"\nmeasured in {time.perf_counter() - started:.0f} s\n")
    print(format_tables(report))
    print()
    for line in targets(report):
        print("-", line)


if __name__ == "__main__":
    main()
