"""The in-memory engine: an engine actor (``_engine``) running the indexed job table
(``_table``), both pure trio and Python. No import of the PostgreSQL engine."""

from ._engine import Clock as Clock
from ._engine import MemoryEngine as MemoryEngine
from ._engine import WallClock as WallClock
