"""Every script in ``examples/`` runs to completion, as ``python examples/NAME.py``.

Examples are discovered by glob, so a new example is tested without touching this file.
An example that mentions ``ALKSTORE_DSN`` needs PostgreSQL: ``conftest.py`` gives it the
test server's DSN in that variable, or skips it (fails it with ``ALKSTORE_REQUIRE_PG=1``)
when there is none. The systemd unit in ``examples/systemd/`` is checked by
``test_acceptance_systemd_unit.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_there_are_examples_to_run():
    names = {path.name for path in EXAMPLES}
    assert {"quickstart.py", "transactional_enqueue.py"} <= names
    # Issue 6 item 4: custom backoff, graceful shutdown under systemd, model checking.
    assert {
        "retries_with_custom_backoff.py",
        "graceful_shutdown.py",
        "model_check_a_handler.py",
    } <= names
    assert (ROOT / "examples" / "systemd" / "alkstore-worker.service").is_file()


@pytest.mark.parametrize("example", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_runs_to_completion(run_command, example, tmp_path):
    # Run from an empty directory: an example must not depend on the working directory.
    result = run_command([sys.executable, str(example)], cwd=tmp_path)
    assert result.returncode == 0, f"{example.name} failed:\n{result.stdout}\n{result.stderr}"
    assert result.stderr == ""


@pytest.mark.parametrize("example", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_is_a_standalone_trio_script(example):
    source = example.read_text(encoding="utf-8")
    assert source.startswith('"""'), f"{example.name} should open with a docstring"
    assert 'if __name__ == "__main__":\n    trio.run(main)' in source
