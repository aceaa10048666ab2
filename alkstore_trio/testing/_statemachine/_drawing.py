"""Drawing the machine's steps with Hypothesis: the strategies, built once, and
:func:`_draw_step`, which picks a step that can be taken from the run's current state
(the handles it holds, the instants ahead where some row's fate may flip)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias

import hypothesis.strategies as st

from ._cancel_steps import draw_q19_5_step  # Q19.5
from ._controls import draw_control, draw_per_key
from ._periodic_steps import draw_fire_periodic  # Q17
from ._q16 import draw_q16_step
from ._steps import (
    _RETENTIONS,
    _RUN_AT_TIMEZONES,
    _WORKERS,
    Ack,
    AckBatch,
    AckHandles,
    AckHandlesAndClaim,
    Advance,
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
    _HandleOp,
    _HeaderPairs,
    _Step,
)

if TYPE_CHECKING:
    from datetime import datetime

    from ._run import _Run

# Built once: building strategies per step would cost more than running the step.
_PAYLOADS = st.binary(max_size=3)
_PAYLOAD_LISTS = st.lists(_PAYLOADS, max_size=3).map(tuple)
_PAYLOAD_TYPE_CHOICES: tuple[Literal["bytes", "bytearray", "memoryview"], ...] = (
    "bytes",
    "bytearray",
    "memoryview",
)
_PAYLOAD_TYPES = st.sampled_from(_PAYLOAD_TYPE_CHOICES)
_PRIORITIES = st.sampled_from((0, 1, -1, 7))
_DELAYS = st.sampled_from((None, 0.0, 2.0, 7.5, -3.0, 40.0))
_RUN_AT_IN = st.sampled_from((None, 0.0, -5.0, 3.0, 12.0))
_OVERRIDES = st.sampled_from((None, 1, 2, 4))
#: Q15: keys from a tiny alphabet, so that enqueues collide (and no key most of the time).
_UNIQUE_KEYS: st.SearchStrategy[str | None] = st.sampled_from([None, None, None, "k1", "k2"])
_UNIQUE_WINDOWS: st.SearchStrategy[float | None] = st.sampled_from([None, None, 4.0, 20.0])
#: Q18.8: concurrency keys from a tiny alphabet too, so that keys fill up.
_GROUP_KEYS: st.SearchStrategy[str | None] = st.sampled_from([None, "g1", "g1", "g1", "g2"])
_HEADERS: st.SearchStrategy[_HeaderPairs | None] = st.sampled_from(
    (None, (), (("traceparent", "00-0af7-b7ad-01"),), (("b", ""), ("a", "ü"), ("ab", "{}")))
)
_WORKER_IDS = st.sampled_from(_WORKERS)
_BATCH_SIZES = st.sampled_from((None, 1, 2, 3, 0, -1))
_CLAIM_SIZES = st.sampled_from((1, 2, 3, 0, -1))
_ADVANCES = st.sampled_from((1.0, 0.5, 5.0, 11.0, 31.0, 100.0, 4000.0))
_ERRORS = st.sampled_from((None, "boom", ""))
#: Q19.1: a handler's result (None: none).
_RESULTS = st.sampled_from((None, b"", b"r\x00"))
_RETRY_DELAYS = st.sampled_from((None, 0.0, 3.0, 0.5))
_EXTENDS = st.sampled_from((None, 1.0, 5.0, 40.0, 0.25))
_SWEEP_RETENTION_CHOICES: tuple[float | Literal["own"] | None, ...] = ("own", None, *_RETENTIONS)
_SWEEP_RETENTIONS = st.sampled_from(_SWEEP_RETENTION_CHOICES)
_HANDLE_OP_CHOICES: tuple[_HandleOp, ...] = ("heartbeat", "ack", "retry", "fail", "release")
_HANDLE_OPS = st.sampled_from(_HANDLE_OP_CHOICES)
_TX_SIZES = st.integers(0, 3)
_PURGE_AGES = st.sampled_from((None, 0.0, 3.0, 10.0))
_LIST_LIMITS = st.sampled_from((1, 2, 100))
_ACK_BATCH_SIZES = st.integers(0, 5)

_StepKind: TypeAlias = Literal[
    "enqueue",
    "claim",
    "advance",
    "ack",
    "retry",
    "fail",
    "release",  # Q19.8
    "heartbeat",
    "advance to",
    "enqueue_many",
    "ack_batch",
    "cancel",
    "sweep",
    "transaction",
    "crash",
    "reuse",
    "ack_handles",
    "heartbeat_handles",
    "retry_handles",
    "fail_handles",
    "ack_handles_and_claim",
    "requeue_dead",
    "purge_dead",
    "inspect",
    "reschedule",  # Q16
    "fire_periodic",  # Q17
    "pause",
    "per_key",  # Q18.8
    "settle_cancelled",  # Q19.5
]
_HANDLE_KINDS: tuple[_StepKind, ...] = (
    "ack",
    "retry",
    "fail",
    "release",
    "heartbeat",
    "crash",
    "ack_handles",
    "heartbeat_handles",
    "retry_handles",
    "fail_handles",
    "ack_handles_and_claim",
)
_BATCH_HANDLE_KINDS: tuple[_StepKind, ...] = (
    "ack_handles",
    "heartbeat_handles",
    "retry_handles",
    "fail_handles",
    "ack_handles_and_claim",
)


@st.composite
def _draw_step(draw: st.DrawFn, run: _Run, now: datetime) -> _Step:
    """One step that can be taken from the run's current state.

    Kinds are listed simplest first, so that shrinking turns steps into enqueues and
    claims where it can. Enqueues, claims and time moves are listed more than once: they
    are what leads to the interesting states (lapsed claims, reclaims, expiry).
    """
    live = [s.label for s in run.slots.values() if not s.consumed and not s.crashed]
    consumed = [s.label for s in run.slots.values() if s.consumed]
    targets = run._time_targets(now)
    kinds: list[_StepKind] = ["enqueue", "claim", "advance", "claim", "enqueue"]
    if live:
        kinds += _HANDLE_KINDS
    if targets:
        kinds += ["advance to", "advance to"]
    kinds += ["enqueue_many", "ack_batch", "cancel", "sweep", "transaction"]
    kinds += ["requeue_dead", "purge_dead", "inspect"]
    kinds += ["reschedule"]  # Q16
    kinds += ["fire_periodic", "fire_periodic"]  # Q17
    kinds.append("pause")  # Q18
    kinds += ["per_key", "per_key"]  # Q18.8: its own kind, so keyed claims meet full keys
    kinds += ["cancel", "settle_cancelled"]  # Q19.5: cancels of running jobs, then settles
    if consumed:
        kinds.append("reuse")
    kind = draw(st.sampled_from(kinds))
    queue = draw(run.labels)
    if kind == "enqueue":
        return _draw_enqueue(draw, queue)
    if kind == "claim":
        return Claim(queue, worker=draw(_WORKER_IDS), n=draw(_BATCH_SIZES))
    if kind == "advance":
        return Advance(draw(_ADVANCES))
    if kind == "advance to":
        return draw(st.sampled_from(targets[draw(st.sampled_from(sorted(targets)))]))
    if kind == "crash":
        return Crash(draw(_WORKER_IDS))
    if kind in _BATCH_HANDLE_KINDS:
        return _draw_batch_handle_step(draw, run, kind, queue, live)
    if kind in ("ack", "retry", "fail", "release", "heartbeat"):
        return _draw_handle_step(draw, kind, live)
    if kind == "reuse":
        return Reuse(draw(st.sampled_from(consumed)), op=draw(_HANDLE_OPS))
    if kind == "enqueue_many":
        payloads = draw(_PAYLOAD_LISTS)
        keyed: bool = draw(st.booleans())
        keys = tuple(draw(_UNIQUE_KEYS) for _ in payloads) if keyed else None
        grouped: bool = draw(st.booleans())
        groups = tuple(draw(_GROUP_KEYS) for _ in payloads) if grouped else None
        return EnqueueMany(
            queue,
            payloads=payloads,
            priority=draw(_PRIORITIES),
            delay_s=draw(_DELAYS),
            max_attempts=draw(_OVERRIDES),
            headers=draw(_HEADERS),
            unique_keys=keys,
            unique_for_s=draw(_UNIQUE_WINDOWS) if keys and any(keys) else None,
            concurrency_keys=groups,
        )
    if kind == "transaction":
        return _draw_transaction(draw, run)
    if kind == "reschedule":
        return draw_q16_step(draw, run, queue)
    if kind == "fire_periodic":  # Q17
        return draw_fire_periodic(draw)
    if kind == "pause":  # Q18
        return draw_control(draw, queue)
    if kind == "per_key":  # Q18.8
        return draw_per_key(draw, queue)
    if kind == "settle_cancelled":  # Q19.5
        return draw_q19_5_step(draw, run, queue)
    return _draw_row_step(draw, run, kind, queue)


def _draw_enqueue(draw: st.DrawFn, queue: str) -> Enqueue:
    key = draw(_UNIQUE_KEYS)
    return Enqueue(
        queue,
        payload=draw(_PAYLOADS),
        payload_as=draw(_PAYLOAD_TYPES),
        priority=draw(_PRIORITIES),
        delay_s=draw(_DELAYS),
        run_at_in_s=draw(_RUN_AT_IN),
        run_at_tz=draw(st.integers(0, len(_RUN_AT_TIMEZONES) - 1)),
        max_attempts=draw(_OVERRIDES),
        headers=draw(_HEADERS),
        unique_key=key,
        unique_for_s=None if key is None else draw(_UNIQUE_WINDOWS),
        concurrency_key=draw(_GROUP_KEYS),
    )


def _draw_batch_handle_step(
    draw: st.DrawFn, run: _Run, kind: _StepKind, queue: str, live: list[str]
) -> _Step:
    """A ``*_handles`` step over distinct live handles of ``queue`` (possibly none)."""
    name = run.queues[queue].name
    mine = [label for label in live if run.slots[label].handle.job.queue == name]
    # One handle per job: a stale and a current handle of one job may both be live
    # here, and listing a job twice is a usage error (InvalidArgument).
    slots = run.slots
    chosen: list[str] = (
        draw(st.lists(st.sampled_from(mine), unique_by=lambda label: slots[label].handle.id))
        if mine
        else []
    )
    if kind == "heartbeat_handles":
        return HeartbeatHandles(queue, handles=tuple(chosen), extend_s=draw(_EXTENDS))
    if kind == "retry_handles":
        retries = tuple((label, draw(_ERRORS), draw(_RETRY_DELAYS)) for label in chosen)
        return RetryHandles(queue, items=retries)
    if kind == "fail_handles":
        return FailHandles(queue, items=tuple((label, draw(_ERRORS)) for label in chosen))
    if kind == "ack_handles_and_claim":
        return AckHandlesAndClaim(
            queue,
            handles=tuple(chosen),
            worker=draw(_WORKER_IDS),
            n=draw(_CLAIM_SIZES),
            results=draw(st.none() | st.tuples(*[_RESULTS] * len(chosen))),
        )
    results = draw(st.none() | st.tuples(*[_RESULTS] * len(chosen)))
    return AckHandles(queue, handles=tuple(chosen), results=results)


def _draw_handle_step(draw: st.DrawFn, kind: _StepKind, live: list[str]) -> _Step:
    """An operation of one live handle."""
    handle = draw(st.sampled_from(live))
    if kind == "ack":
        return Ack(handle, result=draw(_RESULTS))
    if kind == "retry":
        return Retry(handle, error=draw(_ERRORS), delay_s=draw(_RETRY_DELAYS))
    if kind == "fail":
        return Fail(handle, error=draw(_ERRORS))
    if kind == "release":
        return Release(handle, error=draw(_ERRORS))
    progress = draw(st.sampled_from((None, None, "", "1 of 3", "é" * 1024)))
    return Heartbeat(handle, extend_s=draw(_EXTENDS), progress=progress)


def _draw_row_step(draw: st.DrawFn, run: _Run, kind: _StepKind, queue: str) -> _Step:
    """A step of the queue on rows picked by id (ack_batch, cancel, requeue_dead) or on
    all of them (sweep, purge_dead, inspect)."""
    # Ids of processing (for ack_batch) or live (for cancel) rows come first, so that
    # effective acks and cancels are common; then every id ever issued (lapsed, dead,
    # gone, of other queues) and ids never issued.
    jobs = run.model.jobs()
    name = run.queues[queue].name
    processing = [job.id for job in jobs if job.state == "processing" and job.queue == name]
    live_ids = [job.id for job in jobs if job.state != "dead" and job.queue == name]
    pool = st.sampled_from([*live_ids, *run._id_pool()])
    if kind == "ack_batch":
        ack_pool = st.sampled_from([*processing, *processing, *run._id_pool()])
        ids = [draw(ack_pool) for _ in range(draw(_ACK_BATCH_SIZES))]
        duplicate: bool = draw(st.booleans())
        if ids and duplicate:
            ids.append(ids[0])
        return AckBatch(queue, ids=tuple(ids))
    if kind == "cancel":  # Q19.5: processing rows (to become cancelling) first
        running: bool = draw(st.booleans())
        if processing and running:
            return Cancel(queue, job_id=draw(st.sampled_from(processing)))
        return Cancel(queue, job_id=draw(pool))
    if kind == "sweep":
        return Sweep(queue, retention_s=draw(_SWEEP_RETENTIONS))
    if kind == "requeue_dead":
        # Dead ids of this queue first, then any id (live, gone, of other queues).
        dead = [job.id for job in jobs if job.state == "dead" and job.queue == name]
        every: bool = draw(st.booleans())
        if every:
            return RequeueDead(queue)
        redrive_pool = st.sampled_from([*dead, *dead, *run._id_pool()])
        return RequeueDead(queue, ids=tuple(draw(redrive_pool) for _ in range(draw(_TX_SIZES))))
    if kind == "purge_dead":
        older_than_s, dry_run = draw(_PURGE_AGES), draw(st.booleans())
        if draw(st.booleans()):
            return PurgeDead(queue, older_than_s=older_than_s, dry_run=dry_run)
        # D25.1: a selection, dead ids of this queue first, then any id.
        dead = [job.id for job in jobs if job.state == "dead" and job.queue == name]
        pool = st.sampled_from([*dead, *dead, *run._id_pool()])
        chosen = tuple(draw(pool) for _ in range(draw(_TX_SIZES)))
        return PurgeDead(queue, older_than_s=older_than_s, dry_run=dry_run, ids=chosen)
    assert kind == "inspect", kind
    return Inspect(queue, every_queue=draw(st.booleans()), limit=draw(_LIST_LIMITS))


def _draw_transaction(draw: st.DrawFn, run: _Run) -> Tx:
    items = tuple(
        TxItem(
            draw(run.labels),
            bare=draw(st.booleans()),
            payload=draw(_PAYLOADS),
            priority=draw(_PRIORITIES),
            delay_s=draw(_DELAYS),
            max_attempts=draw(_OVERRIDES),
            headers=draw(_HEADERS),
            unique_key=(key := draw(_UNIQUE_KEYS)),
            unique_for_s=None if key is None else draw(_UNIQUE_WINDOWS),
            concurrency_key=draw(_GROUP_KEYS),
        )
        for _ in range(draw(_TX_SIZES))
    )
    return Tx(items, commit=draw(st.booleans()))
