"""``alkstore-trio enqueue``: enqueue one job, its payload and headers checked before
anything is opened (a bad one is a usage error that never echoes a value)."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from typing import TYPE_CHECKING

from .._core import _validate as v
from .._errors import InvalidArgument
from ._args import EXIT_OK, CommandFailed, UsageProblem, int_in, queue_name, signed_seconds
from ._operator import add_command, operator_store
from ._output import say

if TYPE_CHECKING:
    from collections.abc import Mapping


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``enqueue``."""
    enqueue = add_command(
        commands,
        env,
        "enqueue",
        run,
        title="enqueue",
        help="enqueue one job (payload from --payload-json or --payload-file)",
        description=(
            "Enqueue one job with the default stamps (visibility timeout 300 s, 3 "
            "attempts, backoff base 5 s), and the headers given with --header, and print "
            "its id. With --unique-key, a live job of the queue with the same key (or "
            "the key's --unique-for-s window) makes it enqueue nothing: it prints that "
            "job's id, followed by 'existing'."
        ),
        examples=[
            """alkstore-trio enqueue --queue emails --payload-json '{"to": "ada@example.com"}'""",
            "alkstore-trio enqueue --queue thumbnails --payload-file photo.jpg "
            "--header tenant=acme --delay-s 60",
            "printf 'raw bytes' | alkstore-trio enqueue --queue blobs --payload-file -",
            'alkstore-trio enqueue --queue reports --payload-json \'{"day": "2026-12-01"}\' '
            "--unique-key report:2026-12-01 --json",
        ],
    )
    enqueue.add_argument(
        "--queue", metavar="Q", type=queue_name, required=True, help="the queue (required)"
    )
    _add_payload_options(enqueue)
    enqueue.add_argument(
        "--priority",
        metavar="N",
        type=int_in(v.PRIORITY_MIN, v.PRIORITY_MAX),
        default=0,
        help="larger runs first (32-bit; default 0)",
    )
    enqueue.add_argument(
        "--delay-s",
        metavar="S",
        type=signed_seconds,
        default=None,
        help="run no earlier than S seconds from now (default: now)",
    )
    enqueue.add_argument(
        "--max-attempts",
        metavar="N",
        type=int_in(1, v.MAX_ATTEMPTS_MAX),
        default=None,
        help="claims before the job is dead-lettered (default 3)",
    )
    enqueue.add_argument(
        "--header",
        metavar="NAME=VALUE",
        dest="headers",
        action=_HeadersAction,
        type=_header,
        default=None,
        help=(
            "a header of the job: metadata kept beside the payload (split at the first "
            "'='); repeat for more (default: none)"
        ),
    )
    _add_unique_options(enqueue)


def _add_payload_options(enqueue: argparse.ArgumentParser) -> None:
    """``--payload-json`` or ``--payload-file``, and ``--max-payload-bytes``."""
    payload = enqueue.add_mutually_exclusive_group(required=True)
    payload.add_argument(
        "--payload-json",
        metavar="JSON",
        dest="payload",
        type=_payload_json,
        help="the payload: a JSON text, stored as UTF-8",
    )
    payload.add_argument(
        "--payload-file",
        metavar="FILE",
        dest="payload",
        type=PayloadFile,
        help="the payload: the bytes of FILE (- for stdin), at most --max-payload-bytes",
    )
    enqueue.add_argument(
        "--max-payload-bytes",
        metavar="N",
        type=int_in(0, 2**30),
        default=v.DEFAULT_MAX_PAYLOAD_BYTES,
        help=(
            "refuse a larger payload before reading it, as a store opened with "
            "max_payload_bytes=N does (default 1048576: the library's default)"
        ),
    )


def _add_unique_options(enqueue: argparse.ArgumentParser) -> None:
    """Q15: ``--unique-key``, ``--unique-for-s``; Q18.8's ``--concurrency-key``; and
    ``--json``."""
    enqueue.add_argument(
        "--unique-key",
        metavar="KEY",
        type=_unique_key,
        default=None,
        help=(
            "at most one live job of the queue has KEY: if one does, enqueue nothing and "
            "print its id (default: no key)"
        ),
    )
    enqueue.add_argument(
        "--unique-for-s",
        metavar="S",
        type=_window,
        default=None,
        help="with --unique-key: also refuse KEY for S seconds after this job is created",
    )
    enqueue.add_argument(
        "--concurrency-key",
        metavar="KEY",
        type=_concurrency_key,
        default=None,
        help=(
            "the job's concurrency key (e.g. a tenant): the queue's per-key limit "
            "('queue limits NAME --per-key N') caps the jobs of KEY running at once "
            "(default: no key)"
        ),
    )
    enqueue.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object: {"id": ID, "created": true|false}',
    )


