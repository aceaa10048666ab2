"""A PostgreSQL cluster of a test's own (``initdb`` into a temporary directory, on a free
port), for the fault tests that restart or crash the server: never the shared one. Used
by ``test_postgresql_restart.py`` and ``test_wait_faults.py`` through the
:func:`own_cluster` fixture (``conftest.py`` imports it)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import trio


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    """A PostgreSQL cluster in a temporary directory, run by ``pg_ctl``."""

    def __init__(self, bindir: Path, root: Path, user: str | None) -> None:
        self.bindir = bindir
        self.datadir = root / "data"
        self.logfile = root / "server.log"
        self.user = user  # run the tools as this user (initdb refuses root)
        self.port = _free_port()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.datadir} "
            "-c fsync=off -c max_connections=40"
        )

    def argv(self, tool: str, *args: str) -> list[str]:
        argv = [str(self.bindir / tool), *args]
        if self.user is not None:
            argv = ["runuser", "-u", self.user, "--", *argv]
        return argv

    def pg_ctl_argv(self, action: str, *args: str) -> list[str]:
        return self.argv(
            "pg_ctl", action, "-D", str(self.datadir), "-w", "-t", "60", "-l",
            str(self.logfile), *args,
        )  # fmt: skip

    async def pg_ctl(self, action: str, *args: str) -> float:
        """Run ``pg_ctl action`` (waiting for it); returns its seconds."""
        started = time.monotonic()
        with trio.fail_after(90):
            result = await trio.run_process(
                self.pg_ctl_argv(action, *args), capture_stdout=True, capture_stderr=True,
                check=False,
            )  # fmt: skip
        assert result.returncode == 0, (result.stdout, result.stderr, self.log_tail())
        return time.monotonic() - started

    def log_tail(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-3000:]
        except OSError:
            return ""


@pytest.fixture
def own_cluster():
    """A running throwaway cluster (skipped, with the reason, if initdb is impossible)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    initdb = Path(found[-1]) if found else None
    if initdb is None and (which := shutil.which("initdb")):
        initdb = Path(which)
    if initdb is None:
        pytest.skip("no initdb found (/usr/lib/postgresql/*/bin or PATH): cannot run a cluster")
    user = None
    if os.geteuid() == 0:  # initdb refuses to run as root
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run initdb as")
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot run initdb as 'postgres'")
        user = "postgres"
    root = Path(tempfile.mkdtemp(prefix="alkf-pg-"))
    if user is not None:
        shutil.chown(root, user)
    cluster = Cluster(initdb.parent, root, user)
    try:
        made = subprocess.run(
            cluster.argv(
                "initdb", "-D", str(cluster.datadir), "-A", "trust", "-U", "postgres",
                "--no-sync", "-E", "UTF8",
            ),
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if made.returncode != 0:
            pytest.skip(f"initdb is impossible here: {made.stderr.strip()[-500:]}")
        started = subprocess.run(
            cluster.pg_ctl_argv("start", "-o", cluster.options),
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert started.returncode == 0, (started.stderr, cluster.log_tail())
        yield cluster
    finally:
        subprocess.run(
            cluster.pg_ctl_argv("stop", "-m", "immediate"), capture_output=True, timeout=120,
            check=False,
        )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
