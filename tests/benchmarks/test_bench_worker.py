"""``just bench``: ``Worker`` end to end beside raw psycopg and the peers (see ``bench_worker.py``).

Marked ``bench``, so the default test run (``-m "not bench and not slow"``) skips it. It
needs a PostgreSQL server (``pg_dsn``: skipped without one, unless
``ALKSTORE_REQUIRE_PG=1``). It runs the quick sizes (about two minutes) unless
``ALKSTORE_BENCH_FULL=1``. The peers run only when their separate virtualenv exists
(``ALKSTORE_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``); the table says when
they were skipped. The benchmark itself asserts that every job was acked exactly once and
every table left empty; this test prints the tables and the issue's targets, and asserts
only that every case produced numbers: the targets depend on the machine.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from pathlib import Path

import pytest


def _load_bench_module():
    # Loaded by path, so that it works whatever pytest's import mode.
    path = Path(__file__).with_name("bench_worker.py")
    spec = importlib.util.spec_from_file_location("alkstore_bench_worker", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.bench
def test_bench_worker_against_raw_psycopg_and_peers(pg_dsn, monkeypatch):
    pytest.importorskip("psycopg", reason="the worker benchmark needs psycopg 3")
    if not os.environ.get("ALKSTORE_BENCH_DSN"):
        monkeypatch.setenv("ALKSTORE_BENCH_DSN", pg_dsn)
    bench = _load_bench_module()
    full = os.environ.get("ALKSTORE_BENCH_FULL") == "1"
    sizes = bench.FULL if full else bench.QUICK
    report = bench.run_all(sizes, quick=not full, log=print)
    print()
    print(bench.machine())
    print(bench.format_tables(report))
    for line in bench.targets(report):
        print("-", line)
    assert {v.name for v in report.burn} == {v.name for v in bench.burn_variants()}
    for variant in report.burn:
        assert len(variant.runs) == report.rounds
        assert all(r["rate"] > 0 and math.isfinite(r["cpu_us"]) for r in variant.runs)
    assert len(report.steady) == len(bench.STEADY_CONSUMERS) * len(bench.STEADY_LOADS)
    assert all(s.enqueued > 0 and s.drained_rate > 0 for s in report.steady)
    assert set(report.latency) == set(bench.LATENCY_CONSUMERS)
    assert all(len(lat) == sizes.samples for lat in report.latency.values())
    if "skipped" not in report.peers:
        assert report.peers["burn_down"]
        assert report.peers["latency"]
