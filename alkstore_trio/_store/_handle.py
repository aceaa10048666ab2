"""A claim on one job, :class:`JobHandle` (Q4): heartbeat, ack, retry, release and fail,
each a batch of one on the engine (Q13), fenced by the claim token (Q19.8)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, final

from .._core import Job, backoff_delay_s
from .._core import _validate as v
from .._engines._protocol import Claim, FailItem, ProgressItem, RetryItem
from .._errors import EngineError, HandleConsumed, InvalidArgument
from ._results import ack_items

if TYPE_CHECKING:
    import random
    from collections.abc import Awaitable, Iterable, Iterator, Sequence

    from ._queue import Queue
    from ._store import Store

_T = TypeVar("_T")


def retry_item(job: Job, error: str | None, delay_s: float | None, rng: random.Random) -> RetryItem:
    """The engine's retry item for a claim of ``job``, with the backoff draw resolved on
    the caller's side (D2): one draw when ``delay_s`` is ``None`` and the claim is not the
    job's last allowed attempt (at budget the job goes dead, and no delay is needed)."""
    if delay_s is None and job.attempts < job.max_attempts:
        delay_s = float(backoff_delay_s(job.backoff_base_s, job.attempts, rng))
    return RetryItem(job.id, claim_token(job), error, delay_s)


def claim_token(job: Job) -> int:
    """Q19.8: the claim token of a claimed job (an engine that claims without one breaks
    the engine seam: every operation on the claim would be refused)."""
    token = job.claim_token
    if token is None:
        raise EngineError(f"the engine handed out job {job.id} without a claim token (Q19.8)")
    return token


def checked_handles(
    queue: Queue, handles: Iterable[JobHandle], *, where: str = "handles"
) -> list[JobHandle]:
    """The handles as a list, once each is known to be a job handle of ``queue``'s store
    and queue and no job appears twice (the store must be open). ``where`` names the
    argument they came from in messages."""
    queue._store._check_open()
    if isinstance(handles, (str, bytes)) or not hasattr(handles, "__iter__"):
        raise InvalidArgument(
            f"handles must be an iterable of job handles; got a {type(handles).__name__}"
        )
    checked = list(handles)
    seen: set[int] = set()
    store, name = queue._store, queue.name
    for handle in checked:
        if not isinstance(handle, JobHandle):
            raise InvalidArgument(f"{where} must hold job handles; got a {type(handle).__name__}")
        if handle._queue._store is not store or handle._job.queue != name:
            raise InvalidArgument(
                f"job handle {handle.id} belongs to another store or queue "
                f"(queue {handle._job.queue!r}), not to queue {queue.name!r}"
            )
        job_id = handle._job.id
        if job_id in seen:
            raise InvalidArgument(f"job {job_id} appears twice in {where}")
        seen.add(job_id)
    return checked


def checked_items(
    store: Store, items: Iterable[Any], fields: tuple[str, ...]
) -> list[tuple[Any, ...]]:
    """The items as a list, once each is known to be a tuple of ``fields`` (the store
    must be open)."""
    store._check_open()
    shape = f"({', '.join(fields)}) tuples"
    if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
        raise InvalidArgument(f"items must be an iterable of {shape}; got a {type(items).__name__}")
    checked = list(items)
    for index, item in enumerate(checked):
        if not isinstance(item, tuple) or len(item) != len(fields):
            shown = (
                f"a tuple of {len(item)}" if isinstance(item, tuple) else f"a {type(item).__name__}"
            )
            raise InvalidArgument(f"items must hold {shape}; item {index} is {shown}")
        if not isinstance(item[0], JobHandle):
            raise InvalidArgument(
                f"the first field of each item must be a job handle; item {index} "
                f"holds a {type(item[0]).__name__}"
            )
    return checked


def checked_progress(progress: Iterable[str | None], count: int) -> list[str | None] | None:
    """Q19.7: one progress text (or ``None``) per handle; ``None`` when none has news."""
    if isinstance(progress, (str, bytes)) or not hasattr(progress, "__iter__"):
        raise InvalidArgument(
            f"progress must be a sequence of str or None; got a {type(progress).__name__}"
        )
    news = [v.check_progress(text) for text in progress]
    if len(news) != count:
        raise InvalidArgument(f"progress must hold one entry per handle ({count}); got {len(news)}")
    return news if any(text is not None for text in news) else None


@contextmanager
def naming_item(index: int, handle: JobHandle) -> Iterator[None]:
    """Prefix an InvalidArgument raised for one item with its position and handle."""
    try:
        yield
    except InvalidArgument as exc:
        raise InvalidArgument(f"item {index} ({handle!r}): {exc}") from None


async def _consume_all(handles: Sequence[JobHandle], operation: Awaitable[_T]) -> _T:
    """Run a one-shot operation over many handles, as :meth:`JobHandle._consume` does
    for one: the handles are consumed while it runs and after it returned; if it raised
    (engine failure, cancellation), each goes back to what it was, so it can be repeated
    (a handle that was consumed before, as ``settle_cancelled`` accepts, stays consumed)."""
    before = [handle._consumed for handle in handles]
    for handle in handles:
        handle._consumed = True
    try:
        return await operation
    except BaseException:
        for handle, consumed in zip(handles, before, strict=True):
            handle._consumed = consumed
        raise


