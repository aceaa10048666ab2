"""``sql/queries.sql`` as the loader reads it: statements, fragments, and the SQL sent.

- Every statement, with its fragments expanded, is plain SQL: no reference is left, and
  the server prepares it (``PREPARE``, with ``$n`` for the bound parameters).
- What several statements share is written once (issue 7): one dead-letter insert, one
  counter upsert, one list of the job fields, one claim, each a fragment the statements
  include, and no statement carries a copy of its own.
- The loader refuses a file it cannot expand exactly: an unknown fragment or slot, a
  missing slot, a cycle, a fragment no statement uses.
- Statements are named after the contract's operations.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql

from alkstore_trio._engines._postgres import _sql

LIBRARY = _sql.library()
STATEMENTS = sorted(LIBRARY.statements)
_NAMED_PARAM = re.compile(r"%\((\w+)\)[sb]")


def _positional(query: str) -> str:
    """``%(name)s`` / ``%(name)b`` as ``$n``, one number per name (as PREPARE wants)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    return _NAMED_PARAM.sub(number, query)


@pytest.fixture(scope="module")
def prepared_schema(pg_dsn: str) -> Iterator[tuple[psycopg.Connection[Any], str]]:
    schema = "alk_queries_" + secrets.token_hex(4)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        quoted = pgsql.Identifier(schema)
        conn.execute(pgsql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(quoted))
        conn.execute(_sql.schema_sql(schema).encode())
        try:
            yield conn, schema
        finally:
            conn.execute(pgsql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(quoted))


@pytest.mark.parametrize("name", STATEMENTS)
def test_queries_every_expanded_statement_prepares_on_the_server(
    prepared_schema: tuple[psycopg.Connection[Any], str], name: str
):
    conn, schema = prepared_schema
    query = _sql.queries(schema)[name]
    conn.execute(f"PREPARE alk_check AS {_positional(query)}")
    conn.execute("DEALLOCATE alk_check")


@pytest.mark.parametrize("name", STATEMENTS)
def test_queries_no_statement_keeps_a_reference_or_a_comment(name: str):
    text = LIBRARY.statements[name]
    assert re.search(r"\{\w", text) is None, text  # '{}'::jsonb is SQL, {name} is not
    assert "--" not in text
    assert not text.rstrip().endswith(";")


#: The fragments, and the statements that include each (directly or through another).
#: D26.1: the filtered listings, by key and by header, of the live, dead and kept rows.
FILTERED = {
    f"list_{table}_by_{what}"
    for table in ("live", "dead", "completed")
    for what in ("key", "header")
}
FRAGMENT_USERS = {
    "filtered_page": FILTERED,  # D26.1
    # D25, D29, D25.1: the age bound of the purges of dead rows and their dry runs.
    "died_before_bound": {"purge_dead", "count_dead", "purge_dead_ids", "count_dead_ids"},
    "key_arm": {name for name in FILTERED if name.endswith("_by_key")},
    "dead_letter": {
        "claim", "ack_claims_and_claim", "claim_limited", "claim_per_key", "retry", "fail",
        "retry_claims",
        "fail_claims", "sweep_expired",
        "complete_claims_and_claim",  # Q19.1: its claim's pre-claim sweep
    },
    "count_moves": {
        "ack", "ack_batch", "ack_claims", "ack_claims_and_claim", "claim", "claim_limited",
        "claim_per_key", "retry", "fail",
        "retry_claims", "fail_claims", "sweep_expired", "cancel", "settle_cancelled",
        "complete_claims", "complete_claims_and_claim",  # Q19.1
    },
    "job_fields": {
        "claim", "ack_claims_and_claim", "claim_limited", "claim_per_key", "get_job",
        "find_job", "list_live", "list_dead",
        "complete_claims_and_claim", "list_completed",  # Q19.1, Q19.2
        *FILTERED,  # D26.1
    },
    "inline_payload": {"get_job", "find_job"},  # Q8: a large payload read apart
    "inline_result": {"get_job", "find_job"},  # Q19.1: a large result read apart
    "read_tail": {"get_job", "find_job"},  # Q8/Q19.2: what a read of one job adds
    # Q19.2: the moving ack (the kept rows' insert, and the delete it feeds).
    "keep_rows": {
        "ack_batch", "complete_claims", "complete_claims_and_claim",
        "cancel", "settle_cancelled", "sweep_expired",  # Q19.5, through finalize_cancelled
    },
    "complete_delete": {"complete_claims", "complete_claims_and_claim"},
    "claim_gate": {"claim", "ack_claims_and_claim", "complete_claims_and_claim"},  # Q18
    "claim_candidates": {
        "claim", "ack_claims_and_claim", "claim_limited", "complete_claims_and_claim",
    },
    "claim_walks": {
        "claim", "ack_claims_and_claim", "claim_limited", "claim_per_key",
        "complete_claims_and_claim",
    },
    "claim_update": {
        "claim", "ack_claims_and_claim", "claim_limited", "claim_per_key",
        "complete_claims_and_claim",
    },
    "limit_state": {"claim_limited", "claim_per_key", "next_due"},  # Q18.7-Q18.9
    "limit_allowance": {"claim_limited", "claim_per_key"},  # Q18.7-Q18.9
    "key_loose_scan": {"claim_per_key", "next_due"},  # Q18.8
    "ack_claims_delete": {"ack_claims", "ack_claims_and_claim"},
    "new_jobs": {"enqueue_many", "enqueue_one", "enqueue_unique"},
    "redrive": {"requeue_dead", "requeue_dead_all"},
    # Q19.5: the one place a job becomes cancelled.
    "finalize_cancelled": {"cancel", "settle_cancelled", "sweep_expired"},
    # the core's, not queries.sql's:
    "claim_order": {
        "claim", "ack_claims_and_claim", "claim_limited", "claim_per_key", "next_due",
        "complete_claims_and_claim",
    },
    "wake_due": {"enqueue_many", "enqueue_one"},  # R11
    # Q19.4: the statements that finalize announce it (not the sweeps, not unkept acks).
    "notify_done": {
        "retry", "fail", "ack_batch", "complete_claims", "complete_claims_and_claim",
        "retry_claims", "fail_claims", "cancel", "settle_cancelled",
    },
}  # fmt: skip


