"""Acceptance tests: the installed command, the examples and the docs' snippets, each
run in a subprocess exactly as a user would run them.

PostgreSQL: the server is ``ALKSTORE_TEST_DSN``, else the local default below (as in
``tests/postgres/conftest.py``). Every subprocess gets it as ``ALKSTORE_DSN`` (the
variable the command, the docs and the examples read), and never an ``ALKSTORE_SCHEMA``
from the caller's environment. A docs snippet or an example that mentions
``ALKSTORE_DSN`` needs the server: without one it is skipped with one line saying how to
enable it, unless ``ALKSTORE_REQUIRE_PG=1`` (CI), which turns the skip into a failure.
Each such docs snippet runs against a schema of its own, made with
``alkstore-trio migrate`` first (as the reader of the docs did) and named in
``ALKSTORE_SCHEMA``; it is dropped afterwards.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

#: The repository root (tests/acceptance/conftest.py -> ../..).
ROOT = Path(__file__).resolve().parents[2]
#: A subprocess that runs longer than this is a hang, not a slow machine.
TIMEOUT_S = 60
#: The PostgreSQL server used when ``ALKSTORE_TEST_DSN`` is not set.
DEFAULT_TEST_DSN = "postgresql://postgres@127.0.0.1:5432/test"
#: A docs snippet or example whose text contains this needs PostgreSQL.
POSTGRES_MARKER = "ALKSTORE_DSN"


def postgres_test_dsn() -> str:
    """The DSN of the PostgreSQL server the acceptance tests use."""
    return os.environ.get("ALKSTORE_TEST_DSN") or DEFAULT_TEST_DSN


@functools.cache
def postgres_unavailable() -> str | None:
    """Why the PostgreSQL server cannot be used, or ``None`` when it can."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed; the PostgreSQL acceptance tests need it"
    dsn = postgres_test_dsn()
    try:
        with psycopg.connect(dsn, connect_timeout=3):
            pass
    except psycopg.Error as exc:
        return (
            f"no PostgreSQL server at {redact(dsn)} ({type(exc).__name__}); to run these "
            "tests set ALKSTORE_TEST_DSN=postgresql://user@host:port/db"
        )
    return None


def redact(dsn: str) -> str:
    """The DSN without its password, for messages."""
    import psycopg.conninfo

    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<malformed DSN>"
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo(**params)


def _runs_postgres_text(item: pytest.Item) -> str | None:
    """``"snippet"`` or ``"example"`` when the item runs a docs snippet or an example
    that uses PostgreSQL, else ``None``."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "run_command" not in getattr(item, "fixturenames", ()):
        return None
    code = callspec.params.get("code")
    if isinstance(code, str):
        return "snippet" if POSTGRES_MARKER in code else None
    example = callspec.params.get("example")
    if isinstance(example, Path) and POSTGRES_MARKER in example.read_text(encoding="utf-8"):
        return "example"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    needs_postgres = "pg_dsn" in getattr(item, "fixturenames", ()) or _runs_postgres_text(item)
    if not needs_postgres or (unavailable := postgres_unavailable()) is None:
        return
    if os.environ.get("ALKSTORE_REQUIRE_PG") == "1":
        pytest.fail(f"ALKSTORE_REQUIRE_PG=1 but {unavailable}", pytrace=False)
    pytest.skip(unavailable)


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The DSN of a reachable PostgreSQL server (tests that use it are skipped, or fail
    when ``ALKSTORE_REQUIRE_PG=1``, if there is none)."""
    if (unavailable := postgres_unavailable()) is not None:  # pragma: no cover
        pytest.skip(unavailable)
    return postgres_test_dsn()


@pytest.fixture
def fresh_schema(pg_dsn: str) -> Iterator[str]:
    """The name of a schema that does not exist yet; dropped after the test."""
    schema = "alk_accept_" + secrets.token_hex(5)
    try:
        yield schema
    finally:
        drop_schema(pg_dsn, schema)


def drop_schema(dsn: str, schema: str) -> None:
    """``DROP SCHEMA IF EXISTS ... CASCADE``."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(autouse=True)
def _postgres_environment(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """``ALKSTORE_DSN`` for every subprocess; a migrated schema for a PostgreSQL snippet."""
    monkeypatch.setenv("ALKSTORE_DSN", postgres_test_dsn())
    monkeypatch.delenv("ALKSTORE_SCHEMA", raising=False)
    if _runs_postgres_text(request.node) != "snippet":
        yield
        return
    code = request.node.callspec.params["code"]
    assert "ALKSTORE_SCHEMA" in code, (
        "a PostgreSQL snippet of the docs takes its schema from ALKSTORE_SCHEMA (this test "
        "gives it a fresh one): a fixed name is shared by every run on the server at once"
    )
    schema = "alk_docs_" + secrets.token_hex(5)
    migrated = _run([sys.executable, "-m", "alkstore_trio", "migrate", "--schema", schema])
    assert migrated.returncode == 0, migrated.stderr
    monkeypatch.setenv("ALKSTORE_SCHEMA", schema)
    try:
        yield
    finally:
        drop_schema(postgres_test_dsn(), schema)


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
