"""The state machine stays readable (issue 8): no module of
``alkstore_trio/testing/_statemachine/`` over 800 lines, no function over 80 (``apply``
dispatches to one method per kind of step)."""

from __future__ import annotations

import ast
from pathlib import Path

from alkstore_trio.testing import _statemachine

PACKAGE = Path(_statemachine.__file__).parent
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80


def test_statemachine_modules_and_functions_stay_readable() -> None:
    too_long = []
    for path in sorted(PACKAGE.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = (node.end_lineno or start) - start + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.name}::{node.name}: {length} lines")
    assert too_long == [], f"split along the seams the names show: {too_long}"
