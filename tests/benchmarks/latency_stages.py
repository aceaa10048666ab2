"""Where the idle pickup latency goes: one ``Worker`` on PostgreSQL, stage by stage.

``bench_worker.py --only latency`` measures enqueue returned → handler started as one
number. This script splits it, with timestamps taken through the public seam only (a
:class:`~alkstore_trio.engine.ForwardingEngine` around the PostgreSQL engine, and the
engine's wake hub), so the library's code is measured as it ships:

- ``notify``: the engine's listener task read the NOTIFY and published the wake;
- ``woken``: the worker's wake listener returned it;
- ``claim sent`` / ``claim answered``: the worker's claim call entered / left the engine;
- ``handler``: the handler's first line.

Each stage is reported as the time since the previous one (p50 / p90 / p99 over the
samples), next to the raw psycopg consumer of ``bench_worker.py`` (LISTEN + ``select()``
+ the lease claim) measured in the same run, which has no stages in between.

Run: ``python tests/benchmarks/latency_stages.py [--samples 300] [--rounds 2]``. It is
not a test; its numbers go into ``docs/explanation/performance.md``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_worker as bw

import alkstore_trio
from alkstore_trio.engine import ForwardingEngine, PostgresEngine

bp = bw.bp
STAGES = ("notify", "woken", "claim sent", "claim answered", "handler")


class _Stamped(ForwardingEngine):
    """Prints ``s <stage> <perf_counter>`` at the claim calls' entry and exit."""

    async def claim(self, queue: str, worker_id: str, n: int) -> list[alkstore_trio.Job]:
        _stamp("claim sent")
        jobs = await super().claim(queue, worker_id, n)
        if jobs:
            _stamp("claim answered")
        return jobs

    async def ack_and_claim(
        self, queue: str, claims: Any, worker_id: str, n: int
    ) -> tuple[list[int], list[alkstore_trio.Job]]:
        _stamp("claim sent")
        acked, jobs = await super().ack_and_claim(queue, claims, worker_id, n)
        if jobs:
            _stamp("claim answered")
        return acked, jobs

    def open_wake_listener(self, queues: frozenset[str]) -> Any:
        return _Listen(super().open_wake_listener(queues))


