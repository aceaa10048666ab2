"""The per-job history checker (issue 5 item 1) on hand-built histories.

A clean history passes; each rule, broken on its own, is reported with its name and the
job; notes are not violations. No event loop: the checker is pure.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from alkstore_trio import Job, WorkerEvent
from alkstore_trio.testing._history import (
    FinalState,
    HistoryEvent,
    HistoryRecorder,
    check_history,
)
from alkstore_trio.testing._history_files import load_history

#: Store times are epoch seconds; these tests use small numbers.
VT = 30.0


class History:
    """A hand-built history: events of several workers, with per-worker sequence numbers."""

    def __init__(self) -> None:
        self.events: list[HistoryEvent] = []
        self._seq: Counter[str] = Counter()

    def add(self, kind, worker, t, job=None, attempt=None, **fields) -> History:
        seq = self._seq[worker]
        self._seq[worker] += 1
        self.events.append(
            HistoryEvent(
                kind=kind, source=worker, seq=seq, t=t, job_id=job, attempt=attempt, **fields
            )
        )
        return self

    def claim(self, worker, t, job, attempt, claimed_at) -> History:
        return self.add(
            "claim",
            worker,
            t,
            job,
            attempt,
            claimed_at=claimed_at,
            claim_expires_at=claimed_at + VT,
        )

    def run(self, worker, t, job, attempt, outcome="ack", duration=1.0) -> History:
        """start, finish and an accepted outcome, all at ``t`` .. ``t + duration``."""
        self.add("start", worker, t, job, attempt)
        self.add("finish", worker, t + duration, job, attempt)
        return self.add(outcome, worker, t + duration, job, attempt)

    def stop(self, *workers) -> History:
        for worker in workers:
            self.add("worker_stop", worker, 1000.0)
        return self


def clean_history() -> History:
    h = History()
    # job 1: claimed, heartbeat, acked.
    h.claim("w1", 0, 1, 1, claimed_at=100)
    h.add("start", "w1", 0, 1, 1)
    h.add("heartbeat", "w1", 10, 1, 1)
    h.add("finish", "w1", 11, 1, 1)
    h.add("ack", "w1", 11, 1, 1)
    # job 2: w1's lease lapses, w2 reclaims after the deadline; w1's heartbeat is refused.
    h.claim("w1", 0, 2, 1, claimed_at=100)
    h.add("start", "w1", 0, 2, 1)
    h.claim("w2", 40, 2, 2, claimed_at=140)
    h.add("start", "w2", 40, 2, 2)
    h.add("lease_lost", "w1", 45, 2, 2 - 1)
    h.add("finish", "w1", 45, 2, 1)
    h.add("finish", "w2", 50, 2, 2)
    h.add("ack", "w2", 50, 2, 2)
    # job 3: retried at once, reclaimed before the first deadline (fine: the retry ended
    # the claim), then dead-lettered at its budget.
    h.claim("w1", 1, 3, 1, claimed_at=101)
    h.run("w1", 1, 3, 1, outcome="retry", duration=0)
    h.claim("w2", 2, 3, 2, claimed_at=102)
    h.run("w2", 2, 3, 2, outcome="dead")
    # job 4: never claimed, still pending. job 5: failed.
    h.claim("w2", 3, 5, 1, claimed_at=103)
    h.run("w2", 3, 5, 1, outcome="dead")
    return h.stop("w1", "w2")


CLEAN_FINAL = FinalState.of(live=[4], dead=[3, 5])


def check(h: History, *, final=CLEAN_FINAL, enqueued=(1, 2, 3, 4, 5), **kwargs):
    return check_history(h.events, enqueued=enqueued, final=final, **kwargs)


def test_history_a_clean_history_passes():
    report = check(clean_history())
    report.assert_ok()
    assert (report.jobs, report.claims, report.reclaims, report.acked) == (5, 6, 1, 2)
    assert (report.live, report.dead, report.refused, report.concurrent_runs) == (1, 2, 1, 1)
    assert report.notes == ()
    assert "5 jobs checked" in report.summary()


def test_history_q3_a_second_handout_of_one_attempt_is_a_violation():
    h = clean_history().claim("w2", 0.5, 1, 1, claimed_at=100)
    report = check(h)
    assert report.rules() == {"handout"}
    assert list(report.by_job()) == [1]
    with pytest.raises(
        AssertionError, match=r"job 1:\n.*\[handout\] attempt 1 \(claim token 1\) was handed out"
    ):
        report.assert_ok()


def test_history_q4_a_reclaim_before_the_deadline_is_a_lease_overlap():
    h = History().claim("w1", 0, 7, 1, claimed_at=100)
    h.add("start", "w1", 0, 7, 1)
    h.claim("w2", 5, 7, 2, claimed_at=100 + VT)  # at the deadline: still valid (Q4)
    h.run("w2", 5, 7, 2)
    report = check_history(h.stop("w1", "w2").events, final=FinalState())
    assert report.rules() == {"lease_overlap"}
    assert "held a lease valid until 130" in report.violations[0].message


def test_history_q4_a_reclaim_one_instant_after_the_deadline_is_fine():
    h = History().claim("w1", 0, 7, 1, claimed_at=100)
    h.claim("w2", 5, 7, 2, claimed_at=100 + VT + 1e-6)
    h.run("w2", 5, 7, 2)
    check_history(h.stop("w1", "w2").events, final=FinalState()).assert_ok()


def test_history_a_recorded_heartbeat_deadline_extends_the_lease():
    def history(lease_until):
        h = History().claim("w1", 0, 7, 1, claimed_at=100)
        h.add("heartbeat", "w1", 1, 7, 1, lease_until=lease_until)
        h.claim("w2", 50, 7, 2, claimed_at=150)
        h.run("w2", 50, 7, 2)
        return check_history(h.stop("w1", "w2").events, final=FinalState())

    assert history(lease_until=160.0).rules() == {"lease_overlap"}
    assert history(lease_until=149.0).ok
    # Without the new deadline, the heartbeat is assumed to extend by the default
    # (documented): the overlap behind it is not visible to this rule.
    assert history(lease_until=None).ok


def test_history_claims_out_of_store_order_are_reported():
    h = History().claim("w1", 0, 7, 1, claimed_at=200)
    h.run("w1", 0, 7, 1, outcome="retry")
    h.claim("w2", 5, 7, 2, claimed_at=150)
    h.run("w2", 5, 7, 2)
    report = check_history(h.stop("w1", "w2").events, final=FinalState())
    # By store time, attempt 2 came first and was acked, then attempt 1 was claimed.
    assert report.rules() == {"lease_overlap", "stale_token"}
    assert any("claim order" in v.message for v in report.violations)


def test_history_q4_a_heartbeat_accepted_after_a_reclaim_is_a_stale_token():
    h = History().claim("w1", 0, 7, 1, claimed_at=100)
    h.claim("w2", 40, 7, 2, claimed_at=140)
    h.add("heartbeat", "w1", 41, 7, 1)
    h.run("w2", 42, 7, 2)
    report = check_history(h.stop("w1", "w2").events, final=FinalState())
    assert report.rules() == {"stale_token"}
    assert "heartbeat by w1 (attempt 1)" in report.violations[0].message
    # Within the recording slack (or at the same instant) the order is unknown: no claim.
    assert check_history(h.events, final=FinalState(), slack_s=2).ok


def test_history_q4_an_ack_followed_by_any_later_claim_is_a_stale_token():
    # Whatever the recorded order: either the ack held a stale token, or a deleted row
    # was claimed again.
    h = History().claim("w1", 0, 7, 1, claimed_at=100)
    h.claim("w2", 40, 7, 2, claimed_at=140)
    h.add("ack", "w1", 39, 7, 1)
    h.add("lease_lost", "w2", 41, 7, 2)
    report = check_history(h.stop("w1", "w2").events, final=FinalState())
    assert report.rules() == {"stale_token"}
    assert "finished job was claimed again" in report.violations[0].message


def test_history_an_operation_by_another_worker_than_the_holder_is_foreign():
    h = History().claim("w1", 0, 7, 1, claimed_at=100).add("ack", "w2", 1, 7, 1)
    report = check_history(h.stop("w1", "w2").events, final=FinalState())
    assert report.rules() == {"foreign_operation"}


def test_history_an_operation_accepted_after_a_refusal_is_reported():
    h = History().claim("w1", 0, 7, 1, claimed_at=100)
    h.add("lease_lost", "w1", 1, 7, 1).add("ack", "w1", 2, 7, 1)
    report = check_history(h.stop("w1").events, final=FinalState())
    assert report.rules() == {"after_refusal"}


def test_history_q4_one_shot_operations_accepted_twice_are_reported():
    h = History().claim("w1", 0, 7, 1, claimed_at=100)
    h.add("retry", "w1", 1, 7, 1).add("heartbeat", "w1", 2, 7, 1)
    report = check_history(h.stop("w1").events, final=FinalState.of(live=[7]))
    assert report.rules() == {"after_terminal"}


def test_history_an_operation_without_a_recorded_claim_is_an_orphan():
    h = History().add("ack", "w1", 1, 7, 3)
    report = check_history(h.stop("w1").events, final=FinalState())
    assert report.rules() == {"orphan"}
    assert "attempt 3" in report.violations[0].message


def test_history_handler_started_twice_or_finished_unstarted_is_reported():
    h = History().claim("w1", 0, 7, 1, claimed_at=100)
    h.add("start", "w1", 1, 7, 1).add("start", "w1", 2, 7, 1).add("ack", "w1", 3, 7, 1)
    h.claim("w1", 0, 8, 1, claimed_at=100).add("finish", "w1", 1, 8, 1).add("ack", "w1", 1, 8, 1)
    report = check_history(h.stop("w1").events, final=FinalState())
    assert report.rules() == {"handler"}
    assert sorted(report.by_job()) == [7, 8]


def test_history_events_of_a_job_never_enqueued_are_reported():
    h = History().claim("w1", 0, 99, 1, claimed_at=100).run("w1", 0, 99, 1).stop("w1")
    report = check_history(h.events, enqueued=[1], final=FinalState.of(live=[1]))
    assert report.rules() == {"unknown_job"}
    assert list(report.by_job()) == [99]


def test_history_a_job_neither_acked_nor_dead_nor_live_is_missing():
    h = clean_history()
    h.events = [e for e in h.events if not (e.job_id == 1 and e.kind == "ack")]
    report = check(h)
    assert report.rules() == {"missing"}
    assert report.violations[0].job_id == 1
    # An enqueued job that never shows up anywhere is missing too.
    report = check(clean_history(), final=FinalState.of(dead=[3, 5]))
    assert [(v.rule, v.job_id) for v in report.violations] == [("missing", 4)]
    # Unless the test removed it on purpose (cancel, purge).
    check(clean_history(), final=FinalState.of(dead=[3, 5]), removed=[4]).assert_ok()


def test_history_a_final_state_contradicting_the_record_is_reported():
    report = check(clean_history(), final=FinalState.of(live=[1, 4], dead=[3, 5]))
    assert [(v.rule, v.job_id) for v in report.violations] == [("final_state", 1)]
    report = check(clean_history(), final=FinalState.of(live=[4, 5], dead=[3]))
    assert [(v.rule, v.job_id) for v in report.violations] == [("final_state", 5)]


def test_history_a_job_gone_after_its_holder_was_killed_is_a_note():
    h = History().claim("victim", 0, 7, 1, claimed_at=100)
    h.add("start", "victim", 0, 7, 1).add("finish", "victim", 1, 7, 1)  # then kill -9
    report = check_history(h.events, enqueued=[7], final=FinalState())
    report.assert_ok()
    (note,) = report.notes
    assert "incomplete record" in note
    # The same record with a worker_stop: the ack is really missing.
    assert check_history(h.stop("victim").events, final=FinalState()).rules() == {"missing"}


def test_history_a_job_gone_after_its_ack_failed_with_an_engine_error_is_a_note():
    h = History().claim("w1", 0, 7, 1, claimed_at=100).add("start", "w1", 0, 7, 1)
    h.add("finish", "w1", 1, 7, 1).add("engine_error", "w1", 1, 7, 1, op="ack")
    h.add("lease_lost", "w1", 2, 7, 1)  # the repeated ack was refused: the row was gone
    report = check_history(h.stop("w1").events, final=FinalState())
    report.assert_ok()
    assert "engine error" in report.notes[0]


def test_history_attempts_missing_from_the_record_are_notes():
    h = History().claim("w1", 0, 7, 2, claimed_at=100).claim("w1", 50, 7, 4, claimed_at=150)
    h.run("w1", 50, 7, 4)
    report = check_history(h.stop("w1").events, final=FinalState())
    report.assert_ok()
    assert len(report.notes) == 2


def test_history_slack_must_be_a_finite_non_negative_number():
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="slack_s"):
            check_history([], slack_s=bad)


# --- records: the recorder, its JSON lines and the loader ---------------------------------


T0 = datetime(2030, 1, 1, tzinfo=UTC)


def worker_event(kind, worker, at, job_id=None, attempt=1, claimed=None, **fields):
    """A WorkerEvent as the worker publishes it: its job is the claim's snapshot (claimed
    at store time ``T0 + claimed``, by default the event's own time)."""
    claimed = at if claimed is None else claimed
    job = None
    if job_id is not None:
        job = Job(
            id=job_id,
            queue="q",
            payload=b"SECRET-PAYLOAD",
            priority=0,
            state="processing",
            attempts=attempt,
            max_attempts=3,
            run_at=T0,
            enqueued_at=T0,
            visibility_timeout_s=VT,
            backoff_base_s=5.0,
            expires_at=None,
            claimed_by=worker,
            claimed_at=T0 + timedelta(seconds=claimed),
            claim_expires_at=T0 + timedelta(seconds=claimed + VT),
            last_error=None,
            died_at=None,
        )
    return WorkerEvent(
        kind=kind,
        worker_id=worker,
        at=at,
        wall_time=1e9 + at,
        job=job,
        queue=None if job is None else "q",
        message=fields.pop("message", kind),
        **fields,
    )


