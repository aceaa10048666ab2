"""``just bench``: what typed tasks add to a job over the bytes API (see
``bench_tasks.py``): defer + run against enqueue + a bytes handler, and defer_many(1000)
against enqueue_many(1000), on the memory engine and on PostgreSQL.

Marked ``bench``, so the default test run (``-m "not bench and not slow"``) skips it. It
prints the table and the issue's 10 µs target but asserts only that every case produced
numbers: the figures depend on the machine.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("msgspec", reason="the typed tasks need the tasks extra (msgspec)")


def _load_bench_module():
    # Loaded by path, so that it works whatever pytest's import mode.
    path = Path(__file__).with_name("bench_tasks.py")
    spec = importlib.util.spec_from_file_location("alkstore_bench_tasks", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.bench
async def test_bench_tasks_overhead_per_job(pg_dsn):
    bench = _load_bench_module()
    rows = await bench.run_benchmarks(pg_dsn, chunks=15)
    print()
    print(bench.machine())
    print(bench.format_table(rows))
    for line in bench.summary(rows):
        print("-", line)
    assert {row.engine for row in rows} == {"any", "memory", "postgres"}
    assert all(math.isfinite(r.task_us) and r.task_us > 0 for r in rows)
