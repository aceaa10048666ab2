"""Reading the history checker's records back: JSON lines written by
:class:`~._history.HistoryRecorder` (or by the fault suite's worker processes), merged
across processes into :class:`~._history.HistoryEvent` lists for
:func:`~._history.check_history`."""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from ._history import _LEGACY_KINDS, HistoryEvent, TimeBase

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path
    from typing import TextIO


def load_history(
    files: Iterable[str | Path | TextIO], *, time_base: TimeBase = "wall"
) -> list[HistoryEvent]:
    """Read and merge JSON-lines records of several processes.

    Reads the records of :class:`HistoryRecorder` and the older ones of
    ``tests/faults/_worker_proc.py`` (``"end"`` is read as ``"finish"``, ``"stopped"`` as
    ``"worker_stop"``; a record without ``worker_id`` is attributed to ``pid:<pid>``,
    or to the worker id of that file's ``"ready"`` line). A torn last line (a process
    killed while writing it) is skipped; lines of unknown kinds are kept as they are.

    Args:
        files: Paths or open text streams.
        time_base: ``"wall"`` (``t``, comparable across processes) or ``"trio"`` (``at``,
            only comparable within one process).
    """
    events: list[HistoryEvent] = []
    for item in files:
        if isinstance(item, str | os.PathLike):
            with open(item, encoding="utf-8") as stream:
                lines = stream.read().split("\n")
        else:
            lines = item.read().split("\n")
        events.extend(_parse_lines(lines, time_base))
    return events


def _parse_lines(lines: list[str], time_base: TimeBase) -> Iterator[HistoryEvent]:
    names: dict[Any, str] = {}
    counters: dict[str, int] = defaultdict(int)
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if index == len(lines) - 1 or not any(rest.strip() for rest in lines[index + 1 :]):
                continue  # the torn last line of a killed process
            raise
        kind = _LEGACY_KINDS.get(record.get("ev"), record.get("ev"))
        pid = record.get("pid")
        if record.get("worker_id") is not None and kind == "worker_start":
            names[pid] = record["worker_id"]
        source = record.get("worker_id") or names.get(pid) or f"pid:{pid}"
        seq = record.get("seq")
        if seq is None:
            seq = counters[source]
        counters[source] = max(counters[source], seq) + 1
        t = record.get("at") if time_base == "trio" else record.get("t")
        yield HistoryEvent(
            kind=str(kind),
            source=str(source),
            seq=int(seq),
            t=float(t if t is not None else math.nan),
            job_id=record.get("id"),
            attempt=record.get("attempt"),
            queue=record.get("queue"),
            claimed_at=record.get("claimed_at"),
            claim_expires_at=record.get("claim_expires_at"),
            lease_until=record.get("lease_until"),
            error=record.get("error"),
            op=record.get("op"),
            claim_token=record.get("claim_token"),
        )
