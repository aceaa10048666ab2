"""Q16 in the CLI: ``alkstore-trio jobs reschedule ID [--delay-s S | --at ISO8601 | --now]
[--priority P] [--json]``, in-process through ``main([...])`` against a throwaway
PostgreSQL schema; rows are seeded and checked through the library."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from alkstore_trio import Store
from alkstore_trio._cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE


def test_q16_jobs_reschedule_moves_a_pending_job_and_runs_it_now(cli, on_store):
    job_id = on_store(lambda store: store.queue("mail").enqueue(b"x", delay_s=3600))
    status, out, _ = cli("jobs", "reschedule", str(job_id), "--at", "2031-05-06T07:08:09+02:00")
    assert status == EXIT_OK
    assert out == (
        f"rescheduled job {job_id} in queue 'mail': due 2031-05-06T05:08:09Z, priority 0\n"
    )
    status, out, _ = cli("jobs", "reschedule", str(job_id), "--priority", "7", "--json")
    assert status == EXIT_OK
    assert json.loads(out) == {
        "id": job_id,
        "queue": "mail",
        "rescheduled": True,
        "run_at": "2031-05-06T05:08:09Z",
        "priority": 7,
    }
    status, _, _ = cli("jobs", "reschedule", str(job_id), "--now")
    assert status == EXIT_OK

    async def ready(store: Store) -> tuple[Any, Any]:
        job = await store.get_job(job_id)
        handle = await store.queue("mail").claim_one("w")
        return job, handle

    job, handle = on_store(ready)
    assert job.priority == 7
    assert job.run_at <= datetime.now(UTC)
    assert handle is not None
    assert handle.id == job_id
    status, _, err = cli("jobs", "reschedule", str(job_id), "--delay-s", "60")
    assert status == EXIT_FAILED
    assert "it is processing; only a pending job can be rescheduled" in err


def test_q16_jobs_reschedule_delay_is_relative_to_now(cli, on_store):
    job_id = on_store(lambda store: store.queue("mail").enqueue(b"x"))
    assert cli("jobs", "reschedule", str(job_id), "--delay-s", "600")[0] == EXIT_OK
    job = on_store(lambda store: store.get_job(job_id))
    assert 590 < (job.run_at - datetime.now(UTC)).total_seconds() <= 600
    assert cli("jobs", "reschedule", str(job_id), "--delay-s", "-5")[0] == EXIT_OK
    job = on_store(lambda store: store.get_job(job_id))
    assert job.run_at <= datetime.now(UTC)


def test_q16_jobs_reschedule_usage_errors_and_missing_jobs(cli):
    assert cli("jobs", "reschedule", "1")[0] == EXIT_USAGE  # nothing to change
    assert cli("jobs", "reschedule", "1", "--now", "--delay-s", "5")[0] == EXIT_USAGE
    status, _, err = cli("jobs", "reschedule", "1", "--at", "2031-01-01T00:00:00")
    assert status == EXIT_USAGE
    assert "has no UTC offset" in err
    assert cli("jobs", "reschedule", "1", "--delay-s", "nan")[0] == EXIT_USAGE
    assert cli("jobs", "reschedule", "1", "--priority", str(2**31))[0] == EXIT_USAGE
    status, _, err = cli("jobs", "reschedule", "999999", "--now")
    assert status == EXIT_FAILED
    assert "there is no job with this id" in err
