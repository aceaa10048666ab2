"""How the default run is spread over pytest-xdist's worker processes.

``addopts`` (pyproject.toml) has ``-n auto --dist loadgroup``; ``-n 0`` on the command line
runs everything in-process, ``-n 3`` sets the number of workers.

- **How many workers** (``-n auto``, :func:`pytest_xdist_auto_num_workers`): the
  machine's CPUs, at most :data:`MAX_AUTO_WORKERS`, or ``PYTEST_XDIST_AUTO_NUM_WORKERS``.
  A run that names only test files or node ids (``pytest tests/unit/test_backoff.py``)
  runs in-process: no workers to start for a file that takes a second.
- **What never runs together**: the tests of the ``xdist_group`` named :data:`HEAVY` go
  to one worker as one unit, so they run one at a time; the other worker meanwhile runs
  ordinary tests, as any other program on the machine may. That group is every test of
  ``tests/faults`` (fleets of worker processes, kills, latency bounds) and, elsewhere,
  each test marked ``@pytest.mark.xdist_group("heavy")`` because it starts several
  processes or asserts a wall-clock latency. Mark a new such test the same way.
- **What starts first**: groups are handed out before single tests, largest first.
  ``tests/stateful`` (a few long Hypothesis runs, 30 s each) is the ``stateful`` group, so
  it starts at once on the second worker instead of being left for the end of the run.

pytest-xdist 3.8 groups tests by appending ``@group`` to their node ids, which pytest 9.2
no longer lets it do (pytest-dev/pytest-xdist#1386): :class:`_GroupIds` sets the id as
xdist meant to, and fails the run if it cannot, rather than let the groups go silently.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

#: The most workers ``-n auto`` starts: each holds a few connections (a PostgreSQL store
#: has a pool of 4, a fault test's fleet a few dozen), under PostgreSQL's default
#: ``max_connections`` of 100 also on a many-core machine.
MAX_AUTO_WORKERS = 4
#: The ``xdist_group`` of the tests that must not run together (see the module).
HEAVY = "heavy"
#: Folders of ``tests/`` whose every test joins an ``xdist_group``.
GROUPS_BY_FOLDER = {"faults": HEAVY, "stateful": "stateful"}
TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: no workers for a run of named files or tests, else the CPU count (at
    most :data:`MAX_AUTO_WORKERS`), or ``PYTEST_XDIST_AUTO_NUM_WORKERS``."""
    if configured := os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(configured)
    named = [arg for arg in config.args if not arg.startswith("-")]
    if named and all("::" in arg or os.path.isfile(arg) for arg in named):
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MAX_AUTO_WORKERS, cpus or 1))


@pytest.hookimpl(tryfirst=True)  # before xdist's hook, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = os.path.relpath(str(item.path), TESTS).split(os.sep)[0]
        if (group := GROUPS_BY_FOLDER.get(folder)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") and config.getoption("loadgroup", False):
        config.pluginmanager.register(_GroupIds(), "alkstore-xdist-group-ids")


class _GroupIds:
    """On an xdist worker with ``--dist loadgroup``: make sure each grouped test's node id
    ends in ``@group``, which is how the controller learns the groups."""

    @pytest.hookimpl(trylast=True)  # after xdist's own attempt
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            names = {_group_name(mark) for mark in item.iter_markers("xdist_group")}
            if not names:
                continue
            suffix = "@" + "_".join(sorted(names))
            if item.nodeid.endswith(suffix):
                continue  # xdist did it (pytest before 9.2)
            try:
                from _pytest.nodeid import NodeId

                item._id = NodeId.parse(item.nodeid + suffix)  # type: ignore[attr-defined]
            except (ImportError, AttributeError) as exc:
                raise pytest.UsageError(
                    f"cannot put {item.nodeid} in its xdist_group ({exc}); "
                    "run with -n 0, or see tests/_parallel.py"
                ) from exc
            if not item.nodeid.endswith(suffix):
                raise pytest.UsageError(
                    f"cannot put {item.nodeid} in its xdist_group; run with -n 0, "
                    "or see tests/_parallel.py"
                )


def _group_name(mark: pytest.Mark) -> str:
    """The group of an ``xdist_group`` mark, as xdist reads it."""
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On an xdist worker, make a report's captured text sendable to the controller.

    A test may log text that is not valid UTF-8 on purpose (a handler raising with a lone
    surrogate: ``test_r5_long_and_odd_error_text_is_made_storable``); execnet then cannot
    encode the report and the worker crashes. In the report only, such characters become
    ``\\udXXX`` escapes; what the test asserted is untouched.
    """
    report: pytest.TestReport = yield
    if hasattr(item.config, "workerinput"):
        report.sections = [(title, _sendable(text)) for title, text in report.sections]
        if report.longrepr is not None:
            text = str(report.longrepr)
            if (sendable := _sendable(text)) != text:  # else keep the structured repr
                report.longrepr = sendable
    return report


def _sendable(text: str) -> str:
    """``text`` with lone surrogates escaped (``\\ud800``), so that it encodes as UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
