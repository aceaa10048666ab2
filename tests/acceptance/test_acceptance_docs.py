"""Every ```python block of the tutorial, the how-to guides and the README is a complete
program, and runs.

The rule for writers: in ``docs/tutorial/``, ``docs/how-to/`` and ``README.md``, a block
fenced as ```python is run by this test as a standalone script; use ```text (or
```console for shell commands) for anything that is not a whole program.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^```python\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)

DOCS = sorted(
    [
        *(ROOT / "docs" / "tutorial").glob("*.md"),
        *(ROOT / "docs" / "how-to").glob("*.md"),
        ROOT / "README.md",
    ]
)


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """The ```python blocks of a Markdown file, with the line each one starts on."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m["code"]) for m in FENCE.finditer(text)]


SNIPPETS = [
    pytest.param(code, id=f"{path.relative_to(ROOT)}:{line}")
    for path in DOCS
    for line, code in python_blocks(path)
]


def test_the_tutorial_has_runnable_snippets():
    tutorials = sorted((ROOT / "docs" / "tutorial").glob("*.md"))
    assert tutorials, "docs/tutorial/ has no pages"
    for page in tutorials:
        assert python_blocks(page), f"{page.name} has no ```python block"


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
