"""The documentation site builds with ``mkdocs build --strict`` (what ``just docs`` runs):
no broken link, no page missing from the nav, no docstring the API page cannot render.

mkdocs comes with the ``dev`` and ``docs`` extras; without it the test is skipped with
one line saying how to install it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The build takes a few seconds; longer than this is a hang, not a slow machine.
BUILD_TIMEOUT_S = 300


def test_docs_build_strict_without_warnings(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed; pip install -e '.[docs]' (or '.[dev]')")
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    warnings = [line for line in output.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)]
    assert warnings == [], "\n".join(warnings)
    assert (site / "index.html").is_file()
    assert (site / "tutorial" / "first-worker" / "index.html").is_file()
    api = (site / "reference" / "python-api" / "index.html").read_text(encoding="utf-8")
    # The API page is rendered from the docstrings, not left as ::: directives.
    assert "::: alkstore_trio" not in api
    assert "Open a job store for the duration" in api
    # A linked repository folder gets a listing page that also lists its subfolders
    # (examples/systemd/ holds the unit file the deploy how-to shows).
    examples = (site / "_repo" / "examples" / "index.html").read_text(encoding="utf-8")
    assert 'href="systemd/' in examples
    assert "quickstart.py" in examples
    unit = site / "_repo" / "examples" / "systemd" / "alkstore-worker.service"
    assert unit.is_file()
