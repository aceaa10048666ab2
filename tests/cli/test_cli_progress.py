"""Q19.7 on the command line: ``jobs show`` (text and ``--json``) and ``jobs list`` show a
running job's progress, run in-process through ``main([...])`` against a throwaway
PostgreSQL schema."""

from __future__ import annotations

import json

from alkstore_trio import Store
from alkstore_trio._cli import EXIT_OK


async def _running(store: Store, progress: list[str | None]) -> list[int]:
    queue = store.queue("imports")
    ids = await queue.enqueue_many([b"file"] * len(progress))
    handles = await queue.claim_batch("w", len(progress))
    assert await queue.heartbeat_handles(handles, progress=progress) == [True] * len(progress)
    return ids


def test_q19_7_jobs_show_and_list_print_the_progress(cli, on_store):
    text = "chunk 3 of 10\nline two " + "x" * 100
    reported, silent = on_store(lambda store: _running(store, [text, None]))
    status, out, _ = cli("jobs", "show", str(reported))
    assert status == EXIT_OK
    line = next(line for line in out.splitlines() if line.startswith("progress"))
    assert line.split(None, 1)[1] == " ".join(text.split())  # on one line
    status, out, _ = cli("jobs", "show", str(silent))
    assert "progress              -" in out
    status, out, _ = cli("jobs", "show", str(reported), "--json")
    assert json.loads(out)["progress"] == text
    status, out, _ = cli("jobs", "list", "--queue", "imports", "--state", "processing")
    header, *rows = out.splitlines()
    assert header.split()[-1] == "PROGRESS"
    assert rows[0].endswith(" ".join(text.split())[:39] + "…")  # cut after 40 characters
    assert rows[1].split()[-1] == "-"
