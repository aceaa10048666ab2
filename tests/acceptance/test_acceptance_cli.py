"""The ``alkstore-trio`` command, run in subprocesses: --help, --version and the exit
codes (0 ok, 2 usage error). The demo's runs are in ``test_acceptance_demo.py``."""

from __future__ import annotations

import pytest

import alkstore_trio


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
