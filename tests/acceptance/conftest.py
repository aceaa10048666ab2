"""Acceptance tests: the installed command, the examples and the docs' snippets, each
run in a subprocess exactly as a user would run them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

#: The repository root (tests/acceptance/conftest.py -> ../..).
ROOT = Path(__file__).resolve().parents[2]
#: A subprocess that runs longer than this is a hang, not a slow machine.
TIMEOUT_S = 60


def _run(args: list[str], *, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        args,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@pytest.fixture(scope="session")
def run_command() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_command(args, cwd=ROOT)``: run a command with the test's environment, with a
    timeout, and capture its text output (stdout, stderr, returncode)."""
    return _run


@pytest.fixture(scope="session")
def console_script() -> str:
    """The installed ``alkstore-trio`` command of the Python running the tests."""
    scripts = Path(sys.executable).parent
    for name in ("alkstore-trio", "alkstore-trio.exe"):
        if (scripts / name).exists():
            return str(scripts / name)
    found = shutil.which("alkstore-trio")
    if found is None:
        pytest.fail("the alkstore-trio command is not installed: run pip install -e '.[dev]'")
    return found
