"""Q17 on the command line: ``alkstore-trio periodic list`` (table, stale rows,
``--json``) and ``alkstore-trio worker --periodic MODULE:ATTR`` (parsed, loaded before
anything is opened, bad values are usage errors, and a real worker process fires)."""

from __future__ import annotations

import json
import secrets
import signal
import textwrap

import pytest
import trio
from _worker_process import worker_env

from alkstore_trio import Periodic, open_store
from alkstore_trio._cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from alkstore_trio._cli.main import build_parser
from alkstore_trio._cli.worker import setup

SCHEDULES = """
from alkstore_trio import Periodic

async def nothing(job):
    pass

ONE = Periodic("one", "ticks", every_s=1)
SCHEDULES = [Periodic("a", "ticks", every_s=60), Periodic("b", "ticks", cron="0 7 * * *")]
NOT_SCHEDULES = [1, 2]
"""


@pytest.fixture
def schedules_module(tmp_path, monkeypatch):
    name = f"alk_schedules_{secrets.token_hex(4)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(SCHEDULES), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_q17_6_periodic_list_shows_every_row_and_the_stale_ones(cli, pg_dsn, schema):
    async def seed() -> None:
        async with open_store(pg_dsn, schema=schema, listen=False) as store:
            await store.fire_periodic(
                [
                    Periodic("digest", "emails", cron="0 7 * * *", tz="Europe/Riga"),
                    Periodic("gone", "emails", every_s=60),
                ]
            )
            async with store.transaction() as tx:  # back-date: removed from the code
                await tx.execute(
                    f'UPDATE "{schema}".periodic SET last_seen_at = last_seen_at - '
                    "interval '1 hour' WHERE name = 'gone'"
                )

    assert cli("periodic", "list")[2] == "no periodic schedules\n"
    trio.run(seed)
    status, out, _ = cli("periodic", "list")
    assert status == EXIT_OK
    header, digest, gone = out.splitlines()
    assert header.split()[:4] == ["NAME", "QUEUE", "EXPRESSION", "TZ"]
    assert digest.split()[:5] == ["digest", "emails", "cron:0", "7", "*"]
    assert "Europe/Riga" in digest
    assert not digest.endswith("STALE")
    assert gone.endswith("STALE")
    status, out, _ = cli("periodic", "list", "--json", "--stale-after-s", "7200")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["name"], r["stale"], r["last_fire_at"]) for r in rows] == [
        ("digest", False, None),
        ("gone", False, None),
    ]
    assert rows[0]["next_fire_at"].endswith("T05:00:00Z")  # 07:00 in Riga (winter: +2)
    assert rows[0]["expression"] == "cron:0 7 * * *"
    assert cli("periodic", "list", "--stale-after-s", "0")[0] == EXIT_USAGE


def test_q17_10_periodic_delete_deletes_a_row_and_says_when_a_worker_still_declares_it(
    cli, on_store, schema
):
    async def seed(store) -> None:
        await store.fire_periodic(
            [Periodic("gone", "emails", every_s=60), Periodic("live", "emails", every_s=60)]
        )
        async with store.transaction() as tx:  # back-date: removed from the code
            await tx.execute(
                f'UPDATE "{schema}".periodic SET last_seen_at = last_seen_at - '
                "interval '1 hour' WHERE name = 'gone'"
            )

    on_store(seed)
    status, out, err = cli("periodic", "delete", "gone")
    assert (status, out, err) == (EXIT_OK, "deleted the row of schedule 'gone'\n", "")
    status, out, err = cli("periodic", "delete", "live", "--json")
    assert status == EXIT_OK
    assert json.loads(out) == {"name": "live", "deleted": True, "stale": False}
    assert "its next check makes the row again" in err
    assert cli("periodic", "list")[2] == "no periodic schedules\n"
    status, out, err = cli("periodic", "delete", "gone")
    assert (status, out) == (EXIT_FAILED, "")
    assert "schedule 'gone' was not deleted: there is no such row" in err
    status, _, err = cli("periodic", "delete", "bad\x00name")
    assert status == EXIT_USAGE
    assert "NUL" in err


def test_q17_8_worker_periodic_loads_the_schedules_before_opening_anything(schedules_module):
    args = build_parser({}).parse_args(
        [
            "worker",
            "--dsn=memory://",
            f"--queue=other={schedules_module}:nothing",
            f"--periodic={schedules_module}:SCHEDULES",
            f"--periodic={schedules_module}:ONE",
        ]
    )
    setup(args)
    assert [p.name for p in args.periodic] == ["a", "b", "one"]


@pytest.mark.parametrize(
    ("attr", "message"),
    [
        ("NOT_SCHEDULES", "must name a Periodic or a list of them"),
        ("MISSING", "has no attribute 'MISSING'"),
    ],
)
def test_q17_8_worker_periodic_of_no_schedules_is_a_usage_error(
    schedules_module, capsys, attr, message
):
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "worker",
                "--dsn=memory://",
                f"--queue=other={schedules_module}:nothing",
                f"--periodic={schedules_module}:{attr}",
            ]
        )
    assert exited.value.code == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_q17_8_worker_periodic_syntax_is_checked_by_argparse(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["worker", "--dsn=memory://", "--queue=q=m:f", "--periodic=no-colon"])
    assert exited.value.code == EXIT_USAGE
    assert "must be MODULE:ATTR" in capsys.readouterr().err


async def test_q17_8_a_cli_worker_process_fires_its_schedules(
    pg_dsn, schema, start_worker, tmp_path
):
    name = f"alk_schedules_{secrets.token_hex(4)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(SCHEDULES), encoding="utf-8")
    async with open_store(pg_dsn, schema=schema, migrate="apply", listen=False) as store:
        worker = await start_worker(
            f"--queue=other={name}:nothing",
            f"--periodic={name}:ONE",
            "--status-interval-s=0",
            cwd=tmp_path,
            env=worker_env(ALKSTORE_DSN=pg_dsn, ALKSTORE_SCHEMA=schema),
        )
        ticks = store.queue("ticks")
        with trio.move_on_after(30):
            while not await ticks.list_jobs("pending", limit=10):
                assert worker.process.poll() is None, worker.stderr
                await trio.sleep(0.05)
        jobs = await ticks.list_jobs("pending", limit=10)
        assert jobs, f"no periodic job after 30 s; worker stderr:\n{worker.stderr}"
        assert jobs[0].headers["alk-periodic"] == "one"
        (row,) = await store.list_periodic()
        assert (row.name, row.expression, row.stale) == ("one", "every:1.0s", False)
        worker.signal(signal.SIGINT)
        assert await worker.wait() == 0, worker.stderr
