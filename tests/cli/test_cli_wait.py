"""Q19.4 on the command line: ``alkstore-trio jobs wait ID --queue Q [--timeout-s S]``
shows the finished job as ``jobs show`` does, and its exit status says how it finished
(0 completed, 1 no such job, 3 dead or cancelled, 4 timed out). Run in-process through
``main([...])`` against a throwaway PostgreSQL schema."""

from __future__ import annotations

import json

from alkstore_trio import QueueOpts, Store
from alkstore_trio._cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from alkstore_trio._cli._wait import EXIT_NOT_COMPLETED, EXIT_TIMED_OUT

KEPT = QueueOpts(keep_completed_s=3600, max_attempts=1)


async def _finished(store: Store) -> dict[str, int]:
    queue = store.queue("reports", KEPT)
    done, dead, cancelled, pending = await queue.enqueue_many([b"d", b"x", b"c", b"p"])
    handles = {h.id: h for h in await queue.claim_batch("w", 2)}
    assert await handles[done].ack(result=b'{"rows": 3}')
    assert await handles[dead].fail("disk full")
    assert await queue.cancel(cancelled)
    return {"done": done, "dead": dead, "cancelled": cancelled, "pending": pending}


def test_q19_4_jobs_wait_exit_status_says_how_the_job_finished(cli, on_store, tmp_path):
    ids = on_store(_finished)
    status, out, _ = cli("jobs", "wait", str(ids["done"]), "--queue", "reports")
    assert status == EXIT_OK
    assert "state                 completed" in out
    assert "result                11 bytes, json" in out
    status, out, _ = cli("jobs", "wait", str(ids["done"]), "--queue", "reports", "--json")
    assert (status, json.loads(out)["state"]) == (EXIT_OK, "completed")
    target = tmp_path / "result.bin"
    status, _, _ = cli(
        "jobs", "wait", str(ids["done"]), "--queue", "reports", "--result-file", str(target)
    )
    assert (status, target.read_bytes()) == (EXIT_OK, b'{"rows": 3}')
    status, out, _ = cli("jobs", "wait", str(ids["dead"]), "--queue", "reports")
    assert status == EXIT_NOT_COMPLETED == 3
    assert "disk full" in out
    status, out, _ = cli("jobs", "wait", str(ids["cancelled"]), "--queue", "reports")
    assert status == EXIT_NOT_COMPLETED
    assert "state                 cancelled" in out


def test_q19_4_jobs_wait_of_no_such_job_exits_1_naming_keep_completed_s(cli, on_store):
    ids = on_store(_finished)
    status, _, err = cli("jobs", "wait", str(ids["done"]), "--queue", "other")
    assert status == EXIT_FAILED == 1
    assert "keep_completed_s" in err
    assert len(err.strip().splitlines()) == 1


def test_q19_4_jobs_wait_times_out_with_exit_4(cli, on_store):
    ids = on_store(_finished)
    args = ("jobs", "wait", str(ids["pending"]), "--queue", "reports", "--timeout-s", "0.2")
    status, out, err = cli(*args)
    assert status == EXIT_TIMED_OUT == 4
    assert out == ""
    assert "had not finished after 0.2 s" in err


def test_q19_4_jobs_wait_bad_arguments_are_usage_errors(cli):
    for args in (
        ("jobs", "wait", "1"),
        ("jobs", "wait", "1", "--queue", "q", "--timeout-s", "0"),
        ("jobs", "wait", "x", "--queue", "q"),
    ):
        assert cli(*args)[0] == EXIT_USAGE, args
