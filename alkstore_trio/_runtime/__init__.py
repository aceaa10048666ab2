"""The runtime layer: supervision of long-lived trio tasks (rule R1) and the worker.

The supervisor needs only trio and ``alkstore_trio._errors``; the worker works through
the public ``Store`` facade it is given and never imports an engine (import-linter
checks both).
"""

from ._asyncio import AsyncioCancelled as AsyncioCancelled
from ._asyncio import asyncio_handler as asyncio_handler
from ._context import JobContext as JobContext
from ._context import JobTransaction as JobTransaction
from ._context import current_job as current_job
from ._outcomes import Fail as Fail
from ._outcomes import Retry as Retry
from ._outcomes import TimedOut as TimedOut
from ._supervisor import ChildStatistics as ChildStatistics
from ._supervisor import RestartPolicy as RestartPolicy
from ._supervisor import Supervisor as Supervisor
from ._supervisor import SupervisorEscalated as SupervisorEscalated
from ._supervisor import SupervisorStatistics as SupervisorStatistics
from ._supervisor import open_supervisor as open_supervisor
from ._threads import sync_handler as sync_handler
from ._worker import EVENT_KINDS as EVENT_KINDS
from ._worker import Handler as Handler
from ._worker import Worker as Worker
from ._worker import WorkerEvent as WorkerEvent
from ._worker import WorkerStatistics as WorkerStatistics
