"""Handlers for the ``alkstore-trio worker`` command: a module that ``--queue`` names.

Each handler is ``async def handler(job) -> None``: returning acks the job, raising
``Fail`` dead-letters it at once, raising ``Retry`` (or any other exception) retries it.
Serve them from the directory holding this file (the current directory is importable,
as with ``python -m``)::

    alkstore-trio migrate --dsn postgresql://app@db/jobs            # once
    alkstore-trio worker --dsn postgresql://app@db/jobs \\
        --queue emails=worker_cli_handlers:send_email \\
        --queue thumbnails=worker_cli_handlers:Thumbnails.make --log-level info

Ctrl-C (or SIGTERM) stops the worker gracefully; see docs/how-to/run-a-worker.md.

Run as a script (``python worker_cli_handlers.py``), the file shows the same handlers
at work without a database: it runs a ``Worker`` in code on an in-memory store, which
is what the command does on the store its ``--dsn`` names.
"""

from __future__ import annotations

import json
import logging
import sys

import trio

from alkstore_trio import Fail, Job, Retry, Worker, open_store

logger = logging.getLogger("worker_cli_handlers")


async def send_email(job: Job) -> None:
    """Send the email a JSON payload ``{"to": ...}`` describes."""
    try:
        message = json.loads(job.payload)
        to = message["to"]
    except (ValueError, KeyError, TypeError):
        # Retrying cannot fix a malformed payload: dead-letter it now (never log it).
        raise Fail("payload is not JSON with a 'to' field") from None
    if to.endswith("@unreachable.example"):
        raise Retry(delay_s=60, error=f"mail server for {to} unreachable")
    await trio.sleep(0.01)  # stands for the SMTP conversation
    logger.info("sent email to %s (job %d, attempt %d)", to, job.id, job.attempts)


class Thumbnails:
    """Handlers may live in classes: name them ``module:Class.method``."""

    @staticmethod
    async def make(job: Job) -> None:
        """Make a thumbnail of the image the payload names."""
        await trio.sleep(0.01)
        logger.info("made a thumbnail of %s", job.payload.decode(errors="replace"))


async def main() -> None:
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("alkstore_trio").setLevel(logging.ERROR)
    async with open_store("memory://") as store:
        emails, thumbnails = store.queue("emails"), store.queue("thumbnails")
        await emails.enqueue_many([b'{"to": "ada@example.com"}', b"not json"])
        await thumbnails.enqueue(b"cat.png")
        worker = Worker(store, {"emails": send_email, "thumbnails": Thumbnails.make})
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            # Poll the public counters until all three jobs settled (the command instead
            # runs until a signal, printing these counters every --status-interval-s).
            while (stats := worker.statistics()).acked + stats.dead_lettered < 3:  # noqa: ASYNC110
                await trio.sleep(0.01)
            worker.stop()  # what the first Ctrl-C does under the command
        stats = worker.statistics()
        print(f"acked {stats.acked}, dead-lettered {stats.dead_lettered}")


if __name__ == "__main__":
    trio.run(main)