def recorded_run(recorder: HistoryRecorder) -> None:
    recorder.record(worker_event("worker_start", "w1", 0))
    recorder.record(worker_event("claim", "w1", 0, 1))
    recorder.record(worker_event("start", "w1", 0, 1, claimed=0))
    recorder.record(worker_event("engine_error", "w1", 1, 1, claimed=0, message="ack failed"))
    recorder.record(worker_event("ack", "w1", 2, 1, claimed=0))
    recorder.record(worker_event("worker_stop", "w1", 3))


def test_history_recorder_keeps_events_and_writes_json_lines_without_payload():
    stream = io.StringIO()
    recorder = HistoryRecorder(stream)
    recorded_run(recorder)
    kinds = [e.kind for e in recorder.events]
    assert kinds == ["worker_start", "claim", "start", "engine_error", "ack", "worker_stop"]
    assert [e.seq for e in recorder.events] == list(range(6))
    claim = recorder.events[1]
    assert claim.claimed_at == (T0 + timedelta(seconds=0)).timestamp()
    assert claim.claim_expires_at == claim.claimed_at + VT
    assert recorder.events[3].op == "ack"
    text = stream.getvalue()
    assert "SECRET-PAYLOAD" not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert (lines[1]["ev"], lines[1]["id"], lines[1]["attempt"]) == ("claim", 1, 1)
    recorder.check(enqueued=[1], final=FinalState()).assert_ok()


