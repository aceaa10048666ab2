"""``alkstore-trio dashboard`` (W1, W2, W7) in a subprocess: it serves, it refuses a bind
beyond loopback without auth, and the DSN's password shows nowhere."""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

import pytest
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from alkstore_trio import open_store

PASSWORD = "hunter2-dashboard-secret"


async def test_w1_the_command_serves_the_store_and_hides_the_password(pg_dsn, schema):
    # The test server trusts local connections, so any password gets in: the point is
    # only that it is shown nowhere.
    params = conninfo_to_dict(pg_dsn)
    dsn = make_conninfo(**{**params, "password": PASSWORD})
    async with open_store(pg_dsn, schema=schema, migrate="apply") as store:
        await store.queue("emails").enqueue(b"x")
    env = {**os.environ, "ALKSTORE_DSN": dsn, "ALKSTORE_SCHEMA": schema}
    env.pop("ALKSTORE_DASHBOARD_TOKEN", None)
    env.pop("ALKSTORE_DASHBOARD_BASIC_AUTH", None)
    argv = [sys.executable, "-m", "alkstore_trio", "dashboard", "--bind", "127.0.0.1:0"]
    process = await trio.lowlevel.open_process(argv, env=env, stderr=-1)
    seen = b""
    try:
        with trio.fail_after(30):
            while b"dashboard: serving" not in seen or not seen.endswith(b"\n"):
                chunk = await process.stderr.receive_some()
                assert chunk, seen.decode()
                seen += chunk
        line = next(x for x in seen.decode().splitlines() if "dashboard: serving" in x)
        assert "serving postgresql://postgres@" in line
        url = line.rpartition(" on ")[2].split(",")[0].strip()
        page = await trio.to_thread.run_sync(lambda: urllib.request.urlopen(url + "/").read())
        assert b'data-queue="emails"' in page
        assert PASSWORD.encode() not in page
        rebound = urllib.request.Request(url + "/", headers={"Host": "evil.test"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            await trio.to_thread.run_sync(lambda: urllib.request.urlopen(rebound))
        refused.value.close()
        assert refused.value.code == 421
    finally:
        process.terminate()
        with trio.move_on_after(10):
            rest = b""
            while chunk := await process.stderr.receive_some():
                rest += chunk
            seen += rest
        await process.wait()
    assert PASSWORD not in seen.decode()


async def test_w2_the_command_refuses_a_bind_beyond_loopback_without_auth():
    env = {**os.environ, "ALKSTORE_DSN": "postgresql://nobody@127.0.0.1:1/none"}
    env.pop("ALKSTORE_DASHBOARD_TOKEN", None)
    env.pop("ALKSTORE_DASHBOARD_BASIC_AUTH", None)
    argv = [sys.executable, "-m", "alkstore_trio", "dashboard", "--bind", "0.0.0.0:8080"]
    done = await trio.run_process(argv, env=env, capture_stderr=True, check=False)
    assert done.returncode == 2
    assert "not loopback, and no auth is set" in done.stderr.decode()
    short = await trio.run_process(
        argv, env={**env, "ALKSTORE_DASHBOARD_TOKEN": "short"}, capture_stderr=True, check=False
    )
    assert short.returncode == 2
    assert "at least 16 characters" in short.stderr.decode()
    assert "short" not in short.stderr.decode().split("must")[0]


def test_w1_without_the_extra_the_command_names_it(monkeypatch, capsys):
    import alkstore_trio
    from alkstore_trio._cli import main

    for name in [m for m in sys.modules if m.startswith("alkstore_trio.dashboard")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(alkstore_trio, "dashboard", raising=False)
    for name in [m for m in sys.modules if m == "starlette" or m.startswith("starlette.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    monkeypatch.setitem(sys.modules, "starlette", None)
    status = main(["dashboard", "--dsn", "postgresql://nobody@127.0.0.1:1/none"])
    assert status == 1
    assert capsys.readouterr().err == (
        "alkstore-trio dashboard: the dashboard needs the dashboard extra (starlette is "
        "missing): pip install 'alkstore_trio[dashboard]'\n"
    )
