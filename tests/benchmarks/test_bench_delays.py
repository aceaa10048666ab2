"""``just bench``: how late delayed and retried jobs start under a ``Worker`` (R11; see
``bench_delays.py``). Marked ``bench``, so the default test run skips it. It needs a
PostgreSQL server (``pg_dsn``). It prints the lateness table and asserts that every job
started (none waited for the 30 s re-poll); the targets depend on the machine."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest


def _load_bench_module():
    # Loaded by path, so that it works whatever pytest's import mode.
    path = Path(__file__).with_name("bench_delays.py")
    spec = importlib.util.spec_from_file_location("alkstore_bench_delays", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _load_bench_module()


@pytest.mark.bench
async def test_bench_r11_lateness_of_delayed_and_retried_jobs(pg_dsn, monkeypatch):
    if not os.environ.get("ALKSTORE_BENCH_DSN"):
        monkeypatch.setenv("ALKSTORE_BENCH_DSN", pg_dsn)
    results = await bench.run_benchmarks(bench.SAMPLES)
    print()
    print(bench.machine())
    print(bench.format_table(results))
    assert [(r.engine, r.case) for r in results] == [
        (engine, case) for engine in ("memory", "postgres") for case in bench.CASES
    ]
    assert all(len(r.lateness_ms) == bench.SAMPLES for r in results)
    # Started on time give or take the machine's load, never at the 30 s re-poll.
    assert all(max(r.lateness_ms) < bench.POLL_INTERVAL_S * 1000 / 2 for r in results)
