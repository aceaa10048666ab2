"""Every query of ``sql/queries.sql`` is served by an index: no plan scans ``jobs`` or
``dead_jobs`` sequentially, however large they are. The statements are explained as the
engine sends them, fragments expanded.

A schema's ``jobs`` and ``dead_jobs`` are loaded with a realistic mix (one
``INSERT … SELECT … FROM generate_series`` each): several queues of skewed sizes; most
live rows pending, with mixed priorities, most ready and some delayed; some processing,
with lapsed and unlapsed leases (some of the lapsed ones at their attempt budget); some
rows with an ``expires_at`` (a few already expired); dead rows that died over the last
month. After ``ANALYZE``, each query is explained three ways, because the engine's
connections prepare statements on the server from their second use and PostgreSQL then
chooses between a plan for the bound values and a generic one:

- ``bound``: ``EXPLAIN`` of the statement with its values bound as parameters;
- ``custom``: ``PREPARE`` + ``EXPLAIN EXECUTE`` under ``plan_cache_mode =
  force_custom_plan`` (the plan for these values);
- ``generic``: the same under ``force_generic_plan`` (the plan for any values, which the
  server may switch to after five executions).

The default run loads 50,000 rows per table; the 1,000,000-row load is marked ``slow``
(``pytest -m slow tests/postgres/test_explain.py``).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql

from alkstore_trio._engines._postgres import _reads, _sql

#: The tables no query may scan sequentially.
BIG_TABLES = frozenset({"jobs", "dead_jobs", "completed_jobs"})
#: The queue the queries are explained for: the largest one (the worst case for a plan).
QUEUE = "emails"
#: Q8: the size above which a read of one job sends the payload apart, in slices.
SLICE = _reads.PAYLOAD_SLICE_BYTES

SIZES = [
    pytest.param(50_000, id="50k"),
    pytest.param(1_000_000, id="1M", marks=pytest.mark.slow),
]

MODES = ["bound", "custom", "generic"]

# One row per job: queue sizes 40/20/10/10/10/10 %; 95 % pending (70 % of them ready,
# 30 % delayed up to a day; 70 % priority 0, 25 % 1..10, 5 % negative; 20 % retried
# before), 5 % processing (80 % with a live lease, 20 % lapsed; attempts 1..3 of 3, or
# of 5 for one row in ten); 10 % with an expires_at, a twentieth of those expired.
_LOAD_JOBS = """
INSERT INTO {schema}.jobs (
    queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
    claim_expires_at, last_error, claim_token
)
SELECT
    (ARRAY['emails', 'emails', 'emails', 'emails', 'reports', 'reports', 'webhooks',
           'thumbnails', 'billing', 'audit'])[1 + (r.g * 7) %% 10],
    convert_to('{{"order": ' || r.g || '}}', 'UTF8'),
    CASE WHEN r.r1 < 0.70 THEN 0 WHEN r.r1 < 0.95 THEN 1 + r.g %% 10 ELSE -1 - r.g %% 5 END,
    r.state,
    CASE WHEN r.state = 'processing' THEN 1 + r.g %% 3
         WHEN r.r3 < 0.8 THEN 0 ELSE 1 + r.g %% 2 END,
    CASE WHEN r.g %% 10 = 0 THEN 5 ELSE 3 END,
    CASE WHEN r.state = 'processing' THEN r.now - r.r4 * interval '1 hour'
         WHEN r.r4 < 0.7 THEN r.now - r.r4 * interval '2 hours'
         ELSE r.now + r.r4 * interval '1 day' END,
    r.now - interval '3 hours',
    300, 5,
    CASE WHEN r.r5 < 0.005 THEN r.now - r.r5 * interval '10 days'
         WHEN r.r5 < 0.10 THEN r.now + r.r5 * interval '20 days' END,
    CASE WHEN r.state = 'processing' THEN 'worker-' || r.g %% 50 END,
    CASE WHEN r.state = 'processing' THEN r.now - r.r3 * interval '10 minutes' END,
    CASE WHEN r.state = 'processing' AND r.r3 < 0.2 THEN r.now - r.r3 * interval '1 hour'
         WHEN r.state = 'processing' THEN r.now + r.r3 * interval '5 minutes' END,
    CASE WHEN r.state = 'pending' AND r.r3 >= 0.8 THEN 'connection reset' END,
    CASE WHEN r.state = 'processing' THEN r.g::bigint * 7919 END
FROM (
    SELECT g, random() AS r1, random() AS r3, random() AS r4, random() AS r5,
        CASE WHEN random() < 0.95 THEN 'pending' ELSE 'processing' END AS state,
        statement_timestamp() AS now
    FROM generate_series(1, %(rows)s) AS g
) AS r
"""

# One row per dead job: the same queues, died over the last 30 days.
_LOAD_DEAD_JOBS = """
INSERT INTO {schema}.dead_jobs (
    id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
    claim_expires_at, last_error, died_at
)
SELECT
    %(first_id)s + r.g,
    (ARRAY['emails', 'emails', 'emails', 'emails', 'reports', 'reports', 'webhooks',
           'thumbnails', 'billing', 'audit'])[1 + (r.g * 3) %% 10],
    convert_to('{{"order": ' || r.g || '}}', 'UTF8'),
    0, 3, 3, r.died - interval '1 hour', r.died - interval '2 hours', 300, 5,
    NULL, 'worker-' || r.g %% 50, r.died - interval '5 minutes', r.died,
    (ARRAY['max attempts exceeded', 'failed', 'expired', 'payload is not valid UTF-8'])
        [1 + r.g %% 4],
    r.died