class _Woken:
    """A wake listener that stamps ``woken`` when its ``wait`` returns a wake."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def wait(self, timeout_s: float | None = None) -> frozenset[str]:
        woken: frozenset[str] = await self._inner.wait(timeout_s)
        if woken:
            _stamp("woken")
        return woken


class _Listen:
    def __init__(self, cm: Any) -> None:
        self._cm = cm

    async def __aenter__(self) -> _Woken:
        return _Woken(await self._cm.__aenter__())

    async def __aexit__(self, *exc: object) -> Any:
        return await self._cm.__aexit__(*exc)


_STAMPS: list[str] = []


def _stamp(stage: str) -> None:
    """Record a stage's time; the handler's stamp writes the sample's stamps out at once,
    so that no pipe write (and no wake of the reader) falls between two stages."""
    _STAMPS.append(f"{stage.replace(' ', '_')}={time.perf_counter()!r}")
    if stage == "handler":
        print("s " + " ".join(_STAMPS), flush=True)
        _STAMPS.clear()


async def _child(schema: str) -> None:
    engine = PostgresEngine(bp.dsn(), schema=schema, migrate="check")
    publish = engine.wakes.publish

    def stamped_publish(queues: Any) -> None:
        _stamp("notify")
        publish(queues)

    engine.wakes.publish = stamped_publish  # type: ignore[method-assign]

    async def handler(job: alkstore_trio.Job) -> None:
        _stamp("handler")

    async with alkstore_trio.open_store(_Stamped(engine)) as store:
        worker = alkstore_trio.Worker(
            store, {bp.QUEUE: handler}, concurrency=10, claim_batch_max=100, poll_interval_s=5.0
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            print("ready", flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)
            worker.stop()


class _StageChild(bw.Child):
    """A child of this file (not of ``bench_worker.py``) that collects stage stamps."""

    def __init__(self, schema: str) -> None:
        import subprocess
        import threading

        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", schema],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.stamps: list[tuple[str, float]] = []
        self.ready = threading.Event()
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read_stamps, daemon=True)
        self.thread.start()

    def _read_stamps(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.changed:
                if line == "ready\n":
                    self.ready.set()
                elif line.startswith("s "):
                    for item in line.split()[1:]:
                        stage, t = item.split("=")
                        self.stamps.append((stage.replace("_", " "), float(t)))
                self.changed.notify_all()


def _worker_round(samples: int, seed: int) -> list[dict[str, float]]:
    rng = random.Random(seed)
    rows: list[dict[str, float]] = []
    with bp.fresh_schema() as schema:
        kid = _StageChild(schema)
        try:
            kid.wait_ready()

            async def produce() -> None:
                async with alkstore_trio.open_store(
                    bp.dsn(), schema=schema, migrate="check", pool_size=1
                ) as store:
                    queue = store.queue(bp.QUEUE)
                    for i in range(bw.LATENCY_WARMUP + samples):
                        await trio.sleep(rng.uniform(*bw.LATENCY_GAP_S))
                        mark = len(kid.stamps)
                        await queue.enqueue(bp.PAYLOAD)
                        t0 = time.perf_counter()

                        def handled(mark: int = mark) -> bool:
                            return any(s == "handler" for s, _ in kid.stamps[mark:])

                        if not await trio.to_thread.run_sync(kid.wait_for, handled, 10.0):
                            raise RuntimeError(f"job {i} was not picked up")
                        if i < bw.LATENCY_WARMUP:
                            continue
                        seen: dict[str, float] = {"enqueued": t0}
                        for stage, t in kid.stamps[mark:]:
                            seen.setdefault(stage, t)
                        rows.append(seen)

            trio.run(produce)
        finally:
            kid.send("")
            kid.proc.wait(30)
    return rows


#: The raw consumer with the library's own claim and ack statements: what is left of the
#: gap once the SQL is the same is the client (driver, trio, the worker's stages).
RAW_LIB_SQL = "raw LISTEN + select() + library claim SQL"
bw.LATENCY_CONSUMERS.setdefault(
    RAW_LIB_SQL, ("baseline", lambda s: ("raw", s, "lib-sql", 10, 1, 1))
)
RAW = ("raw LISTEN + select() + lease claim", RAW_LIB_SQL)


def _raw_round(samples: int) -> dict[str, list[float]]:
    return {name: bw.latency_once(name, samples, lambda _: None) for name in RAW}


def _ms(values: list[float], p: float) -> float:
    return float(bp.percentile(values, p)) * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        trio.run(_child, args.child[0])
        return
    rows: list[dict[str, float]] = []
    raw: dict[str, list[float]] = {name: [] for name in RAW}
    for r in range(args.rounds):  # interleaved: worker, raw, worker, raw, ...
        rows += _worker_round(args.samples, seed=r)
        for name, values in _raw_round(args.samples).items():
            raw[name] += values
    print(f"{len(rows)} samples per consumer ({bw.machine()})")
    print(f"{'stage (time since the previous)':<34} {'p50':>8} {'p90':>8} {'p99':>8}  ms")
    previous = "enqueued"
    complete = [row for row in rows if all(s in row for s in STAGES)]
    for stage in STAGES:
        deltas = [row[stage] - row[previous] for row in complete]
        print(
            f"{previous + ' → ' + stage:<34} {_ms(deltas, 50):8.3f} {_ms(deltas, 90):8.3f} "
            f"{_ms(deltas, 99):8.3f}"
        )
        previous = stage
    total = [row["handler"] - row["enqueued"] for row in rows]
    print(
        f"{'Worker total (enqueued → handler)':<34} {_ms(total, 50):8.3f} {_ms(total, 90):8.3f} "
        f"{_ms(total, 99):8.3f}"
    )
    for name, values in raw.items():
        print(f"{name:<44} {_ms(values, 50):8.3f} {_ms(values, 90):8.3f} {_ms(values, 99):8.3f}")
    print(f"({len(rows) - len(complete)} samples lacked a stage and are in the totals only)")


if __name__ == "__main__":
    main()
