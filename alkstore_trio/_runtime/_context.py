"""The running job's context (R16): :func:`current_job`, progress and transactional
completion.

A job actor sets a context variable around its handler's call, so code the handler calls
(however deep, and in the tasks it starts) finds its job without passing it along. Why a
context variable and not an argument: the handler's signature stays ``handler(job)``
(typed tasks take their own arguments and never see the job), and trio copies the
context into child tasks and into ``trio.to_thread.run_sync`` threads.

What a thread may use: ``current_job().job`` and ``set_progress`` (a plain assignment,
sent by the worker's next heartbeat). ``transaction()`` is async and needs the trio
thread: a sync handler that wants one calls an async function with
``trio.from_thread.run``.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, final

from .._core import _validate as v
from .._errors import ClaimLost, HandleConsumed, InvalidArgument
from ._book import ClaimState

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence

    from .._core import Enqueued, Job
    from .._store import Queue, Transaction
    from ._book import Claim
    from ._jobs import JobActors

    SqlParams = Sequence[object] | Mapping[str, object]

#: The running claim and its worker's job actors (set by the job actor for the handler).
_CURRENT: ContextVar[tuple[Claim, JobActors]] = ContextVar("alkstore_trio.current_job")


def current_job() -> JobContext:
    """The context of the job whose handler is running (R16): its :class:`~alkstore_trio.Job`,
    :meth:`JobContext.set_progress` and :meth:`JobContext.transaction`.

    Available in a handler run by a :class:`~alkstore_trio.Worker` (async handlers,
    typed tasks, the tasks they start and sync handlers' threads).

    Raises:
        RuntimeError: called outside a handler.
    """
    try:
        claim, actors = _CURRENT.get()
    except LookupError:
        raise RuntimeError(
            "current_job() is only available inside a handler run by a Worker"
        ) from None
    return JobContext(claim, actors)


@final
class JobContext:
    """The running job's context, from :func:`current_job`."""

    __slots__ = ("_actors", "_claim")

    def __init__(self, claim: Claim, actors: JobActors) -> None:
        self._claim = claim
        self._actors = actors

    @property
    def job(self) -> Job:
        """The job as claimed (as the handler's argument)."""
        return self._claim.handle.job

    def set_progress(self, text: str) -> None:
        """Q19.7: report the job's progress: ``text`` (at most 1,024 characters, no NUL or
        lone surrogate) becomes ``Job.progress`` with the worker's next heartbeat of the
        claim (no round trip of its own: it shows within one heartbeat interval). A
        later call before that heartbeat replaces it; the last report before the handler
        ends may never be sent.

        Raises:
            InvalidArgument: ``text`` is not such a str (nothing was kept).
        """
        if text is None:
            raise InvalidArgument("progress must be a str; got None")
        self._claim.progress = v.check_progress(text)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[JobTransaction]:
        """Q19.6: a transaction of the store (Q10) that completes this job as its last
        step: on a clean exit the ack, fenced by the claim token, runs right before the
        commit, so the block's effects (``tx.execute`` on PostgreSQL, ``tx.enqueue`` on
        every engine) and the ack commit together or not at all. The worker then sends
        nothing for the job, and the handler's return value is ignored.

        Raises:
            ClaimLost: at the block's end, when the claim was no longer valid (reclaimed
                by another worker, cancelled, or its lease lapsed): the transaction
                rolled back whole. Let it propagate.
            HandleConsumed: the job was completed in a transaction already.
            EngineError: the commit failed; the outcome may be unknown (then the job
                finished with its effects, or runs again without them).
        """
        claim, actors = self._claim, self._actors
        if claim.in_tx:
            raise HandleConsumed(f"job {claim.handle.id} was completed in a transaction already")
        book = actors.book
        committed = False
        try:
            async with claim.handle._queue._store.transaction() as tx:
                job_tx = JobTransaction(tx)
                yield job_tx
                if not book.committing(claim):
                    raise ClaimLost(f"job {claim.handle.id}: the claim is no longer held")
                await tx.complete(claim.handle, job_tx._result)
            committed = True
        finally:
            if claim.state is ClaimState.COMMITTING and book.committed(claim, committed):
                actors.reporter.log(
                    logging.WARNING,
                    "lease_lost",
                    claim.handle.job,
                    "lost the claim: its transactional completion did not commit; "
                    "the transaction's effects rolled back",
                )
        actors.reporter.log(
            logging.INFO, "completed_in_tx", claim.handle.job, "completed in its transaction"
        )


@final
class JobTransaction:
    """The transaction of :meth:`JobContext.transaction`: a store transaction (Q10)
    whose commit also completes the job."""

    __slots__ = ("_result", "_tx")

    def __init__(self, tx: Transaction) -> None:
        self._tx = tx
        self._result: bytes | None = None

    def set_result(self, result: bytes | bytearray | memoryview | None) -> None:
        """Q19.1: the job's result, stored with the completion (on a kept job).

        Raises:
            InvalidArgument: not bytes-like or ``None``, or larger than the store's
                ``max_result_bytes``.
        """
        self._result = v.result_bytes(result, self._tx._store.max_result_bytes)

    async def enqueue(self, queue: Queue | str, payload: bytes, **options: Any) -> Enqueued:
        """As :meth:`Transaction.enqueue <alkstore_trio.Transaction.enqueue>`."""
        return await self._tx.enqueue(queue, payload, **options)

    async def execute(self, sql: str, params: SqlParams | None = None) -> None:
        """As :meth:`Transaction.execute <alkstore_trio.Transaction.execute>` (PostgreSQL)."""
        await self._tx.execute(sql, params)

    async def fetch(self, sql: str, params: SqlParams | None = None) -> list[tuple[Any, ...]]:
        """As :meth:`Transaction.fetch <alkstore_trio.Transaction.fetch>` (PostgreSQL)."""
        return await self._tx.fetch(sql, params)
