"""``python -m alkstore_trio``: the same as the ``alkstore-trio`` command."""

from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
