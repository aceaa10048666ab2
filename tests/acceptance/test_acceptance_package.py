"""What a user installs works away from the checkout (issue 16 item 5).

No release is published yet, so the README tells users to install a wheel built from a
checkout (``python -m build``). Here the sdist and the wheel are built exactly so (the
wheel from the sdist, as ``build`` does), and:

- both hold every file of the package: the SQL files of the PostgreSQL engine (the
  schema, the queries and each migration, read at run time) and ``py.typed`` (the
  package is typed for its users' type checkers), besides the Python modules;
- the wheel, installed with the ``postgres`` extra into a fresh virtual environment and
  run from an empty directory (nothing of the checkout on ``sys.path``), runs the demo,
  migrates a fresh PostgreSQL schema and enqueues a job there; ``Tasks`` there says it
  needs the ``tasks`` extra, and installed with it too, a task defers into the schema.

The build runs without isolation (``--no-isolation``: the backend, hatchling, is in
``dev``), and the install takes its dependencies from pip's cache or the index, so the
module takes a few seconds. It starts several processes, so it is in the ``heavy`` group
(``tests/_parallel.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "alkstore_trio"
#: Building, installing or one command taking longer than this is a hang.
TIMEOUT_S = 300

pytestmark = pytest.mark.xdist_group("heavy")


def package_files() -> set[str]:
    """Every file of the package in the checkout, as a path under its parent."""
    return {
        str(path.relative_to(ROOT))
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def run(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        args,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}"
    return result.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding the built sdist and wheel."""
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)], cwd=out)
    return out


def the_one(dist: Path, pattern: str) -> Path:
    found = sorted(dist.glob(pattern))
    assert len(found) == 1, found
    return found[0]


def test_the_wheel_holds_the_sql_files_and_py_typed(dist):
    wheel = the_one(dist, "alkstore_trio-*-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = {name for name in archive.namelist() if name.startswith("alkstore_trio/")}
    expected = package_files()
    assert "alkstore_trio/py.typed" in expected
    assert "alkstore_trio/_engines/_postgres/sql/schema.sql" in expected
    assert len([name for name in expected if name.endswith(".sql")]) >= 3
    assert names == expected


def test_the_sdist_holds_the_package_and_the_readme(dist):
    sdist = the_one(dist, "alkstore_trio-*.tar.gz")
    with tarfile.open(sdist) as archive:
        top, *_ = archive.getnames()[0].split("/")
        names = {name.removeprefix(f"{top}/") for name in archive.getnames()}
    assert package_files() <= names
    assert {"pyproject.toml", "README.md"} <= names


def test_the_installed_wheel_runs_the_demo_and_enqueues_on_postgresql(
    dist, pg_dsn, fresh_schema, tmp_path
):
    wheel = the_one(dist, "alkstore_trio-*-py3-none-any.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)]  # the venv has no pip
    run([*pip, "install", "--quiet", f"{wheel}[postgres]"], cwd=tmp_path)
    somewhere = tmp_path / "app"
    somewhere.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTHON", "VIRTUAL_ENV", "ALKSTORE_"))
    }
    env.update(ALKSTORE_DSN=pg_dsn, ALKSTORE_SCHEMA=fresh_schema, PATH=f"{venv / 'bin'}")

    where = run(
        [str(python), "-c", "import alkstore_trio; print(alkstore_trio.__file__)"],
        cwd=somewhere,
        env=env,
    )
    installed = Path(where.strip()).parent
    assert installed.is_relative_to(venv), where
    assert (installed / "py.typed").is_file()

    command = str(venv / "bin" / "alkstore-trio")
    demo = run([command, "demo", "--jobs", "40"], cwd=somewhere, env=env)
    assert "none lost" in demo
    migrations = len(list((PACKAGE / "_engines/_postgres/sql/migrations").glob("*.sql")))
    migrated = run([command, "migrate"], cwd=somewhere, env=env)
    assert migrated == f"schema '{fresh_schema}': version 0 -> {migrations}\n"
    enqueued = run(
        [command, "enqueue", "--queue", "emails", "--payload-json", '{"to": "ada@example.com"}'],
        cwd=somewhere,
        env=env,
    )
    assert enqueued == "1\n"
    stats = run([command, "stats", "--json"], cwd=somewhere, env=env)
    assert '"emails"' in stats

    # Typed tasks need the tasks extra, as the README says: without it, Tasks names the
    # extra; with it, a task defers into the same schema.
    uses_tasks = "import alkstore_trio; alkstore_trio.Tasks()"
    refused = subprocess.run(
        [str(python), "-c", uses_tasks],
        cwd=somewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert refused.returncode == 1
    assert "needs the tasks extra" in refused.stderr, refused.stderr
    run([*pip, "install", "--quiet", f"{wheel}[postgres,tasks]"], cwd=tmp_path)
    (somewhere / "defer_one.py").write_text(DEFER_ONE, encoding="utf-8")
    deferred = run([str(python), "defer_one.py"], cwd=somewhere, env=env)
    assert deferred == "deferred job 2\n"


DEFER_ONE = """\
import os

import trio

import alkstore_trio

tasks = alkstore_trio.Tasks()


@tasks.task(queue="emails")
async def send_email(to: str) -> None: ...


async def main() -> None:
    async with alkstore_trio.open_store(
        os.environ["ALKSTORE_DSN"], schema=os.environ["ALKSTORE_SCHEMA"]
    ) as store:
        print("deferred job", await send_email.defer(store, to="ada@example.com"))


trio.run(main)
"""
