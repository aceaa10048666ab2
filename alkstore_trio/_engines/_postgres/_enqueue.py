"""Q2/Q15 on PostgreSQL, sans I/O: the statements that enqueue jobs in one transaction.

Two kinds of callers run these statements: the engine, on its trio driver (a store's
``tx.enqueue``, and ``Queue.enqueue`` with unique keys), and the producer
(:mod:`._producer`), on the caller's own psycopg connection, sync or asyncio. So that the
two can never drift, the decisions are made here once, as a generator of *steps*: it
yields ``(query, params)``, is sent back the rows, and returns the ids
(:func:`enqueue_steps`). Each caller only runs the steps on its connection: the engine
with :func:`run_on` (its driver), the producer with psycopg's own cursors. The same
statements from ``queries.sql`` run in the same order with the same parameters, whoever
sends them (psycopg drives its own protocol with generators the same way).

The keyless path is one statement per run of jobs that share their options
(``enqueue_one`` for one job, ``enqueue_many`` for more); the keyed path is in
:mod:`._unique`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from ..._core import Enqueued
from . import _unique

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Mapping, Sequence

    from ..._core import EnqueueSpec, Headers
    from . import _driver

T = TypeVar("T")

Rows: TypeAlias = "list[tuple[Any, ...]]"
#: One statement to run: the query text and its parameters.
Step: TypeAlias = "tuple[str, dict[str, object]]"
#: Statements to run one after the other on one connection, each sent the rows of the
#: one before; returns what the statements decided.
Steps: TypeAlias = "Generator[Step, Rows, T]"


def enqueue_steps(
    queries: Mapping[str, str], channel: Callable[[str], str], schema: str,
    specs: Sequence[EnqueueSpec],
) -> Steps[list[Enqueued]]:  # fmt: skip
    """Q2/Q15: enqueue ``specs`` in the transaction open on the connection that runs the
    steps (keyed specs need one: their advisory locks last until its end). ``channel``
    names a queue's wake channel; the NOTIFYs are delivered at the commit."""
    if _unique.has_keys(specs):
        return (yield from _unique.keyed_steps(queries, channel, schema, specs))
    ids: list[Enqueued] = []
    for group in groups(specs):
        rows = yield statement(queries, channel, group)
        ids.extend([Enqueued(row[0]) for row in rows])
    return ids


async def run_on(conn: _driver.Connection, steps: Steps[T]) -> T:
    """Run ``steps`` on one of the engine's own (trio driver) connections."""
    try:
        step = next(steps)
        while True:
            rows = await conn.execute(*step)
            step = steps.send(rows)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def statement(
    queries: Mapping[str, str], channel: Callable[[str], str], group: Sequence[EnqueueSpec]
) -> Step:
    """The enqueue statement for one group of specs that share their options, and its
    parameters (``enqueue_one`` for a single payload: the same effect without the
    unnest)."""
    first = group[0]
    params: dict[str, object] = {
        "queue": first.queue,
        "priority": first.priority,
        "delay_s": first.delay_s,
        "run_at": first.run_at,
        "max_attempts": first.max_attempts,
        "visibility_timeout_s": first.visibility_timeout_s,
        "backoff_base_s": first.backoff_base_s,
        "expires_in_s": first.expires_in_s,
        "keep_completed_s": first.keep_completed_s,  # Q19.2
        "headers": headers_json(first.headers),
        "channel": channel(first.queue),
    }
    if len(group) == 1:
        params["payload"] = first.payload
        params["concurrency_key"] = first.concurrency_key  # Q18.8
        return queries["enqueue_one"], params
    params["payloads"] = [spec.payload for spec in group]
    keys = [spec.concurrency_key for spec in group]
    params["concurrency_keys"] = keys if any(key is not None for key in keys) else None
    return queries["enqueue_many"], params


def headers_json(headers: Headers) -> str:
    """A job's headers as the JSON text the enqueue statements cast to ``jsonb``.

    A str parameter (sent untyped, cast by the statement) rather than psycopg's ``Jsonb``
    wrapper: the same JSON for the same cost, and the constant ``'{}'`` for the usual job
    without headers. ASCII-only JSON (``\\u`` escapes), whatever the connection's
    encoding; the server stores the characters.
    """
    if not headers:
        return "{}"
    return json.dumps(dict(headers.items()))


def groups(specs: Sequence[EnqueueSpec]) -> list[list[EnqueueSpec]]:
    """Split specs into runs that share everything but the payload (one statement each).

    ``enqueue_many`` is always one run, so it is one statement.
    """
    runs: list[list[EnqueueSpec]] = []
    for spec in specs:
        if runs and same_options(runs[-1][0], spec):
            runs[-1].append(spec)
        else:
            runs.append([spec])
    return runs


def same_options(a: EnqueueSpec, b: EnqueueSpec) -> bool:
    """Whether two specs differ in their payload (and concurrency key) only."""
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
