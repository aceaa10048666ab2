"""Figures of a test run: the numbers a test measured, kept for the documentation.

A test that backs a promise of ``docs/explanation/guarantees.md`` records what it did with
the ``figures`` fixture::

    async def test_r8_kill9_...(pg_dsn, schema, open_fleet, figures):
        ...
        figures.record(faults_injected=1, **history_figures(report))

A run started with ``--figures`` (``just figures`` does), or with ``ALKSTORE_FIGURES_FILE``
set, writes them: at the end of the session, if any test asked for ``figures``, every such
test's figures, its outcome (``passed``/``failed``; a skipped test is not written, so it
never hides the last real result), the date and the git commit are merged into a JSON
file, by test node id: ``.figures/last-run.json`` at the repository's root (git-ignored),
or the path in ``ALKSTORE_FIGURES_FILE``. ``tests/tools/guarantees_figures.py`` turns it
into the table of the guarantees page. Other runs write nothing: an experiment on a
half-edited tree never becomes "the last run".

The file::

    {"format": 1, "tests": {"tests/faults/test_x.py::test_y": {
        "outcome": "passed", "figures": {"jobs_checked": 10000, ...},
        "date": "2026-12-01T10:00:00Z", "commit": "1ca0d25", "dirty": true,
        "duration_s": 12.3}}}

Hypothesis tests count the examples they ran with :func:`run_counting_examples`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import math
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

#: The environment variable naming the figures file (else :data:`DEFAULT_PATH`).
FIGURES_ENV = "ALKSTORE_FIGURES_FILE"
#: The figures file, relative to the repository's root (git-ignored).
DEFAULT_PATH = Path(".figures") / "last-run.json"
FORMAT = 1

_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
Value = int | float | str


class Figures:
    """The figures one test records (the ``figures`` fixture)."""

    def __init__(self) -> None:
        self.values: dict[str, Value] = {}

    def record(self, **values: Value) -> None:
        """Set named figures (a name recorded again is replaced): numbers, or short
        strings (an engine's name, a unit)."""
        for name, value in values.items():
            self.values[name] = _checked(name, value)

    def add(self, **values: int | float) -> None:
        """Add to named counters (a name not yet recorded starts at 0)."""
        for name, value in values.items():
            current = self.values.get(name, 0)
            if not isinstance(current, int | float):
                raise TypeError(f"figure {name!r} is not a number: {current!r}")
            self.values[name] = _checked(name, current + value)


def _checked(name: str, value: Value) -> Value:
    if not _NAME.fullmatch(name):
        raise ValueError(f"a figure's name is lower_snake_case: {name!r}")
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"figure {name!r} is not finite: {value!r}")
        return round(value, 6)
    if isinstance(value, str) and len(value) <= 200:
        return value
    raise TypeError(f"figure {name!r} must be a number or a short str: {value!r}")


def history_figures(report: Any) -> dict[str, int]:
    """The figures of a :class:`alkstore_trio.testing.HistoryReport`: jobs checked,
    claims, reclaims, operations accepted and refused, jobs acked, dead and live at the
    end, concurrent runs, violations, and ``lost``: the jobs the checker found neither
    acked, nor dead, nor live (its ``missing`` rule)."""
    figures = {
        "jobs_checked": report.jobs,
        "claims": report.claims,
        "reclaims": report.reclaims,
        "accepted_ops": report.accepted,
        "refused_ops": report.refused,
        "acked": report.acked,
        "concurrent_runs": report.concurrent_runs,
        "violations": len(report.violations),
        "lost": sum(v.rule == "missing" for v in report.violations),
    }
    if report.dead is not None:
        figures["dead"] = report.dead
    if report.live is not None:
        figures["live"] = report.live
    return figures


def run_counting_examples(test: Callable[[], None]) -> int:
    """Run a Hypothesis ``@given`` test (no arguments left to fill) and return how many
    examples it ran: the calls of its body, through Hypothesis's replaceable
    ``inner_test`` (the hook async test runners use)."""
    hypothesis = test.hypothesis  # type: ignore[attr-defined]
    inner = hypothesis.inner_test
    calls = 0

    @functools.wraps(inner)
    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return inner(*args, **kwargs)

    hypothesis.inner_test = counted
    try:
        test()
    finally:
        hypothesis.inner_test = inner
    return calls


