"""The runtime layer: supervision of long-lived trio tasks (rule R1), and later the worker.

The runtime imports only trio and ``alkstore_trio._errors``; it never imports an engine.
The worker will receive its store as an argument.
"""

from ._supervisor import ChildStatistics as ChildStatistics
from ._supervisor import RestartPolicy as RestartPolicy
from ._supervisor import Supervisor as Supervisor
from ._supervisor import SupervisorEscalated as SupervisorEscalated
from ._supervisor import SupervisorStatistics as SupervisorStatistics
from ._supervisor import open_supervisor as open_supervisor
