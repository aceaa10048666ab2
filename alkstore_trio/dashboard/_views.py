"""What the pages show, computed without I/O: previews, groups, times and ages.

Nothing here escapes: the templates do, always (Jinja's autoescape, W5). These helpers
only bound what is shown and say what kind of bytes it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from .._util import age as age
from .._util import one_line

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import datetime

    from .._core import Job, WorkerInfo

#: How many payload (or result) bytes the job page previews (W6).
PREVIEW_BYTES: Final = 4096
#: How many characters of a payload the jobs list shows.
LIST_PREVIEW_CHARS: Final = 80
#: How many characters of an error a dead-letter group is keyed and shown by.
ERROR_KEY_CHARS: Final = 200


@dataclass(frozen=True)
class Preview:
    """A bounded view of some bytes (W6): ``kind`` is ``"text"`` (UTF-8) or ``"hex"``;
    ``shown`` is at most :data:`PREVIEW_BYTES` of them; ``size`` is the whole length."""

    kind: str
    shown: str
    size: int
    cut: bool


def preview(data: bytes, limit: int = PREVIEW_BYTES) -> Preview:
    """W6: the first ``limit`` bytes as text when they are UTF-8 (a character cut at the
    end does not count against that), else as hex."""
    head = data[:limit]
    cut = len(data) > limit
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if cut and exc.start >= len(head) - 3 and exc.reason == "unexpected end of data":
            text = head[: exc.start].decode("utf-8")
        else:
            return Preview("hex", head.hex(" "), len(data), cut)
    return Preview("text", text, len(data), cut)


def list_preview(data: bytes) -> str:
    """The jobs list's one-line payload preview: text, or hex of the first bytes."""
    shown = preview(data, LIST_PREVIEW_CHARS)
    return (
        one_line(shown.shown, LIST_PREVIEW_CHARS)
        if shown.kind == "text"
        else "hex: " + shown.shown[:60]
    )


@dataclass(frozen=True)
class DeadGroup:
    """Dead jobs with the same last error (its first :data:`ERROR_KEY_CHARS`
    characters, on one line)."""

    error: str
    jobs: tuple[Job, ...]


def group_by_error(jobs: Iterable[Job]) -> list[DeadGroup]:
    """Dead jobs grouped by their last error, the largest group first (then by error)."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        key = one_line(job.last_error or "(no error recorded)", ERROR_KEY_CHARS)
        groups.setdefault(key, []).append(job)
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    return [DeadGroup(error, tuple(members)) for error, members in ordered]


def iso(value: datetime | None) -> str:
    """An aware datetime as ISO 8601 to the second with ``Z`` for UTC; ``-`` for None."""
    if value is None:
        return "-"
    return value.replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class WorkerRow:
    """One worker on W1's workers page: its registry row (Q21; ``None`` for a worker
    that holds jobs but never registered, e.g. one of a release before schema version
    15), and its held jobs: how many, the oldest claim's age, and the soonest lease end
    (negative: lapsed)."""

    worker_id: str
    info: WorkerInfo | None
    jobs: tuple[Job, ...]
    oldest_claim_age_s: float | None
    soonest_lease_left_s: float | None

    @property
    def state(self) -> str:
        """``running``, ``stopped``, ``gone`` (Q21.4) or ``unregistered``."""
        return "unregistered" if self.info is None else self.info.state


#: The page's order: live workers first, then the ones that went away.
_STATE_ORDER: Final = {"running": 0, "unregistered": 1, "gone": 2, "stopped": 3}


def by_worker(
    jobs: Iterable[Job], now: datetime, registered: Iterable[WorkerInfo] = ()
) -> list[WorkerRow]:
    """Every registered worker, busy or idle, and every other ``claimed_by`` that holds
    jobs, each with its held jobs: running workers first, then unregistered holders,
    gone and stopped ones; within each, the worker holding the most first."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.claimed_by or "(unknown)", []).append(job)
    infos = {info.worker_id: info for info in registered}
    rows = []
    for worker_id in infos.keys() | groups.keys():
        held = groups.get(worker_id, [])
        claimed = [(now - j.claimed_at).total_seconds() for j in held if j.claimed_at]
        leases = [(j.claim_expires_at - now).total_seconds() for j in held if j.claim_expires_at]
        rows.append(
            WorkerRow(
                worker_id,
                infos.get(worker_id),
                tuple(sorted(held, key=lambda j: j.id)),
                max(claimed, default=None),
                min(leases, default=None),
            )
        )
    return sorted(rows, key=lambda row: (_STATE_ORDER[row.state], -len(row.jobs), row.worker_id))