@final
class JobHandle:
    """A claim on one job, made by :meth:`Queue.claim_batch` (Q4).

    Every operation is fenced by the claim token (``job.claim_token``, fresh for every
    claim: Q19.8) and the deadline: once the claim lapsed, or the job was reclaimed,
    cancelled, redriven or finished, operations return ``False`` and change nothing.
    ``ack``, ``retry``, ``release`` and ``fail`` are one-shot; ``heartbeat`` is
    repeatable.
    """

    def __init__(self, queue: Queue, job: Job) -> None:
        self._queue = queue
        self._job = job
        token = job.claim_token  # claim_token(job) only to raise: every claim comes here
        self._claim = Claim(job.id, token if token is not None else claim_token(job))
        self._consumed = False

    @property
    def job(self) -> Job:
        """The job as it was right after the claim (``claim_token`` is the claim's token,
        ``attempts`` counts this claim)."""
        return self._job

    @property
    def id(self) -> int:
        """The job's id."""
        return self._job.id

    def __repr__(self) -> str:
        return (
            f"<JobHandle id={self._job.id} queue={self._job.queue!r} attempt={self._job.attempts}>"
        )

    def _check_usable(self) -> None:
        self._queue._store._check_open()
        if self._consumed:
            raise HandleConsumed(
                f"job handle {self._job.id} was already used for ack, retry, release or fail"
            )

    async def heartbeat(
        self, extend_s: float | None = None, *, progress: str | None = None
    ) -> bool:
        """Renew the claim: the deadline becomes now + ``extend_s`` (an absolute reset).

        Args:
            extend_s: Seconds (> 0); defaults to the row's ``visibility_timeout_s``.
            progress: Q19.7: the job's progress text from now on (at most 1,024
                characters, no NUL; ``Job.progress``), stored with the renewal in the
                same step; ``None`` keeps the job's.

        Returns:
            ``True`` if renewed; ``False`` if the claim was no longer valid (lapsed,
            reclaimed, cancelled), in which case the work should stop.
        """
        self._check_usable()
        extend = v.check_optional_duration("extend_s", extend_s, min_s=0, min_inclusive=False)
        news = v.check_progress(progress)
        engine, queue = self._queue._engine, self._job.queue
        if news is not None:
            items = [ProgressItem(*self._claim, news)]
            return bool(await engine.heartbeat_progress(queue, items, extend))
        return bool(await engine.heartbeat(queue, [self._claim], extend))

    async def ack(self, result: bytes | bytearray | memoryview | None = None) -> bool:
        """Finish the job: delete its row, or (Q19.2) keep it as ``"completed"`` when its
        stamp ``keep_completed_s`` keeps it. One-shot.

        Args:
            result: Q19.1: the job's result, stored with a kept job in the same atomic
                step (``Job.result``); discarded when the job is not kept.

        Returns:
            ``True`` if finished; ``False`` if the claim was no longer valid.

        Raises:
            InvalidArgument: ``result`` is not bytes-like or ``None``, or is larger than
                the store's ``max_result_bytes`` (nothing was done).
        """
        self._check_usable()
        checked = v.result_bytes(result, self._queue._store.max_result_bytes)
        claims, items = ack_items([self], [checked])
        engine = self._queue._engine
        queue = self._job.queue
        done = engine.ack(queue, claims) if items is None else engine.complete(queue, items)
        return bool(await _consume_all([self], done))

    async def retry(self, error: str | None = None, delay_s: float | None = None) -> bool:
        """Give the job back to run again later, or dead-letter it at its budget. One-shot.

        If this claim was the job's last allowed attempt, the row moves to dead with
        ``last_error = error`` (or ``"max attempts exceeded"``). Otherwise it is pending
        again after ``delay_s`` seconds (``0`` = at once), or after the backoff curve's
        delay when ``delay_s`` is ``None``.

        Returns:
            ``True`` if applied; ``False`` if the claim was no longer valid.
        """
        self._check_usable()
        checked_error = v.check_error_text(error)
        delay = v.check_optional_duration("delay_s", delay_s, min_s=0)
        job = self._job
        item = retry_item(job, checked_error, delay, self._queue._store._rng)
        (applied,) = await _consume_all([self], self._queue._engine.retry(job.queue, [item]))
        return applied

    async def release(self, error: str | None = None) -> bool:
        """Give the job back unfinished (Q19.8): pending again, ready now, with this
        claim's attempt given back (``attempts - 1``) and ``last_error = error``; the
        queue is woken. For work that was not done through no fault of the job's (the
        worker stops); a crash still consumes the attempt. One-shot.

        Returns:
            ``True`` if released; ``False`` if the claim was no longer valid.
        """
        self._check_usable()
        checked_error = v.check_error_text(error)
        engine = self._queue._engine
        released = _consume_all(
            [self], engine.release(self._job.queue, [self._claim], checked_error)
        )
        return bool(await released)

    async def fail(self, error: str | None = None) -> bool:
        """Dead-letter the job now, with ``last_error = error`` (or ``"failed"``). One-shot.

        Returns:
            ``True`` if applied; ``False`` if the claim was no longer valid.
        """
        self._check_usable()
        checked_error = v.check_error_text(error)
        job = self._job
        item = FailItem(job.id, self._claim.token, checked_error)
        (applied,) = await _consume_all([self], self._queue._engine.fail(job.queue, [item]))
        return applied
