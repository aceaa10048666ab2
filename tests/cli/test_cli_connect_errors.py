"""Connection errors of the commands name their cause, and the ones waiting cannot fix
fail at once (issue 6): a closed port, an unknown database, a malformed port. Driven by
real ports on loopback; times are measured, never waited for."""

from __future__ import annotations

import socket
import time

import psycopg.conninfo
import pytest

from alkstore_trio._cli import EXIT_FAILED, EXIT_USAGE, main

SECRET = "s3cr3t-pw"


@pytest.fixture
def closed_port() -> int:
    """A loopback port with certainly nobody listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(capsys, *argv: str) -> tuple[int, str, float]:
    capsys.readouterr()
    started = time.monotonic()
    try:
        status = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        status = int(exc.code or 0)
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    assert SECRET not in out + err
    return status, err, elapsed


@pytest.mark.parametrize("command", [["stats"], ["jobs", "show", "1"], ["migrate"]])
def test_cli_connect_to_a_closed_port_fails_at_once_naming_the_cause(capsys, closed_port, command):
    dsn = f"postgresql://app:{SECRET}@127.0.0.1:{closed_port}/shop"
    status, err, elapsed = run(capsys, *command, f"--dsn={dsn}", "--connect-timeout=30")
    assert status == EXIT_FAILED, err
    assert elapsed < 1.0, f"took {elapsed:.2f} s with --connect-timeout=30"
    assert f"cannot connect to postgresql://app@127.0.0.1:{closed_port}/shop: " in err
    assert "Connection refused" in err
    assert len(err.splitlines()) == 1, err


@pytest.mark.parametrize("command", [["stats"], ["migrate"], ["migrate", "--dry-run"]])
def test_cli_unknown_database_names_the_database(capsys, pg_dsn, command):
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, dbname="alk_no_such_db", password=SECRET)
    status, err, elapsed = run(capsys, *command, f"--dsn={dsn}", "--connect-timeout=30")
    assert status == EXIT_FAILED, err
    assert elapsed < 1.0, f"took {elapsed:.2f} s with --connect-timeout=30"
    assert 'database "alk_no_such_db" does not exist' in err
    assert "OperationalError" not in err


def test_cli_worker_unknown_database_names_the_database(capsys, pg_dsn, monkeypatch, tmp_path):
    (tmp_path / "tasks_connect.py").write_text("async def handle(job):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("logging.basicConfig", lambda **kwargs: None)
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, dbname="alk_no_such_db", password=SECRET)
    status, err, elapsed = run(
        capsys,
        "worker",
        f"--dsn={dsn}",
        "--connect-timeout=30",
        "--queue=emails=tasks_connect:handle",
    )
    assert status == EXIT_FAILED, err
    assert elapsed < 1.0
    assert 'database "alk_no_such_db" does not exist' in err


@pytest.mark.parametrize(
    "command", [["stats"], ["migrate"], ["worker", "--queue=q=m:f"], ["dead", "list"]]
)
@pytest.mark.parametrize(
    "dsn", ["postgresql://h:notaport/db", "host=h port=99999 dbname=db", "host=h port=0"]
)
def test_cli_a_port_that_is_not_a_number_is_a_usage_error(capsys, command, dsn):
    status, err, _ = run(capsys, *command, f"--dsn={dsn}")
    assert status == EXIT_USAGE
    assert "argument --dsn: " in err
    assert "is not a number in 1..65535" in err