# --- the plugin --------------------------------------------------------------------------


class _Run:
    """The figures of this session, by node id."""

    def __init__(self) -> None:
        self.figures: dict[str, Figures] = {}
        self.outcomes: dict[str, str] = {}
        self.durations: dict[str, float] = {}


_RUN_KEY = pytest.StashKey[_Run]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--figures",
        action="store_true",
        help="write the figures tests record into .figures/last-run.json "
        f"(or ${FIGURES_ENV}) for docs/explanation/guarantees.md",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RUN_KEY] = _Run()


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Figures:
    """Record named numbers of this test for the figures file (see the module)."""
    run = request.config.stash[_RUN_KEY]
    return run.figures.setdefault(request.node.nodeid, Figures())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    run = item.config.stash[_RUN_KEY]
    if item.nodeid in run.figures:
        before = run.outcomes.get(item.nodeid, "passed")
        if report.failed:
            run.outcomes[item.nodeid] = "failed"
        elif report.skipped and before != "failed":
            run.outcomes[item.nodeid] = "skipped"
        else:
            run.outcomes.setdefault(item.nodeid, "passed")
        run.durations[item.nodeid] = run.durations.get(item.nodeid, 0.0) + report.duration
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    run = session.config.stash.get(_RUN_KEY, None)
    if run is None or not run.figures:
        return
    if not (session.config.getoption("--figures", False) or os.environ.get(FIGURES_ENV)):
        return
    root = Path(str(session.config.rootpath))
    commit, dirty = _git_commit(root)
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    entries = {
        _without_xdist_group(node): {
            "outcome": run.outcomes.get(node, "failed"),
            "figures": figures.values,
            "date": date,
            "commit": commit,
            "dirty": dirty,
            "duration_s": round(run.durations.get(node, 0.0), 2),
        }
        for node, figures in run.figures.items()
        if run.outcomes.get(node) != "skipped"
    }
    if entries:
        write_figures(figures_path(root), entries)


def _without_xdist_group(node_id: str) -> str:
    """The test's node id without the ``@group`` that pytest-xdist's ``--dist loadgroup``
    appends (``tests/faults/test_x.py::test_y@heavy``): a test keeps one entry."""
    at = node_id.rfind("@")
    return node_id[:at] if at > node_id.rfind("]") else node_id


def figures_path(root: Path) -> Path:
    """The figures file: ``$ALKSTORE_FIGURES_FILE``, else :data:`DEFAULT_PATH` under
    ``root``."""
    configured = os.environ.get(FIGURES_ENV)
    return Path(configured) if configured else root / DEFAULT_PATH


def read_figures(path: Path) -> dict[str, dict[str, Any]]:
    """The entries of a figures file, by node id (none if it does not exist)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a figures file of format {FORMAT}")
    tests = data.get("tests")
    if not isinstance(tests, dict):
        raise ValueError(f"{path}: no 'tests' mapping")
    return tests


def write_figures(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Merge ``entries`` into the figures file (other tests' entries are kept), under a
    lock and by an atomic rename: pytest runs sharing the tree never lose each other's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.with_name(path.name + ".lock")):
        try:
            tests = read_figures(path)
        except (ValueError, json.JSONDecodeError):
            tests = {}  # a file of another format: replaced
        tests.update(entries)
        data = {"format": FORMAT, "tests": dict(sorted(tests.items()))}
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as stream:
                json.dump(data, stream, indent=1, sort_keys=False)
                stream.write("\n")
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # not POSIX: the atomic rename alone
        yield
        return
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _git_commit(root: Path) -> tuple[str | None, bool]:
    """The checked-out commit (abbreviated) and whether tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=10", "HEAD"],
            cwd=root, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root, capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None, False
    return head or None, bool(status.strip())
