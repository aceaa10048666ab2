"""``enqueue --payload-file`` refuses a payload over ``--max-payload-bytes`` before it
reads it (issue 15 item 8): a file by its size, stdin after one byte past the limit.
Nothing is enqueued, and the refusal is a usage error (status 2) that names the option.
"""

from __future__ import annotations

import io
import sys

from alkstore_trio._cli import EXIT_OK, EXIT_USAGE

LIMIT = 1024 * 1024  # the library's default max_payload_bytes


def _live(on_store) -> int:
    async def count(store):
        stats = await store.stats()
        return sum(entry.live for entry in stats.queues)

    return on_store(count)


def test_enqueue_refuses_a_file_over_the_limit_by_its_size(cli, on_store, tmp_path):
    huge = tmp_path / "huge.bin"
    with huge.open("wb") as file:  # 8 GiB, sparse: reading it would not finish in time
        file.truncate(8 * 1024**3)
    status, _, err = cli("enqueue", "--queue", "blobs", "--payload-file", str(huge))
    assert status == EXIT_USAGE
    assert f"is {8 * 1024**3} bytes, larger than --max-payload-bytes {LIMIT}" in err
    assert _live(on_store) == 0


def test_enqueue_takes_a_larger_file_when_the_limit_is_raised(cli, on_store, tmp_path):
    payload = bytes(range(256)) * (LIMIT // 256 + 1)
    path = tmp_path / "big.bin"
    path.write_bytes(payload)
    assert cli("enqueue", "--queue", "blobs", "--payload-file", str(path))[0] == EXIT_USAGE
    status, out, _ = cli(
        "enqueue", "--queue", "blobs", "--payload-file", str(path),
        "--max-payload-bytes", str(len(payload)),
    )  # fmt: skip
    assert status == EXIT_OK

    async def read(store):
        return await store.get_job(int(out))

    assert on_store(read).payload == payload


def test_enqueue_reads_stdin_only_up_to_one_byte_past_the_limit(cli, on_store, monkeypatch):
    source = io.BytesIO(b"x" * (3 * LIMIT))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(source))
    status, _, err = cli("enqueue", "--queue", "blobs", "--payload-file", "-")
    assert status == EXIT_USAGE
    assert "larger than --max-payload-bytes" in err
    assert source.tell() == LIMIT + 1  # the rest was never read
    assert _live(on_store) == 0


def test_enqueue_refuses_a_json_payload_over_the_limit(cli, on_store):
    status, _, err = cli(
        "enqueue", "--queue", "q", "--payload-json", '"abc"', "--max-payload-bytes", "2"
    )
    assert status == EXIT_USAGE
    assert "--max-payload-bytes 2" in err
    assert "abc" not in err  # the payload is not echoed
    assert _live(on_store) == 0
