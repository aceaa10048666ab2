"""Q19.4: waiting for a job to reach a final state (``Queue.wait``).

The loop is the same on every engine: subscribe to the queue's done announcements for
the job *first*, then read it; final, return it; missing, raise :class:`JobGone`; else
wait for an announcement of the job, for word that announcements were lost (the
engine's listener reconnected) or for ``poll_interval_s``, and read it again. Because the
subscription comes before the first read, a job finished between the read and the wait
is announced to a listener that already exists, and latched: it is never missed. Each
read follows an announcement, a resync or the timer, never another read: no busy poll.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from .._core import FINAL_STATES, Job
from .._core import _validate as v
from .._errors import EngineError, JobGone

if TYPE_CHECKING:
    from ._queue import Queue

logger = logging.getLogger("alkstore_trio.wait")

#: Q19.4: the default seconds between two reads of a job nobody announced done.
POLL_INTERVAL_S: Final = 5.0
#: Q19.4: the first delay before a read that failed (``EngineError``) is tried again; it
#: doubles after each failure, up to the poll interval.
RETRY_FIRST_S: Final = 0.1


async def wait_for(queue: Queue, job_id: int, poll_interval_s: float) -> Job:
    """:meth:`Queue.wait`'s loop (see the module docstring)."""
    queue._store._check_open()
    checked = v.check_job_id(job_id)
    interval = v.check_duration("poll_interval_s", poll_interval_s, min_s=0, min_inclusive=False)
    engine = queue._store._engine
    async with engine.open_done_listener(queue.name, frozenset({checked})) as done:
        first, failures = True, 0
        while True:
            try:
                job = await engine.get_job(checked, queue.name)
            except EngineError as exc:
                # The first read's error is the caller's to see (a misconfigured store
                # should not hang); a later one is most likely the database restarting
                # under a long wait: read again soon, backing off up to the interval.
                if first:
                    raise
                failures += 1
                retry_s = min(interval, RETRY_FIRST_S * 2 ** min(failures - 1, 32))
                logger.warning(
                    "wait for job %d of queue %r: read failed (%s); reading again in %.1f s",
                    checked,
                    queue.name,
                    type(exc.__cause__ or exc).__name__,
                    retry_s,
                )
                await done.wait(retry_s)
                continue
            if job is None:
                raise JobGone(_gone_message(queue, checked))
            if job.state in FINAL_STATES:
                return job
            first, failures = False, 0
            await done.wait(interval)


def _gone_message(queue: Queue, job_id: int) -> str:
    keep = queue.opts.keep_completed_s
    head = f"job {job_id} is not in queue {queue.name!r}: it never existed, or it finished"
    if keep is None:
        return (
            f"{head} and was not kept (this queue handle has QueueOpts(keep_completed_s=None), "
            "so an acked or cancelled job is deleted; enqueue with keep_completed_s set to "
            "wait for its outcome)"
        )
    return (
        f"{head} and was purged (QueueOpts(keep_completed_s={keep:g}) keeps a finished job "
        f"for {keep:g} s), or it was enqueued without keep_completed_s"
    )