FROM (
    SELECT g, statement_timestamp() - random() * interval '30 days' AS died
    FROM generate_series(1, %(rows)s) AS g
) AS r
"""

# Q19.2: one kept row per completed job: the same queues, acked over the last day, kept
# for a day (so about half are due for the purge).
_LOAD_COMPLETED_JOBS = """
INSERT INTO {schema}.completed_jobs (
    id, queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, claimed_by, claimed_at, claim_expires_at,
    claim_token, keep_completed_s, completed_at, purge_at, result
)
SELECT
    %(first_id)s + r.g,
    (ARRAY['emails', 'emails', 'emails', 'emails', 'reports', 'reports', 'webhooks',
           'thumbnails', 'billing', 'audit'])[1 + (r.g * 3) %% 10],
    convert_to('{{"order": ' || r.g || '}}', 'UTF8'),
    0, 'completed', 1, 3, r.done - interval '1 hour', r.done - interval '2 hours', 300, 5,
    'worker-' || r.g %% 50, r.done - interval '5 minutes', r.done + interval '5 minutes',
    r.g, 86400, r.done, r.done + interval '1 day', convert_to('{{"ok": true}}', 'UTF8')
FROM (
    SELECT g, statement_timestamp() - random() * interval '2 days' AS done
    FROM generate_series(1, %(rows)s) AS g
) AS r
"""


@dataclass(frozen=True)
class Loaded:
    """A loaded schema, and ids of representative rows in it."""

    schema: str
    rows: int
    pending_id: int
    processing_id: int
    processing_token: int
    dead_id: int
    processing_ids: list[int]
    completed_id: int = 0  # Q19.2


@pytest.fixture(scope="module", params=SIZES)
def loaded(request: pytest.FixtureRequest, pg_dsn: str) -> Iterator[Loaded]:
    rows: int = request.param
    schema = f"alk_explain_{secrets.token_hex(4)}"
    quoted = pgsql.Identifier(schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        try:
            conn.execute(_sql.schema_sql(schema).encode())
            conn.execute("SET synchronous_commit = off")
            conn.execute("SELECT setseed(0.25)")
            conn.execute(pgsql.SQL(_LOAD_JOBS).format(schema=quoted), {"rows": rows})
            conn.execute(
                pgsql.SQL(_LOAD_DEAD_JOBS).format(schema=quoted),
                {"rows": rows, "first_id": 10 * rows},
            )
            conn.execute(
                pgsql.SQL(_LOAD_COMPLETED_JOBS).format(schema=quoted),
                {"rows": rows, "first_id": 20 * rows},
            )
            conn.execute(
                pgsql.SQL("ANALYZE {}.jobs, {}.dead_jobs, {}.completed_jobs").format(
                    quoted, quoted, quoted
                )
            )
            pick = pgsql.SQL(
                "SELECT id, claim_token FROM {}.jobs WHERE queue = %s AND state = %s "
                "ORDER BY id LIMIT 100"
            )
            pending = conn.execute(pick.format(quoted), [QUEUE, "pending"]).fetchall()
            processing = conn.execute(pick.format(quoted), [QUEUE, "processing"]).fetchall()
            (dead_id,) = conn.execute(
                pgsql.SQL("SELECT min(id) FROM {}.dead_jobs WHERE queue = %s").format(quoted),
                [QUEUE],
            ).fetchone()
            (completed_id,) = conn.execute(
                pgsql.SQL("SELECT min(id) FROM {}.completed_jobs WHERE queue = %s").format(quoted),
                [QUEUE],
            ).fetchone()
            yield Loaded(
                schema=schema,
                rows=rows,
                pending_id=pending[0][0],
                processing_id=processing[0][0],
                processing_token=processing[0][1],
                dead_id=dead_id,
                processing_ids=[row[0] for row in processing],
                completed_id=completed_id,
            )
        finally:
            conn.execute(pgsql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(quoted))


def params_for(name: str, data: Loaded) -> list[tuple[str, dict[str, Any]]]:
    """Representative values for each query, as ``(variant, params)``."""
    handle = {"id": data.processing_id, "queue": QUEUE, "token": data.processing_token}
    table: dict[str, list[tuple[str, dict[str, Any]]]] = {
        "enqueue_many": [
            (
                "batch",
                {
                    "queue": QUEUE,
                    "payloads": [b'{"to": "ada@example.com"}'] * 10,
                    "priority": 0,
                    "delay_s": None,
                    "run_at": None,
                    "max_attempts": 3,
                    "visibility_timeout_s": 300.0,
                    "backoff_base_s": 5.0,
                    "expires_in_s": 3600.0,
                    "keep_completed_s": None,
                    "headers": '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-01"}',
                    "channel": _sql.wake_channel(data.schema, QUEUE),
                    "concurrency_keys": None,
                },
            ),
            (
                "batch with concurrency keys (Q18.8)",
                {
                    "queue": QUEUE,
                    "payloads": [b'{"to": "ada@example.com"}'] * 3,
                    "priority": 0,
                    "delay_s": None,
                    "run_at": None,
                    "max_attempts": 3,
                    "visibility_timeout_s": 300.0,
                    "backoff_base_s": 5.0,
                    "expires_in_s": None,
                    "keep_completed_s": 86400.0,
                    "headers": "{}",
                    "channel": _sql.wake_channel(data.schema, QUEUE),
                    "concurrency_keys": ["tenant-1", None, "tenant-2"],
                },
            ),
        ],
        "enqueue_one": [
            (
                "single",
                {
                    "queue": QUEUE,
                    "payload": b'{"to": "ada@example.com"}',
                    "priority": 0,
                    "delay_s": 5.0,
                    "run_at": None,
                    "max_attempts": 3,
                    "visibility_timeout_s": 300.0,
                    "backoff_base_s": 5.0,
                    "expires_in_s": None,
                    "keep_completed_s": 86400.0,
                    "headers": "{}",
                    "channel": _sql.wake_channel(data.schema, QUEUE),
                    "concurrency_key": None,
                },
            ),
            (
                "single with a concurrency key (Q18.8)",
                {
                    "queue": QUEUE,
                    "payload": b'{"to": "ada@example.com"}',
                    "priority": 0,
                    "delay_s": None,
                    "run_at": None,
                    "max_attempts": 3,
                    "visibility_timeout_s": 300.0,
                    "backoff_base_s": 5.0,
                    "expires_in_s": None,
                    "keep_completed_s": 86400.0,
                    "headers": "{}",
                    "channel": _sql.wake_channel(data.schema, QUEUE),
                    "concurrency_key": "tenant-1",
                },
            ),
        ],
        "claim": [
            ("one", {"queue": QUEUE, "worker_id": "worker-1", "n": 1, "token_base": 12345}),
            ("batch", {"queue": QUEUE, "worker_id": "worker-1", "n": 100, "token_base": 12345}),
        ],
        "heartbeat": [("default", {**handle, "extend_s": None})],
        "ack": [("token", handle)],
        "retry": [("delay", {**handle, "error": "boom", "delay_s": 10.0})],
        "fail": [("error", {**handle, "error": "failed"})],
        "ack_batch": [("ids", {"queue": QUEUE, "ids": data.processing_ids})],
        "ack_claims": [
            (
                "pairs",
                {
                    "queue": QUEUE,
                    "ids": data.processing_ids,
                    "tokens": [data.processing_token] * len(data.processing_ids),
                },
            )
        ],
        "ack_claims_and_claim": [
            (
                "pairs, one",
                {
                    "queue": QUEUE,
                    "ids": data.processing_ids[:10],
                    "tokens": [data.processing_token] * len(data.processing_ids[:10]),
                    "worker_id": "worker-1",
                    "n": 1,
                    "token_base": 12345,
                },
            ),
            (
                "pairs, batch",
                {
                    "queue": QUEUE,
                    "ids": data.processing_ids,
                    "tokens": [data.processing_token] * len(data.processing_ids),
                    "worker_id": "worker-1",
                    "n": 100,
                    "token_base": 12345,
                },
            ),
        ],
        "heartbeat_claims": [
            (
                "pairs",
                {
                    "queue": QUEUE,
                    "ids": data.processing_ids,
                    "tokens": [data.processing_token] * len(data.processing_ids),
                    "extend_s": None,
                },
            )
        ],
        "heartbeat_claims_progress": [
            (
                "items",
                {
                    "queue": QUEUE,
                    "ids": data.processing_ids,
                    "tokens": [data.processing_token] * len(data.processing_ids),
                    "progress": ["3 of 10"] + [None] * (len(data.processing_ids) - 1),
                    "extend_s": None,
                },
            )
        ],
        "retry_claims": [
            (
                "items",
                {
                    "queue": QUEUE,
                    "ids": data.processing_ids,
                    "tokens": [data.processing_token] * len(data.processing_ids),
                    "errors": ["boom", None] * (len(data.processing_ids) // 2)
                    + ["boom"] * (len(data.processing_ids) % 2),
                    "delays": [10.0, None] * (len(data.processing_ids) // 2)
                    + [0.0] * (len(data.processing_ids) % 2),
                },
            )
        ],
        "release_claims": [
            (
                "pairs",
                {
                    "queue": QUEUE,
                    "ids": data.processing_ids,
                    "tokens": [data.processing_token] * len(data.processing_ids),
                    "error": "worker stopped",
                    "channel": _sql.wake_channel(data.schema, QUEUE),
                },
            )
        ],
        "fail_claims": [
            (
                "items",
                {
                    "queue": QUEUE,
                    "ids": data.processing_ids,
                    "tokens": [data.processing_token] * len(data.processing_ids),
                    "errors": ["failed"] * len(data.processing_ids),
                },
            )
        ],
        "cancel": [  # Q19.5: a pending row is finalized, a processing one announced
            ("pending", {"id": data.pending_id, "queue": QUEUE, "channel": "alk/x/y"}),
            ("processing", {"id": data.processing_ids[0], "queue": QUEUE, "channel": "alk/x/y"}),
        ],
        "settle_cancelled": [
            (
                "pairs",
                {
                    "queue": QUEUE,
                    "ids": data.processing_ids,
                    "tokens": [data.processing_token] * len(data.processing_ids),
                },
            )
        ],
        "cancelling_among": [("ids", {"queue": QUEUE, "ids": data.processing_ids})],
        "get_job": [
            ("live", {"id": data.pending_id, "queue": QUEUE, "inline_max": SLICE}),
            ("dead", {"id": data.dead_id, "queue": QUEUE, "inline_max": SLICE}),
            ("kept", {"id": data.completed_id, "queue": QUEUE, "inline_max": SLICE}),
        ],
        "payload_slice": [  # Q8: a large payload, read apart
            ("live", {"id": data.pending_id, "start": 1, "len": SLICE}),
            ("dead", {"id": data.dead_id, "start": 1 + SLICE, "len": SLICE}),
            ("kept", {"id": data.completed_id, "start": 1, "len": SLICE}),
        ],
        # Q19.1: a kept row's large result, read apart.
        "result_slice": [("kept", {"id": data.completed_id, "start": 1, "len": SLICE})],
        # Q19.1/Q19.2: the moving acks, with a result per claim.
        "complete_claims": [
            (
                "pairs with results",
                {
                    "queue": QUEUE,
                    "ids": data.processing_ids,
                    "tokens": [data.processing_token] * len(data.processing_ids),
                    "results": [b"ok", None] * (len(data.processing_ids) // 2)
                    + [b"ok"] * (len(data.processing_ids) % 2),
                },
            )
        ],
        "complete_claims_and_claim": [
            (
                "pairs with results, then a batch",
                {
                    "queue": QUEUE,
                    "ids": data.processing_ids,
                    "tokens": [data.processing_token] * len(data.processing_ids),
                    "results": [b"ok"] * len(data.processing_ids),
                    "worker_id": "worker-1",
                    "n": 10,
                    "token_base": 12345,
                },
            )
        ],
        "list_completed": [
            ("first page", {"queue": QUEUE, "state": "completed", "after_id": 0, "limit": 100}),
            ("cancelled", {"queue": QUEUE, "state": "cancelled", "after_id": 0, "limit": 100}),
        ],
        # Q19.3: one batch of the purge.
        "purge_completed": [("a batch", {"queue": QUEUE, "batch": 5000})],
        "sweep_expired": [
            ("retention", {"queue": QUEUE, "retention_s": 7 * 86400.0}),
            ("keep-forever", {"queue": QUEUE, "retention_s": None}),
        ],
        "schema_version": [("none", {})],
        # D22-D26, the operator's statements.
        "find_job": [
            ("live", {"id": data.pending_id, "inline_max": SLICE}),
            ("dead", {"id": data.dead_id, "inline_max": SLICE}),
            ("kept", {"id": data.completed_id, "inline_max": SLICE}),
        ],
        "list_live": [
            ("pending", {"queue": QUEUE, "state": "pending", "after_id": 0, "limit": 100}),
            (
                "processing, next page",
                {
                    "queue": QUEUE,
                    "state": "processing",
                    "after_id": data.processing_id,
                    "limit": 100,
                },
            ),
        ],
        "list_dead": [("first page", {"queue": QUEUE, "after_id": 0, "limit": 100})],
        **_filtered_cases(),  # D26.1
        "stats": [("every queue", {"queue": None}), ("one queue", {"queue": QUEUE})],
        "requeue_dead": [
            (
                "ids",
                {
                    "queue": QUEUE,
                    "ids": [data.dead_id, data.dead_id + 1],
                    "channel": _sql.wake_channel(data.schema, QUEUE),
                },
            )
        ],
        "requeue_dead_all": [
            ("all", {"queue": QUEUE, "channel": _sql.wake_channel(data.schema, QUEUE)})
        ],
        "purge_dead": [
            ("older than a week", {"queue": QUEUE, "older_than_s": 7 * 86400.0}),
            ("all", {"queue": QUEUE, "older_than_s": None}),
        ],
        "count_dead": [
            ("older than a week", {"queue": QUEUE, "older_than_s": 7 * 86400.0}),
            ("all", {"queue": QUEUE, "older_than_s": None}),
        ],
        # D25.1: by id (the dashboard's purge of one job, a group, a selection).
        "purge_dead_ids": [
            (
                "ids",
                {"queue": QUEUE, "ids": [data.dead_id, data.dead_id + 1], "older_than_s": None},
            )
        ],
        "count_dead_ids": [
            (
                "ids, older than a week",
                {"queue": QUEUE, "ids": [data.dead_id], "older_than_s": 7 * 86400.0},
            )
        ],
        # Q16
        "reschedule": [
            (
                "delay",
                {
                    "queue": QUEUE,
                    "id": data.pending_id,
                    "delay_s": 60.0,
                    "run_at": None,
                    "priority": None,
                    "channel": _sql.wake_channel(data.schema, QUEUE),
                },
            ),
            (
                "run_at and priority",
                {
                    "queue": QUEUE,
                    "id": data.pending_id,
                    "delay_s": None,
                    "run_at": datetime(2100, 1, 1, tzinfo=UTC),
                    "priority": 5,
                    "channel": _sql.wake_channel(data.schema, QUEUE),
                },
            ),
        ],
        "next_due": [("one queue", {"queue": QUEUE})],
        # Q17: the periodic statements touch only the periodic table.
        "sync_periodic": [
            (
                "two schedules",
                {
                    "names": ["a", "b"],
                    "queues": [QUEUE, QUEUE],
                    "expressions": ["every:60.0s", "cron:0 7 * * *"],
                    "tzs": ["UTC", "Europe/Riga"],
                },
            )
        ],
        "advance_periodic": [
            (
                "two schedules",
                {
                    "names": ["a", "b"],
                    "queues": [QUEUE, QUEUE],
                    "expressions": ["every:60.0s", "cron:0 7 * * *"],
                    "tzs": ["UTC", "Europe/Riga"],
                    "nexts": [None, None],
                    "lasts": [None, None],
                    "now": datetime(2100, 1, 1, tzinfo=UTC),
                },
            )
        ],
        "delete_periodic": [("one schedule", {"name": "a"})],
        "list_periodic": [("default horizon", {"stale_after_s": 600.0})],
        # Q21: the worker registry touches only the workers table.
        "beat_worker": [
            (
                f"start={start}",
                {
                    "worker_id": "host-a:41:beef",
                    "host": "host-a",
                    "pid": 41,
                    "queues": [QUEUE],
                    "concurrency": 10,
                    "version": "1.0",
                    "start": start,
                    "purge_after_s": 86400.0,
                    "purge_batch": 100,
                },
            )
            for start in (True, False)
        ],
        "stop_worker": [("one worker", {"worker_id": "host-a:41:beef"})],
        "list_workers": [("the default limit", {"limit": 1000})],
        # Q18: queue controls.
        "set_paused": [
            (
                f"paused={paused}",
                {
                    "queue": QUEUE,
                    "paused": paused,
                    "channel": _sql.wake_channel(data.schema, QUEUE),
                },
            )
            for paused in (True, False)
        ],
        # Q18.7-Q18.11: queue limits.
        "set_limits": [
            (
                "a limit and a rate",
                {
                    "queue": QUEUE,
                    "max_running": 5,
                    "rate_per_s": 50.0,
                    "burst": 10,
                    "max_running_per_key": 2,
                    "refill": True,
                    "channel": _sql.wake_channel(data.schema, QUEUE),
                },
            )
        ],
        "lock_limits": [("one queue", {"queue": QUEUE})],
        "claim_limited": [
            ("a worker's batch", {"queue": QUEUE, "worker_id": "w", "n": 10, "token_base": 1}),
        ],
        # Q18.8: the per-key claim.
        "claim_per_key": [
            ("a worker's batch", {"queue": QUEUE, "worker_id": "w", "n": 10, "token_base": 1}),
        ],
        "wake": [("one queue", {"channel": _sql.wake_channel(data.schema, QUEUE)})],
        # Q15: the keyed enqueue's two statements.
        "lock_unique_keys": [("two keys", {"locks": ["alkstore/emails/a", "alkstore/emails/b"]})],
        "enqueue_unique": [
            (
                "keyed, with a window",
                {
                    "queue": QUEUE,
                    "payload": b'{"to": "ada@example.com"}',
                    "priority": 0,
                    "delay_s": None,
                    "run_at": None,
                    "max_attempts": 3,
                    "visibility_timeout_s": 300.0,
                    "backoff_base_s": 5.0,
                    "expires_in_s": None,
                    "keep_completed_s": 86400.0,
                    "headers": "{}",
                    "channel": _sql.wake_channel(data.schema, QUEUE),
                    "unique_key": "welcome:ada@example.com",
                    "unique_for_s": 3600.0,
                    "concurrency_key": None,
                },
            )
        ],
    }
    if "%(done_channel)s" in _sql.library().statements[name]:  # Q19.4: the engine adds it
        done = _sql.done_channel(data.schema, QUEUE)
        return [(variant, {**params, "done_channel": done}) for variant, params in table[name]]
    return table[name]


QUERY_NAMES = sorted(_sql.queries("alkstore"))


def test_explain_every_query_has_representative_values():
    # A new query in queries.sql must be added to params_for (and so be explained).
    data = Loaded("alkstore", 0, 1, 2, 1, 3, [2])
    for name in QUERY_NAMES:
        assert params_for(name, data), name


_NAMED_PARAM = re.compile(r"%\((\w+)\)[sb]")


def to_positional(query: str) -> tuple[str, list[str]]:
    """``%(name)s`` and ``%(name)b`` placeholders as ``$n`` (one number per name), and the
    names in order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    return _NAMED_PARAM.sub(number, query), names


