"""The parameters of the PostgreSQL engine's claim statements, built from the engine's
arguments: arrays of claims as bound text literals, results as a binary array, and the
claim statements' token base (the enqueues' parameters are :mod:`._enqueue`'s)."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

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


def _token_base() -> int:
    """Q19.8: 62 random bits for one claim statement, from the client's entropy (it
    survives a server crash and needs no server randomness); the statement XORs each
    row's id into it, so the tokens of one statement differ. 62 bits: the XOR with an id
    (< 2**63) stays a non-negative bigint."""
    return secrets.randbits(62)


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
