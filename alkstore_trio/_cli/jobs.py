"""``alkstore-trio jobs show`` and ``jobs list``: one job by id, or a queue's jobs in one
state, with payloads previewed safely (nothing raw reaches the terminal)."""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Final

from .._util import one_line as cut
from ._args import EXIT_OK, CommandFailed, HelpFormatter, epilog, int_in, job_id, queue_name
from ._operator import add_command, operator_store
from ._output import escaped, iso, say, table
from ._reschedule import add_reschedule
from .enqueue import _header as header_pair  # D26.1: --header as enqueue takes it

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence

    from .._core import Job

#: How many leading payload bytes ``jobs show`` previews as hex when they are not text.
PREVIEW_BYTES: Final = 64
#: How many characters of a text payload ``jobs show`` previews.
PREVIEW_CHARS: Final = 400
#: How many jobs the ``dead list`` and ``jobs list`` commands show by default.
DEFAULT_LIST_LIMIT: Final = 50


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``jobs show``, ``jobs list`` and ``jobs reschedule``."""
    jobs = commands.add_parser(
        "jobs",
        help="show, list, reschedule or wait for jobs",
        description=(
            "Inspect jobs: one by id, live or dead, or a queue's jobs in one state; "
            "reschedule a pending one; wait until one has finished."
        ),
        epilog=epilog(
            examples=[
                "alkstore-trio jobs show 42",
                "alkstore-trio jobs list --queue emails --state pending",
                "alkstore-trio jobs reschedule 42 --now",
                "alkstore-trio jobs wait 42 --queue reports --timeout-s 60",
            ]
        ),
        formatter_class=HelpFormatter,
    )
    jobs_commands = jobs.add_subparsers(dest="subcommand", metavar="SUBCOMMAND")
    jobs_commands.required = True
    show = add_command(
        jobs_commands,
        env,
        "show",
        show_job,
        title="jobs show",
        help="show one job, live or dead, by id",
        description=(
            "Show every field of the job with this id, whatever its queue, and its "
            "headers, one NAME=VALUE a line. The payload is "
            "shown as its size and a safe preview: JSON or text as text (cut after "
            f"{PREVIEW_CHARS} characters), other bytes as hex of the first {PREVIEW_BYTES}. "
            "--payload writes the raw payload bytes to stdout instead, and nothing else. "
            "A completed job (kept by keep_completed_s) shows completed_at and its result "
            "the same way; --result-file F writes the raw result bytes to F."
        ),
        examples=[
            "alkstore-trio jobs show 42",
            "alkstore-trio jobs show 42 --payload > job42.bin",
            "alkstore-trio jobs show 42 --result-file result42.bin",
            "alkstore-trio jobs show 42 --json",
        ],
    )
    add_show_options(show)
    listing = add_command(
        jobs_commands,
        env,
        "list",
        list_jobs,
        title="jobs list",
        help="list a queue's pending, processing, dead or completed jobs, by id",
        description=(
            "List a queue's jobs in one state, oldest id first, one line each. "
            "--after-id pages: pass the last id shown. --key and --header keep the jobs "
            "that match exactly; a --header search reads at most 10,000 jobs a "
            "call and says where to go on."
        ),
        examples=[
            "alkstore-trio jobs list --queue emails --state pending",
            "alkstore-trio jobs list --queue emails --state dead --after-id 1200 --limit 100",
            "alkstore-trio jobs list --queue reports --state completed",
            "alkstore-trio jobs list --queue emails --state dead --key user-42",
            "alkstore-trio jobs list --queue emails --state pending --header tenant=acme",
        ],
    )
    add_filter_options(listing)
    add_list_options(listing)
    add_reschedule(jobs_commands, env)  # Q16
    from ._wait import add_wait  # it prints as jobs show does: it imports this module

    add_wait(jobs_commands, env)  # Q19.4


def add_show_options(show: argparse.ArgumentParser) -> None:
    """The id and the output options of ``jobs show`` (and ``jobs wait``)."""
    show.add_argument("job_id", metavar="ID", type=job_id, help="the job's id")
    show.add_argument(
        "--payload", action="store_true", help="write only the raw payload bytes to stdout"
    )
    show.add_argument("--json", action="store_true", help="print the job as JSON")
    show.add_argument(
        "--result-file",
        metavar="F",
        default=None,
        help="write the completed job's raw result bytes to the file F",
    )


def add_filter_options(parser: argparse.ArgumentParser) -> None:
    """``jobs list``'s ``--queue`` and ``--state``, and (D26.1) ``--key`` and
    ``--header``: exact matches."""
    parser.add_argument(
        "--queue", metavar="Q", type=queue_name, required=True, help="the queue (required)"
    )
    parser.add_argument(
        "--state",
        required=True,
        choices=("pending", "processing", "cancelling", "dead", "completed", "cancelled"),
        help=(
            "which jobs: pending, processing, cancelling, dead, or completed or cancelled "
            "(kept after they finished by keep_completed_s) (required)"
        ),
    )
    parser.add_argument(
        "--key",
        metavar="K",
        default=None,
        help="only jobs whose unique key or concurrency key is exactly K",
    )
    parser.add_argument(
        "--header",
        metavar="NAME=VALUE",
        type=header_pair,
        default=None,
        help="only jobs whose header NAME is exactly VALUE (split at the first '=')",
    )


def add_list_options(parser: argparse.ArgumentParser) -> None:
    """``--limit``, ``--after-id`` and ``--json`` of ``jobs list`` and ``dead list``."""
    parser.add_argument(
        "--limit",
        metavar="N",
        type=int_in(1, 1000),
        default=DEFAULT_LIST_LIMIT,
        help=f"show at most N jobs (1-1000, default {DEFAULT_LIST_LIMIT})",
    )
    parser.add_argument(
        "--after-id", metavar="ID", type=job_id, default=None, help="only ids above ID"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object per job")


# -- jobs ----------------------------------------------------------------------------


def _preview(payload: bytes) -> tuple[str, str]:
    """The payload's kind (``json``, ``text`` or ``binary``) and a safe one-line preview:
    JSON on one line and text with its control characters escaped, both cut after
    ``PREVIEW_CHARS`` characters; anything else as hex of its first ``PREVIEW_BYTES``
    bytes. Nothing raw reaches the terminal."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        try:
            json.loads(text)
        except ValueError:
            kind = "text"
        else:
            kind = "json"
        if kind == "json" or all(c.isprintable() or c in "\t\r\n" for c in text):
            flat = " ".join(text.split()) if kind == "json" else text
            flat = escaped(flat)
            cut = flat if len(flat) <= PREVIEW_CHARS else flat[:PREVIEW_CHARS] + "…"
            return kind, cut
    head = payload[:PREVIEW_BYTES].hex(" ")
    more = " …" if len(payload) > PREVIEW_BYTES else ""
    return "binary", head + more


