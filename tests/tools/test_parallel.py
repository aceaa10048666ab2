"""``tests/_parallel.py``: how the suite is spread over pytest-xdist's workers.

The groups are checked by running pytest in a subprocess on a small sample suite that
loads the plugin, as the real suite does from ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import _parallel

TESTS = Path(__file__).resolve().parents[1]

#: Four grouped tests that each hold their worker for a while, and ungrouped ones: a
#: group that xdist ignored would land on both workers.
SAMPLE = textwrap.dedent(
    """
    import json, os, time

    import pytest

    def record(name):
        with open(os.environ["RECORD"], "a") as out:
            out.write(json.dumps([name, os.environ.get("PYTEST_XDIST_WORKER", "main")]) + "\\n")

    @pytest.mark.parametrize("i", range(4))
    @pytest.mark.xdist_group("heavy")
    def test_heavy(i):
        record(f"heavy{i}")
        time.sleep(0.2)

    @pytest.mark.parametrize("i", range(8))
    def test_plain(i):
        record(f"plain{i}")
        time.sleep(0.05)

    def test_logs_a_lone_surrogate():
        import logging
        logging.getLogger("sample").warning("bad \\ud800 text")
    """
)


def run_pytest(directory: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list]:
    (directory / "conftest.py").write_text('pytest_plugins = ["_parallel"]\n')
    (directory / "test_sample.py").write_text(SAMPLE)
    record = directory / "record.jsonl"
    environ = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_AUTO_NUM_WORKERS"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=directory,
        env={**environ, "PYTHONPATH": str(TESTS), "RECORD": str(record)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = record.read_text().splitlines() if record.exists() else []
    return result, [json.loads(line) for line in lines]


def test_a_group_runs_on_one_worker_and_a_surrogate_in_a_log_does_not_crash_it(tmp_path):
    result, runs = run_pytest(tmp_path, "-n", "2", "--dist", "loadgroup")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "13 passed" in result.stdout
    workers = dict(runs)
    assert len({workers[f"heavy{i}"] for i in range(4)}) == 1, runs
    assert set(workers.values()) == {"gw0", "gw1"}, runs  # the other worker ran the rest


def test_auto_is_no_workers_for_named_files_or_tests_else_the_cpus_at_most_four(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    (tmp_path / "test_a.py").write_text("")

    def workers(*args: str) -> int:
        return _parallel.pytest_xdist_auto_num_workers(SimpleNamespace(args=list(args)))

    cpus = min(_parallel.MAX_AUTO_WORKERS, len(os.sched_getaffinity(0)))
    assert workers(str(tmp_path / "test_a.py")) == 0
    assert workers(str(tmp_path / "test_a.py::test_x"), "tests/x.py::T::test_y") == 0
    assert workers() == cpus  # the testpaths
    assert workers(str(tmp_path)) == cpus
    assert workers(str(tmp_path / "test_a.py"), str(tmp_path)) == cpus
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert workers(str(tmp_path / "test_a.py")) == 3
