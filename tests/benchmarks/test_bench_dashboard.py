"""``just bench``: the dashboard's page times (issue 17's target: every page in ≤ 100 ms
p95 with 1,000,000 jobs and 100,000 dead rows in the schema). Marked ``bench``, so the
default run skips it; it needs a PostgreSQL server (``pg_dsn``) and the dev extra.
``ALKSTORE_BENCH_DASHBOARD_JOBS`` sets the number of jobs (dead rows: a tenth of it).

The rows are loaded by SQL (the jobs pending in one queue, the dead rows over two queues
and five errors; D26.1: every job with a ``tenant`` header, one of ten values but for
one ``rare`` row near the end, one in a hundred with a unique key, and a concurrency
key, ``big-customer`` for a tenth of them, else one of a thousand), then each page is
fetched ``RUNS`` times over real HTTP from the dashboard served by Hypercorn's trio
worker, and the p50 and p95 are printed. Pages share one ``stats`` reading per refresh
interval (W9), so these are the times of a page served from a reading; the ``stats``
reading itself counts rows, and its time is printed apart (the cost, once per interval,
of the request that refreshes it). The assertion is the target for the pages; a loaded
shared machine may miss it, so read the printed table with the load it prints."""

from __future__ import annotations

import functools
import os
import secrets
import statistics
import time
import urllib.request

import psycopg
import pytest
import trio
from psycopg import sql as pgsql

from alkstore_trio import open_store
from alkstore_trio._engines._postgres import _sql
from alkstore_trio.dashboard import serve_dashboard

PENDING = int(os.environ.get("ALKSTORE_BENCH_DASHBOARD_JOBS", "1000000"))
DEAD = PENDING // 10
RUNS = 40
TARGET_P95_MS = 100.0
PENDING_PAGE = "/jobs?queue=orders&state=pending"

_LOAD_PENDING = """
INSERT INTO {schema}.jobs (
    queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, headers, unique_key, concurrency_key
)
SELECT 'orders', convert_to('{{"order": ' || g || '}}', 'UTF8'), g %% 3, 'pending', 0, 3,
    statement_timestamp() - interval '1 hour', statement_timestamp() - interval '1 hour',
    300, 5,
    jsonb_build_object('tenant', CASE WHEN g = %(rows)s - 7 THEN 'rare' ELSE 't' || g %% 10 END),
    CASE WHEN g %% 100 = 0 THEN 'order-' || g END,
    CASE WHEN g %% 10 = 0 THEN 'big-customer' ELSE 'customer-' || g %% 1000 END
FROM generate_series(1, %(rows)s) AS g
"""

_LOAD_DEAD = """
INSERT INTO {schema}.dead_jobs (
    id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, last_error, died_at, concurrency_key
)
SELECT 50000000 + g, CASE WHEN g %% 2 = 0 THEN 'orders' ELSE 'emails' END,
    convert_to('{{"n": ' || g || '}}', 'UTF8'), 0, 3, 3, now() - interval '2 hours',
    now() - interval '2 hours', 300, 5, 'error kind ' || (g %% 5) || ': it failed',
    now() - g * interval '1 second', 'customer-' || g %% 1000
FROM generate_series(1, %(rows)s) AS g
"""


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


