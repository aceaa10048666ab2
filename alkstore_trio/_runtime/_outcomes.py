"""The exceptions a handler raises to choose its job's outcome (rule R5).

A handler that returns has succeeded (its job is acked). To say anything else it raises
one of these; any other exception counts as a failure to be retried. They are ordinary
:class:`Exception` subclasses on purpose: a handler's own ``except Exception`` around a
helper call will catch them too, exactly as it would catch any other failure, so raise
them from the handler's top level.
"""

from __future__ import annotations

from .._util import finite_number


class Retry(Exception):
    """Raised by a handler to give its job back to run again later.

    The worker calls ``handle.retry(error, delay_s)``: the job is pending again after
    ``delay_s`` seconds, or after the queue's backoff curve when ``delay_s`` is ``None``.
    On the job's last allowed attempt the job is dead-lettered instead (with ``error``).
    Unlike :class:`Fail`, the job keeps its remaining attempts.

    Args:
        delay_s: Seconds before the job may run again (a finite number >= 0), or ``None``
            for the backoff curve.
        error: The text stored as the job's ``last_error`` (``None`` for none).

    Raises:
        ValueError: ``delay_s`` is not ``None`` or a finite number >= 0.
    """

    def __init__(self, delay_s: float | None = None, error: str | None = None) -> None:
        if delay_s is not None and ((number := finite_number(delay_s)) is None or number < 0):
            raise ValueError(f"delay_s must be None or a finite number >= 0; got {delay_s!r}")
        super().__init__(error if error is not None else "retry requested")
        self.delay_s = None if delay_s is None else float(delay_s)
        self.error = error


class TimedOut(Retry):
    """A :class:`Retry` that says a time limit of the handler's own ran out (a typed
    task's ``timeout_s``, T5). The worker treats it as its own ``job_timeout_s``: it
    retries the job with ``error``, counts it in ``statistics().timed_out`` and logs a
    ``timeout`` event (not a handler error). Internal: raised by the tasks layer."""


class Fail(Exception):
    """Raised by a handler to dead-letter its job now, whatever attempts it has left.

    The worker calls ``handle.fail(error)``; the job's ``last_error`` becomes ``error``
    (or ``"failed"`` when it is ``None``). Unlike :class:`Retry`, the job never runs again
    unless someone re-enqueues it.

    Args:
        error: The text stored as the job's ``last_error``.
    """

    def __init__(self, error: str | None = None) -> None:
        super().__init__(error if error is not None else "failed")
        self.error = error