def _job_dict(job: Job) -> dict[str, object]:
    kind, _ = _preview(job.payload)
    out: dict[str, object] = {
        field.name: getattr(job, field.name)
        for field in dataclasses.fields(job)
        if field.name not in ("payload", "result")
    }
    for name, value in out.items():
        if isinstance(value, datetime):
            out[name] = iso(value)
    out["headers"] = dict(job.headers)
    out["payload_size"] = len(job.payload)
    out["payload_kind"] = kind
    out["payload_base64"] = base64.b64encode(job.payload).decode("ascii")
    # Q19.1: a completed job's result, as the payload (None: no result).
    out["result_size"] = None if job.result is None else len(job.result)
    out["result_base64"] = (
        None if job.result is None else base64.b64encode(job.result).decode("ascii")
    )
    return out


async def show_job(args: argparse.Namespace) -> int:
    async with operator_store(args) as store:
        job = await store.get_job(args.job_id)
    if job is None:
        raise CommandFailed(
            f"no job {args.job_id}: it was never enqueued, or it was acked, cancelled or "
            "purged (finished jobs leave no row unless their queue keeps them: "
            "keep_completed_s)"
        )
    return print_job(job, args)


def print_job(job: Job, args: argparse.Namespace) -> int:
    """Print ``job`` as ``jobs show`` does (``--result-file``, ``--payload``, ``--json``
    or its fields); the exit status."""
    if args.result_file is not None:
        return _write_result(job, args.result_file)
    if args.payload:
        sys.stdout.buffer.write(job.payload)
        sys.stdout.buffer.flush()
        return EXIT_OK
    if args.json:
        say(json.dumps(_job_dict(job)))
        return EXIT_OK
    kind, preview = _preview(job.payload)
    fields = [
        ("id", str(job.id)),
        ("queue", job.queue),
        ("state", job.state),
        ("priority", str(job.priority)),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("run_at", iso(job.run_at)),
        ("enqueued_at", iso(job.enqueued_at)),
        ("expires_at", iso(job.expires_at)),
        ("visibility_timeout_s", f"{job.visibility_timeout_s:g}"),
        ("backoff_base_s", f"{job.backoff_base_s:g}"),
        ("claimed_by", job.claimed_by or "-"),
        ("claimed_at", iso(job.claimed_at)),
        ("claim_expires_at", iso(job.claim_expires_at)),
        ("last_error", "-" if job.last_error is None else " ".join(job.last_error.split())),
        ("died_at", iso(job.died_at)),
        # Q19.7: the last progress the handler reported (on one line).
        ("progress", "-" if job.progress is None else escaped(" ".join(job.progress.split()))),
        *(("headers" if i == 0 else "", line) for i, line in enumerate(_header_lines(job))),
        ("payload", f"{len(job.payload)} bytes, {kind}"),
        ("preview", preview or "(empty)"),
        *_result_lines(job),
    ]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        say(f"{name.ljust(width)}  {value}")
    return EXIT_OK


