"""The PostgreSQL engine: the contract as single SQL statements over a trio-native pool.

Every operation is one statement (see ``sql/queries.sql``) on a pooled connection in
autocommit mode, so every operation is one atomic transaction and one round trip. The
database serializes transitions with row locks; claims skip locked rows. The clock is the
database's (``alk_now()``), read once per statement.

Wakes: an enqueue NOTIFYs its queue's channel in the same statement (delivered at commit,
never on rollback). A dedicated LISTEN connection, owned by a listener task, forwards
notifications into the store's :class:`WakeHub`; it reconnects with capped backoff and
wakes everyone after reconnecting, since notifications sent while it was away are lost
(:mod:`._listener`).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import psycopg
import psycopg.conninfo
import trio

from ..._core import (
    FAILED,
    Enqueued,
    EnqueueSpec,
    Job,
    JobState,
    QueueLimits,
    StoreStats,
    SweepResult,
    claim_order_key,
)
from ..._core import _validate as v
from ..._core._filters import JobPage  # D26.1
from ..._core._transitions import PURGE_BATCH, PURGE_BUDGET_S
from ..._core._workers import WORKER_PURGE_AFTER_S, WORKER_PURGE_BATCH
from ..._errors import EngineError, InvalidArgument, StoreClosed
from .._nursery import open_background_nursery
from .._protocol import Completion
from .._wake import WakeHub
from . import (
    _driver,
    _enqueue,
    _filters,  # D26.1
    _limited,
    _periodic,
    _pool,
    _reads,
    _rows,
    _schema,
    _sql,
    _unique,
)
from ._dsn import describe
from ._listener import Listening
from ._options import _Conninfo, check_options, driver_connect
from ._params import (
    _applied,
    _claim_params,
    _completion_params,
    _int_array,
    _token_base,
)
from ._rows import job as _job
from ._rows import utc as _utc
from ._rows import worker_info as _worker_info

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence
    from datetime import datetime

    from ..._core._periodic import Periodic, PeriodicInfo, PeriodicTick  # Q17
    from ..._core._workers import BeatPhase, WorkerInfo, WorkerRegistration  # Q21
    from .._protocol import Claim, FailItem, ProgressItem, RetryItem, SqlParams
    from ._pool import Pool


_SESSION_UTC_SQL: Final = "SET TIME ZONE 'UTC'"
#: Q18: how long a pause waits for the writes in flight on the jobs table (claims, and
#: open transactions that enqueued) before it gives up with an EngineError, unchanged.
PAUSE_LOCK_TIMEOUT_S: Final = 5.0
_PAUSE_LOCK_TIMEOUT_SQL: Final = "SELECT pg_catalog.set_config('lock_timeout', %s, true)"
#: Q18: the pause barrier (see set_paused in queries.sql), rendered for the schema.
_PAUSE_BARRIER_SQL: Final = "LOCK TABLE @schema@.jobs IN SHARE MODE"


def _engine_error(exc: BaseException) -> EngineError:
    return EngineError(f"PostgreSQL operation failed: {type(exc).__name__}: {exc}")


class PostgresEngine(Listening):
    """The PostgreSQL engine: one store's view of one schema in one database.

    Example::

        engine = PostgresEngine("postgresql://app@db/jobs", schema="alkstore", pool_size=20)
        async with alkstore_trio.open_store(engine) as store:
            ...

    ``open_store("postgresql://…", schema=…, …)`` makes one from the same options. The
    options are checked here, before anything connects; :meth:`open` connects, checks
    (or applies) the schema and runs the wake listener. An instance serves one store,
    once.

    Args:
        dsn: A ``postgresql://`` URL or a libpq conninfo (``"host=db dbname=jobs"``).
        schema: The schema holding the tables (always quoted).
        pool_size: The most connections the store holds at once (plus one for LISTEN
            once a wake listener is open).
        connect_timeout_s: How long to keep trying to connect.
        migrate: ``"check"`` raises :class:`~alkstore_trio.SchemaError` unless the schema
            is at this library's version; ``"apply"`` migrates it first.
        application_name: Shown in ``pg_stat_activity`` (the LISTEN session gets a
            ``:listen`` suffix).
        listen: ``False`` opens no LISTEN session (poll-only mode).
        driver: ``"native"`` (the trio-native driver), ``"thread"`` (psycopg's sync
            connections in worker threads) or ``None`` (native when this psycopg version
            supports it, else thread).

    Raises:
        InvalidArgument: an option is invalid.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "alkstore",
        pool_size: int = 10,
        connect_timeout_s: float = 10.0,
        migrate: str = "check",
        application_name: str = "alkstore_trio",
        listen: bool = True,
        driver: str | None = None,
    ) -> None:
        if not isinstance(dsn, str):
            raise InvalidArgument(f"dsn must be a str; got a {type(dsn).__name__}")
        options = check_options(
            schema=schema,
            pool_size=pool_size,
            connect_timeout_s=connect_timeout_s,
            migrate=migrate,
            application_name=application_name,
            listen=listen,
        )
        self._conninfo = _Conninfo(dsn)
        self._options = options
        self._connect = driver_connect(driver)
        self._pool: Pool[_driver.Connection] | None = None
        self._opened = False
        #: False: no LISTEN connection (poll-only mode, e.g. behind a transaction pooler);
        #: wake listeners then never wake and workers find jobs by re-polling.
        self._listen = options["listen"]
        self._schema = options["schema"]
        self._q = _sql.queries(self._schema)
        self._pause_barrier = _sql.render(_PAUSE_BARRIER_SQL, self._schema)
        self._limit_barrier = _sql.render(_limited.LIMIT_BARRIER_SQL, self._schema)
        #: Q18.7: the queues this engine claims from with the limited claim (learned
        #: from set_limits and from the fast claims' marker row; see _limited).
        self._limited: set[str] = set()
        self.wakes = WakeHub()
        self._closed = False
        self._channels: dict[str, str] = {}  # channel -> queue
        self._done_channels: dict[str, str] = {}  # Q19.4: done channel -> queue
        #: Q19.4: the statements that announce jobs done (they take ``done_channel``).
        self._announcing = frozenset(k for k, q in self._q.items() if "%(done_channel)s" in q)
        self._listening: set[str] = set()
        self._listen_changed = False
        self._listen_wait: trio.CancelScope | None = None
        self._listen_progress = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._listener_started = False

    @property
    def schema(self) -> str:
        """The schema this engine works in."""
        return self._schema

    def __repr__(self) -> str:
        return f"postgresql schema {self._schema!r}{'' if self._listen else ' (poll only)'}"

    # -- plumbing ----------------------------------------------------------------------

    async def _run(self, name: str, params: dict[str, object]) -> list[tuple[Any, ...]]:
        if name in self._announcing:  # Q19.4
            params["done_channel"] = self._done_channel(str(params["queue"]))
        return await self._execute(self._q[name], params)

    async def _execute_binary(self, query: str, params: dict[str, object]) -> list[tuple[Any, ...]]:
        return await self._execute(query, params, binary=True)

    async def _execute(
        self, query: str, params: dict[str, object], *, binary: bool = False
    ) -> list[tuple[Any, ...]]:
        if self._closed or self._pool is None:
            raise StoreClosed("the store is closed")
        try:
            async with self._pool.connection() as conn:
                return await conn.execute(query, params, binary=binary)
        except psycopg.Error as exc:
            raise _engine_error(exc) from exc
        except _pool.PoolClosed as exc:
            raise StoreClosed("the store is closed") from exc

    # -- the work path -----------------------------------------------------------------

    async def enqueue(self, specs: Sequence[EnqueueSpec]) -> list[Enqueued]:
        if _unique.has_keys(specs):
            return await self._enqueue_keyed(specs)
        ids: list[Enqueued] = []
        for group in _enqueue.groups(specs):
            query, params = self._enqueue_statement(group)
            rows = await self._execute(query, params)
            ids.extend([Enqueued(row[0]) for row in rows])
        return ids

    async def _enqueue_keyed(self, specs: Sequence[EnqueueSpec]) -> list[Enqueued]:
        """Q15: a call with unique keys, in a transaction of its own."""
        async with self._transaction_conn() as conn:
            return await _enqueue.run_on(conn, self._enqueue_steps(specs))

    def _enqueue_steps(self, specs: Sequence[EnqueueSpec]) -> _enqueue.Steps[list[Enqueued]]:
        return _enqueue.enqueue_steps(self._q, self._channel, self._schema, specs)

    def _enqueue_statement(self, group: Sequence[EnqueueSpec]) -> tuple[str, dict[str, object]]:
        """The enqueue statement for one group and its parameters (see :mod:`._enqueue`)."""
        return _enqueue.statement(self._q, self._channel, group)

    async def claim(self, queue: str, worker_id: str, n: int) -> list[Job]:
        # LIMIT takes a bigint; any larger n means "all there is" just the same.
        params = {
            "queue": queue,
            "worker_id": worker_id,
            "n": min(n, v.JOB_ID_MAX),
            "token_base": _token_base(),
        }
        if queue in self._limited:
            return (await self._claim_limited(queue, (), params))[1]
        rows = await self._run("claim", params)
        if rows and rows[-1][0] is None:  # Q18.7: the queue is limited
            self._limited.add(queue)
            return (await self._claim_limited(queue, (), params))[1]
        jobs = [_job(row) for row in rows]
        jobs.sort(key=claim_order_key)
        return jobs

    async def _claim_limited(
        self,
        queue: str,
        claims: Sequence[Claim] | Sequence[Completion],
        params: dict[str, object],
        ack_name: str = "ack_claims",
    ) -> tuple[list[int], list[Job]]:
        """Q18.7-Q18.9: a claim (after acks: ``ack_name``, or Q19.1's
        ``complete_claims``) of a limited queue, in a transaction."""
        params["channel"] = self._channel(queue)
        params["done_channel"] = self._done_channel(queue)  # Q19.4: complete_claims
        async with self._transaction_conn() as conn:
            acked, jobs, limited = await _limited.claim(
                conn, self._q, self._limit_barrier, queue, claims, params, _job, ack_name
            )
        if not limited:
            self._limited.discard(queue)
        jobs.sort(key=claim_order_key)
        return acked, jobs

    async def _freed(self, queue: str, freed: int) -> None:
        """Q18.7: settling ``freed`` leases of a limited queue freed slots: wake it."""
        if freed > 0 and queue in self._limited:
            await self._run("wake", {"channel": self._channel(queue)})

    # A batch of one takes the one-row statement: it plans and runs faster than the
    # array statement over one element.

    async def heartbeat(
        self, queue: str, claims: Sequence[Claim], extend_s: float | None
    ) -> list[int]:
        if len(claims) == 1:
            ((job_id, token),) = claims
            params = {"id": job_id, "queue": queue, "token": token, "extend_s": extend_s}
            return [job_id] if await self._run("heartbeat", params) else []
        params = {**_claim_params(queue, claims), "extend_s": extend_s}
        return [row[0] for row in await self._run("heartbeat_claims", params)]

    async def heartbeat_progress(
        self, queue: str, items: Sequence[ProgressItem], extend_s: float | None
    ) -> list[int]:
        params: dict[str, object] = {
            "queue": queue,
            "ids": [item.job_id for item in items],
            "tokens": [item.token for item in items],
            "progress": [item.progress for item in items],
            "extend_s": extend_s,
        }
        return [row[0] for row in await self._run("heartbeat_claims_progress", params)]

    async def ack(self, queue: str, claims: Sequence[Claim]) -> list[int]:
        if len(claims) == 1:
            ((job_id, token),) = claims
            params = {"id": job_id, "queue": queue, "token": token}
            acked = [job_id] if await self._run("ack", params) else []
        else:
            acked = [row[0] for row in await self._run("ack_claims", _claim_params(queue, claims))]
        if len(acked) < len(claims):
            acked += await self._complete_left(queue, claims, acked)
        await self._freed(queue, len(acked))
        return acked

    async def _complete_left(
        self, queue: str, claims: Sequence[Claim], acked: Sequence[int]
    ) -> list[int]:
        """Q19.2: the plain acks leave kept rows alone (``keep_completed_s IS NULL``); the
        claims they did not finish (kept, or refused) go through the moving ack. The
        store sends kept claims to :meth:`complete`, so this runs only for refusals (and
        for a caller of the engine that did not know the stamp)."""
        done = set(acked)
        left = [Completion(*claim, None) for claim in claims if claim.job_id not in done]
        return await self._complete(queue, left)

    async def complete(self, queue: str, items: Sequence[Completion]) -> list[int]:
        done = await self._complete(queue, items)
        await self._freed(queue, len(done))
        return done

    async def _complete(self, queue: str, items: Sequence[Completion]) -> list[int]:
        if not items:
            return []
        params = _completion_params(queue, items)
        return [row[0] for row in await self._run("complete_claims", params)]

    async def complete_and_claim(
        self, queue: str, items: Sequence[Completion], worker_id: str, n: int
    ) -> tuple[list[int], list[Job]]:
        params = {
            **_completion_params(queue, items),
            "worker_id": worker_id,
            "n": min(n, v.JOB_ID_MAX),
            "token_base": _token_base(),
        }
        if queue in self._limited:
            return await self._claim_limited(queue, items, params, "complete_claims")
        return await self._fused(queue, "complete_claims_and_claim", params)

    async def ack_and_claim(
        self, queue: str, claims: Sequence[Claim], worker_id: str, n: int
    ) -> tuple[list[int], list[Job]]:
        params = {
            **_claim_params(queue, claims),
            "worker_id": worker_id,
            "n": min(n, v.JOB_ID_MAX),
            "token_base": _token_base(),
        }
        if queue in self._limited:
            acked, jobs = await self._claim_limited(queue, claims, params)
        else:
            acked, jobs = await self._fused(queue, "ack_claims_and_claim", params)
        if len(acked) < len(claims):
            acked += await self._complete_left(queue, claims, acked)
        return acked, jobs

    async def _fused(
        self, queue: str, name: str, params: dict[str, object]
    ) -> tuple[list[int], list[Job]]:
        """R2 (D21): acks and a claim in one statement (``ack_claims_and_claim`` or
        ``complete_claims_and_claim``); the ids acked and the jobs claimed."""
        acked: list[int] = []
        jobs: list[Job] = []
        for row in await self._run(name, params):
            if row[0] is not None:
                acked.append(row[0])
            elif row[1] is not None:
                jobs.append(_job(row[1:]))
            else:  # Q18.7: the queue is limited; the acks are done
                self._limited.add(queue)
                for key in ("ids", "tokens", "results"):
                    params.pop(key, None)
                return acked, (await self._claim_limited(queue, (), params))[1]
        jobs.sort(key=claim_order_key)
        return acked, jobs

    async def retry(self, queue: str, items: Sequence[RetryItem]) -> list[bool]:
        if len(items) == 1:
            ((job_id, token, error, delay_s),) = items
            params = {
                "id": job_id,
                "queue": queue,
                "token": token,
                "error": error,
                "delay_s": delay_s,
            }
            done = [bool(await self._run("retry", params))]
        else:
            params = {
                **_claim_params(queue, items),
                "errors": [item.error for item in items],
                "delays": [None if item.delay_s is None else float(item.delay_s) for item in items],
            }
            done = _applied(len(items), await self._run("retry_claims", params))
        await self._freed(queue, sum(done))
        return done

    async def release(self, queue: str, claims: Sequence[Claim], error: str | None) -> list[int]:
        params = {**_claim_params(queue, claims), "error": error, "channel": self._channel(queue)}
        return [row[0] for row in await self._run("release_claims", params)]

    async def fail(self, queue: str, items: Sequence[FailItem]) -> list[bool]:
        if len(items) == 1:
            ((job_id, token, error),) = items
            params = {
                "id": job_id,
                "queue": queue,
                "token": token,
                "error": FAILED if error is None else error,
            }
            done = [bool(await self._run("fail", params))]
        else:
            params = {
                **_claim_params(queue, items),
                "errors": [FAILED if item.error is None else item.error for item in items],
            }
            done = _applied(len(items), await self._run("fail_claims", params))
        await self._freed(queue, sum(done))
        return done

    async def ack_batch(self, queue: str, job_ids: Sequence[int]) -> int:
        params: dict[str, object] = {"queue": queue, "ids": _int_array(list(job_ids))}
        ((count,),) = await self._run("ack_batch", params)
        await self._freed(queue, int(count))
        return int(count)

    # Q16 / R11
    async def next_due_in_s(self, queue: str) -> float | None:
        ((seconds, *waits),) = await self._run("next_due", {"queue": queue})
        due = None if seconds is None else float(seconds)
        # Q18.9: a limited queue's ready jobs are due when its limits let one out.
        wait = _limited.due_in_s(waits)
        return due if wait is None else wait if due is None else min(due, wait)

    # -- the operator path -------------------------------------------------------------

    async def cancel(self, queue: str, job_id: int) -> bool:
        params = {"id": job_id, "queue": queue, "channel": self._channel(queue)}
        ((cancelled, _),) = await self._run("cancel", params)
        return bool(cancelled)

    async def settle_cancelled(self, queue: str, claims: Sequence[Claim]) -> list[int]:
        rows = await self._run("settle_cancelled", _claim_params(queue, claims))
        await self._freed(queue, len(rows))  # Q18.7: a cancelling lease held a slot
        return [row[0] for row in rows]

    async def cancelling_among(self, queue: str, job_ids: Sequence[int]) -> list[int]:
        params: dict[str, object] = {"queue": queue, "ids": _int_array(job_ids)}
        return [row[0] for row in await self._run("cancelling_among", params)]

    async def get_job(self, job_id: int, queue: str | None) -> Job | None:
        name, params = ("find_job", {}) if queue is None else ("get_job", {"queue": queue})
        return await _reads.read_job(
            self._execute_binary,
            self._q[name],
            (self._q["payload_slice"], self._q["result_slice"]),
            {**params, "id": job_id},
        )

    async def sweep_expired(self, queue: str, retention_s: float | None) -> SweepResult:
        ((expired, purged, cancelled),) = await self._run(
            "sweep_expired", {"queue": queue, "retention_s": retention_s}
        )
        return SweepResult(
            int(expired), int(purged), await self._purge_completed(queue), int(cancelled)
        )

    async def _purge_completed(self, queue: str) -> int:
        """Q19.3: purge the queue's kept rows past their time in batches of
        :data:`PURGE_BATCH`, one statement (one transaction) each, while a batch comes
        back full and for at most :data:`PURGE_BUDGET_S` (the next sweep goes on)."""
        params: dict[str, object] = {"queue": queue, "batch": PURGE_BATCH}
        deadline = trio.current_time() + PURGE_BUDGET_S
        batch, purged = PURGE_BATCH, 0
        while batch == PURGE_BATCH and trio.current_time() < deadline:
            ((count,),) = await self._run("purge_completed", params)
            batch = int(count)
            purged += batch
        return purged

    async def list_jobs(
        self, queue: str, state: JobState, limit: int, after_id: int | None
    ) -> list[Job]:
        # No id is below the int64 minimum: it stands for "from the first".
        params = {
            "queue": queue,
            "after_id": -v.JOB_ID_MAX - 1 if after_id is None else after_id,
            "limit": limit,
        }
        if state == "dead":
            rows = await self._run("list_dead", params)
        elif state in ("completed", "cancelled"):
            rows = await self._run("list_completed", {**params, "state": state})
        else:
            rows = await self._run("list_live", {**params, "state": state})
        return [_rows.kept_job(row) for row in rows]

    async def find_jobs(
        self,
        queue: str,
        state: JobState,
        limit: int,
        after_id: int | None,
        key: str | None,
        header: tuple[str, str] | None,
    ) -> JobPage:
        if key is None and header is None:
            jobs = await self.list_jobs(queue, state, limit, after_id)
            return JobPage(jobs, jobs[-1].id if len(jobs) == limit else None, None)
        return await _filters.find_jobs(self._run, queue, state, limit, after_id, key, header)

    async def stats(self, queue: str | None) -> StoreStats:
        rows = await self._run("stats", {"queue": queue})
        now = _utc(rows[0][0])
        entries = tuple(_rows.queue_stats(row, now) for row in rows if row[2] is not None)
        return StoreStats(now=now, ids_issued=int(rows[0][1]), queues=entries)

    async def requeue_dead(self, queue: str, job_ids: Sequence[int] | None) -> int:
        params: dict[str, object] = {"queue": queue, "channel": self._channel(queue)}
        if job_ids is None:
            ((count, _),) = await self._run("requeue_dead_all", params)
        else:
            ((count, _),) = await self._run("requeue_dead", {**params, "ids": list(job_ids)})
        return int(count)

    async def purge_dead(
        self,
        queue: str,
        older_than_s: float | None,
        *,
        dry_run: bool,
        ids: Sequence[int] | None = None,
    ) -> int:
        params: dict[str, object] = {"queue": queue, "older_than_s": older_than_s}
        if ids is None:
            name = "count_dead" if dry_run else "purge_dead"
        else:  # D25.1: by the primary key, whatever the table's size
            name = "count_dead_ids" if dry_run else "purge_dead_ids"
            params["ids"] = list(ids)
        ((count,),) = await self._run(name, params)
        return int(count)

    # Q16
    async def reschedule(
        self,
        queue: str,
        job_id: int,
        delay_s: float | None,
        run_at: datetime | None,
        priority: int | None,
    ) -> bool:
        params: dict[str, object] = {
            "queue": queue,
            "id": job_id,
            "delay_s": delay_s,
            "run_at": run_at,
            "priority": priority,
            "channel": self._channel(queue),
        }
        ((count, _),) = await self._run("reschedule", params)
        return bool(count)

    # -- Q17 periodic jobs ---------------------------------------------------------------

    async def fire_periodic(self, schedules: Sequence[Periodic]) -> PeriodicTick:
        async with self._transaction_conn() as conn:
            return await _periodic.fire(conn, self._q, self._enqueue_statement, schedules)

    async def list_periodic(self, stale_after_s: float) -> list[PeriodicInfo]:
        rows = await self._run("list_periodic", {"stale_after_s": stale_after_s})
        return [_periodic.info(row) for row in rows]

    async def delete_periodic(self, name: str) -> bool:
        ((count,),) = await self._run("delete_periodic", {"name": name})
        return bool(count)

    # -- Q21 the worker registry -----------------------------------------------------------

    async def beat_worker(self, registration: WorkerRegistration, phase: BeatPhase) -> None:
        if phase == "stop":
            await self._run("stop_worker", {"worker_id": registration.worker_id})
            return
        params: dict[str, object] = {
            "worker_id": registration.worker_id,
            "host": registration.host,
            "pid": registration.pid,
            "queues": list(registration.queues),
            "concurrency": registration.concurrency,
            "version": registration.version,
            "start": phase == "start",
            "purge_after_s": WORKER_PURGE_AFTER_S,
            "purge_batch": WORKER_PURGE_BATCH,
        }
        await self._run("beat_worker", params)

    async def list_workers(self, gone_after_s: float, limit: int) -> list[WorkerInfo]:
        rows = await self._run("list_workers", {"limit": limit})
        return [_worker_info(row, gone_after_s) for row in rows]

    # Q18: queue controls.
    async def set_paused(self, queue: str, paused: bool) -> None:
        params = {"queue": queue, "paused": paused, "channel": self._channel(queue)}
        if not paused:
            await self._run("set_paused", params)
            return
        await self._behind_barrier("set_paused", params)

    async def set_limits(self, queue: str, limits: QueueLimits, refill: bool) -> None:
        params: dict[str, object] = {
            "queue": queue,
            "max_running": limits.max_running,
            "rate_per_s": limits.rate_per_s,
            "burst": limits.burst,
            "max_running_per_key": limits.max_running_per_key,
            "refill": refill,
            "channel": self._channel(queue),
        }
        await self._behind_barrier("set_limits", params)
        if limits.limited:
            self._limited.add(queue)

    async def _behind_barrier(self, name: str, params: dict[str, object]) -> None:
        """Q18: run a control statement behind the pause barrier (see set_paused in
        queries.sql): every claim that starts after it returns sees its effect."""
        timeout = f"{round(PAUSE_LOCK_TIMEOUT_S * 1000)}ms"
        async with self._transaction_conn() as conn:
            await conn.execute(_PAUSE_LOCK_TIMEOUT_SQL, [timeout])
            await conn.execute(self._pause_barrier, [])
            await conn.execute(self._q[name], params)

    @asynccontextmanager
    async def _transaction_conn(self) -> AsyncIterator[_driver.Connection]:
        """A pooled connection in a transaction of its own, with the engine's errors."""
        if self._closed or self._pool is None:
            raise StoreClosed("the store is closed")
        try:
            async with self._pool.connection() as conn, conn.transaction():
                yield conn
        except psycopg.Error as exc:
            raise _engine_error(exc) from exc
        except _pool.PoolClosed as exc:
            raise StoreClosed("the store is closed") from exc

    # -- lifecycle, transactions, wakes -------------------------------------------------

    @asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        """Open a pool on the DSN, check (or apply) the schema, and run the engine (and,
        once a wake listener opens, its listener task) for the ``async with`` block."""
        if self._opened:
            raise InvalidArgument("this PostgresEngine was opened before; make a new one per store")
        self._opened = True
        options = self._options
        async with _pool.open_pool(
            self._conninfo.value,
            size=options["pool_size"],
            connect_timeout_s=options["connect_timeout_s"],
            application_name=options["application_name"],
            connect=self._session_connect,
        ) as pool:
            try:
                async with pool.connection() as conn:
                    if options["migrate"] == "apply":
                        await _schema.migrate(conn, self._schema)
                    else:
                        await _schema.check(conn, self._schema, dsn_hint=self._conninfo.redacted)
            except psycopg.Error as exc:
                cause = describe(exc, self._conninfo.value)
                raise EngineError(
                    f"cannot open the store on {self._conninfo.redacted}: {cause}"
                ) from exc
            self._pool = pool
            async with open_background_nursery() as nursery:
                self._nursery = nursery
                try:
                    yield
                finally:
                    self.close()
                    nursery.cancel_scope.cancel()

    async def _session_connect(
        self, conninfo: str, *, connect_timeout_s: float, application_name: str
    ) -> _driver.Connection:
        conn = await self._connect(
            conninfo, connect_timeout_s=connect_timeout_s, application_name=application_name
        )
        # Sessions in UTC: psycopg then returns timestamps already in datetime.UTC, so
        # turning a claimed row into a Job needs no conversion (Q8 wants UTC anyway).
        await conn.execute(_SESSION_UTC_SQL)
        return conn

    async def _listen_connect(self) -> _driver.Connection:
        return await self._session_connect(
            self._conninfo.value,
            connect_timeout_s=self._options["connect_timeout_s"],
            application_name=f"{self._options['application_name']}:listen",
        )

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[PostgresTransaction]:
        async with self._transaction_conn() as conn:
            yield PostgresTransaction(self, conn)

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()

    def close(self) -> None:
        """Refuse new operations and stop the listener. Idempotent."""
        self._closed = True
        self.wakes.close()
        self._poke_listener()