def explain(
    conn: psycopg.Connection[Any], query: str, params: dict[str, Any], mode: str
) -> list[dict[str, Any]]:
    """The JSON plan of ``query`` for ``params``, planned as ``mode`` says. Plain EXPLAIN:
    nothing is executed."""
    if mode == "bound":
        (plan,) = conn.execute("EXPLAIN (VERBOSE, FORMAT JSON) " + query, params).fetchone()
        return plan
    positional, names = to_positional(query)
    args = pgsql.SQL(", ").join(pgsql.Literal(params[name]) for name in names)
    execute = pgsql.SQL("EXPLAIN (VERBOSE, FORMAT JSON) EXECUTE alk_explain")
    if names:
        execute += pgsql.SQL(" ({})").format(args)
    conn.execute(f"SET plan_cache_mode = force_{mode}_plan")
    conn.execute(f"PREPARE alk_explain AS {positional}")
    try:
        (plan,) = conn.execute(execute).fetchone()
    finally:
        conn.execute("DEALLOCATE alk_explain")
        conn.execute("RESET plan_cache_mode")
    return plan


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from plan_nodes(child)


def seq_scans(plan: list[dict[str, Any]], schema: str) -> list[dict[str, Any]]:
    """The plan's sequential scans of ``jobs`` or ``dead_jobs`` of ``schema``."""
    return [
        node
        for top in plan
        for node in plan_nodes(top["Plan"])
        if node["Node Type"] == "Seq Scan"
        and node.get("Relation Name") in BIG_TABLES
        and node.get("Schema", schema) == schema
    ]


