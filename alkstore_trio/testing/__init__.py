"""Public test helpers for users of alkstore_trio and for engine authors.

- :class:`ManualClock`: a clock that moves only when told to.
- :class:`EngineHarness` / :class:`MemoryHarness`: how the suites drive one engine.
"""

from ._clock import ManualClock as ManualClock
from ._harness import EngineHarness as EngineHarness
from ._harness import MemoryHarness as MemoryHarness