def test_queries_each_shared_piece_is_one_fragment_that_its_statements_include():
    assert set(LIBRARY.fragments) == set(FRAGMENT_USERS)
    for fragment, users in FRAGMENT_USERS.items():
        found = {name for name, uses in LIBRARY.uses.items() if fragment in dict(uses)}
        assert found == users, fragment


#: What the issue found copied (7 dead-letter inserts, 11 counter upserts, 22 column
#: lists), as a line of each that only that piece has.
SHARED_LINES = {
    "the dead-letter insert": "INSERT INTO @schema@.dead_jobs (",
    "the counter upsert": "INSERT INTO @schema@.queue_counters",
    "the job fields": "j.claimed_by, j.claimed_at, j.claim_expires_at, j.last_error,",
    # The sweep and the two walks of every claim (Q18.8's per-key probes, by the per-key
    # indexes, are claim_per_key's own).
    "the claim walk": "AND (SELECT g.open FROM gate AS g) AND {only}",
    "the new-job insert": "visibility_timeout_s, backoff_base_s, expires_at, headers",
    "the redrive insert": "OVERRIDING SYSTEM VALUE",
}


@pytest.mark.parametrize("piece", sorted(SHARED_LINES))
def test_queries_the_file_writes_each_shared_piece_once(piece: str):
    # The file as written (not expanded): the piece is in its fragment and nowhere else
    # (the claim walk has two SKIP LOCKED walks and the pre-claim sweep, in one fragment).
    text = _sql._read("queries.sql")
    line = SHARED_LINES[piece]
    blocks = re.split(r"^-- (?:name|fragment): ", text, flags=re.MULTILINE)[1:]
    holders = [block.split(None, 1)[0].split("(")[0] for block in blocks if line in block]
    assert len(holders) == 1, (piece, holders)
    assert holders[0] in LIBRARY.fragments


def test_queries_the_job_fields_are_the_fields_the_backend_reads_in_its_order():
    # _backend._job reads rows by position: id .. last_error, headers, died_at, unique_key,
    # claim_token (Q19.8), concurrency_key.
    body = " ".join(LIBRARY.fragments["job_fields"].body.split())
    assert body == (
        "j.id, j.queue, {payload}, j.priority, {state} AS state, j.attempts, j.max_attempts, "
        "j.run_at, j.enqueued_at, j.visibility_timeout_s, j.backoff_base_s, j.expires_at, "
        "j.claimed_by, j.claimed_at, j.claim_expires_at, j.last_error, "
        "nullif(j.headers, '{}'::jsonb) AS headers, {died_at} AS died_at, j.unique_key, "
        "j.claim_token, j.concurrency_key, j.keep_completed_s"
    )


