"""Q19.1/Q19.2 on the command line: ``jobs list --state completed`` and ``jobs show`` of a
completed job (completed_at, the result's size and a bounded preview, ``--result-file``),
run in-process through ``main([...])`` against a throwaway PostgreSQL schema."""

from __future__ import annotations

import json

from alkstore_trio import QueueOpts, Store
from alkstore_trio._cli import EXIT_FAILED, EXIT_OK

KEPT = QueueOpts(keep_completed_s=3600)


async def _completed(store: Store, results: list[bytes | None]) -> list[int]:
    queue = store.queue("reports", KEPT)
    ids = await queue.enqueue_many([b'{"n": %d}' % i for i in range(len(results))])
    handles = await queue.claim_batch("w", len(results))
    assert await queue.ack_handles(handles, results=results) == [True] * len(results)
    return ids


def test_q19_2_jobs_list_state_completed_pages_by_id(cli, on_store):
    ids = on_store(lambda store: _completed(store, [b"r0", None, b"r2"]))
    status, out, _ = cli("jobs", "list", "--queue", "reports", "--state", "completed")
    assert status == EXIT_OK
    header, *rows = out.splitlines()
    assert header.split() == ["ID", "QUEUE", "ATTEMPTS", "COMPLETED", "AT", "RESULT"]
    assert [int(row.split()[0]) for row in rows] == ids
    assert rows[0].split()[-2:] == ["2", "bytes"]
    assert rows[1].split()[-1] == "-"
    status, out, _ = cli(
        "jobs", "list", "--queue", "reports", "--state", "completed", "--after-id", str(ids[0]),
        "--json",
    )  # fmt: skip
    listed = [json.loads(line) for line in out.splitlines()]
    assert [job["id"] for job in listed] == ids[1:]
    assert [job["result_size"] for job in listed] == [None, 2]
    assert listed[1]["state"] == "completed"


def test_q19_1_jobs_show_prints_completed_at_and_a_bounded_result_preview(cli, on_store):
    (text_id, binary_id) = on_store(lambda store: _completed(store, [b"x" * 5000, bytes(200)]))
    status, out, _ = cli("jobs", "show", str(text_id))
    assert status == EXIT_OK
    assert "state                 completed" in out
    assert "completed_at" in out
    assert "result                5000 bytes, text" in out
    preview = next(line for line in out.splitlines() if line.startswith("result preview"))
    assert len(preview) < 600, "the preview is not bounded"
    assert preview.endswith("…")
    status, out, _ = cli("jobs", "show", str(binary_id))
    assert "200 bytes, binary" in out
    status, out, _ = cli("jobs", "show", str(binary_id), "--json")
    data = json.loads(out)
    assert (data["state"], data["result_size"]) == ("completed", 200)
    assert data["completed_at"].endswith("Z") or "+00:00" in data["completed_at"]


def test_q19_1_jobs_show_result_file_writes_the_raw_bytes(cli, on_store, tmp_path):
    (job_id, empty_id) = on_store(lambda store: _completed(store, [b"\x00\xffraw", None]))
    target = tmp_path / "result.bin"
    status, out, _ = cli("jobs", "show", str(job_id), "--result-file", str(target))
    assert status == EXIT_OK
    assert target.read_bytes() == b"\x00\xffraw"
    assert "wrote 5 bytes" in out
    missing = tmp_path / "none.bin"
    status, _, err = cli("jobs", "show", str(empty_id), "--result-file", str(missing))
    assert status == EXIT_FAILED
    assert "has no result" in err
    assert not missing.exists()
