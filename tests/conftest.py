"""Fixtures shared by every test folder: the PostgreSQL server to test against.

The server comes from ``ALKSTORE_TEST_DSN``, else the local default below if it answers.
Without a server, tests that use ``pg_dsn`` are skipped with one line saying how to
enable them, unless ``ALKSTORE_REQUIRE_PG=1`` (CI), which turns the skip into a failure.

Every folder also gets the ``figures`` fixture of ``tests/_figures.py``. The default run
is spread over worker processes by pytest-xdist: ``tests/_parallel.py`` says how many,
and which tests never run together.

Every PostgreSQL test works in a schema of its own with a random name, finds its own
sessions by a random ``application_name``, and binds only port 0: workers (and two
checkouts on one server) never see each other's rows or sessions.
"""

from __future__ import annotations

import functools
import os

import pytest

#: The ``figures`` fixture (``tests/_figures.py``): numbers a test measured, written at the
#: end of the session for ``docs/explanation/guarantees.md``; and how the run is spread
#: over pytest-xdist's workers (``tests/_parallel.py``).
pytest_plugins = ["_figures", "_parallel"]

#: The server used when ``ALKSTORE_TEST_DSN`` is not set.
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


@functools.cache
def _test_server() -> tuple[str, str | None]:
    """The DSN to test against, and why it cannot be used (``None`` if it can)."""
    dsn = os.environ.get("ALKSTORE_TEST_DSN") or DEFAULT_DSN
    try:
        import psycopg
    except ImportError:
        return dsn, "psycopg is not installed; pip install -e '.[dev]' to run the PostgreSQL tests"
    try:
        with psycopg.connect(dsn, connect_timeout=3):
            pass
    except psycopg.Error as exc:
        return dsn, (
            f"no PostgreSQL server at {_safe(dsn)} ({type(exc).__name__}); to run these "
            "tests set ALKSTORE_TEST_DSN=postgresql://user@host:port/db"
        )
    return dsn, None


def _skip_or_fail(unavailable: str) -> None:
    if os.environ.get("ALKSTORE_REQUIRE_PG") == "1":
        pytest.fail(f"ALKSTORE_REQUIRE_PG=1 but {unavailable}", pytrace=False)
    pytest.skip(unavailable)


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Skipping here rather than in the fixture reports every skip at one location, so
    # the summary shows one line, not one per test.
    if "pg_dsn" not in getattr(item, "fixturenames", ()):
        return
    _, unavailable = _test_server()
    if unavailable is not None:
        _skip_or_fail(unavailable)


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The DSN of a reachable PostgreSQL server (tests that use it are skipped, or fail
    when ``ALKSTORE_REQUIRE_PG=1``, if there is none)."""
    dsn, unavailable = _test_server()
    if unavailable is not None:  # requested dynamically (getfixturevalue)
        _skip_or_fail(unavailable)
    return dsn


def _safe(dsn: str) -> str:
    """The DSN without a password, for messages."""
    import psycopg.conninfo

    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<malformed DSN>"
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo(**params)
