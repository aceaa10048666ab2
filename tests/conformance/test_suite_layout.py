"""The conformance suite's layout cannot rot (issue 8).

Every check lives in the module named after its rule (``q4_*`` in a ``q4_...`` module; a
module that checks several decisions lists each id: ``d25_d29_purge.py``), so "where is
Q4 checked?" is answered by a file name and a rule's checks are found from its id in one
search. Every check a rule module defines is listed in ``CONFORMANCE_CHECKS`` (none is
silently left out of the suite), and the modules stay small enough to read.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from alkstore_trio.testing import CONFORMANCE_CHECKS
from alkstore_trio.testing import _conformance as suite

PACKAGE = Path(suite.__file__).parent
#: The rule ids a module name starts with: ``d25_d29_purge`` -> ``d25_d29_``.
MODULE_RULES = re.compile(r"(?:[qd]\d+_)+")
#: Modules of the package that hold no checks.
NOT_RULE_MODULES = {"__init__.py", "_helpers.py"}


def rules_of_module(module: str) -> set[str]:
    """``{"d25", "d29"}`` for ``d25_d29_purge``; empty for a name without a rule id."""
    match = MODULE_RULES.match(module)
    return set() if match is None else set(match.group(0).rstrip("_").split("_"))


def rule_of_check(name: str) -> str:
    return name.split("_", 1)[0]


def rule_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.glob("*.py") if p.name not in NOT_RULE_MODULES)


def test_every_check_lives_in_the_module_named_after_its_rule() -> None:
    misplaced = []
    for check in CONFORMANCE_CHECKS:
        module = check.__module__.rpartition(".")[2]
        # __module__ is copied by functools.wraps; the source file is the proof.
        source = Path(inspect.getsourcefile(inspect.unwrap(check)) or "")
        if source.stem != module or rule_of_check(check.__name__) not in rules_of_module(module):
            misplaced.append(f"{check.__name__} in {source.name}")
    assert misplaced == [], f"checks outside the module of their rule: {misplaced}"


def test_every_rule_module_is_named_after_its_rules_and_all_its_checks_run() -> None:
    listed = {check.__name__ for check in CONFORMANCE_CHECKS}
    problems = []
    for path in rule_modules():
        rules = rules_of_module(path.stem)
        if not rules:
            problems.append(f"{path.name}: the name does not start with a rule id")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        checks = [
            node.name
            for node in tree.body
            if isinstance(node, ast.AsyncFunctionDef) and not node.name.startswith("_")
        ]
        problems += [
            f"{path.name}: {name} is not in CONFORMANCE_CHECKS"
            for name in checks
            if name not in listed
        ]
        problems += [
            f"{path.name}: {name} checks another rule"
            for name in checks
            if rule_of_check(name) not in rules
        ]
        problems += [
            f"{path.name}: named after {rule}, but has no {rule}_ check"
            for rule in sorted(rules - {rule_of_check(name) for name in checks})
        ]
    assert problems == [], "\n".join(problems)
