"""Typed tasks on top of the bytes API (T1-T7): a registry of functions whose calls are
stored as jobs, their arguments checked at defer time and decoded into the annotated types
at run time. Needs the ``tasks`` extra (msgspec); ``import alkstore_trio`` never imports
this package until ``alkstore_trio.Tasks`` is used."""

from ._codec import ENVELOPE_VERSION as ENVELOPE_VERSION
from ._options import TaskOptions as TaskOptions
from ._registry import Tasks as Tasks
from ._task import Task as Task
from ._task import TaskCall as TaskCall
