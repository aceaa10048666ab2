"""The operator's commands (issue 6 item 1): ``stats``, ``jobs show/list``, ``dead
list/requeue/purge``, ``enqueue``, ``cancel`` and ``sweep``, run in-process through
``main([...])`` against a throwaway PostgreSQL schema (``schema`` of
``tests/postgres/conftest.py``, dropped after each test). Rows are seeded and checked
through the library in their own ``trio.run``; ``main`` runs its own.

Issue 6 (second round): ``--json`` for ``dead requeue``, ``dead purge`` and ``sweep``,
and the confirmation of ``dead purge`` — on a stand-in terminal in-process, and once on
a real pseudo-terminal in a subprocess.

D30: ``enqueue --header NAME=VALUE`` (a bad one is a usage error before anything is
opened), and the headers shown by ``jobs show`` and exported by the ``--json`` lists.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from typing import Any

import pytest

from alkstore_trio import QueueOpts, Store
from alkstore_trio._cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, main


async def _dead(store: Store, queue: str, payload: bytes, error: str = "boom") -> int:
    q = store.queue(queue)
    job_id = await q.enqueue(payload, priority=100)
    handle = await q.claim_one("w")
    assert handle is not None
    assert handle.id == job_id
    assert await handle.fail(error)
    return job_id


def test_d22_stats_prints_each_queue_and_json(cli, on_store):
    async def seed(store: Store) -> None:
        emails = store.queue("emails", QueueOpts(visibility_timeout_s=60))
        await emails.enqueue_many([b"a", b"b"])
        await emails.enqueue(b"later", delay_s=3600)
        assert await emails.claim_one("w") is not None
        await _dead(store, "reports", b"r")

    on_store(seed)
    status, out, _ = cli("stats")
    assert status == EXIT_OK
    lines = out.splitlines()
    assert lines[1].split() == [
        "QUEUE", "READY", "DELAYED", "PROCESSING", "RECLAIMABLE", "DEAD", "OLDEST", "READY",
    ]  # fmt: skip
    assert lines[2].split()[:6] == ["emails", "1", "1", "1", "0", "0"]
    assert lines[3].split()[:7] == ["reports", "0", "0", "0", "0", "1", "-"]
    status, out, _ = cli("stats", "--json", "--queue", "reports")
    assert status == EXIT_OK
    data = json.loads(out)
    assert [q["queue"] for q in data["queues"]] == ["reports"]
    assert data["queues"][0]["dead"] == 1
    assert data["ids_issued"] == 4


def test_d23_stats_watch_reports_jobs_finished_per_minute(cli, on_store):
    on_store(lambda store: store.queue("q").enqueue_many([b"1", b"2"]))
    status, out, _ = cli("stats", "--watch", "--interval", "0.05", "--count", "2", "--json")
    assert status == EXIT_OK
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["finished_per_min"] is None
    assert second["finished_per_min"] == 0.0  # nothing acked between the readings
    status, out, _ = cli("stats", "--watch", "--interval", "0.05", "--count", "1")
    assert status == EXIT_OK
    assert "finished per minute" in out
    assert "\x1b[" not in out  # not a terminal: plain blocks, no cursor control


def test_d26_jobs_show_previews_json_text_and_binary_payloads(cli, on_store):
    ids = on_store(
        lambda store: store.queue("show").enqueue_many(
            [b'{"to":  "ada@example.com"}', b"line\tone\n", bytes(range(200))]
        )
    )
    status, out, _ = cli("jobs", "show", str(ids[0]))
    assert status == EXIT_OK
    assert "queue                 show" in out
    assert "26 bytes, json" in out
    assert '{"to": "ada@example.com"}' in out
    status, out, _ = cli("jobs", "show", str(ids[1]))
    assert "9 bytes, text" in out
    assert "line\\tone\\n" in out  # escaped: one line, no raw control character
    assert "\t" not in out
    status, out, _ = cli("jobs", "show", str(ids[2]))
    assert "200 bytes, binary" in out  # undecodable bytes: hex of the first 64
    assert "00 01 02 03" in out
    assert out.rstrip().endswith("…")
    status, out, _ = cli("jobs", "show", str(ids[2]), "--json")
    assert json.loads(out)["payload_size"] == 200


def test_d26_jobs_show_payload_writes_the_raw_bytes(
    pg_dsn, schema, on_store, monkeypatch, capfdbinary
):
    monkeypatch.setenv("ALKSTORE_DSN", pg_dsn)
    monkeypatch.setenv("ALKSTORE_SCHEMA", schema)
    assert main(["migrate"]) == EXIT_OK
    job_id = on_store(lambda store: store.queue("raw").enqueue(b"\x00\xff raw"))
    capfdbinary.readouterr()
    assert main(["jobs", "show", str(job_id), "--payload"]) == EXIT_OK
    assert capfdbinary.readouterr().out == b"\x00\xff raw"


def test_jobs_show_of_an_unknown_id_exits_1_with_one_line(cli):
    status, out, err = cli("jobs", "show", "424242")
    assert (status, out) == (EXIT_FAILED, "")
    assert err.count("\n") == 1
    assert "no job 424242" in err


def test_d26_jobs_list_pages_by_id(cli, on_store):
    ids = on_store(lambda store: store.queue("list").enqueue_many([b"1", b"2", b"3"]))
    status, out, _ = cli("jobs", "list", "--queue", "list", "--state", "pending", "--limit", "2")
    assert status == EXIT_OK
    rows = out.splitlines()[1:]
    assert [int(row.split()[0]) for row in rows] == ids[:2]
    status, out, _ = cli(
        "jobs", "list", "--queue", "list", "--state", "pending", "--after-id", str(ids[1]),
        "--json",
    )  # fmt: skip
    assert [json.loads(line)["id"] for line in out.splitlines()] == ids[2:]
    status, _, err = cli("jobs", "list", "--queue", "list", "--state", "done")
    assert status == EXIT_USAGE
    assert "invalid choice" in err


def test_d24_dead_list_and_requeue_by_id(cli, on_store):
    async def seed(store: Store) -> tuple[int, int, int]:
        return (
            await _dead(store, "a", b"1", "first failure"),
            await _dead(store, "b", b"2"),
            await store.queue("a").enqueue(b"live"),
        )

    dead_a, dead_b, live = on_store(seed)
    status, out, _ = cli("dead", "list")
    assert status == EXIT_OK
    assert "first failure" in out
    assert [int(row.split()[0]) for row in out.splitlines()[1:]] == [dead_a, dead_b]
    status, out, err = cli("dead", "requeue", str(dead_a), str(live), "--queue", "a")
    assert status == EXIT_OK
    assert "queue 'a': requeued 1 dead job" in out
    assert f"skipped 1 id(s) that are not dead jobs of queue 'a': {live}" in err

    async def check(store: Store) -> None:
        job = await store.get_job(dead_a)
        assert job is not None
        assert (job.state, job.attempts) == ("pending", 0)
        other = await store.get_job(dead_b)
        assert other is not None
        assert other.state == "dead"

    on_store(check)
    status, out, err = cli("dead", "requeue", str(live))
    assert status == EXIT_FAILED
    assert "none of the ids is a dead job" in err


def test_d24_dead_requeue_all_and_its_usage_errors(cli, on_store):
    async def seed(store: Store) -> None:
        await _dead(store, "a", b"1")
        await _dead(store, "a", b"2")
        await _dead(store, "b", b"3")

    on_store(seed)
    assert cli("dead", "requeue")[0] == EXIT_USAGE
    assert cli("dead", "requeue", "1", "--all")[0] == EXIT_USAGE
    status, out, _ = cli("dead", "requeue", "--all", "--queue", "a")
    assert status == EXIT_OK
    assert "queue 'a': requeued 2 dead jobs" in out
    status, out, _ = cli("dead", "requeue", "--all")
    assert "queue 'b': requeued 1 dead job" in out
    assert "queue 'a'" not in out  # nothing dead left there


def test_d25_dead_purge_older_than_and_all(cli, on_store):
    on_store(lambda store: _dead(store, "p", b"x"))
    status, out, _ = cli("dead", "purge", "--older-than", "3600", "--yes")
    assert (status, out) == (EXIT_OK, "queue 'p': purged 0 dead jobs\n")
    status, out, _ = cli("dead", "purge", "--queue", "p", "-y")
    assert (status, out) == (EXIT_OK, "queue 'p': purged 1 dead job\n")
    assert cli("dead", "purge", "--older-than", "-1", "--yes")[0] == EXIT_USAGE


def test_enqueue_cancel_and_sweep(cli, on_store, tmp_path):
    status, out, _ = cli(
        "enqueue", "--queue", "mail", "--payload-json", '{"to": "ada"}', "--priority", "5",
        "--delay-s", "60", "--max-attempts", "7",
    )  # fmt: skip
    assert status == EXIT_OK
    job_id = int(out)
    payload_file = tmp_path / "payload.bin"
    payload_file.write_bytes(b"\x00binary")
    status, out, _ = cli("enqueue", "--queue", "mail", "--payload-file", str(payload_file))
    second = int(out)

    async def check(store: Store) -> tuple[Any, Any]:
        return await store.get_job(job_id), await store.get_job(second)

    first_job, second_job = on_store(check)
    assert (first_job.payload, first_job.priority, first_job.max_attempts) == (
        b'{"to": "ada"}',
        5,
        7,
    )
    assert (first_job.run_at - first_job.enqueued_at).total_seconds() == 60
    assert second_job.payload == b"\x00binary"
    status, out, _ = cli("cancel", str(job_id))
    assert (status, out) == (EXIT_OK, f"cancelled job {job_id} (pending in queue 'mail')\n")
    status, _, err = cli("cancel", str(job_id))
    assert status == EXIT_FAILED
    assert "there is no live job with this id" in err
    status, out, _ = cli("sweep")
    assert (status, out) == (
        EXIT_OK,
        "queue 'mail': expired 0, purged 0, completed purged 0, cancelled 0\n",
    )
    status, _, err = cli("enqueue", "--queue", "mail", "--payload-json", "{nope")
    assert status == EXIT_USAGE
    assert "is not valid JSON" in err
    assert "nope" not in err  # the payload is not echoed
    assert cli("enqueue", "--queue", "alk_reserved", "--payload-json", "1")[0] == EXIT_USAGE
    status, _, err = cli("enqueue", "--queue", "m", "--payload-file", str(tmp_path / "none"))
    assert status == EXIT_USAGE
    assert "check the path" in err


def test_operator_commands_never_echo_the_password(monkeypatch, capsys, schema):
    monkeypatch.delenv("ALKSTORE_DSN", raising=False)
    dsn = "postgresql://alk:hunter2-secret@127.0.0.1:1/test"
    status = main(["stats", "--dsn", dsn, "--schema", schema, "--connect-timeout", "2"])
    _, err = capsys.readouterr()
    assert status == EXIT_FAILED
    assert "hunter2" not in err
    assert err.count("\n") == 1
    assert "check --dsn" in err


def test_operator_commands_need_a_dsn(monkeypatch, capsys):
    monkeypatch.delenv("ALKSTORE_DSN", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["dead", "list"])
    assert exc.value.code == EXIT_USAGE
    assert "--dsn is required (or set ALKSTORE_DSN)" in capsys.readouterr().err


# -- issue 6: --json for dead requeue / dead purge / sweep; dead purge confirms -------


class Terminal:
    """A stand-in for a terminal on stdin: ``isatty()``, and the lines the user types
    (then end of input)."""

    def __init__(self, *lines: str) -> None:
        self.lines = list(lines)
        self.reads = 0

    def isatty(self) -> bool:
        return True

    def readline(self) -> str:
        self.reads += 1
        return self.lines.pop(0) if self.lines else ""


def _states(on_store, ids):
    async def read(store: Store) -> list[str | None]:
        return [None if (job := await store.get_job(i)) is None else job.state for i in ids]

    return on_store(read)


def test_issue6_dead_requeue_json(cli, on_store):
    async def seed(store: Store) -> tuple[int, int, int, int]:
        return (
            await _dead(store, "a", b"1"),
            await _dead(store, "a", b"2"),
            await _dead(store, "b", b"3"),
            await store.queue("a").enqueue(b"live"),
        )

    first, _, _, live = on_store(seed)
    status, out, err = cli("dead", "requeue", str(first), str(live), "--json")
    assert (status, err) == (EXIT_OK, "")  # the skipped ids are in the JSON
    assert json.loads(out) == {
        "queues": [{"queue": "a", "requeued": 1}],
        "requeued": 1,
        "skipped": [live],
        "held": [],  # Q15.4: none is kept dead by a live job's unique key
    }
    status, out, _ = cli("dead", "requeue", "--all", "--json")
    data = json.loads(out)
    assert status == EXIT_OK
    assert sorted(data["queues"], key=lambda q: q["queue"]) == [
        {"queue": "a", "requeued": 1},
        {"queue": "b", "requeued": 1},
    ]
    assert (data["requeued"], data["skipped"]) == (2, [])
    status, out, err = cli("dead", "requeue", str(live), "--json")
    assert status == EXIT_FAILED  # still a failure, with the JSON on stdout
    assert json.loads(out) == {"queues": [], "requeued": 0, "skipped": [live], "held": []}
    assert "none of the ids is a dead job" in err


def test_issue6_dead_purge_json(cli, on_store):
    on_store(lambda store: _dead(store, "p", b"1"))
    on_store(lambda store: _dead(store, "p", b"2"))
    status, out, _ = cli("dead", "purge", "--yes", "--json")
    assert status == EXIT_OK
    assert json.loads(out) == {"queues": [{"queue": "p", "purged": 2}], "purged": 2}
    status, out, _ = cli("dead", "purge", "--yes", "--json")
    assert json.loads(out) == {"queues": [], "purged": 0}
    status, out, _ = cli("dead", "purge", "--yes", "--json", "--queue", "empty")
    assert json.loads(out) == {"queues": [{"queue": "empty", "purged": 0}], "purged": 0}


def test_issue6_sweep_json(cli, on_store, schema):
    async def seed(store: Store) -> None:
        queue = store.queue("s", QueueOpts(expires_in_s=3600))
        ids = await queue.enqueue_many([b"1", b"2"])
        async with store.transaction() as tx:  # back-date the first one: it expired
            await tx.execute(
                f"UPDATE \"{schema}\".jobs SET expires_at = now() - interval '1 second' "
                "WHERE id = %s",
                [ids[0]],
            )
        await _dead(store, "old", b"x")

    on_store(seed)
    status, out, _ = cli("sweep", "--json")
    data = json.loads(out)
    assert status == EXIT_OK
    assert sorted(data["queues"], key=lambda q: q["queue"]) == [
        {"queue": "old", "expired": 0, "purged": 0, "purged_completed": 0, "cancelled": 0},
        {"queue": "s", "expired": 1, "purged": 0, "purged_completed": 0, "cancelled": 0},
    ]
    assert (data["expired"], data["purged"]) == (1, 0)
    status, out, _ = cli("sweep", "--json", "--retention-s", "0")
    data = json.loads(out)
    assert (data["expired"], data["purged"]) == (0, 2)  # old's dead job and s's expired one
    status, out, _ = cli("sweep", "--json", "--queue", "quiet")
    assert json.loads(out) == {
        "queues": [
            {"queue": "quiet", "expired": 0, "purged": 0, "purged_completed": 0, "cancelled": 0}
        ],
        "expired": 0,
        "purged": 0,
        "purged_completed": 0,
        "cancelled": 0,
    }


def test_q19_5_sweep_reports_the_cancels_it_finalized(cli, on_store, schema):
    """A cancel whose holder let its lease lapse is finalized by the sweep, which says so."""

    async def seed(store: Store) -> None:
        queue = store.queue("c")
        await queue.enqueue(b"1")
        handle = await queue.claim_one("gone-worker")
        assert handle is not None
        assert await queue.cancel(handle.id)  # cancelling now: its holder is told
        async with store.transaction() as tx:  # its holder never came back
            await tx.execute(
                f"UPDATE \"{schema}\".jobs SET claim_expires_at = now() - interval '1 second'"
            )

    on_store(seed)
    status, out, _ = cli("sweep", "--queue", "c")
    assert (status, out) == (
        EXIT_OK,
        "queue 'c': expired 0, purged 0, completed purged 0, cancelled 1\n",
    )
    status, out, _ = cli("sweep", "--json", "--queue", "c")
    assert json.loads(out)["cancelled"] == 0  # finalized once


def test_issue6_dead_purge_refuses_without_yes_when_stdin_is_not_a_terminal(cli, on_store):
    job_id = on_store(lambda store: _dead(store, "p", b"x"))
    status, out, err = cli("dead", "purge")  # pytest's stdin is not a terminal
    assert (status, out) == (EXIT_USAGE, "")
    assert err == (
        "alkstore-trio dead purge: error: refusing to delete dead jobs without "
        "confirmation: stdin is not a terminal; pass --yes to purge without asking (or "
        "--dry-run to only count them)\n"
    )
    assert _states(on_store, [job_id]) == ["dead"]


def test_issue6_dead_purge_asks_first_on_a_terminal(cli, on_store, monkeypatch):
    async def seed(store: Store) -> list[int]:
        return [
            await _dead(store, "p", b"1"),
            await _dead(store, "p", b"2"),
            await _dead(store, "other", b"3"),
        ]

    ids = on_store(seed)
    terminal = Terminal("n\n")
    monkeypatch.setattr(sys, "stdin", terminal)
    status, out, err = cli("dead", "purge", "--queue", "p")
    assert (status, out) == (EXIT_FAILED, "")
    assert err == (
        "Purge 2 dead jobs of queue 'p' for good? [y/N] "
        "alkstore-trio dead purge: purge cancelled: nothing was deleted\n"
    )
    status, out, err = cli("dead", "purge")  # end of input (Ctrl-D) declines too
    assert (status, out) == (EXIT_FAILED, "")
    assert err.startswith("Purge 3 dead jobs of 2 queues for good? [y/N] \n")
    assert _states(on_store, ids) == ["dead", "dead", "dead"]
    terminal.lines = ["Yes\n"]
    status, out, err = cli("dead", "purge", "--older-than", "0")
    assert status == EXIT_OK
    assert err == "Purge 3 dead jobs of 2 queues (dead for more than 0 s) for good? [y/N] "
    assert sorted(out.splitlines()) == [
        "queue 'other': purged 1 dead job",
        "queue 'p': purged 2 dead jobs",
    ]
    assert _states(on_store, ids) == [None, None, None]
    reads = terminal.reads
    status, out, err = cli("dead", "purge")  # nothing to purge: nothing to ask
    assert (status, out, err) == (EXIT_OK, "purged 0 dead jobs\n", "")
    assert terminal.reads == reads


def test_d29_dead_purge_dry_run_counts_exactly_and_deletes_nothing(
    cli, on_store, schema, monkeypatch
):
    async def seed(store: Store) -> list[int]:
        ids = [await _dead(store, "p", b"old"), await _dead(store, "p", b"new")]
        ids.append(await _dead(store, "q", b"old too"))
        async with store.transaction() as tx:  # back-date two of them: dead for an hour
            await tx.execute(
                f"UPDATE \"{schema}\".dead_jobs SET died_at = died_at - interval '1 hour' "
                "WHERE id = ANY(%s)",
                [[ids[0], ids[2]]],
            )
        return ids

    ids = on_store(seed)
    # No terminal and no --yes: a dry run deletes nothing, so it needs no confirmation.
    status, out, err = cli("dead", "purge", "--dry-run", "--older-than", "600")
    assert (status, err) == (EXIT_OK, "")
    assert sorted(out.splitlines()) == [
        "queue 'p': would purge 1 dead job",
        "queue 'q': would purge 1 dead job",
    ]
    status, out, _ = cli("dead", "purge", "--dry-run", "--json", "--queue", "p")
    assert json.loads(out) == {"queues": [{"queue": "p", "would_purge": 2}], "would_purge": 2}
    assert _states(on_store, ids) == ["dead", "dead", "dead"]
    # On a terminal, the question names exactly what the purge deletes (the age applied).
    terminal = Terminal("y\n")
    monkeypatch.setattr(sys, "stdin", terminal)
    status, out, err = cli("dead", "purge", "--older-than", "600", "--queue", "p")
    assert status == EXIT_OK
    assert err == "Purge 1 dead job of queue 'p' (dead for more than 600 s) for good? [y/N] "
    assert out == "queue 'p': purged 1 dead job\n"
    assert _states(on_store, ids) == [None, "dead", "dead"]


def test_issue6_dead_purge_asks_on_a_real_terminal(cli, on_store, pg_dsn, schema):
    job_id = on_store(lambda store: _dead(store, "tty", b"x"))
    primary, secondary = pty.openpty()
    try:
        os.write(primary, b"y\n")  # typed ahead: the terminal holds the line until read
        result = subprocess.run(
            [sys.executable, "-m", "alkstore_trio", "dead", "purge"],
            stdin=secondary,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "ALKSTORE_DSN": pg_dsn, "ALKSTORE_SCHEMA": schema},
            check=False,
        )
    finally:
        os.close(primary)
        os.close(secondary)
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stderr == "Purge 1 dead job of queue 'tty' for good? [y/N] "
    assert result.stdout == "queue 'tty': purged 1 dead job\n"
    assert _states(on_store, [job_id]) == [None]


def test_issue6_dead_purge_interrupted_at_its_question_deletes_nothing(cli, on_store, monkeypatch):
    job_id = on_store(lambda store: _dead(store, "p", b"x"))

    class Interrupted(Terminal):
        def readline(self) -> str:
            raise KeyboardInterrupt  # Ctrl-C while the question waits

    monkeypatch.setattr(sys, "stdin", Interrupted())
    status, out, err = cli("dead", "purge")
    assert (status, out) == (EXIT_INTERRUPTED, "")
    assert err == "Purge 1 dead job of queue 'p' for good? [y/N] \nalkstore-trio: interrupted\n"
    assert _states(on_store, [job_id]) == ["dead"]


# -- D30: headers ----------------------------------------------------------------------


def test_d30_enqueue_header_options_become_the_jobs_headers(cli, on_store):
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    status, out, err = cli(
        "enqueue", "--queue", "mail", "--payload-json", "{}",
        "--header", "tenant=acme", "--header", f"traceparent={traceparent}",
        "--header", "query=a=1&b=2", "--header", "empty=",
    )  # fmt: skip
    assert (status, err) == (EXIT_OK, "")
    with_headers = int(out)
    status, out, _ = cli("enqueue", "--queue", "mail", "--payload-json", "{}")
    without = int(out)
    jobs = on_store(lambda store: _jobs(store, [with_headers, without]))
    assert dict(jobs[0].headers) == {
        "tenant": "acme",
        "traceparent": traceparent,
        "query": "a=1&b=2",  # split at the first '='
        "empty": "",
    }
    assert jobs[0].payload == b"{}"  # the payload is untouched
    assert dict(jobs[1].headers) == {}


async def _jobs(store: Store, ids: list[int]) -> list[Any]:
    return [await store.get_job(job_id) for job_id in ids]


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (["no-equals-s3cret"], "expected NAME=VALUE (split at the first '='), e.g. --header"),
        (["=s3cret"], "the header name before '=' is empty; expected NAME=VALUE"),
        (["a=1", "b=2", "a=s3cret"], "header 'a' is given twice; give each header name once"),
        (["n" * 257 + "=s3cret"], "a header name must be at most 256 characters"),
        ([f"h{i}=s3cret" for i in range(65)], "headers must have at most 64 entries; got 65"),
        (["big=" + "s3cret" * 3000], "headers must be at most 16384 bytes"),
        (["bad=s3cret\udcff"], "header 'bad' must be valid Unicode text (no lone surrogates)"),
    ],
)
def test_d30_a_bad_header_is_a_usage_error_before_anything_is_opened(
    headers, message, monkeypatch, capsys
):
    # No server answers at this DSN: the usage error comes first, and nothing is enqueued.
    monkeypatch.setenv("ALKSTORE_DSN", "postgresql://nobody@127.0.0.1:1/none")
    argv = ["enqueue", "--queue", "q", "--payload-json", "1"]
    for header in headers:
        argv += ["--header", header]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == ""
    *usage, error = err.splitlines()  # argparse's usage (wrapped), then one line
    assert usage[0].startswith("usage: alkstore-trio enqueue")
    assert error.startswith("alkstore-trio enqueue: error: argument --header: " + message)
    assert "s3cret" not in err  # a header's value is never echoed


def test_d30_jobs_show_prints_the_headers_text_and_json(cli, on_store):
    long_value = "x" * 500
    headers = {
        "tenant": "acme",
        "note": "two\nlines\x07",
        "a=b": "name with an equals sign",
        "long": long_value,
    }

    async def seed(store: Store) -> tuple[int, int]:
        queue = store.queue("show")
        return await queue.enqueue(b'{"to": "ada"}', headers=headers), await queue.enqueue(b"x")

    with_headers, without = on_store(seed)
    status, out, _ = cli("jobs", "show", str(with_headers))
    assert status == EXIT_OK
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("headers "))
    shown = [line[len("headers") :].strip() for line in lines[first : first + 4]]
    assert shown == [
        '"a=b"=name with an equals sign',  # quoted: NAME=VALUE stays readable
        "long=" + "x" * 400 + "…",  # cut like the preview; --json has it whole
        "note=two\\nlines\\u0007",  # escaped: one line, no raw control character
        "tenant=acme",
    ]  # in name order, one a line, the continuation lines aligned under the first
    assert all(line.startswith(" " * len("headers")) for line in lines[first + 1 : first + 4])
    assert lines[first + 4].startswith("payload ")
    assert "\x07" not in out
    status, out, _ = cli("jobs", "show", str(with_headers), "--json")
    data = json.loads(out)
    assert data["headers"] == headers
    assert list(data["headers"]) == sorted(headers)
    status, out, _ = cli("jobs", "show", str(without))
    assert "headers               -" in out.splitlines()
    status, out, _ = cli("jobs", "show", str(without), "--json")
    assert json.loads(out)["headers"] == {}


def test_d30_jobs_list_and_dead_list_export_the_headers_in_json(cli, on_store):
    async def seed(store: Store) -> tuple[int, int]:
        queue = store.queue("h")
        live = await queue.enqueue(b"live", headers={"tenant": "acme"})
        dead = await queue.enqueue(b"dead", headers={"tenant": "globex", "try": "1"})
        for _ in range(2):
            handle = await queue.claim_one("w")
            assert handle is not None
            if handle.id == dead:
                assert await handle.fail("boom")
            else:
                assert await handle.retry("later", delay_s=3600)
        return live, dead

    live, dead = on_store(seed)
    status, out, _ = cli("jobs", "list", "--queue", "h", "--state", "pending", "--json")
    assert [(row["id"], row["headers"]) for row in map(json.loads, out.splitlines())] == [
        (live, {"tenant": "acme"})
    ]
    status, out, _ = cli("dead", "list", "--json")
    assert [(row["id"], row["headers"]) for row in map(json.loads, out.splitlines())] == [
        (dead, {"tenant": "globex", "try": "1"})
    ]
    # The text tables are summaries: no header values there.
    for args in (["jobs", "list", "--queue", "h", "--state", "pending"], ["dead", "list"]):
        status, out, _ = cli(*args)
        assert status == EXIT_OK
        assert "acme" not in out
        assert "globex" not in out