def _concurrency_key(text: str) -> str:
    """An argparse ``type`` for ``--concurrency-key`` (Q18.8); not echoed back either."""
    try:
        return v.check_concurrency_key(text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _unique_key(text: str) -> str:
    """An argparse ``type`` for ``--unique-key`` (Q15.7); the key is not echoed back."""
    try:
        return v.check_unique_key(text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _window(text: str) -> float:
    """An argparse ``type`` for ``--unique-for-s``: seconds > 0."""
    try:
        return v.check_duration("--unique-for-s", float(text), min_s=0, min_inclusive=False)
    except (ValueError, InvalidArgument) as exc:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds > 0, e.g. --unique-for-s 3600; got {text!r}"
            if not isinstance(exc, InvalidArgument)
            else str(exc)
        ) from None


def _payload_json(text: str) -> bytes:
    """An argparse ``type`` for ``--payload-json``: valid JSON, stored as given (UTF-8).
    The text is not echoed back: it may hold secrets."""
    try:
        json.loads(text)
    except ValueError as exc:
        line, col = getattr(exc, "lineno", "?"), getattr(exc, "colno", "?")
        raise argparse.ArgumentTypeError(
            f"is not valid JSON (line {line}, column {col}); quote it for the shell, e.g. "
            """--payload-json '{"to": "ada@example.com"}'"""
        ) from None
    return text.encode("utf-8", "surrogatepass")


class PayloadFile:
    """An argparse ``type`` for ``--payload-file``: the file (``-``: stdin), read by
    :meth:`read` once the size limit (``--max-payload-bytes``) is known. A file that
    cannot be opened is a usage error at once."""

    def __init__(self, text: str) -> None:
        self._path = text
        if text != "-":
            try:
                with open(text, "rb"):
                    pass
            except OSError as exc:
                raise argparse.ArgumentTypeError(self._cannot_read(exc)) from None

    def _cannot_read(self, exc: OSError) -> str:
        return f"cannot read {self._path!r}: {exc.strerror or type(exc).__name__}; check the path"

    def read(self, limit: int) -> bytes:
        """The payload, never more than ``limit`` bytes read (and never more than
        ``limit + 1`` held): a larger one raises :class:`UsageProblem` before it is read.
        A regular file's size is checked before reading; stdin is read up to one byte
        past the limit."""
        too_big = (
            f"the payload of --payload-file {self._path!r} is larger than "
            f"--max-payload-bytes {limit}; raise --max-payload-bytes (the workers' stores "
            "must accept it too: open_store(max_payload_bytes=...))"
        )
        if self._path == "-":
            data = sys.stdin.buffer.read(limit + 1)
            if len(data) > limit:
                raise UsageProblem(too_big)
            return data
        try:
            with open(self._path, "rb") as file:
                info = os.fstat(file.fileno())
                size = info.st_size
                if stat.S_ISREG(info.st_mode) and size > limit:
                    raise UsageProblem(too_big.replace("is larger", f"is {size} bytes, larger"))
                data = file.read(limit + 1)
        except OSError as exc:
            raise CommandFailed(self._cannot_read(exc)) from None
        if len(data) > limit:
            raise UsageProblem(too_big)
        return data


def _header(text: str) -> tuple[str, str]:
    """An argparse ``type`` for ``--header``: ``NAME=VALUE``, split at the first ``=``.
    The text is not echoed back: a header's value may be a secret."""
    name, equals, value = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(
            "expected NAME=VALUE (split at the first '='), e.g. --header tenant=acme"
        )
    if not name:
        raise argparse.ArgumentTypeError(
            "the header name before '=' is empty; expected NAME=VALUE, e.g. --header tenant=acme"
        )
    return name, value


class _HeadersAction(argparse.Action):
    """``--header``, repeatable: collects the headers into one dict (the option's value),
    refusing a name given twice and whatever ``Queue.enqueue(headers=...)`` would (D30),
    so a bad header is a usage error with nothing opened."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        assert isinstance(values, tuple)
        name, value = values
        headers = dict(getattr(namespace, self.dest) or {})
        if name in headers:
            raise argparse.ArgumentError(
                self, f"header {name!r} is given twice; give each header name once"
            )
        headers[name] = value
        try:
            v.check_headers(headers)
        except InvalidArgument as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        setattr(namespace, self.dest, headers)


async def run(args: argparse.Namespace) -> int:
    if args.unique_for_s is not None and args.unique_key is None:
        args.usage_error("--unique-for-s needs --unique-key")
    payload = args.payload
    if isinstance(payload, PayloadFile):
        payload = payload.read(args.max_payload_bytes)
    elif len(payload) > args.max_payload_bytes:
        args.usage_error(
            f"the payload of --payload-json is larger than --max-payload-bytes "
            f"{args.max_payload_bytes}; raise --max-payload-bytes"
        )
    async with operator_store(args, max_payload_bytes=args.max_payload_bytes) as store:
        job_id = await store.queue(args.queue).enqueue(
            payload,
            priority=args.priority,
            delay_s=args.delay_s,
            max_attempts=args.max_attempts,
            headers=args.headers,
            unique_key=args.unique_key,
            unique_for_s=args.unique_for_s,
            concurrency_key=args.concurrency_key,
        )
    if args.json:
        say(json.dumps({"id": int(job_id), "created": job_id.created}))
    else:
        # The id first, so that scripts can keep reading it; 'existing' when nothing new
        # was enqueued (Q15: a live job, or the window, holds the key).
        say(str(int(job_id)) if job_id.created else f"{int(job_id)} existing")
    return EXIT_OK
