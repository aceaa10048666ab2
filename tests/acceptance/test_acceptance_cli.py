"""The ``alkstore-trio`` command, run in subprocesses: the demo, --help, --version and
the exit codes (0 ok, 2 usage error)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import alkstore_trio

ROOT = Path(__file__).resolve().parents[2]

SUMMARY_LINE = re.compile(r"^\s+(?P<key>[a-z -]+):\s+(?P<value>\d+(?:\.\d+)?)", re.MULTILINE)
DEAD_GROUP = re.compile(r"^\s+(?P<count>\d+) x '(?P<error>[^']*)' \(job ids (?P<ids>[\d, ]+)\)$")


def summary_of(stdout: str) -> dict[str, float]:
    """The ``key: number`` lines of the demo's summary."""
    return {m["key"]: float(m["value"]) for m in SUMMARY_LINE.finditer(stdout)}


def counts_of(stdout: str) -> dict[str, float]:
    """The summary without the timing lines (the deterministic part)."""
    summary = summary_of(stdout)
    return {key: value for key, value in summary.items() if key not in {"wall time", "throughput"}}


def assert_demo_output_is_consistent(stdout: str, *, jobs: int) -> dict[str, float]:
    summary = summary_of(stdout)
    assert set(summary) == {
        "enqueued",
        "claims",
        "acked",
        "retried",
        "dead-lettered",
        "wall time",
        "throughput",
    }, stdout
    assert summary["enqueued"] == jobs
    # Every job settled: acked or dead-lettered.
    assert summary["acked"] + summary["dead-lettered"] == summary["enqueued"]
    # Every claim ended in exactly one of ack, retry back to pending, or dead-letter.
    assert summary["claims"] == summary["acked"] + summary["retried"] + summary["dead-lettered"]
    assert summary["acked"] > 0
    assert summary["retried"] > 0
    assert summary["dead-lettered"] > 0
    # The dead-lettered jobs are listed with their last_error, grouped.
    groups = [m for line in stdout.splitlines() if (m := DEAD_GROUP.match(line))]
    assert {g["error"] for g in groups} == {
        "poison job: handler always raises",
        "malformed payload: fail() without retrying",
    }
    assert sum(int(g["count"]) for g in groups) == summary["dead-lettered"]
    for group in groups:
        assert len(group["ids"].split(", ")) == int(group["count"])
    assert summary["wall time"] < 5.0, "the demo must finish in a few seconds"
    return summary


def test_demo_console_script_exits_0_and_prints_a_consistent_summary(run_command, console_script):
    result = run_command([console_script, "demo"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("alkstore-trio demo: in-memory engine, seed 0")
    summary = assert_demo_output_is_consistent(result.stdout, jobs=300)
    assert summary["throughput"] > 0
    # The sample output in the CLI reference is what the defaults really print.
    reference = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    sample = reference.split("```text\nalkstore-trio demo: ", 1)[1].split("```", 1)[0]
    assert counts_of(sample) == counts_of(result.stdout)


def test_demo_python_dash_m_exits_0_and_prints_a_consistent_summary(run_command):
    result = run_command([sys.executable, "-m", "alkstore_trio", "demo", "--jobs", "120"])
    assert result.returncode == 0, result.stderr
    assert_demo_output_is_consistent(result.stdout, jobs=120)


def test_demo_counts_are_deterministic_for_a_seed_whatever_the_concurrency(
    run_command, console_script
):
    args = [console_script, "demo", "--jobs", "200", "--seed", "7"]
    one = run_command([*args, "--workers", "1"])
    three = run_command([*args, "--workers", "3"])
    assert one.returncode == three.returncode == 0, one.stderr + three.stderr
    assert counts_of(one.stdout) == counts_of(three.stdout)

    def dead_lines(stdout: str) -> list[str]:
        return [line for line in stdout.splitlines() if DEAD_GROUP.match(line)]

    assert dead_lines(one.stdout) == dead_lines(three.stdout)


def test_demo_seeds_change_the_job_mix(run_command, console_script):
    a = run_command([console_script, "demo", "--jobs", "200", "--seed", "1"])
    b = run_command([console_script, "demo", "--jobs", "200", "--seed", "2"])
    assert a.returncode == b.returncode == 0
    assert counts_of(a.stdout) != counts_of(b.stdout)


def test_help_exits_0_and_lists_the_demo_command(run_command, console_script):
    result = run_command([console_script, "--help"])
    assert result.returncode == 0
    assert "demo" in result.stdout
    assert "usage: alkstore-trio" in result.stdout


def test_demo_help_exits_0_and_lists_its_options(run_command, console_script):
    result = run_command([console_script, "demo", "--help"])
    assert result.returncode == 0
    for option in ("--jobs", "--seed", "--workers"):
        assert option in result.stdout


def test_version_exits_0_and_prints_the_package_version(run_command, console_script):
    result = run_command([console_script, "--version"])
    assert result.returncode == 0
    assert result.stdout.strip() == f"alkstore-trio {alkstore_trio.__version__}"


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="no-command"),
        pytest.param(["frobnicate"], id="unknown-command"),
        pytest.param(["demo", "--nope"], id="unknown-option"),
        pytest.param(["demo", "--jobs", "0"], id="jobs-zero"),
        pytest.param(["demo", "--jobs", "many"], id="jobs-not-a-number"),
        pytest.param(["demo", "--workers", "0"], id="workers-zero"),
        pytest.param(["demo", "--workers", "1000"], id="workers-too-many"),
        pytest.param(["demo", "--seed", "-1"], id="seed-negative"),
        pytest.param(["demo", "extra"], id="extra-argument"),
    ],
)
def test_usage_errors_exit_2_with_a_message_on_stderr(run_command, console_script, args):
    result = run_command([console_script, *args])
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert "usage: alkstore-trio" in result.stderr
    assert "error:" in result.stderr
