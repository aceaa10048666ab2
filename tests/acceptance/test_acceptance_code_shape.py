"""Modest modules and functions (issue 12, ``style.md``): no module of the package over
about 800 lines, and no function over about 80 lines of code (its docstring not counted:
a long explanation of why is welcome). Past that, split along the seams that the names
already show."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "alkstore_trio"
MODULE_MAX_LINES = 800
FUNCTION_MAX_LINES = 80


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    assert node.end_lineno is not None
    lines = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        assert first.end_lineno is not None
        if isinstance(first.value.value, str):
            lines -= first.end_lineno - first.lineno + 1
    return lines


def test_no_module_of_the_package_is_over_800_lines():
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := path.read_text(encoding="utf-8").count("\n")) > MODULE_MAX_LINES
    }
    assert long == {}


def test_no_function_of_the_package_is_over_80_lines_of_code():
    long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = _code_lines(node)
                if lines > FUNCTION_MAX_LINES:
                    long[f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}"] = lines
    assert long == {}
