"""``alkstore-trio migrate``, run in subprocesses against a real PostgreSQL server: a fresh
schema, idempotence, ``--dry-run``, the environment defaults, concurrent runs, and
errors (one line, exit status 1, never a password; usage errors exit 2).

The server comes from ``ALKSTORE_TEST_DSN`` (see ``conftest.py``); without one these
tests are skipped, or fail when ``ALKSTORE_REQUIRE_PG=1``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("psycopg", reason="the migrate command needs psycopg 3")

import psycopg
import psycopg.conninfo

from alkstore_trio._engines._postgres import _sql

LATEST = _sql.latest_version()
#: Stands in for a real password: it must never appear in the command's output.
SECRET = "s3cret-Pa55word-do-not-print"


def with_params(dsn: str, **params: str) -> str:
    """``dsn`` as a conninfo string with some parameters replaced."""
    return psycopg.conninfo.make_conninfo(dsn, **params)


def as_url(dsn: str, *, password: str, **overrides: str) -> str:
    """``dsn`` as a ``postgresql://`` URL with a password (and overrides)."""
    params = {**psycopg.conninfo.conninfo_to_dict(dsn), **overrides}
    user = params.get("user", "postgres")
    host = params.get("host", "127.0.0.1")
    port = params.get("port", "5432")
    dbname = params.get("dbname", "postgres")
    return f"postgresql://{user}:{password}@{host}:{port}/{dbname}"