def _result_lines(job: Job) -> list[tuple[str, str]]:
    """Q19.1/Q19.2: ``jobs show``'s lines for a kept job (completed, or Q19.5's cancelled):
    when, and its result's size and a bounded preview (as the payload's); none for a job
    not kept."""
    if job.state not in ("completed", "cancelled"):
        return []
    lines = [("completed_at", iso(job.completed_at))]
    if job.result is None:
        return [*lines, ("result", "-")]
    kind, preview = _preview(job.result)
    return [
        *lines,
        ("result", f"{len(job.result)} bytes, {kind}"),
        ("result preview", preview or "(empty)"),
    ]


def _write_result(job: Job, path: str) -> int:
    """``--result-file``: the raw result bytes into the file; a job without a result is
    an error (nothing is written)."""
    if job.result is None:
        raise CommandFailed(
            f"job {job.id} has no result (state {job.state}: only a completed job of a "
            "queue with keep_completed_s keeps one, and only when its handler returned bytes)"
        )
    try:
        with open(path, "wb") as out:
            out.write(job.result)
    except OSError as exc:
        raise CommandFailed(f"cannot write the result to {path!r}: {exc.strerror}") from exc
    say(f"wrote {len(job.result)} bytes of job {job.id}'s result to {path}")
    return EXIT_OK


def _header_lines(job: Job) -> list[str]:
    """``jobs show``'s lines for the headers (D30): ``NAME=VALUE`` each, as ``--header``
    takes them, in name order; ``-`` for none. Control characters are escaped (one line
    each), a name that could not be told apart from its value is quoted as JSON, and a
    value is cut after ``PREVIEW_CHARS`` characters (``--json`` has it whole)."""
    if not job.headers:
        return ["-"]
    lines = []
    for name, value in job.headers.items():
        shown = escaped(name)
        if "=" in name or shown != name or name != name.strip() or name.startswith('"'):
            shown = json.dumps(name, ensure_ascii=False)
        text = escaped(value)
        cut = text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"
        lines.append(f"{shown}={cut}")
    return lines


def print_jobs(jobs: Sequence[Job], *, as_json: bool, dead: bool) -> None:
    if as_json:
        for job in jobs:
            say(json.dumps(_job_dict(job)))
        return
    if not jobs:
        return
    if jobs[0].state in ("completed", "cancelled"):  # Q19.2, Q19.5
        header = ["ID", "QUEUE", "ATTEMPTS", "COMPLETED AT", "RESULT"]
        rows = [
            [
                str(job.id),
                job.queue,
                f"{job.attempts}/{job.max_attempts}",
                iso(job.completed_at),
                "-" if job.result is None else f"{len(job.result)} bytes",
            ]
            for job in jobs
        ]
        for line in table(header, rows, "rlrlr"):
            say(line)
        return
    if dead:
        header = ["ID", "QUEUE", "ATTEMPTS", "DIED AT", "LAST ERROR"]
        rows = [
            [
                str(job.id),
                job.queue,
                f"{job.attempts}/{job.max_attempts}",
                iso(job.died_at),
                cut(job.last_error),
            ]
            for job in jobs
        ]
    else:
        header = [
            "ID",
            "QUEUE",
            "STATE",
            "PRIORITY",
            "ATTEMPTS",
            "RUN AT",
            "CLAIMED BY",
            "PROGRESS",
        ]
        rows = [
            [
                str(job.id),
                job.queue,
                job.state,
                str(job.priority),
                f"{job.attempts}/{job.max_attempts}",
                iso(job.run_at),
                job.claimed_by or "-",
                cut(job.progress, 40),
            ]
            for job in jobs
        ]
    for line in table(header, rows, "rllll" if dead else "rllrrlll"):
        say(line)


async def list_jobs(args: argparse.Namespace) -> int:
    async with operator_store(args) as store:
        page = await store.queue(args.queue).find_jobs(
            args.state, key=args.key, header=args.header, limit=args.limit, after_id=args.after_id
        )
    jobs = page.jobs
    print_jobs(jobs, as_json=args.json, dead=args.state == "dead")
    if page.searched_to_id is not None:  # D26.1: the header search stopped at its bound
        print(
            f"searched up to id {page.searched_to_id}; continue with --after-id "
            f"{page.searched_to_id}",
            file=sys.stderr,
        )
        return EXIT_OK
    if not jobs and not args.json:
        print(f"no {args.state} jobs in queue {args.queue!r}", file=sys.stderr)
    return EXIT_OK
