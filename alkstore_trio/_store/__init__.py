"""The store facade, identical on every engine: :class:`Store` and :class:`Transaction`
(``_store``), :class:`Queue` (``_queue``) and :class:`JobHandle` (``_handle``)."""

from ._handle import JobHandle as JobHandle
from ._queue import LIST_LIMIT_MAX as LIST_LIMIT_MAX
from ._queue import Queue as Queue
from ._store import Store as Store
from ._store import Transaction as Transaction
