"""The history checker (issue 5 item 1) on real workers: a clean run passes, a tampered
record fails.

Two :class:`Worker` s run on the in-memory engine under trio's
``MockClock(autojump_threshold=0)``; the store's clock follows trio's, so leases lapse and
heartbeats renew them in mock time. The run has retries, a dead-letter by exhaustion, a
``Fail``, a handler timeout, a heartbeat-kept long job, a job cancelled while it runs (R15:
its handler is cancelled at once and the job recorded cancelled), and a stale worker whose
heartbeats come too late, whose job the second worker reclaims and finishes, and whose late
ack is refused. Every
event of both workers goes through a :class:`HistoryRecorder` (in memory and as JSON
lines); the checker must pass on it, and fail on each kind of tampering.
"""

from __future__ import annotations

import dataclasses
import io
from datetime import UTC, datetime

import pytest
import trio
from _figures import history_figures

from alkstore_trio import Fail, QueueOpts, Retry, Worker, open_store
from alkstore_trio.testing import TrioClock
from alkstore_trio.testing._history import (
    HistoryEvent,
    HistoryRecorder,
    check_history,
    read_final_state,
)
from alkstore_trio.testing._history_files import load_history

T0 = datetime(2000, 1, 1, tzinfo=UTC)
VT_S = 10.0


async def wait_until(predicate, *, step_s=0.5, limit_s=600.0):
    deadline = trio.current_time() + limit_s
    while not predicate():
        assert trio.current_time() < deadline, "condition never became true"
        await trio.sleep(step_s)


@dataclasses.dataclass
class Run:
    events: list[HistoryEvent]
    jsonl: str
    enqueued: list[int]
    ids: dict[bytes, int]
    final: object
    removed: list[int]
    stale: Worker
    main: Worker


