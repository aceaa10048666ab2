"""Helpers of the ``alkstore-trio worker`` tests (not a test module): the worker
subprocess and its environment. Imported by ``conftest.py`` and the tests."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

ROOT = Path(__file__).resolve().parents[2]
#: A worker process that takes longer than this to do what a test waits for is hung.
DEADLINE_S = 30.0


@dataclass
class WorkerProcess:
    """A running ``alkstore-trio worker`` subprocess."""

    process: trio.Process
    stdout_path: Path
    stderr_path: Path

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8")

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(encoding="utf-8")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    async def wait_for_output(self, text: str, *, count: int = 1) -> None:
        """Wait until stderr holds ``text`` ``count`` times (or the process ended)."""
        with trio.move_on_after(DEADLINE_S):
            while self.stderr.count(text) < count:
                if self.process.poll() is not None:
                    pytest.fail(f"the worker exited before printing {text!r}:\n{self.stderr}")
                await trio.sleep(0.02)
            return
        pytest.fail(f"the worker did not print {text!r} within {DEADLINE_S}s:\n{self.stderr}")

    async def wait(self, *, within_s: float = DEADLINE_S) -> int:
        """Wait for the exit status (failing the test after ``within_s``)."""
        with trio.move_on_after(within_s):
            return await self.process.wait()
        pytest.fail(f"the worker did not exit within {within_s}s:\n{self.stderr}")


def worker_env(**extra: str) -> dict[str, str]:
    """The environment of a worker subprocess: the caller's, without its ALKSTORE_*
    settings, unbuffered."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALKSTORE_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONSAFEPATH", None)
    return {**env, **extra}
