"""The tasks extra stays optional: importing alkstore_trio (or its testing helpers)
imports no msgspec until a task name is used."""

from __future__ import annotations

import subprocess
import sys


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_t1_importing_alkstore_trio_does_not_import_msgspec():
    code = (
        "import sys, alkstore_trio, alkstore_trio.testing;"
        "print('msgspec' in sys.modules);"
        "alkstore_trio.Tasks;"
        "print('msgspec' in sys.modules)"
    )
    assert run(code).split() == ["False", "True"]


def test_t1_without_msgspec_the_task_names_say_which_extra_to_install():
    code = (
        "import sys; sys.modules['msgspec'] = None\n"
        "import alkstore_trio\n"
        "try:\n"
        "    alkstore_trio.Tasks\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc)\n"
    )
    assert "pip install 'alkstore_trio[tasks]'" in run(code)