@pytest.fixture(scope="module")
def explain_conn(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


#: Bulk operator statements (D24, D25) that may scan ``dead_jobs`` sequentially: they
#: delete every dead row of a queue (or every one older than an age), and when that is a
#: large part of the table (the explained queue holds 40 % of it) reading the whole table
#: once is the cheaper plan; for a small part the planner takes the retention index.
#: They are an operator's one-off commands, never on a worker's path.
BULK_DEAD_QUERIES = frozenset({"requeue_dead_all", "purge_dead", "count_dead"})


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", QUERY_NAMES)
def test_explain_no_query_scans_jobs_or_dead_jobs_sequentially(
    loaded: Loaded, explain_conn: psycopg.Connection[Any], name: str, mode: str
):
    query = _sql.queries(loaded.schema)[name]
    failures = []
    for variant, params in params_for(name, loaded):
        plan = explain(explain_conn, query, params, mode)
        scans = seq_scans(plan, loaded.schema)
        if name in BULK_DEAD_QUERIES:
            scans = [node for node in scans if node["Relation Name"] != "dead_jobs"]
        if scans:
            relations = sorted({node["Relation Name"] for node in scans})
            failures.append(
                f"{name} [{variant}, {mode} plan, {loaded.rows} rows] scans {relations} "
                f"sequentially:\n{json.dumps(plan, indent=1)}"
            )
    assert not failures, "\n\n".join(failures)


#: The R2 batch statements over (id, claim token) items (D18-D20): they must reach their
#: rows by primary key, never by a walk of a queue's pending rows or leases.
BATCH_CLAIM_QUERIES = [
    "ack_claims",
    "fail_claims",
    "heartbeat_claims",
    "heartbeat_claims_progress",
    "release_claims",
    "retry_claims",
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", BATCH_CLAIM_QUERIES)
def test_r2_explain_batch_claim_statements_find_jobs_by_primary_key(
    loaded: Loaded, explain_conn: psycopg.Connection[Any], name: str, mode: str
):
    query = _sql.queries(loaded.schema)[name]
    for variant, params in params_for(name, loaded):
        plan = explain(explain_conn, query, params, mode)
        reads = [
            node
            for top in plan
            for node in plan_nodes(top["Plan"])
            if node.get("Relation Name") == "jobs" and node["Node Type"] != "ModifyTable"
        ]
        assert reads, f"{name} [{variant}, {mode} plan] reads no jobs row"
        lookups = {(node["Node Type"], node.get("Index Name")) for node in reads}
        assert lookups == {("Index Scan", "jobs_pkey")}, (
            f"{name} [{variant}, {mode} plan, {loaded.rows} rows] reads jobs through "
            f"{sorted(lookups, key=str)}, expected primary-key lookups only:\n"
            f"{json.dumps(plan, indent=1)}"
        )


def test_r2_explain_ack_claims_and_claim_acks_by_primary_key(
    loaded: Loaded, explain_conn: psycopg.Connection[Any]
):
    # D21: the fused statement's DELETE of the acked pairs reads jobs by primary key, as
    # ack_claims does; its claim part walks the claim and lease indexes, as claim does.
    query = _sql.queries(loaded.schema)["ack_claims_and_claim"]
    for mode in MODES:
        for variant, params in params_for("ack_claims_and_claim", loaded):
            plan = explain(explain_conn, query, params, mode)
            deletes = [
                node
                for top in plan
                for node in plan_nodes(top["Plan"])
                if node["Node Type"] == "ModifyTable"
                and node.get("Operation") == "Delete"
                and node.get("Relation Name") == "jobs"
                and node.get("Subplan Name") == "CTE acked"
            ]
            assert len(deletes) == 1, f"[{variant}, {mode}] no DELETE for CTE acked in the plan"
            reads = {
                (node["Node Type"], node.get("Index Name"))
                for node in plan_nodes(deletes[0])
                if node.get("Relation Name") == "jobs" and node["Node Type"] != "ModifyTable"
            }
            assert reads == {("Index Scan", "jobs_pkey")}, (
                f"ack_claims_and_claim [{variant}, {mode} plan] acks through "
                f"{sorted(reads, key=str)}, expected primary-key lookups only:\n"
                f"{json.dumps(plan, indent=1)}"
            )


def split_ctes(query: str) -> tuple[dict[str, str], str]:
    """A ``WITH`` statement's CTEs (name -> body, whitespace collapsed, ``MATERIALIZED``
    kept; ``WITH RECURSIVE`` and a CTE's column list skipped) and the statement after
    them."""
    text = " ".join(query.split())
    assert text.startswith("WITH "), text[:40]
    ctes: dict[str, str] = {}
    pos = len("WITH RECURSIVE ") if text.startswith("WITH RECURSIVE ") else len("WITH ")
    while True:
        head = re.compile(r"(\w+)(?: \([\w, ]+\))? AS ((?:MATERIALIZED )?)\( ?").match(text, pos)
        assert head is not None, text[pos : pos + 40]
        depth, i, quoted = 1, head.end(), False
        while depth:
            char = text[i]
            if char == "'":
                quoted = not quoted
            elif not quoted:
                depth += {"(": 1, ")": -1}.get(char, 0)
            i += 1
        ctes[head[1]] = head[2] + text[head.end() : i - 1].strip()
        if text.startswith(", ", i):
            pos = i + 2
        else:
            return ctes, text[i:].strip()


def split_columns(select_list: str) -> list[str]:
    """A select list's items (split at the commas outside parentheses)."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(select_list):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(select_list[start:i].strip())
            start = i + 1
    items.append(select_list[start:].strip())
    return items


#: D26.1: the filtered listings.
_FILTERED = [f"list_{t}_by_{w}" for t in ("live", "dead", "completed") for w in ("key", "header")]


def _filtered_cases() -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """D26.1: each filtered listing for a key alone, a key and a header, a header alone."""
    base = {"queue": QUEUE, "after_id": 0, "limit": 50, "key": None, "name": None, "value": None}
    key = {**base, "key": "tenant-7", "window": 50}
    both = {**key, "name": "h", "value": "v", "window": 10_000}
    header = {**base, "name": "h", "value": "v", "window": 10_000}
    cases: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for table, states in (
        ("live", ["pending", "processing", "cancelling"]),
        ("dead", ["dead"]),
        ("completed", ["completed", "cancelled"]),
    ):
        cases[f"list_{table}_by_key"] = [
            (f"{state}, {what}", {**params, "state": state})
            for state in states
            for what, params in (("key", key), ("key and header", both))
        ]
        cases[f"list_{table}_by_header"] = [(state, {**header, "state": state}) for state in states]
    return cases


#: The statements that return jobs (parsed by ``_backend._job``), and how many lists of
#: job columns each has (a live and a dead half for the lookups by id).
JOB_QUERIES = {
    "claim": 1,
    "ack_claims_and_claim": 1,
    "claim_limited": 1,  # Q18.7
    "claim_per_key": 1,  # Q18.8
    "get_job": 3,
    "find_job": 3,
    "list_live": 1,
    "list_dead": 1,
    "complete_claims_and_claim": 1,  # Q19.1
    "list_completed": 1,  # Q19.2
    **dict.fromkeys(_FILTERED, 1),  # D26.1
}
#: The Job fields as those statements return them: the columns of ``jobs`` up to
#: ``last_error``, the headers (NULL when empty), ``died_at``, the unique key (Q15), the
#: claim token (Q19.8) and the concurrency key (Q18.8).
JOB_COLUMNS = [
    "id", "queue", "payload", "priority", "state", "attempts", "max_attempts", "run_at",
    "enqueued_at", "visibility_timeout_s", "backoff_base_s", "expires_at", "claimed_by",
    "claimed_at", "claim_expires_at", "last_error", "nullif(headers, '{}'::jsonb)", "died_at",
    "unique_key", "claim_token", "concurrency_key", "keep_completed_s",
]  # fmt: skip


#: Q8: the reads of one job send a large payload apart: their payload column is this
#: expression, and one more column follows the job fields (the payload's size).
INLINE_PAYLOAD = (
    "CASE WHEN pg_catalog.octet_length(payload) <= %(inline_max)s::integer THEN payload END"
)
READS_APART = {"get_job", "find_job"}
PAYLOAD_SIZE = "pg_catalog.octet_length(payload)"


def _select_lists(query: str) -> list[list[str]]:
    """Every select or RETURNING list in ``query``: from the keyword to a ``FROM`` outside
    parentheses, the closing parenthesis of its CTE, or the end."""
    text = " ".join(query.split())
    lists = []
    for match in re.finditer(r"\b(?:SELECT|RETURNING) ", text):
        depth, end = 0, len(text)
        for i in range(match.end(), len(text)):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            if depth < 0 or (depth == 0 and text.startswith(" FROM ", i)):
                end = i
                break
        lists.append(split_columns(text[match.end() : end]))
    return lists


def _bare(column: str) -> str:
    column = re.sub(r"\bj\.", "", column)
    column = re.sub(r" AS \w+$", "", column)
    if column in ("'dead'",):
        return "state"
    if column.startswith("NULL::timestamptz"):
        return "died_at"
    return column


def _fragments_used(name: str) -> list[str]:
    return [fragment for fragment, _ in _sql.library().uses[name]]


@pytest.mark.parametrize("name", sorted(JOB_QUERIES))
def test_d30_every_statement_that_returns_jobs_returns_the_job_fields_in_one_order(name: str):
    # _backend._job reads rows by position, and takes a NULL headers column for "no
    # headers" without parsing JSON: each of these statements lists the same columns,
    # in the same order, with the headers as nullif(headers, '{}').
    # Q8/Q19.2: the reads of one job add completed_at, the result (inline or not), its
    # size and the payload's size; list_completed adds completed_at and the result.
    want = JOB_COLUMNS
    if name in READS_APART:
        want = [INLINE_PAYLOAD if c == "payload" else c for c in JOB_COLUMNS]
    width = len(want)
    lists = [
        columns
        for columns in _select_lists(_sql.queries("alkstore")[name])
        if columns[0].endswith("id") and [_bare(c) for c in columns[width - 3 : width]] == want[-3:]
    ]
    assert len(lists) == JOB_QUERIES[name], (name, lists)
    for columns in lists:
        assert [_bare(c) for c in columns[:width]] == want, (name, columns)
        tail = columns[width:]
        # Q19.7: every read ends with the progress text.
        if name in READS_APART:
            assert len(tail) == 5, (name, tail)
            assert _bare(tail[-2]) == PAYLOAD_SIZE, (name, tail)
            assert tail[-1] == "j.progress", (name, tail)
        elif name == "list_completed":
            assert tail == ["j.completed_at", "j.result", "j.progress"], (name, tail)
        elif name in ("list_live", "list_dead"):
            assert tail == ["NULL::timestamptz", "NULL::bytea", "j.progress"], (name, tail)
        elif name in _FILTERED:  # D26.1: then how many rows it examined, the last id
            assert tail[-3:] == ["j.progress", "w.examined", "w.last_id"], (name, tail)
        else:
            assert tail == [], (name, tail)
    # They all take them from the one job_fields fragment (once per list).
    assert _fragments_used(name).count("job_fields") == JOB_QUERIES[name]


def test_d30_only_the_statements_that_return_jobs_use_the_job_fields():
    users = {name for name in QUERY_NAMES if "job_fields" in _fragments_used(name)}
    assert users == set(JOB_QUERIES)


def test_q13_ack_claims_and_claim_is_made_of_the_ack_claims_and_claim_fragments():
    # D21: the fused statement is the two statements glued, not a rewrite: its acked CTE
    # is ack_claims' DELETE, and its claim part the claim's CTEs and UPDATE (with the
    # job fields, D30's headers included), from the same fragments, so they cannot
    # drift apart. D27: its one counter upsert adds both statements' counts (a statement
    # may update the counter row only once).
    assert _fragments_used("ack_claims") == ["ack_claims_delete", "count_moves"]
    order = ["claim_order"] * 3  # the core's Q3 order, in ready, lapsed and picked
    candidates = ["claim_candidates", "claim_walks", "dead_letter", *order]
    assert _fragments_used("claim") == [
        "claim_gate", *candidates, "count_moves", "claim_update", "job_fields",
    ]  # fmt: skip
    assert _fragments_used("ack_claims_and_claim") == [
        "ack_claims_delete", "claim_gate", *candidates, "count_moves", "claim_update",
        "job_fields",
    ]  # fmt: skip
    fused, fused_main = split_ctes(_sql.queries("alkstore")["ack_claims_and_claim"])
    assert list(fused) == [
        "acked", "gate", "spent", "swept", "dead", "ready", "lapsed", "picked", "counted",
        "claimed",
    ]  # fmt: skip
    returned = split_columns(fused["claimed"].rsplit(" RETURNING ", 1)[1])
    assert returned[-6:] == [
        "nullif(j.headers, '{}'::jsonb) AS headers",
        "NULL::timestamptz AS died_at",
        "j.unique_key",
        "j.claim_token",  # Q19.8
        "j.concurrency_key",
        "j.keep_completed_s",
    ]
    # The acked rows: the id, then one NULL per returned column (never jobs.*, whose
    # shape a migration changes).
    # Q18.7: then one row of NULLs (the id's too) when the queue is limited.
    nulls = ", ".join(["NULL"] * len(returned))
    assert fused_main == (
        f"SELECT acked.id, {nulls} FROM acked UNION ALL SELECT NULL, claimed.* FROM claimed "
        f"UNION ALL SELECT NULL, {nulls} FROM gate AS g WHERE g.limited"
    )
    upsert_source = fused["counted"].split(" FROM ", 1)[1]
    assert upsert_source.startswith(
        "(SELECT count(*) AS n FROM acked) AS a "
        "CROSS JOIN (SELECT count(*) AS n FROM swept) AS d WHERE a.n + d.n > 0 "
    )


#: D27: the statements that move jobs out of the live table, and the counter each adds
#: to. Every other statement leaves queue_counters alone.
COUNTING_QUERIES = {
    "ack": {"acked"},
    "ack_batch": {"acked"},
    "ack_claims": {"acked"},
    "ack_claims_and_claim": {"acked", "dead_lettered"},
    "complete_claims": {"acked"},  # Q19.1
    "complete_claims_and_claim": {"acked", "dead_lettered"},
    "claim": {"dead_lettered"},
    "claim_limited": {"dead_lettered"},  # Q18.7
    "claim_per_key": {"dead_lettered"},  # Q18.8
    "retry": {"dead_lettered"},
    "fail": {"dead_lettered"},
    "retry_claims": {"dead_lettered"},
    "fail_claims": {"dead_lettered"},
    "sweep_expired": {"dead_lettered", "cancelled"},  # Q19.5: lapsed cancelling rows
    "cancel": {"cancelled"},
    "settle_cancelled": {"cancelled"},  # Q19.5
}
_COUNTER_UPSERT = re.compile(
    r"INSERT INTO \S+\.queue_counters AS c \(queue, shard, acked, dead_lettered, cancelled\) "
    r"SELECT %\(queue\)s::text, pg_catalog\.mod\(pg_catalog\.pg_backend_pid\(\), 64\), "
    r"(\S+), (\S+), (\S+) FROM (.*) "
    r"ON CONFLICT \(queue, shard\) DO UPDATE SET "
    r"acked = c\.acked \+ EXCLUDED\.acked, "
    r"dead_lettered = c\.dead_lettered \+ EXCLUDED\.dead_lettered, "
    r"cancelled = c\.cancelled \+ EXCLUDED\.cancelled"
)
#: The rows a counter upsert selects from: the CTE of the one row a statement moves (a
#: count of 1), or one row of counts of the rows of CTEs, present only when some moved.
_ONE_ROW = re.compile(r"(\w+)")
_COUNTS = re.compile(
    r"\(SELECT count\(\*\) AS n FROM (\w+)\) AS (\w)"
    r"(?: CROSS JOIN \(SELECT count\(\*\) AS n FROM (\w+)\) AS (\w))? WHERE (.*) > 0"
)
#: The statements that move at most one job (by id and claim token, or by id).
SINGLE_ROW_QUERIES = {"ack", "retry", "fail", "cancel"}


@pytest.mark.parametrize("name", QUERY_NAMES)
def test_d27_exactly_the_statements_that_move_jobs_out_count_them(name: str):
    # One upsert per statement (the count_moves fragment), into this session's shard of
    # its queue, adding to the counters of the moves it makes and 0 to the others;
    # counting nothing when nothing moved: a row per moved job where at most one moves,
    # else one row of counts (never a row per job: the upsert would hit its row twice).
    query = " ".join(_sql.queries("alkstore")[name].split())
    counts = [slots for fragment, slots in _sql.library().uses[name] if fragment == "count_moves"]
    if name not in COUNTING_QUERIES:
        assert counts == [], name
        assert "queue_counters" not in query or name == "stats", name
        return
    ctes, _ = split_ctes(query)
    assert query.count("queue_counters") == 1, name
    upsert = _COUNTER_UPSERT.fullmatch(ctes["counted"])
    assert upsert is not None, ctes["counted"]
    added = dict(zip(("acked", "dead_lettered", "cancelled"), upsert.groups()[:3], strict=True))
    assert {column for column, count in added.items() if count != "0"} == COUNTING_QUERIES[name]
    source = upsert[4]
    if name in SINGLE_ROW_QUERIES:
        assert _ONE_ROW.fullmatch(source) is not None, source
        assert source in ctes, source
        assert sorted(added.values()) == ["0", "0", "1"], added
        return
    counted = _COUNTS.fullmatch(source)
    assert counted is not None, source
    cte_a, alias_a, cte_b, alias_b, total = counted.groups()
    aliases = {alias_a: cte_a} if cte_b is None else {alias_a: cte_a, alias_b: cte_b}
    assert set(aliases.values()) <= set(ctes), source
    assert total == " + ".join(f"{alias}.n" for alias in aliases), source
    assert sorted(c for c in added.values() if c != "0") == sorted(f"{a}.n" for a in aliases)


def test_d22_explain_stats_reads_only_the_partial_indexes(
    loaded: Loaded, explain_conn: psycopg.Connection[Any]
):
    # D22: stats finds the queues by skip scans and counts through the claim, lease,
    # cancelling and retention indexes, never a scan of a whole table. Counting is still
    # proportional to the rows counted: an index-only scan where the visibility map
    # allows, else index entries plus the heap pages they point to (a bitmap heap scan).
    # D27: the counters are summed from the small counter table, through its primary key
    # or not.
    query = _sql.queries(loaded.schema)["stats"]
    allowed = {
        "jobs_claim_idx",
        "jobs_lease_idx",
        "dead_jobs_retention_idx",
        "queue_counters_pkey",
        "queue_controls_pkey",  # Q18: the paused flag of each queue
        "jobs_cancelling_idx",  # Q19.5: the cancelling rows (none in the usual case)
    }
    for mode in MODES:
        for variant, params in params_for("stats", loaded):
            plan = explain(explain_conn, query, params, mode)
            nodes = [node for top in plan for node in plan_nodes(top["Plan"])]
            indexes = {node["Index Name"] for node in nodes if "Index Name" in node}
            assert indexes, f"stats [{variant}, {mode}] uses no index"
            where = f"stats [{variant}, {mode} plan, {loaded.rows} rows]"
            assert indexes <= allowed, (
                f"{where} uses {sorted(indexes - allowed)}, expected only {sorted(allowed)}:"
                f"\n{json.dumps(plan, indent=1)}"
            )
            assert not seq_scans(plan, loaded.schema), f"{where} scans a table sequentially"


def test_explain_the_seq_scan_detector_sees_a_seq_scan(
    loaded: Loaded, explain_conn: psycopg.Connection[Any]
):
    # Guards the test above against a detector that can never fire.
    query = f'SELECT count(*) FROM "{loaded.schema}".jobs WHERE payload = %(payload)s::bytea'
    for mode in MODES:
        plan = explain(explain_conn, query, {"payload": b"x"}, mode)
        assert [node["Relation Name"] for node in seq_scans(plan, loaded.schema)] == ["jobs"]


#: Q19.2 (O3, E1): the statements of the claim path, and the plain acks. None of them
#: reads the history table, whatever its size (the 1M-row variant of ``loaded`` runs
#: under ``-m slow``).
CLAIM_PATH_QUERIES = [
    "claim", "claim_limited", "claim_per_key", "ack_claims_and_claim", "ack_claims", "ack",
    "heartbeat_claims", "retry_claims", "fail_claims",
]  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", CLAIM_PATH_QUERIES)
def test_q19_2_explain_the_claim_path_never_reads_completed_jobs(
    loaded: Loaded, explain_conn: psycopg.Connection[Any], name: str, mode: str
):
    query = _sql.queries(loaded.schema)[name]
    assert "completed_jobs" not in query, name
    for variant, params in params_for(name, loaded):
        plan = explain(explain_conn, query, params, mode)
        touched = {node.get("Relation Name") for top in plan for node in plan_nodes(top["Plan"])}
        assert "completed_jobs" not in touched, (name, variant, mode)