#: The operations of the contract and of the backend protocol, which statements are
#: named after (D22-D29 for the operator's statements).
CONTRACT_WORDS = {
    "enqueue_many", "enqueue_one", "claim", "heartbeat", "ack", "retry", "fail",
    "ack_batch", "heartbeat_claims", "ack_claims", "ack_claims_and_claim", "retry_claims",
    "fail_claims", "cancel", "get_job", "sweep_expired", "schema_version", "find_job",
    "list_live", "list_dead", "stats", "requeue_dead", "requeue_dead_all", "purge_dead",
    "count_dead", "purge_dead_ids", "count_dead_ids",  # D25.1
    "lock_unique_keys", "enqueue_unique",  # Q15
    "reschedule", "next_due",  # Q16
    "sync_periodic", "advance_periodic", "list_periodic",  # Q17
}  # fmt: skip
CONTRACT_WORDS |= {"set_paused"}  # Q18: queue controls.
CONTRACT_WORDS |= {"delete_periodic"}  # Q17.10
CONTRACT_WORDS |= {"beat_worker", "stop_worker", "list_workers"}  # Q21
CONTRACT_WORDS |= {"payload_slice"}  # Q8: a large payload, read in slices
CONTRACT_WORDS |= {"set_limits", "lock_limits", "claim_limited", "wake"}  # Q18.7-
CONTRACT_WORDS |= {"claim_per_key"}  # Q18.8
# Q19.1-Q19.3: the moving acks (with results), the history's listing, a large result's
# slices, the purge.
CONTRACT_WORDS |= {
    "complete_claims", "complete_claims_and_claim", "list_completed", "result_slice",
    "purge_completed",
}  # fmt: skip
CONTRACT_WORDS |= {"release_claims"}  # Q19.8
CONTRACT_WORDS |= {"settle_cancelled", "cancelling_among"}  # Q19.5
CONTRACT_WORDS |= {"heartbeat_claims_progress"}  # Q19.7
CONTRACT_WORDS |= FILTERED  # D26.1


def test_queries_statements_are_named_after_the_contract():
    assert set(STATEMENTS) == CONTRACT_WORDS
    assert not {"bury", "enqueue"} & set(STATEMENTS)  # issue 7's renames


# -- the loader refuses what it cannot expand ---------------------------------------------


def _parse(text: str) -> _sql.Library:
    return _sql._parse_library(text)


def test_queries_loader_expands_slots_defaults_and_nested_fragments():
    library = _parse(
        "-- fragment: outer(x, y = 2)\n-- a comment\n{inner(z = {x})} + {y}\n"
        "-- fragment: inner(z)\n({z})\n"
        "-- name: s\nSELECT\n    {outer(x = a.b)};\n"
    )
    assert library.statements == {"s": "SELECT\n    (a.b) + 2"}
    assert [name for name, _ in library.uses["s"]] == ["outer", "inner"]
    assert library.uses["s"][0][1] == {"x": "a.b", "y": "2"}


def test_queries_loader_keeps_the_indentation_of_a_reference():
    library = _parse(
        "-- fragment: f\nSELECT 1\nUNION ALL SELECT 2\n"
        "-- name: s\nWITH a AS (\n    {f}\n)\nSELECT * FROM a\n"
    )
    assert library.statements["s"] == (
        "WITH a AS (\n    SELECT 1\n    UNION ALL SELECT 2\n)\nSELECT * FROM a"
    )


def test_queries_loader_splits_slot_values_at_top_level_commas_only():
    library = _parse(
        "-- fragment: f(a, b)\n{a} | {b}\n"
        "-- name: s\nSELECT {f(a = coalesce(x, 'y, z'), b = '(,')}\n"
    )
    assert library.statements["s"] == "SELECT coalesce(x, 'y, z') | '(,'"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- name: s\nSELECT {nope}\n", "no fragment or slot 'nope'"),
        ("-- fragment: f(a)\n{a}\n-- name: s\nSELECT {f}\n", "needs ['a']"),
        ("-- fragment: f(a)\n{a}\n-- name: s\nSELECT {f(b = 1)}\n", "takes slots"),
        ("-- fragment: f(a)\n{a}\n-- name: s\nSELECT {f(a = 1, a = 2)}\n", "takes slots"),
        ("-- fragment: f\n1\n-- name: s\nSELECT 1\n", "fragments no statement uses: ['f']"),
        ("-- fragment: f\n{g}\n-- fragment: g\n{f}\n-- name: s\nSELECT {f}\n", "cycle"),
        ("-- name: s\nSELECT 1\n-- name: s\nSELECT 2\n", "two blocks are named 's'"),
        (
            "-- fragment: f(g)\n{g}\n-- fragment: g\n1\n-- name: s\nSELECT {f(g = {g})}\n",
            "slots named like fragments",
        ),
        ("-- name: s(a)\nSELECT 1\n", "cannot take slots"),
    ],
)  # fmt: skip
def test_queries_loader_refuses_what_it_cannot_expand_exactly(text: str, message: str):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        _parse(text)


def test_q3_the_claim_statements_order_by_the_cores_claim_order():
    # Q3's order is stated once, in the core (CLAIM_ORDER); the SQL renders it.
    from alkstore_trio._core import CLAIM_ORDER

    wanted = ", ".join(f"{field} {direction}" for field, direction in CLAIM_ORDER)
    assert wanted == "priority DESC, run_at ASC, id ASC"
    for name in ("claim", "ack_claims_and_claim"):
        orders = re.findall(r"ORDER BY (\w+)\.priority ([^\n]*)", LIBRARY.statements[name])
        assert len(orders) == 3, name
        for alias, rest in orders:
            assert f"{alias}.priority {rest}" == ", ".join(
                f"{alias}.{field} {direction}" for field, direction in CLAIM_ORDER
            )
