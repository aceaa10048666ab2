"""``just bench``: the PostgreSQL engine beside raw psycopg (see ``bench_postgres.py``).

Marked ``bench``, so the default test run (``-m "not bench and not slow"``) skips it. It
needs a PostgreSQL server (``pg_dsn``: skipped without one, unless
``ALKSTORE_REQUIRE_PG=1``). It runs the quick sizes (about a minute) unless
``ALKSTORE_BENCH_FULL=1``; the full run takes a quarter of an hour or more. It prints the
table and the issue's targets but asserts only that every case produced numbers: the
targets depend on the machine.
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
    path = Path(__file__).with_name("bench_postgres.py")
    spec = importlib.util.spec_from_file_location("alkstore_bench_postgres", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.bench
def test_bench_postgres_against_raw_psycopg(pg_dsn, monkeypatch):
    pytest.importorskip("psycopg", reason="the PostgreSQL benchmark needs psycopg 3")
    bench = _load_bench_module()
    if not os.environ.get("ALKSTORE_BENCH_DSN"):
        monkeypatch.setenv("ALKSTORE_BENCH_DSN", pg_dsn)
    sizes = bench.FULL if os.environ.get("ALKSTORE_BENCH_FULL") == "1" else bench.QUICK
    cases = bench.build_cases(sizes)
    bench.run_cases(cases, sizes.rounds, log=print)
    peers = bench.run_peer_enqueues(sizes.many, print)  # [] without the peers' virtualenv
    print()
    print(bench.machine())
    print(bench.format_table(cases))
    print(bench.format_peer_enqueues(cases, peers))
    for line in bench.targets(cases, peers):
        print("-", line)
    for peer in peers:
        assert peer["rate"] > 0, peer
    for case in cases:
        for variant in case.variants:
            assert variant.chunks, f"{case.name}: {variant.name} produced no chunks"
            if case.latency:
                assert variant.latencies_s
            else:
                assert all(c.jobs > 0 and c.seconds > 0 for c in variant.chunks)
                assert math.isfinite(case.ratio(variant, case.baseline()))
