"""T2, T4, T9: mypy checks a defer call, each call of a defer_many, and a producer's
defer_with, against the task's
signature (ParamSpec): a sample of right calls passes, and each wrong call of another
sample is an error on its line."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="the typing test runs mypy")

HEADER = """\
    from __future__ import annotations

    import trio
    import psycopg
    from alkstore_trio import Store, Tasks, Transaction
    from alkstore_trio.postgres import Producer
    from alkstore_trio.testing import TaskOutcome, perform

    tasks = Tasks()


    @tasks.task(queue="emails", max_attempts=5)
    async def send_email(to: str, subject: str, urgent: bool = False) -> None: ...


    @tasks.task
    async def add(a: int, b: int) -> int:
        return a + b


    @tasks.task(queue="thumbs")
    def resize(path: str, width: int) -> bytes:
        return b""
"""

GOOD = """\
    async def calls(store: Store, tx: Transaction) -> int:
        await send_email.defer(store, to="ada@example.com", subject="hi")
        await send_email.defer(tx, "ada@example.com", "hi", urgent=True)
        await send_email.with_options(delay_s=60).defer(store, to="a", subject="b")
        await resize.defer(store, path="a.png", width=100)
        await send_email.defer_many(store, [send_email.call(to="a", subject=s) for s in "xy"])
        await resize.defer_many(tx, [resize.call("a.png", 100)])
        outcome: TaskOutcome[int] = await perform(add, 1, b=2)
        total: int = add.decode_result(b"3")
        direct: int = await add(1, 2)
        return total + direct + (outcome.value or 0)


    async def produce(
        producer: Producer, conn: psycopg.Connection, aconn: psycopg.AsyncConnection
    ) -> None:
        send_email.defer_with(producer, conn, to="ada@example.com", subject="hi")
        await send_email.adefer_with(producer, aconn, "ada@example.com", "hi", urgent=True)
"""

BAD = """\
    async def calls(store: Store) -> None:
        await send_email.defer(store, to=1, subject="hi")  # error: to
        await send_email.defer(store, to="a")  # error: missing subject
        await send_email.defer(store, to="a", subject="b", cc="c")  # error: unknown cc
        await send_email.defer(to="a", subject="b")  # error: no target
        await resize.defer(store, path="a.png", width="wide")  # error: width
        await perform(add, a="1", b=2)  # error: perform checks too
        text: str = add.decode_result(b"3")  # error: the result is an int
        await send_email.defer_many(store, [send_email.call(to=1, subject="b")])  # error: to
        await send_email.defer_many(store, [add.call(1, 2)])  # error: another task's call
        await send_email.defer_many(store, [{"to": "a", "subject": "b"}])  # error: a dict
        await resize.defer_many(store, resize.call("a.png", 1))  # error: one call, not many


    async def produce(producer: Producer, conn: psycopg.Connection) -> None:
        send_email.defer_with(producer, conn, to=1, subject="hi")  # error: to
        await send_email.adefer_with(producer, conn, to="a")  # error: missing subject
"""


def test_t2_t4_t9_mypy_checks_defer_defer_many_and_defer_with_against_the_task_signature(
    tmp_path: Path,
):
    good = tmp_path / "good_calls.py"
    bad = tmp_path / "bad_calls.py"
    good.write_text(textwrap.dedent(HEADER + "\n\n" + GOOD), encoding="utf-8")
    bad.write_text(textwrap.dedent(HEADER + "\n\n" + BAD), encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable, "-m", "mypy", "--strict", "--no-incremental",
            "--cache-dir", str(tmp_path / "cache"), str(good), str(bad),
        ],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "good_calls.py" not in output, output
    lines = bad.read_text(encoding="utf-8").splitlines()
    expected = {n for n, line in enumerate(lines, 1) if "# error:" in line}
    flagged = {int(m) for m in re.findall(r"bad_calls\.py:(\d+): error", output)}
    assert flagged == expected, output
