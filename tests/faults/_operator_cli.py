"""Run ``alkstore-trio`` operator commands in one process (not a test module).

Usage: ``python _operator_cli.py`` with, on stdin, one JSON list of commands, each a list
of arguments (``[["stats"], ["jobs", "show", "7", "--json"], ...]``). Each command runs
through :func:`alkstore_trio._cli.main`, what ``alkstore-trio`` and ``python -m
alkstore_trio`` run, in turn, with every log record of the process (root logger at DEBUG,
with all the record's attributes) captured. For each command one JSON line is printed on
the real stdout: ``argv``, ``status`` (the exit status, also from ``SystemExit`` as
argparse raises it), ``stdout``, ``stderr`` and ``log``.

One process for all the commands because Python's start-up is most of a command's cost;
the store settings come from the environment (``ALKSTORE_DSN``, ``ALKSTORE_SCHEMA``), as
an operator's shell would give them.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys

from alkstore_trio._cli import main


class _Capture(logging.Handler):
    """Keeps each record as a line with every attribute of the record."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{self.format(record)} {vars(record)!r}")


def run(argv: list[str], capture: _Capture) -> dict[str, object]:
    out, err = io.StringIO(), io.StringIO()
    capture.lines.clear()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            status = exc.code if isinstance(exc.code, int) else 1
    return {
        "argv": argv,
        "status": status,
        "stdout": out.getvalue(),
        "stderr": err.getvalue(),
        "log": "\n".join(capture.lines),
    }


if __name__ == "__main__":
    commands = json.load(sys.stdin)
    capture = _Capture()
    capture.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    logging.getLogger().addHandler(capture)
    logging.getLogger().setLevel(logging.DEBUG)
    real_stdout = sys.stdout
    for argv in commands:
        print(json.dumps(run(argv, capture)), file=real_stdout, flush=True)
