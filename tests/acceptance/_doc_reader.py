"""A reader who follows a page of the docs top to bottom, as a newcomer does.

:class:`DocReader` acts on every fenced block of a Markdown page, in order, in one working
directory and one environment, and compares every output the page shows with what the
reader really got. What each block means:

- ```` ```python title="NAME.py" ```` is saved as ``NAME.py`` (the reader saves it);
- ```` ```python ```` without a title is a complete program, run with ``python``;
- ```` ```console ```` holds shell commands, run one by one with bash, each of which must
  succeed, except:

  - ``pip install ...`` (alone, or before ``&&``): checked against
    :data:`INSTALL_COMMANDS`, not run (the test runs in that installation already);
  - ``export ALKSTORE_DSN=...`` / ``export ALKSTORE_SCHEMA=...``: the test's server and
    a fresh schema of its own are used instead (the page's values are remembered: see
    the output below);
  - ``alkstore-trio worker ...``, which runs until it is stopped: it is started in the
    background (the reader's second terminal) and must say it is serving;

- ```` ```text ```` is **output**: what the block run just before it printed (stdout and
  stderr together, as a terminal shows them), or the worker's log after a worker's start,
  after ``<!-- doc-test: the worker's output -->`` and after the stop. It must match
  (:func:`output_matches`): a line that is only ``...`` stands for any number of lines,
  and ``...`` within a line for any text in that line; trailing blanks are ignored, and
  the test's own DSN and schema name are written as the page's exported ones before the
  comparison. Each run
  shows at most one output block; a worker's log is compared until it matches (it is
  still being written), for up to :data:`STEP_TIMEOUT_S`.

Markers are HTML comments alone on a line (invisible on the page):

- ``<!-- doc-test: stop the worker -->`` is where the reader presses Ctrl-C: the test
  sends SIGINT, and the worker must exit with status 0;
- ``<!-- doc-test: wait for the worker -->``: the reader types the next command a moment
  later, once the worker has settled every job; the test waits (bounded) until the
  schema's ``jobs`` table is empty (every job acked, or dead);
- ``<!-- doc-test: the worker's output -->``: the next ```` ```text ```` block is the
  running worker's log so far;
- ``<!-- doc-test: not run: REASON -->``: the next fenced block is neither run nor
  compared, for REASON. Every such marker must be listed, with its reason, in the test
  that reads the page (:attr:`DocReader.not_run` collects them), so none is silent.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

#: The install commands the pages may show (the test environment is one of them).
INSTALL_COMMANDS = frozenset(
    {
        "pip install -e '.[dev]'",
        "pip install -e '.[postgres]'",
        "pip install -e '.[postgres,tasks]'",
    }
)
#: A command, a program or a worker's startup that takes longer than this is a hang.
STEP_TIMEOUT_S = 90

MARK_PREFIX = "<!-- doc-test: "
STOP_WORKER = "<!-- doc-test: stop the worker -->"
WAIT_FOR_WORKER = "<!-- doc-test: wait for the worker -->"
WORKER_OUTPUT = "<!-- doc-test: the worker's output -->"
NOT_RUN = re.compile(r"<!-- doc-test: not run: (?P<reason>[^>]*) -->")

BLOCK = re.compile(
    r"^```(?P<lang>\w+)(?P<info>[^\n]*)\n(?P<code>.*?)^```$|^(?P<mark><!-- doc-test: [^>]*-->)$",
    re.MULTILINE | re.DOTALL,
)
TITLE = re.compile(r'title="(?P<title>[^"]+)"')
EXPORT = re.compile(r"export (?P<name>ALKSTORE_DSN|ALKSTORE_SCHEMA)=(?P<value>\S+)")


@dataclass(frozen=True)
class Step:
    """One fenced block (or marker) of a page."""

    where: str  # "first-worker.md:42"
    lang: str  # python, console, text, ..., or "mark"
    title: str | None
    code: str


def page_steps(path: Path) -> list[Step]:
    """The fenced blocks and markers of a Markdown page, in order."""
    text = path.read_text(encoding="utf-8")
    steps = []
    for match in BLOCK.finditer(text):
        where = f"{path.name}:{text.count(chr(10), 0, match.start()) + 1}"
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


def output_matches(expected: str, actual: str) -> bool:
    """Whether ``actual`` is what ``expected`` shows. A line of ``expected`` that is only
    ``...`` stands for any number of lines (none too); elsewhere ``...`` stands for any
    text within one line. Trailing blanks, and blank lines at either end, do not count."""
    pattern = ""
    for line in _tidy(expected).splitlines():
        if line.strip() == "...":
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += "[^\n]*?".join(re.escape(part) for part in line.split("...")) + "\n"
    return re.fullmatch(pattern, _tidy(actual) + "\n") is not None


def _tidy(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


class DocReader:
    """Follows pages' steps in one directory and environment (see the module docstring
    for what each kind of block does)."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.env = env
        self.worker: subprocess.Popen[str] | None = None
        self.worker_where = ""
        self.worker_log_from = 0  # where the worker's shown output starts in its log
        self.programs = 0
        self.compared = 0  # output blocks that matched
        self.not_run: list[tuple[str, str]] = []  # (where, reason)
        self.page_values: dict[str, str] = {}  # the page's ALKSTORE_DSN / ALKSTORE_SCHEMA
        self._output: Callable[[], str] | None = None  # what the next text block shows
        self._live = False  # the output is a log still being written
        self._skip_next = False

    # --- the steps -------------------------------------------------------------------

    def follow(self, step: Step) -> None:
        if self._skip_next and step.lang != "mark":
            self._skip_next = False
            return
        if step.lang == "mark":
            self.mark(step)
        elif step.lang == "python" and step.title:
            (self.workdir / step.title).write_text(step.code, encoding="utf-8")
        elif step.lang == "python":
            self.programs += 1
            script = self.workdir / f"_program_{self.programs}.py"
            script.write_text(step.code, encoding="utf-8")
            shown = self.run(step.where, [sys.executable, str(script)])
            self.shows(lambda: shown)
        elif step.lang == "console":
            self.console(step)
        elif step.lang == "text":
            self.compare(step)
        else:
            pytest.fail(
                f"{step.where}: a ```{step.lang} block is neither run nor output; use "
                "```python, ```console or ```text, or mark it <!-- doc-test: not run: WHY -->"
            )

    def mark(self, step: Step) -> None:
        if step.code == STOP_WORKER:
            self.stop_worker(step.where)
        elif step.code == WAIT_FOR_WORKER:
            self.wait_for_worker(step.where)
        elif step.code == WORKER_OUTPUT:
            assert self.worker is not None, f"{step.where}: no worker is running"
            self.shows(self.worker_output, live=True)
        elif (match := NOT_RUN.fullmatch(step.code)) is not None:
            self.not_run.append((step.where, match["reason"]))
            self._skip_next = True
        else:
            pytest.fail(f"{step.where}: unknown marker {step.code}")

    def console(self, step: Step) -> None:
        shown: list[str] = []
        for command in console_commands(step.code):
            if command.startswith("alkstore-trio worker"):
                self.start_worker(step.where, command)
                self.shows(self.worker_output, live=True)
                return
            shown.append(self.run_command(step.where, command))
        self.shows(lambda: "".join(shown))

    def run_command(self, where: str, command: str) -> str:
        first, _, rest = command.partition(" && ")
        if first.startswith("pip "):
            assert first in INSTALL_COMMANDS, f"{where}: unexpected install {first!r}"
            return self.run_command(where, rest) if rest else ""
        if (export := EXPORT.fullmatch(command)) is not None:
            self.page_values[export["name"]] = export["value"]
            return ""  # the test's own server and schema are in self.env already
        if command.startswith("export "):
            name, _, value = command.removeprefix("export ").partition("=")
            self.env[name] = os.path.expandvars(value)
            return ""
        if command.startswith("psql ") and shutil.which("psql") is None:
            return self.psql_without_psql(where, command)
        return self.run(where, ["bash", "-c", command])

    def run(self, where: str, args: list[str]) -> str:
        """Run to completion; it must succeed. Its output, stdout and stderr as one."""
        result = subprocess.run(
            args,
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=STEP_TIMEOUT_S,
            check=False,
        )
        assert result.returncode == 0, (
            f"{where}: {shlex.join(args)} exited with {result.returncode}\n{result.stdout}"
        )
        assert "Traceback" not in result.stdout, f"{where}:\n{result.stdout}"
        return result.stdout

    # --- output ----------------------------------------------------------------------

    def shows(self, output: Callable[[], str], *, live: bool = False) -> None:
        self._output = output
        self._live = live

    def compare(self, step: Step) -> None:
        assert self._output is not None, (
            f"{step.where}: this ```text block follows no run (each run shows at most one "
            "output block); run the command it shows, or mark it "
            "<!-- doc-test: not run: WHY -->"
        )
        deadline = time.monotonic() + (STEP_TIMEOUT_S if self._live else 0)
        while not output_matches(step.code, actual := self.as_on_the_page(self._output())):
            if time.monotonic() >= deadline:
                pytest.fail(
                    f"{step.where}: the output differs from the page.\n--- the page shows:\n"
                    f"{step.code}--- the reader got:\n{actual}",
                    pytrace=False,
                )
            time.sleep(0.1)
        self.compared += 1
        self._output = None

    def as_on_the_page(self, output: str) -> str:
        """The output with the test's DSN and schema written as the page's ones."""
        for name, value in self.page_values.items():
            if self.env.get(name):
                output = output.replace(self.env[name], value)
        return output

    # --- the worker ------------------------------------------------------------------

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
        self.worker_log_from = 0
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while " serving " not in self.worker_log():
            assert self.worker.poll() is None, f"{where}: the worker exited:\n{self.worker_log()}"
            assert time.monotonic() < deadline, f"{where}: the worker never said it serves"
            time.sleep(0.05)

    def worker_log(self) -> str:
        return (self.workdir / "_worker.log").read_text(encoding="utf-8")

    def worker_output(self) -> str:
        return self.worker_log()[self.worker_log_from :]

    def stop_worker(self, where: str) -> None:
        assert self.worker is not None, f"{where}: no worker is running to stop"
        self.worker_log_from = len(self.worker_log())
        self.worker.send_signal(signal.SIGINT)
        status = self.worker.wait(timeout=STEP_TIMEOUT_S)
        self.worker = None
        assert status == 0, f"{where}: the worker exited with {status}:\n{self.worker_log()}"
        assert "stopped worker" in self.worker_log(), self.worker_log()
        self.shows(self.worker_output)

    def wait_for_worker(self, where: str) -> None:
        import psycopg
        from psycopg import sql

        assert self.worker is not None, f"{where}: no worker is running to wait for"
        jobs = sql.SQL("SELECT count(*) FROM {}.jobs").format(
            sql.Identifier(self.env["ALKSTORE_SCHEMA"])
        )
        deadline = time.monotonic() + STEP_TIMEOUT_S
        with psycopg.connect(self.env["ALKSTORE_DSN"], autocommit=True) as conn:
            while (row := conn.execute(jobs).fetchone()) is not None and row[0] > 0:
                assert time.monotonic() < deadline, f"{where}: the worker never settled its jobs"
                time.sleep(0.05)

    def psql_without_psql(self, where: str, command: str) -> str:
        """``psql "$ALKSTORE_DSN" -c "SQL"`` through psycopg, where psql is not installed."""
        import psycopg

        args = [os.path.expandvars(a) for a in shlex.split(command)]
        assert len(args) == 4, f"{where}: cannot run {command!r} without psql"
        assert args[2] == "-c", f"{where}: cannot run {command!r} without psql"
        with psycopg.connect(args[1], autocommit=True) as conn:
            conn.execute(args[3])
        return ""

    def close(self) -> None:
        """After the last page: nothing may be left running or pending."""
        if self.kill_worker():
            pytest.fail(f"{self.worker_where}: the page never stops the worker it starts")
        assert not self._skip_next, "a <!-- doc-test: not run --> marker ends the page"

    def kill_worker(self) -> bool:
        """Kill a worker still running; whether there was one."""
        if self.worker is None or self.worker.poll() is not None:
            return False
        self.worker.kill()
        self.worker.wait()
        return True


def reader_environment() -> dict[str, str]:
    """The test's environment, with its Python's scripts first on ``PATH``."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def follow_pages(pages: list[Path], workdir: Path, env: dict[str, str]) -> DocReader:
    """Follow every step of ``pages`` in order, as one reader."""
    reader = DocReader(workdir, env)
    try:
        for page in pages:
            for step in page_steps(page):
                reader.follow(step)
    except BaseException:
        reader.kill_worker()
        raise
    reader.close()
    return reader