async def run_scenario() -> Run:
    stream = io.StringIO()
    recorder = HistoryRecorder(stream)
    async with open_store("memory://", clock=TrioClock()) as store:
        opts = QueueOpts(visibility_timeout_s=VT_S, max_attempts=3, backoff_base_s=1)
        queue = store.queue("work", opts)
        attempts: dict[bytes, int] = {}

        async def handler(job):
            payload = job.payload
            attempts[payload] = job.attempts
            if payload == b"retry-once" and job.attempts == 1:
                raise Retry(delay_s=2, error="try again")
            if payload == b"boom":
                raise ValueError("always broken")
            if payload == b"fail":
                raise Fail("give up")
            if payload == b"slow-once" and job.attempts == 1:
                await trio.sleep(10 * VT_S)  # past job_timeout_s
            if payload == b"long":
                await trio.sleep(3 * VT_S)  # kept alive by heartbeats
            if payload == b"cancel-me":
                await trio.sleep_forever()
            await trio.sleep(0.1)

        stale_started = trio.Event()

        async def stale_handler(job):
            stale_started.set()
            # Its first heartbeat would come long after the lease lapsed; the worker
            # cancels it at the lease's deadline, but it ignores the cancellation (as
            # blocking code would) and finishes late: its ack must be refused.
            with trio.CancelScope(shield=True):
                await trio.sleep(5 * VT_S)

        # The stale worker runs alone first, so it gets the "stale" job.
        stale = Worker(
            store,
            {queue: stale_handler},
            worker_id="stale",
            concurrency=1,
            heartbeat_interval_s=1000,
            poll_interval_s=1,
        )
        main = Worker(
            store, {queue: handler}, worker_id="main", job_timeout_s=4 * VT_S, poll_interval_s=1
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(recorder.record_worker, stale)
            await nursery.start(recorder.record_worker, main)
            stale_id = await queue.enqueue(b"stale")
            await nursery.start(stale.run)
            await stale_started.wait()
            payloads = [b"ok", b"retry-once", b"boom", b"fail", b"slow-once", b"long"]
            ids = dict(zip(payloads, await queue.enqueue_many(payloads), strict=True))
            ids[b"stale"] = stale_id
            ids[b"cancel-me"] = await queue.enqueue(b"cancel-me")
            await nursery.start(main.run)

            await wait_until(lambda: b"cancel-me" in attempts)
            assert await queue.cancel(ids[b"cancel-me"])

            async def settled():
                jobs = [await queue.get_job(i) for i in ids.values()]
                return all(job is None or job.state == "dead" for job in jobs)

            done = [False]
            while not done[0]:
                done[0] = await settled() and stale.statistics().lease_lost == 1
                await trio.sleep(1)
            await wait_until(lambda: main.statistics().in_flight == 0)
            stale.stop()
            main.stop()
        final = await read_final_state([queue], ids.values())
    assert attempts[b"boom"] == 3
    return Run(
        events=recorder.events,
        jsonl=stream.getvalue(),
        enqueued=list(ids.values()),
        ids=ids,
        final=final,
        removed=[ids[b"cancel-me"]],
        stale=stale,
        main=main,
    )


def check(run: Run, events=None):
    return check_history(
        run.events if events is None else events,
        enqueued=run.enqueued,
        final=run.final,
        removed=run.removed,
    )


async def test_history_a_real_run_with_faults_passes_the_checker(autojump_clock, figures):
    run = await run_scenario()
    report = check(run)
    report.assert_ok()
    print(f"\n{report.summary()}")
    figures.record(events_checked=len(run.events), **history_figures(report))

    stale, main = run.stale.statistics(), run.main.statistics()
    assert report.claims == stale.claimed + main.claimed
    assert report.acked == stale.acked + main.acked
    assert run.final.dead == {run.ids[b"boom"], run.ids[b"fail"]}
    assert run.final.live == set()
    assert main.timed_out == 1
    assert main.lease_lost == 0
    assert main.cancelled == 1  # R15: the cancel reached the handler; settled as cancelled
    assert stale.lease_lost == 1  # its late ack (or heartbeat) was refused
    assert report.refused == 1
    assert report.reclaims == 1  # the stale job
    assert report.concurrent_runs == 1  # the stale handler still ran when main took over
    heartbeats = [e for e in run.events if e.kind == "heartbeat"]
    assert {e.job_id for e in heartbeats} >= {run.ids[b"long"]}


async def test_history_the_json_lines_record_checks_the_same(autojump_clock):
    run = await run_scenario()
    assert b"SECRET" not in run.jsonl.encode()  # (no payload field at all)
    assert '"payload"' not in run.jsonl
    loaded = load_history([io.StringIO(run.jsonl)], time_base="trio")
    key = [(e.kind, e.source, e.seq, e.t, e.job_id, e.attempt) for e in run.events]
    assert [(e.kind, e.source, e.seq, e.t, e.job_id, e.attempt) for e in loaded] == key
    assert check(run, loaded) == check(run)


def _replace(events, predicate, **changes):
    """The events with the first one matching ``predicate`` changed."""
    out = list(events)
    index = next(i for i, e in enumerate(out) if predicate(e))
    out[index] = dataclasses.replace(out[index], **changes)
    return out, out[index]


async def test_history_a_tampered_record_of_a_real_run_fails(autojump_clock, figures):
    run = await run_scenario()
    events = run.events
    stale_id, ok_id = run.ids[b"stale"], run.ids[b"ok"]

    def is_reclaim(e):
        return e.kind == "claim" and e.job_id == stale_id and e.source == "main"

    def is_stale_refusal(e):
        return e.kind == "lease_lost" and e.source == "stale"

    tampered: dict[str, list[HistoryEvent]] = {}
    # The stale worker's refused ack reported as accepted (wrong whatever the order).
    tampered["stale_token"], _ = _replace(events, is_stale_refusal, kind="ack")
    # ... or as an accepted heartbeat (wrong because it was recorded after the reclaim).
    tampered["stale_token (heartbeat)"], _ = _replace(events, is_stale_refusal, kind="heartbeat")
    # The reclaim moved (on the store's clock) to the stale claim's deadline.
    stale_claim = next(e for e in events if e.kind == "claim" and e.source == "stale")
    tampered["lease_overlap"], _ = _replace(
        events, is_reclaim, claimed_at=stale_claim.claim_expires_at
    )
    # The reclaim recorded with the stale claim's token: a second handout.
    tampered["handout"], _ = _replace(
        events, is_reclaim, attempt=stale_claim.attempt, claim_token=stale_claim.claim_token
    )
    # An ack lost from the record.
    tampered["missing"] = [e for e in events if not (e.kind == "ack" and e.job_id == ok_id)]
    # An ack recorded by the other worker.
    tampered["foreign_operation"], _ = _replace(
        events, lambda e: e.kind == "ack" and e.job_id == ok_id, source="stale", seq=10**6
    )
    # An ack recorded twice.
    ack = next(e for e in events if e.kind == "ack" and e.job_id == ok_id)
    tampered["after_terminal"] = [*events, dataclasses.replace(ack, seq=10**6)]

    for name, record in tampered.items():
        rule = name.split()[0]
        report = check(run, record)
        assert rule in report.rules(), (rule, report.violations)
        with pytest.raises(AssertionError, match=rf"\[{rule}\]"):
            report.assert_ok()
    figures.record(tamperings_tried=len(tampered), tamperings_caught=len(tampered))
