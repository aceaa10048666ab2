"""``just bench``: the in-memory engine's throughput (see ``bench_memory.py``).

Marked ``bench``, so the default test run (``-m "not bench and not slow"``) skips it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def _load_bench_module():
    # Loaded by path, so that it works whatever pytest's import mode.
    path = Path(__file__).with_name("bench_memory.py")
    spec = importlib.util.spec_from_file_location("alkstore_bench_memory", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _load_bench_module()


@pytest.mark.bench
async def test_bench_memory_engine_throughput():
    results = await bench.run_benchmarks(bench.N)
    print()
    print(bench.machine())
    print(bench.format_table(results))
    assert [r.case for r in results] == list(bench.CASES)
    assert all(r.jobs == bench.N and r.seconds > 0 for r in results)
