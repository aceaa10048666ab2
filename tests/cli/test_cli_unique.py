"""Q15 in the CLI: ``enqueue --unique-key`` (and ``--unique-for-s``, ``--json``), and
``dead requeue`` reporting the dead jobs a live job's unique key keeps dead; Q18.8's
``enqueue --concurrency-key``, checked the same way."""

from __future__ import annotations

import json

import pytest

from alkstore_trio import Store
from alkstore_trio._cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE

ENQUEUE = ("enqueue", "--queue", "reports", "--payload-json", "{}")


def test_q15_enqueue_unique_key_prints_the_existing_job(cli, on_store):
    status, out, err = cli(*ENQUEUE, "--unique-key", "day:2026-12-01")
    assert (status, err) == (EXIT_OK, "")
    job_id = int(out)
    status, out, _ = cli(*ENQUEUE, "--unique-key", "day:2026-12-01")
    assert (status, out) == (EXIT_OK, f"{job_id} existing\n")
    status, out, _ = cli(*ENQUEUE, "--unique-key", "day:2026-12-01", "--json")
    assert json.loads(out) == {"id": job_id, "created": False}
    status, out, _ = cli(*ENQUEUE, "--unique-key", "day:2026-12-02", "--json")
    other = json.loads(out)
    assert other["created"] is True
    assert other["id"] != job_id
    job = on_store(lambda store: store.get_job(job_id))
    assert job.unique_key == "day:2026-12-01"


def test_q15_enqueue_unique_for_s_refuses_the_key_after_the_job_is_gone(cli, on_store):
    status, out, _ = cli(*ENQUEUE, "--unique-key", "k", "--unique-for-s", "3600")
    job_id = int(out)
    assert on_store(lambda store: store.queue("reports").cancel(job_id)) is True
    status, out, _ = cli(*ENQUEUE, "--unique-key", "k")
    assert (status, out) == (EXIT_OK, f"{job_id} existing\n")


def test_q18_8_enqueue_concurrency_key_is_kept_on_the_job(cli, on_store):
    status, out, err = cli(*ENQUEUE, "--concurrency-key", "tenant-7")
    assert (status, err) == (EXIT_OK, "")
    job = on_store(lambda store: store.get_job(int(out)))
    assert job.concurrency_key == "tenant-7"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency-key", ""], "concurrency_key must be 1-256 characters"),
        (["--concurrency-key", "k" * 257], "concurrency_key must be at most 256 characters"),
        (["--unique-key", ""], "unique_key must be 1-256 characters"),
        (["--unique-key", "k" * 257], "unique_key must be at most 256 characters"),
        (["--unique-for-s", "5"], "--unique-for-s needs --unique-key"),
        (["--unique-key", "k", "--unique-for-s", "0"], "--unique-for-s must be > 0"),
        (["--unique-key", "k", "--unique-for-s", "soon"], "must be a number of seconds > 0"),
    ],
)
def test_q15_enqueue_bad_unique_options_are_usage_errors(cli, on_store, args, message):
    status, out, err = cli(*ENQUEUE, *args)
    assert (status, out) == (EXIT_USAGE, "")
    assert message in err
    stats = on_store(lambda store: store.stats("reports"))
    assert stats.queue("reports").live == 0


async def _dead_with_key(store: Store, key: str) -> int:
    queue = store.queue("reports")
    job_id = await queue.enqueue(b"doomed", unique_key=key, priority=100)
    handle = await queue.claim_one("w")
    assert handle is not None
    assert handle.id == job_id
    assert await handle.fail("boom")
    return int(job_id)


def test_q15_dead_requeue_reports_the_jobs_a_live_key_keeps_dead(cli, on_store):
    async def seed(store: Store) -> tuple[int, int]:
        dead = await _dead_with_key(store, "k")
        live = await store.queue("reports").enqueue(b"live", unique_key="k")
        return dead, int(live)

    dead, live = on_store(seed)
    status, out, err = cli("dead", "requeue", str(dead))
    assert status == EXIT_FAILED
    assert f"1 dead job(s) stayed dead because a live job holds their unique key: {dead}" in err
    assert "no job was requeued: live jobs hold the unique keys" in err
    status, out, err = cli("dead", "requeue", "--all", "--json")
    assert status == EXIT_OK
    assert json.loads(out) == {
        "queues": [{"queue": "reports", "requeued": 0}],
        "requeued": 0,
        "skipped": [],
        "held": [dead],
    }
    assert on_store(lambda store: store.queue("reports").cancel(live)) is True
    status, out, err = cli("dead", "requeue", str(dead))
    assert (status, err) == (EXIT_OK, "")
    assert "queue 'reports': requeued 1 dead job" in out