def schema_version(dsn: str, schema: str) -> int | None:
    """The version row of ``schema``, or ``None`` when the schema does not exist."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        (exists,) = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", [schema]
        ).fetchone()
        if not exists:
            return None
        (version,) = conn.execute(f'SELECT version FROM "{schema}".alk_schema_version').fetchone()
        return int(version)


def migrate(run_command, console_script, *args: str):
    return run_command([console_script, "migrate", *args])


def test_migrate_creates_a_fresh_schema_then_is_idempotent(
    run_command, console_script, pg_dsn, fresh_schema
):
    first = migrate(run_command, console_script, "--dsn", pg_dsn, "--schema", fresh_schema)
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"schema '{fresh_schema}': version 0 -> {LATEST}\n"
    assert first.stderr == ""
    assert schema_version(pg_dsn, fresh_schema) == LATEST

    second = migrate(run_command, console_script, "--dsn", pg_dsn, "--schema", fresh_schema)
    assert second.returncode == 0, second.stderr
    assert second.stdout == f"schema '{fresh_schema}': already at version {LATEST}\n"
    assert second.stderr == ""
    assert schema_version(pg_dsn, fresh_schema) == LATEST


def test_migrate_dry_run_prints_the_sql_and_creates_nothing(
    run_command, console_script, pg_dsn, fresh_schema
):
    result = migrate(
        run_command, console_script, "--dsn", pg_dsn, "--schema", fresh_schema, "--dry-run"
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    script = result.stdout
    assert "nothing was executed" in script.splitlines()[0]
    assert f'CREATE TABLE "{fresh_schema}".jobs' in script
    assert f'CREATE TABLE "{fresh_schema}".dead_jobs' in script
    assert "@schema@" not in script
    assert "pg_advisory_xact_lock" in script
    assert script.splitlines()[2] == "BEGIN;"
    assert script.rstrip().endswith("COMMIT;")
    assert schema_version(pg_dsn, fresh_schema) is None, "--dry-run created the schema"

    # The printed script is what migrate runs: applying it by hand gives a migrated schema.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(script.encode())
    assert schema_version(pg_dsn, fresh_schema) == LATEST
    again = migrate(run_command, console_script, "--dsn", pg_dsn, "--schema", fresh_schema)
    assert again.stdout == f"schema '{fresh_schema}': already at version {LATEST}\n"
    up_to_date = migrate(
        run_command, console_script, "--dsn", pg_dsn, "--schema", fresh_schema, "--dry-run"
    )
    assert up_to_date.returncode == 0
    assert f"already at version {LATEST}; nothing to run" in up_to_date.stdout
    assert "CREATE" not in up_to_date.stdout


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"port": "1"}, id="nothing-listening"),
        pytest.param({"dbname": "alk_no_such_database"}, id="no-such-database"),
        pytest.param({"user": "alk_no_such_role"}, id="no-such-role"),
    ],
)
def test_migrate_bad_dsn_exits_1_with_one_line_and_no_password(
    run_command, console_script, pg_dsn, fresh_schema, overrides
):
    dsn = as_url(pg_dsn, password=SECRET, **overrides)
    result = migrate(
        run_command,
        console_script,
        "--dsn",
        dsn,
        "--schema",
        fresh_schema,
        "--connect-timeout",
        "5",
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("alkstore-trio migrate: cannot connect to postgresql://")
    assert "check --dsn (or ALKSTORE_DSN)" in lines[0]
    assert SECRET not in result.stdout + result.stderr
    assert schema_version(pg_dsn, fresh_schema) is None


@pytest.mark.parametrize(
    "dsn",
    [
        pytest.param(f"host=localhost password={SECRET} port", id="conninfo-without-value"),
        pytest.param(f"not a dsn {SECRET}", id="words"),
        pytest.param("", id="empty"),
    ],
)
def test_migrate_malformed_dsn_is_a_usage_error_that_does_not_echo_it(
    run_command, console_script, dsn
):
    result = migrate(run_command, console_script, "--dsn", dsn)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert "error: argument --dsn:" in result.stderr
    assert "postgresql://user[:password]@host[:port]/dbname" in result.stderr
    assert SECRET not in result.stderr


def test_migrate_reads_dsn_and_schema_from_the_environment(
    run_command, console_script, pg_dsn, fresh_schema, monkeypatch
):
    monkeypatch.setenv("ALKSTORE_DSN", pg_dsn)
    monkeypatch.setenv("ALKSTORE_SCHEMA", fresh_schema)
    result = migrate(run_command, console_script)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"schema '{fresh_schema}': version 0 -> {LATEST}\n"
    assert schema_version(pg_dsn, fresh_schema) == LATEST


def test_migrate_options_win_over_the_environment(
    run_command, console_script, pg_dsn, fresh_schema, monkeypatch
):
    decoy = fresh_schema + "_env"
    monkeypatch.setenv("ALKSTORE_DSN", as_url(pg_dsn, password=SECRET, port="1"))
    monkeypatch.setenv("ALKSTORE_SCHEMA", decoy)
    try:
        result = migrate(run_command, console_script, "--dsn", pg_dsn, "--schema", fresh_schema)
        assert result.returncode == 0, result.stderr
        assert schema_version(pg_dsn, fresh_schema) == LATEST
        assert schema_version(pg_dsn, decoy) is None
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{decoy}" CASCADE')


def test_migrate_without_a_dsn_is_a_usage_error(run_command, console_script, monkeypatch):
    monkeypatch.delenv("ALKSTORE_DSN", raising=False)
    result = migrate(run_command, console_script)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "usage: alkstore-trio migrate" in result.stderr
    assert "--dsn is required (or set ALKSTORE_DSN)" in result.stderr


@pytest.mark.parametrize("schema", ["bad-name", "pg_catalog", "1abc", "x" * 64])
def test_migrate_invalid_schema_is_a_usage_error(run_command, console_script, pg_dsn, schema):
    result = migrate(run_command, console_script, "--dsn", pg_dsn, "--schema", schema)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error: argument --schema:" in result.stderr


def test_migrate_help_names_the_environment_variables(run_command, console_script):
    result = migrate(run_command, console_script, "--help")
    assert result.returncode == 0
    for text in ("--dsn", "--schema", "--dry-run", "ALKSTORE_DSN", "ALKSTORE_SCHEMA"):
        assert text in result.stdout
    listed = run_command([console_script, "--help"])
    assert "migrate" in listed.stdout


def test_migrate_a_newer_schema_exits_1_and_says_upgrade(
    run_command, console_script, pg_dsn, fresh_schema
):
    created = migrate(run_command, console_script, "--dsn", pg_dsn, "--schema", fresh_schema)
    assert created.returncode == 0, created.stderr
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'UPDATE "{fresh_schema}".alk_schema_version SET version = %s', [LATEST + 1])
    for extra in ([], ["--dry-run"]):
        result = migrate(
            run_command, console_script, "--dsn", pg_dsn, "--schema", fresh_schema, *extra
        )
        assert result.returncode == 1, result.stdout + result.stderr
        assert result.stdout == ""
        (line,) = result.stderr.splitlines()
        assert f"version {LATEST + 1}, newer than this library's {LATEST}" in line
        assert "upgrade alkstore_trio" in line
    assert schema_version(pg_dsn, fresh_schema) == LATEST + 1


def test_migrate_concurrent_runs_apply_the_migrations_once(console_script, pg_dsn, fresh_schema):
    # A rolling deploy: several processes migrate the same schema at the same moment.
    args = [console_script, "migrate", "--dsn", pg_dsn, "--schema", fresh_schema]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [
        subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 4, outputs
    lines = sorted(out for out, _ in outputs)
    assert lines == sorted(
        [f"schema '{fresh_schema}': version 0 -> {LATEST}\n"]
        + [f"schema '{fresh_schema}': already at version {LATEST}\n"] * 3
    )
    assert schema_version(pg_dsn, fresh_schema) == LATEST


def test_migrate_python_dash_m_works_too(run_command, pg_dsn, fresh_schema):
    result = run_command(
        [
            sys.executable,
            "-m",
            "alkstore_trio",
            "migrate",
            "--dsn",
            pg_dsn,
            "--schema",
            fresh_schema,
        ]
    )
    assert result.returncode == 0, result.stderr
    assert schema_version(pg_dsn, fresh_schema) == LATEST


def test_migrate_waits_for_the_advisory_lock_that_dry_run_shows(
    run_command, console_script, pg_dsn, fresh_schema
):
    dry = migrate(
        run_command, console_script, "--dsn", pg_dsn, "--schema", fresh_schema, "--dry-run"
    )
    # The script's own lock statement (migration 10's enqueue function takes a lock too, in
    # its body: that line is indented).
    (lock_line,) = [
        line
        for line in dry.stdout.splitlines()
        if line.startswith("SELECT pg_catalog.pg_advisory_xact_lock")
    ]
    key_sql = lock_line.replace("SELECT pg_catalog.pg_advisory_xact_lock", "SELECT ").rstrip(";")
    with psycopg.connect(pg_dsn, autocommit=True) as holder:
        (key,) = holder.execute(key_sql).fetchone()
        holder.execute("SELECT pg_advisory_lock(%s)", [key])  # what a running migration holds
        args = [console_script, "migrate", "--dsn", pg_dsn, "--schema", fresh_schema]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            waiting = 0
            deadline = time.monotonic() + 30
            while not waiting and proc.poll() is None and time.monotonic() < deadline:
                (waiting,) = holder.execute(
                    """
                    SELECT count(*) FROM pg_locks
                    WHERE locktype = 'advisory' AND NOT granted
                        AND ((classid::bigint << 32) | objid::bigint) = %s
                    """,
                    [key],
                ).fetchone()
                time.sleep(0.02)
            assert waiting == 1, "migrate did not wait for the schema's advisory lock"
            assert proc.poll() is None
            assert schema_version(pg_dsn, fresh_schema) is None
        finally:
            holder.execute("SELECT pg_advisory_unlock(%s)", [key])
            out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == f"schema '{fresh_schema}': version 0 -> {LATEST}\n"


def create_at_version(dsn: str, schema: str, version: int) -> None:
    """``schema`` as release ``version`` of the library left it: its migrations only."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        for _, sql in _sql.migrations(schema)[:version]:
            conn.execute(sql.encode())
        conn.execute(
            f"INSERT INTO {_sql.quote_ident(schema)}.alk_schema_version (version) VALUES (%s)",
            [version],
        )