class PostgresTransaction:
    """Q10 on PostgreSQL: a real database transaction on one pooled connection."""

    def __init__(self, backend: PostgresEngine, conn: _driver.Connection) -> None:
        self._backend = backend
        self._conn = conn

    async def enqueue(self, specs: Sequence[EnqueueSpec]) -> list[Enqueued]:
        try:
            return await _enqueue.run_on(self._conn, self._backend._enqueue_steps(specs))
        except psycopg.Error as exc:
            raise _engine_error(exc) from exc

    async def fetch(self, sql: str, params: SqlParams | None) -> list[tuple[Any, ...]]:
        try:
            return await self._conn.execute(sql, params)
        except psycopg.Error as exc:
            raise _engine_error(exc) from exc

    async def complete(self, queue: str, items: Sequence[Completion]) -> list[int]:
        """Q19.6: ``complete_claims`` on the transaction's connection (the row locks it
        takes are held to the commit); a limited queue's freed slots wake it at commit."""
        backend = self._backend
        try:
            params = _completion_params(queue, items)
            params["done_channel"] = backend._done_channel(queue)  # Q19.4: it announces
            done = [
                row[0] for row in await self._conn.execute(backend._q["complete_claims"], params)
            ]
            if done and queue in backend._limited:
                await self._conn.execute(backend._q["wake"], {"channel": backend._channel(queue)})
        except psycopg.Error as exc:
            raise _engine_error(exc) from exc
        return done
