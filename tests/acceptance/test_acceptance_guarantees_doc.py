"""The guarantees page cannot rot (issue 5, "Done when").

``docs/explanation/guarantees.md`` names, for every promise and every fault, the tests
that prove it, as links written ``[`file.py::function`](../../path/to/file.py)`` (or
``[`file.py`](...)`` for a whole file). These tests check that every such link points at
a file that exists, that the function is defined there (at module level, as pytest
collects it), that every promise and every fault names at least one test, and that the
generated figures table lists exactly the rows of ``tests/tools/guarantees_figures.py``.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "explanation" / "guarantees.md"
SCRIPT = ROOT / "tests" / "tools" / "guarantees_figures.py"
#: ``[`file.py::function`](target)`` or ``[`file.py`](target)``.
TEST_LINK = re.compile(
    r"\[`(?P<file>[\w.-]+\.py)(?:::(?P<function>\w+))?`\]\((?P<target>[^)\s#]+)\)"
)


def linked_tests(text: str) -> list[re.Match[str]]:
    return list(TEST_LINK.finditer(text))


@cache
def module_level_names(path: Path) -> frozenset[str]:
    """Functions, classes and assigned names defined at the module level of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return frozenset(names)


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("guarantees_figures", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("guarantees_figures", module)
    spec.loader.exec_module(module)
    return module


def test_guarantees_every_linked_test_exists_file_and_function():
    text = PAGE.read_text(encoding="utf-8")
    links = linked_tests(text)
    assert len(links) >= 40, f"only {len(links)} test links: did the link format change?"
    broken = []
    for link in links:
        target = (PAGE.parent / link["target"]).resolve()
        where = f"{link[0]}"
        if not target.is_relative_to(ROOT) or not target.is_file():
            broken.append(f"{where}: no file {target}")
            continue
        if target.name != link["file"]:
            broken.append(f"{where}: named {link['file']} but links to {target.name}")
            continue
        function = link["function"]
        if function is not None and function not in module_level_names(target):
            broken.append(f"{where}: {target.relative_to(ROOT)} defines no {function}")
    assert broken == [], "\n".join(broken)


def _sections(text: str, heading: str) -> str:
    """The text of the ``## heading`` section."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_guarantees_every_promise_and_every_fault_names_a_test():
    text = PAGE.read_text(encoding="utf-8")
    promises = re.split(r"\n### ", _sections(text, "What is guaranteed"))[1:]
    titles = [promise.splitlines()[0] for promise in promises]
    for required in (
        "At-least-once execution",
        "Exactly-once handout",
        "Leases are fenced",
        "A committed enqueue is durable",
        "dead-letter move is atomic",
        "One clock",
        "Graceful stops lose nothing",
    ):
        assert any(required in title for title in titles), (required, titles)
    for promise in promises:
        assert linked_tests(promise), f"promise without a test: {promise.splitlines()[0]}"

    faults = re.split(r"\n\n(?=\*\*)", _sections(text, "What happens on each fault"))[1:]
    leads = [fault.split("**")[1] for fault in faults]
    for required in (
        "worker crashes",
        "paused",
        "sessions",
        "PostgreSQL restarts",
        "network",
        "LISTEN",
        "long transaction",
        "Hostile",
        "Secrets",
        "clock",
    ):
        assert any(required in lead for lead in leads), (required, leads)
    for fault in faults:
        assert linked_tests(fault), f"fault without a test: {fault.split('**')[1]}"
    # What is not promised stays on the page.
    assert "**Exactly-once execution.**" in _sections(text, "What is *not* guaranteed")


def test_guarantees_figures_table_lists_exactly_the_rows_of_the_script():
    script = load_script()
    text = PAGE.read_text(encoding="utf-8")
    assert script.table_test_cells(text) == [script.link_cell(row) for row in script.ROWS]
    # Every row's test is linked from the prose too, not only from the table.
    prose = text.partition("## The figures of the last run")[0]
    linked = {(m["target"], m["function"]) for m in linked_tests(prose)}
    for row in script.ROWS:
        key = (script.TO_ROOT + row.path, row.function)
        assert key in linked, f"the table shows {row.node_prefix}, which no promise links"