def test_d30_migrate_across_version_3_says_to_stop_the_old_workers(
    run_command, console_script, pg_dsn, fresh_schema
):
    # Version 2's workers fail on the version-3 schema (migrate.md): an operator who
    # upgrades an existing schema is told so, in the dry run's script and after the run.
    create_at_version(pg_dsn, fresh_schema, 2)
    args = ["--dsn", pg_dsn, "--schema", fresh_schema]
    dry = migrate(run_command, console_script, *args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    notes = [line for line in dry.stdout.splitlines() if line.startswith("-- note:")]
    assert len(notes) == 2  # version 3's, then version 9's (Q19.8)
    assert "workers of the version-2 release" in notes[0]
    assert "docs/how-to/migrate.md" in notes[0]
    assert schema_version(pg_dsn, fresh_schema) == 2

    result = migrate(run_command, console_script, *args)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"schema '{fresh_schema}': version 2 -> {LATEST}"
    assert lines[1:] == [note.replace("-- note:", "note:") for note in notes]
    assert schema_version(pg_dsn, fresh_schema) == LATEST

    again = migrate(run_command, console_script, *args)
    assert again.stdout == f"schema '{fresh_schema}': already at version {LATEST}\n"


def test_q19_8_migrate_across_version_9_says_to_replace_the_old_workers(
    run_command, console_script, pg_dsn, fresh_schema
):
    # Version 8's workers' claims are refused on the version-9 schema, by the name of
    # the constraint: the operator is told so, and what to do.
    create_at_version(pg_dsn, fresh_schema, 8)
    result = migrate(run_command, console_script, "--dsn", pg_dsn, "--schema", fresh_schema)
    assert result.returncode == 0, result.stderr
    first, *notes = result.stdout.splitlines()
    assert first == f"schema '{fresh_schema}': version 8 -> {LATEST}"
    (note,) = notes
    assert note.startswith("note: version 9 adds claim tokens")
    assert "jobs_claim_needs_v9_workers" in note
    assert "Version 9: replace the old workers" in note
