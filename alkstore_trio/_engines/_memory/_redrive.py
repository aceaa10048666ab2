"""D24/Q15 in memory: which dead rows a redrive may move, and :class:`KeyHeld`, the
signal that an open transaction holds a unique key the operation met."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..._core import Job

__all__ = ["KeyHeld", "redrivable"]


class KeyHeld(Exception):
    """Q15: an operation met a unique key that an open transaction (``holder``) has
    enqueued but not committed. Raised before any effect: the engine waits for the
    holder to finish and runs the operation again."""

    def __init__(self, holder: object) -> None:
        super().__init__("a unique key is held by an open transaction")
        self.holder = holder


def redrivable(
    targets: list[Job], held: Mapping[tuple[str, str], tuple[object, ...]],
    live_keys: Mapping[tuple[str, str], int],
) -> list[Job]:  # fmt: skip
    """Q15/D24: the dead rows a redrive may move, by id: a keyless row, or the lowest id
    of the rows with a key that no live row holds (``live_keys``). Raises
    :class:`KeyHeld` when an open transaction holds one of their keys (``held``;
    PostgreSQL waits for it too)."""
    out: list[Job] = []
    taken: set[tuple[str, str]] = set()
    for job in sorted(targets, key=lambda job: job.id):
        if job.unique_key is None:
            out.append(job)
            continue
        key = (job.queue, job.unique_key)
        holder = held.get(key)
        if holder is not None:
            raise KeyHeld(holder[0])
        if key not in taken and key not in live_keys:
            taken.add(key)
            out.append(job)
    return out