@pytest.mark.bench
async def test_bench_dashboard_pages_with_a_million_jobs(pg_dsn):
    schema = f"alk_dash_{secrets.token_hex(4)}"
    quoted = pgsql.Identifier(schema)
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(_sql.schema_sql(schema).encode())
            conn.execute("SET synchronous_commit = off")
            started = time.monotonic()
            conn.execute(pgsql.SQL(_LOAD_PENDING).format(schema=quoted), {"rows": PENDING})
            conn.execute(pgsql.SQL(_LOAD_DEAD).format(schema=quoted), {"rows": DEAD})
            conn.execute(pgsql.SQL("ANALYZE {}.jobs").format(quoted))
            conn.execute(pgsql.SQL("ANALYZE {}.dead_jobs").format(quoted))
            loaded_s = time.monotonic() - started
            print(f"\nloaded {PENDING} jobs and {DEAD} dead rows in {loaded_s:.0f} s")
            (first,) = conn.execute(
                pgsql.SQL("SELECT min(id) FROM {}.jobs").format(quoted)
            ).fetchone()
        async with open_store(pg_dsn, schema=schema, pool_size=4, listen=False) as store:
            stats_ms = []
            for _ in range(5):
                began = time.perf_counter()
                await store.stats()
                stats_ms.append((time.perf_counter() - began) * 1000)
            async with trio.open_nursery() as nursery:
                urls = await nursery.start(serve_dashboard, store, "127.0.0.1:0")
                base = urls[0]
                pages = {
                    "overview": "/",
                    "overview refresh": "/fragments/overview",
                    "jobs, first page": "/jobs?queue=orders&state=pending",
                    "jobs, halfway": (
                        f"/jobs?queue=orders&state=pending&after={first + PENDING // 2}"
                    ),
                    "jobs, dead": "/jobs?queue=orders&state=dead",
                    # D26.1: filtered by a unique key (one row), a concurrency key of
                    # 1,000 rows and one of 100,000, a rare header (one row, near the
                    # end: each page reads its 10,000 rows), a common one (a tenth).
                    "jobs, unique key": f"{PENDING_PAGE}&key=order-{PENDING // 2}",
                    "jobs, key of 1k": "/jobs?queue=orders&state=pending&key=customer-7",
                    "jobs, key of 100k": "/jobs?queue=orders&state=pending&key=big-customer",
                    "jobs, key of 100k, deep": (
                        "/jobs?queue=orders&state=pending&key=big-customer"
                        f"&after={first + PENDING // 2}"
                    ),
                    "jobs, rare header": f"{PENDING_PAGE}&header=tenant&value=rare",
                    "jobs, common header": f"{PENDING_PAGE}&header=tenant&value=t3",
                    "jobs, dead, key of 100": "/jobs?queue=orders&state=dead&key=customer-8",
                    "job": f"/jobs/{first + PENDING // 8}",
                    "dead letters": "/dead",
                    "dead letters, one queue": "/dead?queue=emails",
                    "workers": "/workers",
                    "limits": "/limits?queue=orders",
                }
                results = {}
                for name, path in pages.items():

                    def fetch(url=base + path):
                        began = time.perf_counter()
                        with urllib.request.urlopen(url) as reply:
                            reply.read()
                            assert reply.status == 200
                        return (time.perf_counter() - began) * 1000

                    await trio.to_thread.run_sync(fetch)  # warm
                    results[name] = _ms([await trio.to_thread.run_sync(fetch) for _ in range(RUNS)])
                # W9 across refreshes: the overview's table every 0.25 s for 12 s with a
                # 1 s refresh interval, so readings go stale and are replaced while pages
                # are served (in the background: no request waits for the count).
                refreshing = await nursery.start(
                    functools.partial(serve_dashboard, store, "127.0.0.1:0", refresh_s=1.0)
                )
                spaced = []
                for _ in range(48):

                    def fetch_table(url=refreshing[0] + "/fragments/overview"):
                        began = time.perf_counter()
                        with urllib.request.urlopen(url) as reply:
                            reply.read()
                        return (time.perf_counter() - began) * 1000

                    spaced.append(await trio.to_thread.run_sync(fetch_table))
                    await trio.sleep(0.25)
                results["overview refresh, across refreshes"] = _ms(spaced)
                nursery.cancel_scope.cancel()
        print(f"load average: {os.getloadavg()[0]:.1f} (2-core shared machine)")
        print(f"Store.stats(), the shared reading: median {statistics.median(stats_ms):.0f} ms")
        print(f"{'page':28} {'p50 ms':>8} {'p95 ms':>8}")
        for name, (p50, p95) in results.items():
            print(f"{name:28} {p50:8.1f} {p95:8.1f}")
        slow = {name: p95 for name, (_, p95) in results.items() if p95 > TARGET_P95_MS}
        assert not slow, f"pages over {TARGET_P95_MS} ms p95: {slow}"
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(pgsql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(quoted))
