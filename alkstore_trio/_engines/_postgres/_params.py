"""The parameters of the PostgreSQL engine's statements, built from the engine's
arguments: arrays of claims as bound text literals, results as a binary array, headers
as JSON text, and enqueues grouped by the options one statement can share."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..._core import EnqueueSpec, Headers
    from .._protocol import Claim, Completion, FailItem, RetryItem


def _claim_params(
    queue: str, claims: Sequence[Claim] | Sequence[RetryItem] | Sequence[FailItem]
) -> dict[str, object]:
    """The parameters of the batch statements over (job id, claim token) pairs: two
    parallel arrays, unnest'ed together in SQL. The facade never sends an empty batch."""
    return {
        "queue": queue,
        "ids": _int_array([claim.job_id for claim in claims]),
        "tokens": _int_array([claim.token for claim in claims]),
    }


def _completion_params(queue: str, items: Sequence[Completion]) -> dict[str, object]:
    """Q19.1: :func:`_claim_params` with the results, one per distinct claim (the first
    of a claim listed twice: the statement's join would otherwise meet it twice)."""
    distinct: dict[tuple[int, int], bytes | None] = {}
    for item in items:
        distinct.setdefault((item.job_id, item.token), item.result)
    return {
        "queue": queue,
        "ids": _int_array([job_id for job_id, _ in distinct]),
        "tokens": _int_array([token for _, token in distinct]),
        "results": list(distinct.values()),
    }


def _int_array(values: Sequence[int]) -> str:
    """A PostgreSQL array literal of ints (``{1,2,3}``), bound as a text parameter that
    the statement casts (``::bigint[]``). psycopg's list dumper costs ~2 µs more per
    element than this on the worker's hot path (a bound parameter all the same: never
    query text). ``int.__repr__`` writes the digits of any int, subclasses included."""
    return "{" + ",".join(map(int.__repr__, values)) + "}"


def _applied(count: int, rows: Sequence[tuple[Any, ...]]) -> list[bool]:
    """One bool per item of a batch statement that returns the ordinals (1-based
    positions) of the items it applied."""
    applied = {row[0] for row in rows}
    return [ordinal in applied for ordinal in range(1, count + 1)]


def _headers_json(headers: Headers) -> str:
    """A job's headers as the JSON text the enqueue statements cast to ``jsonb``.

    A str parameter (sent untyped, cast by the statement) rather than psycopg's ``Jsonb``
    wrapper: the same JSON for the same cost, and the constant ``'{}'`` for the usual job
    without headers. ASCII-only JSON (``\\u`` escapes), whatever the connection's
    encoding; the server stores the characters.
    """
    if not headers:
        return "{}"
    return json.dumps(dict(headers.items()))


def _groups(specs: Sequence[EnqueueSpec]) -> list[list[EnqueueSpec]]:
    """Split specs into runs that share everything but the payload (one statement each).

    ``enqueue_many`` is always one run, so it is one statement.
    """
    groups: list[list[EnqueueSpec]] = []
    for spec in specs:
        if groups and _same_options(groups[-1][0], spec):
            groups[-1].append(spec)
        else:
            groups.append([spec])
    return groups


def _same_options(a: EnqueueSpec, b: EnqueueSpec) -> bool:
    return (
        a.queue == b.queue
        and a.priority == b.priority
        and a.delay_s == b.delay_s
        and a.run_at == b.run_at
        and a.max_attempts == b.max_attempts
        and a.visibility_timeout_s == b.visibility_timeout_s
        and a.backoff_base_s == b.backoff_base_s
        and a.expires_in_s == b.expires_in_s
        and a.headers == b.headers
        and a.keep_completed_s == b.keep_completed_s
    )
