"""The error hierarchy (contract rule Q12).

Every error the library raises on purpose is an :class:`AlkstoreError`. Expected races
(a lapsed lease, a job that was reclaimed or cancelled) are *return values* (``False``),
never exceptions; the classes below are for misuse, a closed store, schema trouble and
engine failure.
"""

from __future__ import annotations


class AlkstoreError(Exception):
    """The root of every error alkstore_trio raises on purpose.

    Catch this to handle any library error; catch a subclass to handle one cause.
    """


class InvalidArgument(AlkstoreError, ValueError):
    """Raised by any operation when an argument is malformed or out of range.

    It is raised before the operation has any effect (no row written, no I/O done), so
    the call can be corrected and repeated. It is also a :class:`ValueError`, the builtin
    a caller would expect. The message names the parameter, the offending value (never a
    payload) and what would be accepted instead.
    """


class StoreClosed(AlkstoreError):
    """Raised by every operation on a store that was closed, or on its queues, job
    handles, transactions and wake listeners.

    Unlike :class:`HandleConsumed` (a one-shot handle used twice), this says the whole
    store is gone: open a new one.
    """


class HandleConsumed(AlkstoreError):
    """Raised when a one-shot handle is used again.

    A job handle is consumed once ``ack``, ``retry`` or ``fail`` returned (``True`` or
    ``False``); a transaction is consumed once its ``async with`` block ended. This is a
    usage error in the calling code, unlike a refusal (``False``), which is an expected
    race with another worker or with time.
    """


class SchemaError(AlkstoreError):
    """Raised when opening a store whose database schema is missing, older or newer than
    this version of the library.

    The message says which, and the command that fixes it.
    """


class EngineError(AlkstoreError):
    """Raised when the engine itself failed (a database or driver error, a broken engine
    actor).

    The underlying exception is attached as ``__cause__``. Unlike :class:`InvalidArgument`,
    the operation may or may not have taken effect; every operation is safe to repeat,
    because job handle operations are fenced by the claim token.
    """


class ClaimLost(AlkstoreError):
    """Raised by a transactional completion (Q19.6: ``Transaction.complete``, and the
    block of ``current_job().transaction()``) whose claim was no longer valid: the job
    was reclaimed by another worker, cancelled, or its lease lapsed. The transaction
    rolls back whole: none of its effects land. Let it propagate from the handler (the
    worker then sends nothing for the claim: whoever holds the job now finishes it).
    """


class JobGone(AlkstoreError, LookupError):
    """Raised by :meth:`Queue.wait` (Q19.4) when the queue has no row with the job's id:
    it never existed, or it finished and was not kept, or it was purged.

    It is also a :class:`LookupError`, the builtin a caller would expect of a missing key.
    The message names the job, the queue and the retention setting that decides whether
    a finished job stays readable (``QueueOpts(keep_completed_s=...)``).
    """
