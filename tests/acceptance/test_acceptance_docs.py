"""The docs' code runs.

Two mechanisms:

- **The tutorial is run start to finish, as a newcomer follows it**
  (:func:`test_tutorial_runs_start_to_finish`): its pages, in the order of
  :data:`TUTORIAL`, are read top to bottom and every fenced code block is acted on in
  one working directory and one environment:

  - ```` ```python title="NAME.py" ```` is saved as ``NAME.py`` (the reader saves it);
  - ```` ```python ```` without a title is a complete program, run with ``python``;
  - ```` ```console ```` holds shell commands, run one by one with bash, each of which
    must succeed — except ``pip install ...`` (checked against :data:`INSTALL_COMMANDS`:
    the test runs in that installation already), ``export ALKSTORE_DSN=`` /
    ``export ALKSTORE_SCHEMA=`` (the test's server and a fresh schema of its own are
    used instead, and the schema is dropped afterwards), and ``alkstore-trio worker``,
    which runs until it is stopped: it is started in the background (the reader's
    second terminal), and must say it is serving;
  - ```` <!-- tutorial: stop the worker --> ```` (an HTML comment, invisible on the
    page) is where the reader presses Ctrl-C: the test sends SIGINT and the worker
    must exit with status 0;
  - ```` ```text ```` is output shown for reading, not run.

  Part 1 uses the in-memory engine only, so it also runs on its own without a database
  (:func:`test_tutorial_part_1_runs_without_a_database`).

- **Every other ```` ```python ```` block of the how-to guides and the README is a
  complete program, and runs** (:func:`test_docs_python_block_runs_as_a_program`); use
  ```` ```text ```` (or ```` ```console ```` for shell commands) for anything that is
  not a whole program.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The tutorial, in the order a reader follows it. Every page of docs/tutorial/ is here.
TUTORIAL = ("first-queue.md", "first-postgres-queue.md", "first-worker.md", "periodic-digest.md")
#: The install commands the tutorial may show (the test environment is one of them).
INSTALL_COMMANDS = frozenset({"pip install -e '.[dev]'", "pip install -e '.[postgres]'"})
#: Stands for the reader pressing Ctrl-C in the worker's terminal.
STOP_WORKER_MARK = "<!-- tutorial: stop the worker -->"
#: A command, a program or a worker's startup that takes longer than this is a hang.
STEP_TIMEOUT_S = 90

FENCE = re.compile(r"^```python\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)
BLOCK = re.compile(
    r"^```(?P<lang>\w+)(?P<info>[^\n]*)\n(?P<code>.*?)^```$|^(?P<mark><!-- tutorial: [^>]*-->)$",
    re.MULTILINE | re.DOTALL,
)
TITLE = re.compile(r'title="(?P<title>[^"]+)"')


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """The untitled ```python blocks of a Markdown file, with the line each starts on."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m["code"]) for m in FENCE.finditer(text)]


# --- the tutorial, start to finish ---------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One fenced block (or marker) of a tutorial page."""

    where: str  # "first-worker.md:42"
    lang: str  # python, console, text, ..., or "mark"
    title: str | None
    code: str


def tutorial_steps(page: str) -> list[Step]:
    path = ROOT / "docs" / "tutorial" / page
    text = path.read_text(encoding="utf-8")
    steps = []
    for match in BLOCK.finditer(text):
        where = f"{page}:{text.count(chr(10), 0, match.start()) + 1}"
        if match["mark"]:
            steps.append(Step(where, "mark", None, match["mark"]))
            continue
        title = TITLE.search(match["info"])
        steps.append(Step(where, match["lang"], title and title["title"], match["code"]))
    return steps


def console_commands(code: str) -> list[str]:
    """The commands of a ```console block: continuation lines joined, comments dropped."""
    joined = code.replace("\\\n", " ")
    return [
        line.strip()
        for line in joined.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


class TutorialReader:
    """Follows the tutorial's steps in one directory and environment (see the module
    docstring for what each kind of block does)."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.env = env
        self.worker: subprocess.Popen[str] | None = None
        self.worker_where = ""
        self.programs = 0

    def follow(self, step: Step) -> None:
        if step.lang == "python" and step.title:
            (self.workdir / step.title).write_text(step.code, encoding="utf-8")
        elif step.lang == "python":
            self.programs += 1
            script = self.workdir / f"_snippet_{self.programs}.py"
            script.write_text(step.code, encoding="utf-8")
            self.run(step.where, [sys.executable, str(script)])
        elif step.lang == "console":
            for command in console_commands(step.code):
                self.run_command(step.where, command)
        elif step.lang == "mark":
            assert step.code == STOP_WORKER_MARK, f"{step.where}: unknown marker {step.code}"
            self.stop_worker(step.where)
        else:
            assert step.lang in {"text", "toml", "ini", "yaml"}, (
                f"{step.where}: a ```{step.lang} block in the tutorial is neither run nor "
                "known to be output; use ```python, ```console or ```text"
            )

    def run_command(self, where: str, command: str) -> None:
        if command.startswith("pip "):
            assert command in INSTALL_COMMANDS, f"{where}: unexpected install {command!r}"
        elif re.fullmatch(r"export ALKSTORE_(DSN|SCHEMA)=\S+", command):
            pass  # the test's own server and schema are in self.env already
        elif command.startswith("export "):
            name, _, value = command.removeprefix("export ").partition("=")
            self.env[name] = os.path.expandvars(value)
        elif command.startswith("alkstore-trio worker"):
            self.start_worker(where, command)
        elif command.startswith("psql ") and shutil.which("psql") is None:
            self.psql_without_psql(where, command)
        else:
            self.run(where, ["bash", "-c", command])

    def run(self, where: str, args: list[str]) -> None:
        result = subprocess.run(
            args,
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT_S,
            check=False,
        )
        assert result.returncode == 0, (
            f"{where}: {shlex.join(args)} exited with {result.returncode}\n"
            f"{result.stdout}\n{result.stderr}"
        )
        assert "Traceback" not in result.stderr, f"{where}:\n{result.stderr}"

    def start_worker(self, where: str, command: str) -> None:
        assert self.worker is None, f"{where}: a second worker while the first runs"
        with (self.workdir / "_worker.log").open("w", encoding="utf-8") as log:
            self.worker = subprocess.Popen(
                ["bash", "-c", f"exec {command}"],
                cwd=self.workdir,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        self.worker_where = where
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while " serving " not in self.worker_log():
            assert self.worker.poll() is None, f"{where}: the worker exited:\n{self.worker_log()}"
            assert time.monotonic() < deadline, f"{where}: the worker never said it serves"
            time.sleep(0.05)

    def worker_log(self) -> str:
        return (self.workdir / "_worker.log").read_text(encoding="utf-8")

    def stop_worker(self, where: str) -> None:
        assert self.worker is not None, f"{where}: no worker is running to stop"
        self.worker.send_signal(signal.SIGINT)
        status = self.worker.wait(timeout=STEP_TIMEOUT_S)
        self.worker = None
        assert status == 0, f"{where}: the worker exited with {status}:\n{self.worker_log()}"
        assert "stopped worker" in self.worker_log(), self.worker_log()

    def psql_without_psql(self, where: str, command: str) -> None:
        """``psql "$ALKSTORE_DSN" -c "SQL"`` through psycopg, where psql is not installed."""
        import psycopg

        args = [os.path.expandvars(a) for a in shlex.split(command)]
        assert len(args) == 4, f"{where}: cannot run {command!r} without psql"
        assert args[2] == "-c", f"{where}: cannot run {command!r} without psql"
        with psycopg.connect(args[1], autocommit=True) as conn:
            conn.execute(args[3])

    def close(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.kill()
            self.worker.wait()
            pytest.fail(f"{self.worker_where}: the tutorial never stops the worker it starts")


def reader_environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def follow_tutorial(pages: tuple[str, ...], workdir: Path, env: dict[str, str]) -> TutorialReader:
    reader = TutorialReader(workdir, env)
    try:
        for page in pages:
            for step in tutorial_steps(page):
                reader.follow(step)
    finally:
        reader.close()
    return reader


def test_the_tutorial_path_lists_every_tutorial_page():
    pages = sorted(p.name for p in (ROOT / "docs" / "tutorial").glob("*.md"))
    assert pages == sorted(TUTORIAL)
    for page in TUTORIAL:
        assert any(s.lang in {"python", "console"} for s in tutorial_steps(page)), page


def test_tutorial_part_1_runs_without_a_database(tmp_path):
    follow_tutorial(TUTORIAL[:1], tmp_path, reader_environment())


def test_tutorial_runs_start_to_finish(pg_dsn, fresh_schema, tmp_path):
    env = reader_environment()
    env["ALKSTORE_DSN"] = pg_dsn
    env["ALKSTORE_SCHEMA"] = fresh_schema  # dropped after the test
    reader = follow_tutorial(TUTORIAL, tmp_path, env)
    assert reader.programs > 0


# --- the how-to guides and the README: each ```python block is a program -------------

DOCS = sorted([*(ROOT / "docs" / "how-to").glob("*.md"), ROOT / "README.md"])

SNIPPETS = [
    pytest.param(code, id=f"{path.relative_to(ROOT)}:{line}")
    for path in DOCS
    for line, code in python_blocks(path)
]


@pytest.mark.parametrize("code", SNIPPETS)
def test_docs_python_block_runs_as_a_program(run_command, code, tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    result = run_command([sys.executable, str(script)], cwd=tmp_path)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert result.stderr == ""


def quick_start_commands() -> list[str]:
    """The commands of the README's "Quick start" section, in order."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```console\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_quick_start_is_exactly_the_demo_and_the_test_command():
    assert quick_start_commands() == [
        "pip install -e '.[dev]' && alkstore-trio demo",
        "pip install -e '.[dev]' && pytest",
    ]


def test_ci_runs_the_readme_test_command_verbatim():
    ci_lines = [
        line
        for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert ci_lines[-1] == quick_start_commands()[-1]


LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize(
    "page",
    [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))],
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_relative_links_point_to_existing_files(page):
    text = page.read_text(encoding="utf-8")
    for match in LINK.finditer(text):
        target = match["target"]
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
