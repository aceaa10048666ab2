"""The docs' code runs, and shows what it prints.

Two mechanisms:

- **The README and the tutorial are followed start to finish, as a newcomer follows
  them** (:func:`test_readme_runs_start_to_finish`,
  :func:`test_tutorial_runs_start_to_finish`): every fenced block is acted on in order, in
  one working directory, against a fresh PostgreSQL schema, and every output block is
  compared with what really came out. ``_doc_reader.py`` says what each kind of block
  and each ``<!-- doc-test: ... -->`` marker means. A block that is not run is marked in
  the page with its reason, and listed here (:data:`NOT_RUN`), so none is skipped
  silently. Part 1 of the tutorial uses the in-memory engine only, so it also runs on
  its own without a database (:func:`test_tutorial_part_1_runs_without_a_database`).

- **Every ```` ```python ```` block of the how-to guides is a complete program, and
  runs** (:func:`test_docs_python_block_runs_as_a_program`); use ```` ```text ```` (or
  ```` ```console ```` for shell commands) for anything that is not a whole program.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from _doc_reader import follow_pages, output_matches, page_steps, reader_environment

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: The tutorial, in the order a reader follows it. Every page of docs/tutorial/ is here.
TUTORIAL = (
    "first-queue.md",
    "first-postgres-queue.md",
    "first-worker.md",
    "periodic-digest.md",
    "results-and-waiting.md",
)
TUTORIAL_PAGES = [ROOT / "docs" / "tutorial" / page for page in TUTORIAL]

#: Every block of the README and the tutorial that is not run, and why (each is marked
#: ``<!-- doc-test: not run: REASON -->`` in its page, with the same reason).
NOT_RUN = {
    "README.md": [
        "building and installing the wheel: test_acceptance_package.py does it",
        "the test suite itself, this test among them",
    ],
}

FENCE = re.compile(r"^```python\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """The untitled ```python blocks of a Markdown file, with the line each starts on."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m["code"]) for m in FENCE.finditer(text)]


# --- the README and the tutorial, start to finish --------------------------------------


def not_run_reasons(reader) -> dict[str, list[str]]:
    reasons: dict[str, list[str]] = {}
    for where, reason in reader.not_run:
        reasons.setdefault(where.split(":")[0], []).append(reason)
    return reasons


def test_the_tutorial_path_lists_every_tutorial_page():
    pages = sorted(p.name for p in (ROOT / "docs" / "tutorial").glob("*.md"))
    assert pages == sorted(TUTORIAL)
    for page in TUTORIAL_PAGES:
        assert any(s.lang in {"python", "console"} for s in page_steps(page)), page


def test_tutorial_part_1_runs_without_a_database(tmp_path):
    reader = follow_pages(TUTORIAL_PAGES[:1], tmp_path, reader_environment())
    assert reader.compared > 0  # part 1 shows what its programs print


def test_tutorial_runs_start_to_finish(pg_dsn, fresh_schema, tmp_path):
    env = reader_environment()
    env["ALKSTORE_DSN"] = pg_dsn
    env["ALKSTORE_SCHEMA"] = fresh_schema  # dropped after the test
    reader = follow_pages(TUTORIAL_PAGES, tmp_path, env)
    assert reader.programs > 0
    assert not_run_reasons(reader) == {
        page: reasons for page, reasons in NOT_RUN.items() if page in TUTORIAL
    }


def test_readme_runs_start_to_finish(pg_dsn, fresh_schema, tmp_path):
    env = reader_environment()
    env["ALKSTORE_DSN"] = pg_dsn
    env["ALKSTORE_SCHEMA"] = fresh_schema  # dropped after the test
    reader = follow_pages([README], tmp_path, env)
    assert reader.programs > 0
    assert reader.compared > 0
    assert not_run_reasons(reader) == {"README.md": NOT_RUN["README.md"]}


@pytest.mark.parametrize(
    ("expected", "actual", "matches"),
    [
        ("job 1 done\n", "job 1 done\n", True),
        ("job 1 done", "job 2 done", False),
        ("claimed 2 leased until ...\n", "claimed 2 leased until 2026-11-30 02:30:24Z", True),
        ("first\n...\nlast\n", "first\nsecond\nthird\nlast\n", True),
        ("first\n...\nlast\n", "first\nlast\nmore\n", False),
        ("first\n...\nlast\n", "first\nlast\n", True),  # a "..." line may be no line
        ("a ... z\n", "a b\nc z\n", False),  # "..." in a line stays in that line
        ("a ...\n...\n", "a b\nc\nd\n", True),
        ("a  \n", "a\n\n", True),  # trailing blanks and blank lines do not count
    ],
)
def test_output_blocks_match_with_doctest_style_ellipsis(expected, actual, matches):
    assert output_matches(expected, actual) is matches


# --- the how-to guides: each ```python block is a program ---------------------------

DOCS = sorted((ROOT / "docs" / "how-to").glob("*.md"))

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
