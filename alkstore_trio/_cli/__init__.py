"""The ``alkstore-trio`` command (also ``python -m alkstore_trio``).

The only package that parses arguments. One module per command group, each with its
``add_parser`` and ``run``:

- ``demo``: a few hundred jobs through a supervised worker on the in-memory engine.
- ``migrate``: create or upgrade a PostgreSQL schema (``--dry-run``: print the SQL).
- ``worker``: run a worker until SIGINT/SIGTERM (``_handlers`` loads the handlers named
  by ``--queue``, ``_serve`` runs the worker, its signals and its status lines).
- ``stats``, ``jobs``, ``dead``, ``enqueue``, ``cancel``, ``sweep``: the operator
  commands, on a PostgreSQL store (``_operator`` opens it).

Below them, imported by every command and importing none: ``_args`` (exit statuses, the
exceptions that end a command, argparse types and shared options) and ``_output``
(lines, times, tables). ``main`` builds the parser and runs a command.

Exit codes: 0 success (for ``worker``: stopped by a signal, gracefully), 1 the command
failed, 2 usage error (argparse's own convention), 130 interrupted (for ``worker``: a
second or third stop signal).
"""

from ._args import EXIT_FAILED as EXIT_FAILED
from ._args import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from ._args import EXIT_OK as EXIT_OK
from ._args import EXIT_USAGE as EXIT_USAGE
from .main import build_parser as build_parser
from .main import main as main
