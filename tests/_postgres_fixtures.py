"""The PostgreSQL suite's ``schema`` and ``make_schema`` fixtures for the suites that
need them outside ``tests/postgres`` (the command line, the tasks, the dashboard): its
conftest, loaded once by path (a conftest is not importable by name)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType


@functools.cache
def postgres_fixtures() -> ModuleType:
    path = Path(__file__).with_name("postgres") / "conftest.py"
    spec = importlib.util.spec_from_file_location("_alkstore_tests_postgres_conftest", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
