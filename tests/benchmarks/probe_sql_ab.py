"""A/B of two versions of ``queries.sql`` on the hot statements, interleaved in one run.

Issue 7 rewrote ``queries.sql`` with fragments; the statements the server receives must
not get slower. This probe loads the statements of an older commit (``--old-ref``, read
with ``git show``) beside the working tree's, and times the same work with each:

- ``enqueue_one``: one single-payload enqueue per job;
- ``enqueue_many``: 100 payloads per statement;
- ``keyed enqueue_one``, ``keyed claim+ack``: as ``enqueue_one`` and ``claim+ack`` with
  each job under one of 100 concurrency keys (Q18.8: the rows the per-key indexes, and
  D26.1's ``jobs_key_list_idx``, have entries for);
- ``claim+ack``: ``claim(n=1)`` then ``ack`` (the handle path, one job at a time);
- ``claim+fail``: ``claim(n=1)`` then ``fail`` (a dead-letter move, counted);
- ``claim+retry``: ``claim(n=1)`` then ``retry(delay_s=0)`` below budget (the row goes
  back to pending and is claimed again);
- ``claim+ack_claims``: ``claim(n=10)`` then ``ack_claims`` of the ten;
- ``ack_claims_and_claim``: the worker's fused loop (D21), n=10;
- ``claim``: ``claim(n=10)`` alone (the rows stay processing);
- ``heartbeat_claims``: one renewal of ten claims, again and again;
- ``claim_limited+ack``: a limited queue's claim (Q18.7, ``max_running`` far above
  what runs, so it never throttles) of ten, then ``ack_claims`` of the ten; the
  statements alone, without the engine's barrier and lock (those are the same on both
  sides).

Each side runs on the schema of its own commit (``schema.sql`` at the ref), so a
migration's constraint (version 9 refuses a claim without a token) holds on each.
The claim token of a claimed row is read where its side's statements put it: the
``claim_token`` column from version 9 on (Q19.8), ``attempts`` before.

Each version has its own schema, prefilled with ready jobs, and its own sync psycopg
connection that prepares statements from their first use, as the engine's do (so the
server runs the generic or custom plans of prepared statements, as in production). The
two versions then run chunk after chunk, alternating which goes first; a case's result
is the median over chunks of (new chunk rate / old chunk rate), with the interquartile
range, so both sides of each ratio saw the same moment of a shared machine. Above 1.00
means the new text is faster. With a local server, the probe also sums the CPU time of
each side's server process over the timed chunks (from ``/proc``): the ratio old / new
of those sums is the statements' own cost, far less disturbed by other load than the
wall clock (above 1.00: the new text costs the server less).

Run: ``python tests/benchmarks/probe_sql_ab.py --old-ref 13fa9e3 [--chunks 30]
[--async-commit] [--only CASE]``. ``--new-ref REF`` takes the new side from a commit
too (``--new-ref`` equal to ``--old-ref`` is an A/A run: the noise floor).
``--async-commit`` sets ``synchronous_commit=off`` on both connections, which takes the
WAL flush out of every commit and leaves the statements' own cost. The server is
``ALKSTORE_BENCH_DSN``, else ``ALKSTORE_TEST_DSN``, else
``postgresql://postgres@127.0.0.1:5432/test``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import psycopg.conninfo

from alkstore_trio._engines._postgres import _driver, _sql

QUEUES_SQL = "alkstore_trio/_engines/_postgres/sql/queries.sql"
SCHEMA_SQL = "alkstore_trio/_engines/_postgres/sql/schema.sql"
#: Statements renamed by issue 7 (old name -> new name).
RENAMES = {"enqueue": "enqueue_many", "bury": "fail"}
QUEUE = "ab"
PAYLOAD = b'{"to": "ada@example.com", "template": "welcome"}'
COLUMNS = (
    "queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at, "
    "visibility_timeout_s, backoff_base_s"
)


def dsn(async_commit: bool) -> str:
    base = (
        os.environ.get("ALKSTORE_BENCH_DSN")
        or os.environ.get("ALKSTORE_TEST_DSN")
        or "postgresql://postgres@127.0.0.1:5432/test"
    )
    if not async_commit:
        return base
    params = psycopg.conninfo.conninfo_to_dict(base)
    params["options"] = (str(params.get("options", "")) + " -c synchronous_commit=off").strip()
    return psycopg.conninfo.make_conninfo("", **params)


def at_ref(ref: str, path: str) -> str:
    """The text of ``path`` at commit ``ref``."""
    root = Path(__file__).parents[2]
    return subprocess.run(
        ["git", "show", f"{ref}:{path}"], cwd=root, check=True, capture_output=True
    ).stdout.decode()


def old_statements(ref: str, schema: str) -> dict[str, str]:
    """The statements of ``queries.sql`` at ``ref``, under today's names, for ``schema``."""
    text = at_ref(ref, QUEUES_SQL)
    library = _sql._parse_library(text)  # a file without fragments loads as it did
    return {
        RENAMES.get(name, name): _sql.render(body, schema)
        for name, body in library.statements.items()
    }


