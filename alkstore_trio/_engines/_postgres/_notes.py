"""The wake channels' notifications as the listener hands them to the wake hub: a plain
wake (R11: the payload is the seconds until due; '' or anything unreadable means ready
now) or, Q19.5, a cancel's announcement (``cancel:<job id>``); and the done channels'
(Q19.4: the payload is comma-separated job ids)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from .._wake import WakeHub
    from . import _driver


def publish(
    wakes: WakeHub,
    channels: Mapping[str, str],
    notes: Iterable[_driver.Notify],
    done_channels: Mapping[str, str] | None = None,
) -> None:
    """Wake the notified queues (``channels``: channel to queue name): once for the
    notifications of jobs ready now, once with the earliest due time of the delayed
    ones; each cancel's announcement goes to the hub's cancel subscribers; each done
    announcement (``done_channels``: done channel to queue name) to the done listeners
    of its ids."""
    ready: set[str] = set()
    due: dict[str, float] = {}
    for note in notes:
        queue = channels.get(note.channel)
        if queue is None:
            done_queue = None if done_channels is None else done_channels.get(note.channel)
            if done_queue is not None:
                wakes.publish_done(done_queue, done_ids(note.payload))
            continue
        if note.payload.startswith("cancel:"):  # Q19.5: "cancel:<job id>"
            job_id = cancelled_id(note.payload)
            if job_id is not None:
                wakes.publish_cancel(queue, job_id)
            continue
        seconds = due_in_s(note.payload) if note.payload else None
        if seconds is None:
            ready.add(queue)
        else:
            due[queue] = min(seconds, due.get(queue, seconds))
    wakes.publish(ready)
    for queue, seconds in due.items():
        wakes.publish_due(queue, seconds)


def due_in_s(payload: str) -> float | None:
    """R11: a wake's payload as seconds until due (>= 0 and finite; exactly 0 is a
    limited queue's freed slots, "due now", Q18.7), else ``None``."""
    try:
        seconds = float(payload)
    except ValueError:
        return None
    return seconds if 0 <= seconds < math.inf else None


def cancelled_id(payload: str) -> int | None:
    """Q19.5: the job id of a ``cancel:<id>`` announcement, else ``None``."""
    digits = payload[7:]
    return int(digits) if digits.isascii() and digits.isdigit() else None


def done_ids(payload: str) -> list[int]:
    """Q19.4: the job ids of a done announcement (``17,18,40``); unreadable parts are
    skipped."""
    return [int(part) for part in payload.split(",") if part.isascii() and part.isdigit()]