def test_history_loader_merges_files_and_skips_a_torn_last_line(tmp_path):
    one, two = io.StringIO(), io.StringIO()
    recorded_run(HistoryRecorder(one, keep=False))
    second = HistoryRecorder(two, keep=False)
    second.record(worker_event("claim", "w2", 5, 2))
    second.record(worker_event("ack", "w2", 6, 2, claimed=5))
    path = tmp_path / "w2.jsonl"
    path.write_text(two.getvalue() + '{"ev": "cla')  # killed while writing
    events = load_history([io.StringIO(one.getvalue()), path])
    assert Counter(e.source for e in events) == {"w1": 6, "w2": 2}
    assert events[1].t == 1e9  # wall time by default
    report = check_history(events, enqueued=[1, 2], final=FinalState())
    report.assert_ok()
    assert report.acked == 2
    events = load_history([io.StringIO(one.getvalue())], time_base="trio")
    assert events[1].t == 0


def test_history_loader_reads_the_older_fault_records():
    """``tests/faults/_worker_proc.py`` writes start/end with the claim's store times and
    the worker's log records (no claim lines, no worker id but on ``ready``)."""
    lines = [
        {"ev": "ready", "pid": 7, "t": 0.0, "worker_id": "w7", "app": "a"},
        {"ev": "start", "pid": 7, "t": 1.0, "id": 1, "attempt": 1, "claimed_at": 10.0,
         "claim_expires_at": 13.0},
        {"ev": "end", "pid": 7, "t": 2.0, "id": 1, "attempt": 1, "claimed_at": 10.0,
         "claim_expires_at": 13.0, "outcome": "returned"},
        {"ev": "ack", "pid": 7, "t": 2.1, "id": 1, "attempt": 1},
        {"ev": "stopped", "pid": 7, "t": 3.0, "stats": {}},
    ]  # fmt: skip
    events = load_history([io.StringIO("\n".join(json.dumps(r) for r in lines) + "\n")])
    assert {e.source for e in events} == {"w7"}
    assert [e.kind for e in events] == ["worker_start", "start", "finish", "ack", "worker_stop"]
    report = check_history(events, enqueued=[1], final=FinalState())
    report.assert_ok()
    assert report.claims == 1
    # A run of attempt 2 by another process, whose claim times (carried by its start
    # record) put it inside the first lease, after the first attempt's ack.
    lines.append({"ev": "start", "pid": 8, "t": 1.5, "id": 1, "attempt": 2, "claimed_at": 12.0,
                  "claim_expires_at": 15.0})  # fmt: skip
    events = load_history([io.StringIO("\n".join(json.dumps(r) for r in lines))])
    report = check_history(events, enqueued=[1], final=FinalState())
    assert report.rules() == {"lease_overlap", "stale_token"}


def test_history_q19_8_a_release_then_a_reclaim_of_the_same_attempt_is_no_handout():
    # A release gives the attempt back: the next claim repeats attempt 1 with a new
    # token. Keyed by token, that is two claims; a record without tokens (keyed by
    # attempt) would read it as one attempt handed out twice.
    def releasing(with_tokens: bool) -> History:
        first = {"claim_token": 11} if with_tokens else {}
        second = {"claim_token": 12} if with_tokens else {}
        h = History()
        h.add("claim", "w1", 0, 7, 1, claimed_at=100, claim_expires_at=100 + VT, **first)
        h.add("start", "w1", 1, 7, 1, **first).add("release", "w1", 2, 7, 1, **first)
        h.add("claim", "w2", 3, 7, 1, claimed_at=103, claim_expires_at=103 + VT, **second)
        h.add("start", "w2", 4, 7, 1, **second).add("finish", "w2", 5, 7, 1, **second)
        return h.add("ack", "w2", 5, 7, 1, **second).stop("w1", "w2")

    report = check_history(releasing(True).events, final=FinalState())
    assert report.ok, report.violations
    assert report.claims == 2
    assert "handout" in check_history(releasing(False).events, final=FinalState()).rules()