class Side:
    """One version of the statements, on its own schema and connection."""

    def __init__(self, stack: ExitStack, label: str, conninfo: str, ref: str | None) -> None:
        self.label = label
        self.schema = f"alk_ab_{label}_{secrets.token_hex(4)}"
        self.q = old_statements(ref, self.schema) if ref else _sql.queries(self.schema)
        self.channel = _sql.wake_channel(self.schema, QUEUE)
        self.done_channel = _sql.done_channel(self.schema, QUEUE)  # Q19.4 (ignored before)
        admin = psycopg.connect(conninfo, autocommit=True)
        stack.callback(admin.close)
        schema_sql = _sql.render(at_ref(ref, SCHEMA_SQL), self.schema) if ref else None
        admin.execute((schema_sql or _sql.schema_sql(self.schema)).encode())
        #: Where a claimed row's token is: Q19.8's claim_token, else attempts.
        self.token_at = 19 if "claim_token" in self.q["claim"] else 5
        stack.callback(admin.execute, f"DROP SCHEMA {_sql.quote_ident(self.schema)} CASCADE")
        self.admin = admin
        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.conn.prepare_threshold = _driver.PREPARE_THRESHOLD
        stack.callback(self.conn.close)
        self.cur = self.conn.cursor()
        (self.backend_pid,) = self.conn.execute("SELECT pg_catalog.pg_backend_pid()").fetchone()
        self.server_cpu_s = 0.0

    def backend_cpu_s(self) -> float:
        """The CPU time of this side's server process so far (a local server only: read
        from ``/proc``; 0 when it cannot be read)."""
        try:
            fields = Path(f"/proc/{self.backend_pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def prefill(self, n: int, keyed: bool = False) -> None:
        """``n`` ready rows; ``keyed``: each with one of 100 concurrency keys (Q18.8)."""
        run_at = datetime.now(UTC) - timedelta(seconds=5)
        row = (QUEUE, PAYLOAD, 0, "pending", 0, 1_000_000, run_at, run_at, 3600.0, 5.0)
        table = f"{_sql.quote_ident(self.schema)}.jobs"
        columns = f"{COLUMNS}, concurrency_key" if keyed else COLUMNS
        with self.admin.cursor() as cur, cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for i in range(n):
                copy.write_row((*row, f"tenant-{i % 100}") if keyed else row)
        self.admin.execute(f"ANALYZE {table}")

    def run(self, name: str, params: Mapping[str, object]) -> list[tuple[Any, ...]]:
        self.cur.execute(self.q[name], params)
        return self.cur.fetchall()

    # -- the operations ----------------------------------------------------------------

    def enqueue_params(self) -> dict[str, object]:
        return {
            "queue": QUEUE,
            "priority": 0,
            "delay_s": None,
            "run_at": None,
            "max_attempts": 3,
            "visibility_timeout_s": 3600.0,
            "backoff_base_s": 5.0,
            "expires_in_s": None,
            "keep_completed_s": None,  # Q19.2: not kept (the old text ignores it)
            "headers": "{}",
            "channel": self.channel,
            "concurrency_key": None,  # Q18.8 (version 8): none
            "concurrency_keys": None,
        }

    def claim(self, n: int) -> list[tuple[Any, ...]]:
        params = {"queue": QUEUE, "worker_id": "ab", "n": n, "token_base": token_base()}
        return self.run("claim", params)

    def handle(self, row: tuple[Any, ...]) -> dict[str, object]:
        return {
            "id": row[0],
            "queue": QUEUE,
            "token": row[self.token_at],
            "done_channel": self.done_channel,
        }

    def claims(self, rows: list[tuple[Any, ...]]) -> dict[str, object]:
        """The (ids, tokens) arrays of the batch statements over ``rows``."""
        return {
            "queue": QUEUE,
            "ids": _int_array([r[0] for r in rows]),
            "tokens": _int_array([r[self.token_at] for r in rows]),
        }


def token_base() -> int:
    """Q19.8: the claim's 62 random bits, drawn per statement as the engine does (a
    statement of an older commit ignores the parameter)."""
    return secrets.randbits(62)


def _int_array(values: list[int]) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def op_enqueue_one(side: Side, jobs: int) -> None:
    params = {**side.enqueue_params(), "payload": PAYLOAD}
    for _ in range(jobs):
        side.run("enqueue_one", params)


def op_enqueue_one_keyed(side: Side, jobs: int) -> None:
    """Q18.8: as enqueue_one, each job with one of 100 concurrency keys."""
    for i in range(jobs):
        side.run(
            "enqueue_one",
            {**side.enqueue_params(), "payload": PAYLOAD, "concurrency_key": f"tenant-{i % 100}"},
        )


def op_enqueue_many(side: Side, jobs: int) -> None:
    params = {**side.enqueue_params(), "payloads": [PAYLOAD] * 100}
    for _ in range(jobs // 100):
        side.run("enqueue_many", params)


def op_claim_ack(side: Side, jobs: int) -> None:
    for _ in range(jobs):
        (row,) = side.claim(1)
        assert side.run("ack", side.handle(row))


def op_claim_fail(side: Side, jobs: int) -> None:
    for _ in range(jobs):
        (row,) = side.claim(1)
        assert side.run("fail", {**side.handle(row), "error": "failed"})


def op_claim_retry(side: Side, jobs: int) -> None:
    for _ in range(jobs):
        (row,) = side.claim(1)
        assert side.run("retry", {**side.handle(row), "error": "boom", "delay_s": 0.0})


def op_claim_ack_claims(side: Side, jobs: int) -> None:
    for _ in range(jobs // 10):
        rows = side.claim(10)
        assert len(side.run("ack_claims", side.claims(rows))) == 10


def op_fused(side: Side, jobs: int) -> None:
    rows = side.claim(10)
    for _ in range(jobs // 10 - 1):
        params = {
            **side.claims(rows),
            "worker_id": "ab",
            "n": 10,
            "token_base": token_base(),
        }
        result = side.run("ack_claims_and_claim", params)
        rows = [r[1:] for r in result if r[0] is None]
    side.run("ack_claims", side.claims(rows))


def op_claim_limited_ack(side: Side, jobs: int) -> None:
    if "claim_limited" not in side.q:
        raise SystemExit(f"{side.label}: this commit has no claim_limited statement")
    side.admin.execute(
        f"INSERT INTO {_sql.quote_ident(side.schema)}.queue_controls "
        "(queue, updated_at, max_running) VALUES (%s, now(), 1000000) ON CONFLICT DO NOTHING",
        [QUEUE],
    )
    params = {"queue": QUEUE, "worker_id": "ab", "n": 10, "channel": side.channel}
    for _ in range(jobs // 10):
        rows = side.run("claim_limited", {**params, "token_base": token_base()})
        assert len(side.run("ack_claims", side.claims(rows))) == 10


def op_claim(side: Side, jobs: int) -> None:
    for _ in range(jobs // 10):
        assert len(side.claim(10)) == 10


_HELD: dict[str, list[tuple[Any, ...]]] = {}


def op_heartbeat_claims(side: Side, jobs: int) -> None:
    rows = _HELD.get(side.schema)
    if rows is None:
        rows = _HELD[side.schema] = side.claim(10)
    params = {**side.claims(rows), "extend_s": None}
    for _ in range(jobs // 10):
        assert len(side.run("heartbeat_claims", params)) == 10


#: case -> (operation, jobs per chunk, whether the jobs it works on must be prefilled)
#: Each case: its operation, the jobs a chunk takes, and whether to prefill ready rows
#: (``"keyed"``: rows with concurrency keys).
CASES: dict[str, tuple[Callable[[Side, int], None], int, bool | str]] = {
    "enqueue_one": (op_enqueue_one, 200, False),
    "keyed enqueue_one": (op_enqueue_one_keyed, 200, False),  # D26.1's index pays here
    "keyed claim+ack": (op_claim_ack, 200, "keyed"),
    "enqueue_many": (op_enqueue_many, 2000, False),
    "claim+ack": (op_claim_ack, 200, True),
    "claim+fail": (op_claim_fail, 200, True),
    "claim+retry": (op_claim_retry, 200, True),
    "claim+ack_claims": (op_claim_ack_claims, 500, True),
    "ack_claims_and_claim": (op_fused, 500, True),
    "claim": (op_claim, 500, True),
    "heartbeat_claims": (op_heartbeat_claims, 500, True),
    "claim_limited+ack": (op_claim_limited_ack, 500, True),
}


@contextmanager
def sides(old_ref: str, new_ref: str | None, conninfo: str) -> Iterator[tuple[Side, Side]]:
    with ExitStack() as stack:
        yield Side(stack, "old", conninfo, old_ref), Side(stack, "new", conninfo, new_ref)


def measure(
    case: str, old_ref: str, new_ref: str | None, conninfo: str, chunks: int
) -> tuple[list[float], float]:
    """The per-chunk ratios (new rate / old rate) and the ratio of the server CPU time
    the two sides' backends spent over every chunk (old / new: above 1, new is cheaper;
    NaN when the server's processes cannot be read)."""
    op, jobs, prefill = CASES[case]
    ratios: list[float] = []
    with sides(old_ref, new_ref, conninfo) as (old, new):
        for side in (old, new):
            if prefill:
                side.prefill(jobs * (chunks + 2), keyed=prefill == "keyed")
            op(side, jobs)  # warm up: every statement prepared before the clock starts
        for chunk in range(chunks):
            seconds: dict[str, float] = {}
            order = (old, new) if chunk % 2 == 0 else (new, old)
            for side in order:
                cpu = side.backend_cpu_s()
                start = time.perf_counter()
                op(side, jobs)
                seconds[side.label] = time.perf_counter() - start
                side.server_cpu_s += side.backend_cpu_s() - cpu
            ratios.append(seconds["old"] / seconds["new"])  # new rate / old rate
        cpu_ratio = old.server_cpu_s / new.server_cpu_s if new.server_cpu_s else float("nan")
    return ratios, cpu_ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-ref", required=True, help="git commit of the old queries.sql")
    parser.add_argument(
        "--new-ref", default=None, help="git commit of the new queries.sql (default: this tree)"
    )
    parser.add_argument("--chunks", type=int, default=30, help="chunks per case and side")
    parser.add_argument("--only", default="", help="only cases whose name contains this")
    parser.add_argument("--async-commit", action="store_true", help="synchronous_commit=off")
    args = parser.parse_args()
    conninfo = dsn(args.async_commit)
    commit = "synchronous_commit=off" if args.async_commit else "synchronous commit"
    new = args.new_ref or "working tree"
    print(f"old = {args.old_ref}, new = {new}; {args.chunks} chunks per side; {commit}")
    print(f"{'case':22} {'new/old rate':>12} {'IQR':>13} {'old/new server CPU':>18}")
    for case in CASES:
        if args.only not in case:
            continue
        ratios, cpu_ratio = measure(case, args.old_ref, args.new_ref, conninfo, args.chunks)
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        median = statistics.median(ratios)
        print(f"{case:22} {median:12.3f} {q1:6.3f}-{q3:6.3f} {cpu_ratio:18.3f}")


if __name__ == "__main__":
    main()
