"""One run of the machine: an engine's store and the reference model side by side.

:class:`_Run` holds the queue handles, the job handles claimed so far (as labelled
slots) and the model; :meth:`_Run.apply` runs a step on both, one method per kind of
step, and fails with :class:`Disagreement` as soon as their answers differ;
:meth:`_Run.check_all_rows` compares every row after each step.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeAlias

import hypothesis.strategies as st

from ..._core import Enqueued, Headers, Job, JobState
from ..._errors import HandleConsumed
from ._cancel_steps import (  # Q19.5
    CancellingAmong,
    SettleCancelled,
    apply_cancelling_among,
    apply_settle_cancelled,
)
from ._controls import SetLimits, SetPaused, apply_set_limits
from ._drawing import _draw_step
from ._filter_check import agree_on_filters  # D26.1
from ._periodic_steps import FirePeriodic, apply_fire_periodic, periodic_targets  # Q17
from ._q16 import NextDue, Reschedule, apply_next_due, apply_reschedule
from ._steps import (
    _ONE_MICROSECOND,
    _RETENTIONS,
    _RUN_AT_TIMEZONES,
    Ack,
    AckBatch,
    AckHandles,
    AckHandlesAndClaim,
    Advance,
    AdvanceTo,
    Cancel,
    Claim,
    Crash,
    Enqueue,
    EnqueueMany,
    Fail,
    FailHandles,
    Heartbeat,
    HeartbeatHandles,
    Inspect,
    PurgeDead,
    Release,
    RequeueDead,
    Retry,
    RetryHandles,
    Reuse,
    Sweep,
    Tx,
    TxItem,
    _headers,
    _Step,
)
from ._wait_check import agree_on_waits  # Q19.4

if TYPE_CHECKING:
    from ..._store import JobHandle, Queue, Store, Transaction
    from .._harness import EngineHarness
    from .._model import ModelTransaction, ReferenceModel


class _Rollback(Exception):
    """Raised inside a transaction block to roll it back."""


@dataclass
class _Slot:
    label: str
    handle: JobHandle
    worker: str
    consumed: bool = False
    crashed: bool = False


_Outcome: TypeAlias = object


class Disagreement(AssertionError):
    """The engine and the reference model disagree."""


def _created(*results: Enqueued) -> list[tuple[int, bool]]:
    """Q15: enqueue results as (id, created) pairs, so that agreement checks both."""
    return [(int(result), result.created) for result in results]


def _token(job: Job) -> int:
    """Q19.8: a claimed snapshot's claim token (the model takes the engine's)."""
    if job.claim_token is None:
        raise Disagreement(f"job {job.id} was handed out without a claim token (Q19.8)")
    return job.claim_token


def _tokens(handles: list[JobHandle]) -> dict[int, int]:
    return {handle.id: _token(handle.job) for handle in handles}


def _agree(what: str, engine: object, model: object) -> None:
    if engine != model:
        differ = ""
        if isinstance(engine, Job) and isinstance(model, Job):
            # The repr leaves out the payload and the headers: name what differs.
            names = [
                f.name for f in fields(Job) if getattr(engine, f.name) != getattr(model, f.name)
            ]
            differ = f"\n  fields that differ: {', '.join(names)}"
        raise Disagreement(f"{what}:\n  engine: {engine!r}\n  model:  {model!r}{differ}")


_TIMESTAMP_FIELDS = (
    "run_at",
    "enqueued_at",
    "expires_at",
    "claimed_at",
    "claim_expires_at",
    "died_at",
)


def _check_shape(what: str, job: Job | None) -> None:
    """Q8: the payload is ``bytes`` and every timestamp a timezone-aware UTC datetime
    (``==`` cannot tell: ``b"a" == bytearray(b"a")``, and datetimes compare instants)."""
    if job is None:
        return
    if type(job.payload) is not bytes:
        raise Disagreement(f"{what}: the payload is a {type(job.payload).__name__} (Q2, Q8)")
    if type(job.headers) is not Headers or list(job.headers) != sorted(job.headers):
        raise Disagreement(f"{what}: the headers are not Headers in key order (D30)")
    for name in _TIMESTAMP_FIELDS:
        value = getattr(job, name)
        if value is not None and (value.tzinfo is None or value.utcoffset() != timedelta(0)):
            raise Disagreement(f"{what}: {name} is not a UTC datetime (Q8): {value!r}")


@dataclass
class _Run:
    harness: EngineHarness
    store: Store
    model: ReferenceModel
    queues: dict[str, Queue]
    slots: dict[str, _Slot] = field(default_factory=dict)
    handles_made: int = 0
    #: Q19.8: every claim token each job was handed so far.
    tokens_seen: dict[int, set[int]] = field(default_factory=dict)
    #: Q17: every (schedule, fire time) enqueued so far in the run.
    periodic_fired: set[tuple[str, datetime]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.labels = st.sampled_from(list(self.queues))

    # -- drawing -----------------------------------------------------------------------

    def _id_pool(self) -> list[int]:
        """Ids for ack_batch and cancel: every issued id and some never issued."""
        return [*self._ids_to_read(), -1, 2**63 - 1]

    def _ids_to_read(self) -> list[int]:
        """Every issued id, 0, and the next id (not issued yet)."""
        issued = self.model.issued_ids()
        return [*issued, 0, len(issued) + 1]

    def step_strategy(self, now: datetime) -> st.SearchStrategy[_Step]:
        """Every step that can be taken from here (see :func:`_draw_step`)."""
        return _draw_step(self, now)

    def _time_targets(self, now: datetime) -> dict[str, list[AdvanceTo]]:
        """Every instant ahead where some row's fate may flip, and one microsecond after
        it, grouped by kind (so that rare kinds, like deadlines, are drawn as often as
        common ones)."""
        instants: list[tuple[int, str, datetime]] = []
        for job in self.model.jobs():
            if job.state == "processing" and job.claim_expires_at is not None:
                instants.append((job.id, "claim_expires_at", job.claim_expires_at))
            if job.state == "pending":
                instants.append((job.id, "run_at", job.run_at))
            if job.state != "dead" and job.expires_at is not None:
                instants.append((job.id, "expires_at", job.expires_at))
            if job.state == "dead" and job.died_at is not None:
                died_at = job.died_at
                instants.extend(
                    (job.id, f"died_at+{r:g}s", died_at + timedelta(seconds=r)) for r in _RETENTIONS
                )
        for job in self.model.kept.rows.values():  # Q19.3: when a kept row may be purged
            assert job.completed_at is not None
            assert job.keep_completed_s is not None
            purge_at = job.completed_at + timedelta(seconds=job.keep_completed_s)
            instants.append((job.id, "purge_at", purge_at))
        out: dict[str, list[AdvanceTo]] = {}
        for job_id, what, instant in instants:
            for plus_us in (0, 1):
                target = instant + plus_us * _ONE_MICROSECOND
                if target > now:
                    seconds = (target - now).total_seconds()
                    kind = what.split("+")[0]
                    out.setdefault(kind, []).append(AdvanceTo(job_id, what, plus_us, seconds))
        if fire_targets := periodic_targets(self, now):  # Q17
            out["next_fire_at"] = fire_targets
        return out

    # -- applying ----------------------------------------------------------------------

    async def apply(self, step: _Step, now: datetime) -> _Outcome:
        """Run one step on the engine and on the model; check the results agree."""
        match step:
            case Enqueue():
                return await self._enqueue(step, now)
            case EnqueueMany():
                return await self._enqueue_many(step, now)
            case Claim():
                return await self._claim(step, now)
            case Heartbeat():
                return await self._heartbeat(step, now)
            case Ack():
                return await self._ack(step, now)
            case Retry():
                return await self._retry(step, now)
            case Fail():
                return await self._fail(step, now)
            case Release():
                return await self._release(step, now)
            case Reuse():
                return await self._reuse(step)
            case AckHandles():
                return await self._ack_handles(step, now)
            case AckHandlesAndClaim():
                return await self._ack_and_claim(step, now)
            case HeartbeatHandles():
                return await self._heartbeat_handles(step, now)
            case RetryHandles():
                return await self._retry_handles(step, now)
            case FailHandles():
                return await self._fail_handles(step, now)
            case AckBatch():
                return await self._ack_batch(step, now)
            case Cancel():
                return await self._cancel(step, now)
            case Sweep():
                return await self._sweep(step, now)
            case RequeueDead():
                return await self._requeue_dead(step, now)
            case PurgeDead():
                return await self._purge_dead(step, now)
            case Inspect():
                return await self._inspect(step, now)
            case Advance() | AdvanceTo():
                return await self._advance(step)
            case Tx():
                return await self._transaction(step, now)
            case Crash():
                return self._crash(step)
            # Q16
            case Reschedule():
                return await apply_reschedule(self, step, now)
            case NextDue():
                return await apply_next_due(self, step, now)
            case FirePeriodic():  # Q17
                return await apply_fire_periodic(self, step, now)
            case SetPaused():
                return await self._set_paused(step, now)
            case SetLimits():  # Q18.7-Q18.9
                return await apply_set_limits(self, step, now)
            case SettleCancelled():  # Q19.5
                return await apply_settle_cancelled(self, step, now)
            case CancellingAmong():
                return await apply_cancelling_among(self, step, now)
        raise AssertionError(f"unknown step {step!r}")  # pragma: no cover

    # -- one method per step -------------------------------------------------------------

    async def _enqueue(self, step: Enqueue, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        run_at = None
        if step.run_at_in_s is not None:
            run_at = (now + timedelta(seconds=step.run_at_in_s)).astimezone(
                _RUN_AT_TIMEZONES[step.run_at_tz]
            )
        payload: bytes | bytearray | memoryview = step.payload
        if step.payload_as == "bytearray":
            payload = bytearray(step.payload)
        elif step.payload_as == "memoryview":
            payload = memoryview(step.payload)
        got = await queue.enqueue(
            payload,
            priority=step.priority,
            delay_s=step.delay_s,
            run_at=run_at,
            max_attempts=step.max_attempts,
            headers=_headers(step.headers),
            unique_key=step.unique_key,
            unique_for_s=step.unique_for_s,
            concurrency_key=step.concurrency_key,
        )
        want = self.model.enqueue(
            queue.name,
            step.payload,
            opts=queue.opts,
            priority=step.priority,
            delay_s=step.delay_s,
            run_at=run_at,
            max_attempts=step.max_attempts,
            headers=_headers(step.headers),
            unique_key=step.unique_key,
            unique_for_s=step.unique_for_s,
            concurrency_key=step.concurrency_key,
            now=now,
        )
        _agree(f"{step}: (id, created)", _created(got), _created(want))
        return got

    async def _enqueue_many(self, step: EnqueueMany, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        got_ids = await queue.enqueue_many(
            list(step.payloads),
            priority=step.priority,
            delay_s=step.delay_s,
            max_attempts=step.max_attempts,
            headers=_headers(step.headers),
            unique_keys=step.unique_keys,
            unique_for_s=step.unique_for_s,
            concurrency_keys=step.concurrency_keys,
        )
        want_ids = self.model.enqueue_many(
            queue.name,
            list(step.payloads),
            opts=queue.opts,
            priority=step.priority,
            delay_s=step.delay_s,
            max_attempts=step.max_attempts,
            headers=_headers(step.headers),
            unique_keys=step.unique_keys,
            unique_for_s=step.unique_for_s,
            concurrency_keys=step.concurrency_keys,
            now=now,
        )
        _agree(f"{step}: (id, created)s", _created(*got_ids), _created(*want_ids))
        return got_ids

    async def _ack_handles(self, step: AckHandles, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        slots = [self.slots[label] for label in step.handles]
        for slot in slots:
            slot.consumed = True
        got_acked = await queue.ack_handles([slot.handle for slot in slots], step.results)
        claims = [(slot.handle.job.id, _token(slot.handle.job)) for slot in slots]
        deleted = self.model.ack_claims(queue.name, claims, now=now, results=step.results)
        want_acked = [job_id in deleted for job_id, _ in claims]
        _agree(f"{step}: results", got_acked, want_acked)
        return got_acked

    async def _heartbeat_handles(self, step: HeartbeatHandles, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        slots = [self.slots[label] for label in step.handles]
        got_renewed = await queue.heartbeat_handles([slot.handle for slot in slots], step.extend_s)
        claims = [(slot.handle.job.id, _token(slot.handle.job)) for slot in slots]
        renewed = self.model.heartbeat_claims(queue.name, claims, step.extend_s, now=now)
        want_renewed = [job_id in renewed for job_id, _ in claims]
        _agree(f"{step}: results", got_renewed, want_renewed)
        return got_renewed

    async def _retry_handles(self, step: RetryHandles, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        retries = [(self.slots[label], error, delay) for label, error, delay in step.items]
        for slot, _, _ in retries:
            slot.consumed = True
        got_retried = await queue.retry_handles(
            [(slot.handle, error, delay) for slot, error, delay in retries]
        )
        want_retried = self.model.retry_claims(
            queue.name,
            [
                (slot.handle.job.id, _token(slot.handle.job), error, delay)
                for slot, error, delay in retries
            ],
            now=now,
        )
        _agree(f"{step}: results", got_retried, want_retried)
        return got_retried

    async def _fail_handles(self, step: FailHandles, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        fails = [(self.slots[label], error) for label, error in step.items]
        for slot, _ in fails:
            slot.consumed = True
        got_failed = await queue.fail_handles([(slot.handle, error) for slot, error in fails])
        want_failed = self.model.fail_claims(
            queue.name,
            [(slot.handle.job.id, _token(slot.handle.job), error) for slot, error in fails],
            now=now,
        )
        _agree(f"{step}: results", got_failed, want_failed)
        return got_failed

    async def _ack_batch(self, step: AckBatch, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        got_count = await queue.ack_batch(list(step.ids))
        want_count = self.model.ack_batch(queue.name, list(step.ids), now=now)
        _agree(f"{step}: count", got_count, want_count)
        return got_count

    async def _cancel(self, step: Cancel, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        got_ok = await queue.cancel(step.job_id)
        want_ok = self.model.cancel(queue.name, step.job_id, now=now)
        _agree(f"{step}: result", got_ok, want_ok)
        return got_ok

    async def _sweep(self, step: Sweep, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        if step.retention_s != "own":
            opts = replace(queue.opts, dead_letter_retention_s=step.retention_s)
            queue = self.store.queue(queue.name, opts)
        got_sweep = await queue.sweep_expired()
        want_sweep = self.model.sweep_expired(
            queue.name, queue.opts.dead_letter_retention_s, now=now
        )
        _agree(f"{step}: result", got_sweep, want_sweep)
        return got_sweep

    async def _requeue_dead(self, step: RequeueDead, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        if step.ids is None:
            got_count = await queue.requeue_dead(all=True)
        else:
            got_count = await queue.requeue_dead(list(step.ids))
        want_count = self.model.requeue_dead(queue.name, step.ids, now=now)
        _agree(f"{step}: count", got_count, want_count)
        return got_count

    async def _purge_dead(self, step: PurgeDead, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        ids = None if step.ids is None else list(step.ids)
        got_count = await queue.purge_dead(step.older_than_s, dry_run=step.dry_run, ids=ids)
        want_count = self.model.purge_dead(
            queue.name, step.older_than_s, dry_run=step.dry_run, ids=step.ids, now=now
        )
        _agree(f"{step}: count", got_count, want_count)
        return got_count

    async def _advance(self, step: Advance | AdvanceTo) -> _Outcome:
        await self.harness.advance(step.seconds)
        return await self.harness.now()

    def _crash(self, step: Crash) -> _Outcome:
        for slot in self.slots.values():
            if slot.worker == step.worker and not slot.consumed:
                slot.crashed = True
        return None

    async def _inspect(self, step: Inspect, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        name = None if step.every_queue else queue.name
        got_stats = await self.store.stats(name)
        _agree(f"{step}: stats", got_stats, self.model.stats(name, now=now))
        for job_id in self._ids_to_read():
            got = await self.store.get_job(job_id)
            _agree(f"{step}: store.get_job({job_id})", got, self.model.find_job(job_id))
            _check_shape(f"{step}: store.get_job({job_id})", got)
        # Q19.4: the engine's wait returns exactly the jobs the model reads as final.
        model_job = functools.partial(self.model.get_job, queue.name)
        await agree_on_waits(queue, model_job, self._ids_to_read(), str(step), _agree)
        states: tuple[JobState, ...] = (
            "pending", "processing", "cancelling", "dead", "completed", "cancelled"
        )  # fmt: skip
        for state in states:
            after: int | None = None
            while True:
                page = await queue.list_jobs(state, limit=step.limit, after_id=after)
                want = self.model.list_jobs(queue.name, state, limit=step.limit, after_id=after)
                _agree(f"{step}: list_jobs({state!r}, after_id={after})", page, want)
                if len(page) < step.limit:
                    break
                after = page[-1].id
            await agree_on_filters(queue, self.model, state, step.limit, str(step), _agree)
        return sum(entry.live + entry.dead for entry in got_stats.queues)

    async def _set_paused(self, step: SetPaused, now: datetime) -> _Outcome:
        """Q18: pause or resume on both; their stats of the queue agree."""
        queue = self.queues[step.queue]
        await (queue.pause() if step.paused else queue.resume())
        self.model.set_paused(queue.name, step.paused)
        got = await self.store.stats(queue.name)
        _agree(f"{step}: stats", got, self.model.stats(queue.name, now=now))
        return step.paused

    async def _claim(self, step: Claim, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        if step.n is None:
            one = await queue.claim_one(step.worker)
            got = [] if one is None else [one]
            n = 1
        else:
            got = await queue.claim_batch(step.worker, step.n)
            n = step.n
        want = self.model.claim(queue.name, step.worker, n, now=now, tokens=_tokens(got))
        return self._claimed(step, step.worker, got, want)

    async def _ack_and_claim(self, step: AckHandlesAndClaim, now: datetime) -> _Outcome:
        queue = self.queues[step.queue]
        slots = [self.slots[label] for label in step.handles]
        for slot in slots:
            slot.consumed = True
        got_acked, got = await queue.ack_handles_and_claim(
            [slot.handle for slot in slots], step.worker, step.n, step.results
        )
        claims = [(slot.handle.job.id, _token(slot.handle.job)) for slot in slots]
        deleted, want = self.model.ack_claims_and_claim(
            queue.name,
            claims,
            step.worker,
            step.n,
            now=now,
            results=step.results,
            tokens=_tokens(got),
        )
        _agree(f"{step}: ack results", got_acked, [job_id in deleted for job_id, _ in claims])
        return [got_acked, *self._claimed(step, step.worker, got, want)]

    def _claimed(
        self, step: _Step, worker: str, got: list[JobHandle], want: list[Job]
    ) -> list[str]:
        """Check claimed handles against the model's snapshots and keep them as slots;
        their labels."""
        _agree(f"{step}: claimed jobs", [h.job for h in got], want)
        labels = []
        for handle in got:
            # Q19.8: every claim of a job gets a token no earlier claim of it had.
            seen = self.tokens_seen.setdefault(handle.id, set())
            if _token(handle.job) in seen:
                raise Disagreement(f"{step}: job {handle.id} got a claim token again (Q19.8)")
            seen.add(_token(handle.job))
            _check_shape(f"{step}: snapshot", handle.job)
            _agree(f"{step}: handle id", handle.id, handle.job.id)
            self.handles_made += 1
            label = f"h{self.handles_made}"
            self.slots[label] = _Slot(label, handle, worker)
            labels.append(f"{label}=job {handle.id}/attempt {handle.job.attempts}")
        return labels

    async def _heartbeat(self, step: Heartbeat, now: datetime) -> _Outcome:
        job = self.slots[step.handle].handle.job
        handle = self.slots[step.handle].handle
        got = await handle.heartbeat(step.extend_s, progress=step.progress)
        want = self.model.heartbeat(
            job.queue, job.id, _token(job), step.extend_s, now=now, progress=step.progress
        )
        _agree(f"{step}: result", got, want)
        return got

    async def _ack(self, step: Ack, now: datetime) -> _Outcome:
        slot = self.slots[step.handle]
        job = slot.handle.job
        slot.consumed = True
        got = await slot.handle.ack(step.result)
        want = self.model.ack(job.queue, job.id, _token(job), now=now, result=step.result)
        _agree(f"{step}: result", got, want)
        return got

    async def _retry(self, step: Retry, now: datetime) -> _Outcome:
        slot = self.slots[step.handle]
        job = slot.handle.job
        slot.consumed = True
        got = await slot.handle.retry(step.error, step.delay_s)
        want = self.model.retry(job.queue, job.id, _token(job), step.error, step.delay_s, now=now)
        _agree(f"{step}: result", got, want)
        return got

    async def _fail(self, step: Fail, now: datetime) -> _Outcome:
        slot = self.slots[step.handle]
        job = slot.handle.job
        slot.consumed = True
        got = await slot.handle.fail(step.error)
        want = self.model.fail(job.queue, job.id, _token(job), step.error, now=now)
        _agree(f"{step}: result", got, want)
        return got

    async def _release(self, step: Release, now: datetime) -> _Outcome:
        slot = self.slots[step.handle]
        job = slot.handle.job
        slot.consumed = True
        got = await slot.handle.release(step.error)
        want = self.model.release(job.queue, job.id, _token(job), step.error, now=now)
        _agree(f"{step}: result", got, want)
        return got

    async def _reuse(self, step: Reuse) -> _Outcome:
        handle = self.slots[step.handle].handle
        try:
            if step.op == "heartbeat":
                await handle.heartbeat()
            elif step.op == "ack":
                await handle.ack()
            elif step.op == "retry":
                await handle.retry()
            elif step.op == "release":
                await handle.release()
            else:
                await handle.fail()
        except HandleConsumed:
            return "HandleConsumed"
        raise Disagreement(f"{step}: a consumed handle did not raise HandleConsumed (Q4)")

    async def _transaction(self, step: Tx, now: datetime) -> _Outcome:
        mtx = self.model.transaction()
        reserved: list[tuple[str, int]] = []
        finished: Transaction | None = None
        try:
            async with self.store.transaction() as tx:
                finished = tx
                for item in step.items:
                    queue = self.queues[item.queue]
                    got = await tx.enqueue(
                        queue.name if item.bare else queue,
                        item.payload,
                        priority=item.priority,
                        delay_s=item.delay_s,
                        max_attempts=item.max_attempts,
                        headers=_headers(item.headers),
                        unique_key=item.unique_key,
                        unique_for_s=item.unique_for_s,
                        concurrency_key=item.concurrency_key,
                    )
                    want = self._model_tx_enqueue(mtx, queue, item, now)
                    _agree(f"{step}: {item}: (id, created)", _created(got), _created(want))
                    if got.created:
                        reserved.append((queue.name, got))
                # Q10: nothing is visible before the commit.
                for name, job_id in reserved:
                    seen = await self.store.queue(name).get_job(job_id)
                    _agree(f"{step}: job {job_id} before the commit", seen, None)
                if not step.commit:
                    raise _Rollback
        except _Rollback:
            mtx.rollback()
            outcome = "rolled back"
        else:
            mtx.commit(now=now)
            outcome = "committed"
        assert finished is not None
        try:
            await finished.enqueue(next(iter(self.queues.values())), b"late")
        except HandleConsumed:
            pass
        else:
            raise Disagreement(f"{step}: a finished transaction accepted an enqueue (Q10)")
        return f"{outcome} {[job_id for _, job_id in reserved]}"

    @staticmethod
    def _model_tx_enqueue(
        mtx: ModelTransaction, queue: Queue, item: TxItem, now: datetime
    ) -> Enqueued:
        return mtx.enqueue(
            queue.name,
            item.payload,
            opts=None if item.bare else queue.opts,
            priority=item.priority,
            delay_s=item.delay_s,
            max_attempts=item.max_attempts,
            headers=_headers(item.headers),
            unique_key=item.unique_key,
            unique_for_s=item.unique_for_s,
            concurrency_key=item.concurrency_key,
            now=now,
        )

    # -- agreement on every row --------------------------------------------------------

    async def check_all_rows(self) -> None:
        """``get_job`` of every id ever issued (and a few never issued), on every queue."""
        names = sorted({queue.name for queue in self.queues.values()})
        ids = self._ids_to_read()
        for name in names:
            queue = self.store.queue(name)
            keys: set[str] = set()
            for job_id in ids:
                got = await queue.get_job(job_id)
                _agree(f"get_job({name!r}, {job_id})", got, self.model.get_job(name, job_id))
                _check_shape(f"get_job({name!r}, {job_id})", got)
                # Q15.1 counts live rows: a dead or a kept (completed, cancelled) row holds no
                # key.
                unkeyed = ("dead", "completed", "cancelled")
                key = None if got is None or got.state in unkeyed else got.unique_key
                if key is not None:
                    if key in keys:
                        raise Disagreement(f"two live jobs of {name!r} hold {key!r}")
                    keys.add(key)  # Q15.1: at most one live job per key
