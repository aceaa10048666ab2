"""Q19.1: the results given to an ack, checked and matched to the claims they finish.

The store picks the statement by what the claims need: a batch in which no job is kept
(no stamp ``keep_completed_s``) is a plain ack, whatever results came with it (they are
discarded: a result lives only on a kept row); a batch with a kept job is a moving ack
(the engine's ``complete``), with each kept job's result. A queue without history so
sends exactly the statements it sent before results existed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._core import _validate as v
from .._engines._protocol import Claim, Completion
from .._errors import InvalidArgument

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._handle import JobHandle


def checked_results(results: object, count: int, max_bytes: int) -> list[bytes | None] | None:
    """``results=`` of the batch acks: ``None``, or one result per handle (bytes,
    bytearray, memoryview or ``None``, each at most ``max_bytes``), as bytes."""
    if results is None:
        return None
    if not isinstance(results, Iterable) or isinstance(results, str | bytes | bytearray):
        raise InvalidArgument(
            f"results must be a sequence of one result per handle; got a {type(results).__name__}"
        )
    checked = [v.result_bytes(result, max_bytes) for result in results]
    if len(checked) != count:
        raise InvalidArgument(
            f"results must hold one result per handle: got {len(checked)} for {count} handles"
        )
    return checked


def ack_items(
    handles: Sequence[JobHandle], results: Sequence[bytes | None] | None
) -> tuple[list[Claim], list[Completion] | None]:
    """The claims of a batch ack (each fenced by its claim token, Q19.8) and, when some
    job of it is kept (Q19.2), its completions (each kept job's result; an unkept job's
    result discarded); ``None`` when the plain ack finishes the batch."""
    claims = [handle._claim for handle in handles]
    for handle in handles:  # a loop, not all(<generator>): it runs for every job
        if handle._job.keep_completed_s is not None:
            break
    else:
        return claims, None
    given = results if results is not None else [None] * len(handles)
    return claims, [
        Completion(
            claim.job_id,
            claim.token,
            None if handle._job.keep_completed_s is None else result,
        )
        for claim, handle, result in zip(claims, handles, given, strict=True)
    ]
