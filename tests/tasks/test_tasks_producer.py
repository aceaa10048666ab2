"""T9: a typed task deferred through a producer, on the application's own psycopg
connection and in its transaction (Q20): checked as ``defer`` checks a call, stamped
with every option of the task (its QueueOpts too, whatever the producer's ``queues=``
says), visible at the commit and gone with a rollback; run by a worker serving the
registry like any deferred call."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
import trio

from alkstore_trio import InvalidArgument, QueueOpts, Tasks, open_store, postgres
from alkstore_trio.postgres import Producer
from alkstore_trio.testing import drain

OPTS = QueueOpts(visibility_timeout_s=42.5, backoff_base_s=1.5, keep_completed_s=60)

tasks = Tasks()
sent: list[str] = []


@tasks.task(
    queue="emails",
    max_attempts=7,
    priority=3,
    delay_s=-1.0,
    unique_key="mail-{to}",
    concurrency_key="{to}",
    opts=OPTS,
)
async def send_email(to: str, subject: str) -> str:
    sent.append(f"{to}: {subject}")
    return f"sent to {to}"


@pytest.fixture
def migrated(pg_dsn, schema) -> str:
    trio.run(lambda: postgres.migrate(pg_dsn, schema=schema))
    return schema


def view_that_fails(producer: Producer, conn: psycopg.Connection) -> None:
    with conn.transaction():
        send_email.defer_with(producer, conn, "bob@example.com", "hi")
        raise RuntimeError("the view failed: its job goes with it")


async def async_view_that_fails(producer: Producer, conn: psycopg.AsyncConnection) -> None:
    async with conn.transaction():
        await send_email.adefer_with(producer, conn, to="eve@example.com", subject="s")
        raise RuntimeError("rolled back")


def _shape(job) -> tuple[object, ...]:
    return (
        job.queue, job.payload, job.priority, job.max_attempts, job.visibility_timeout_s,
        job.backoff_base_s, job.keep_completed_s, job.unique_key, job.concurrency_key,
    )  # fmt: skip


async def test_t9_defer_with_writes_the_job_defer_writes_and_the_commit_decides(pg_dsn, migrated):
    # The producer knows nothing of the queue: the task's own QueueOpts stamp the row.
    producer = Producer(migrated)

    def app() -> tuple[int, int]:
        with psycopg.connect(pg_dsn) as conn:
            with conn.transaction():
                ada = send_email.defer_with(producer, conn, to="ada@example.com", subject="hi")
            with pytest.raises(RuntimeError):
                view_that_fails(producer, conn)
            with conn.transaction():
                again = send_email.defer_with(producer, conn, to="ada@example.com", subject="x")
        assert ada.created
        assert (int(again), again.created) == (int(ada), False)  # the task's unique key
        return int(ada), int(again)

    ada, _ = await trio.to_thread.run_sync(app)
    async with open_store(pg_dsn, schema=migrated, listen=False) as store:
        deferred = await send_email.defer(store, to="cy@example.com", subject="hi")
        emails = store.queue("emails")
        produced, by_store = await emails.get_job(ada), await emails.get_job(int(deferred))
        assert _shape(produced)[2:7] == _shape(by_store)[2:7]
        assert _shape(produced)[2:] == (
            3, 7, 42.5, 1.5, 60.0, "mail-ada@example.com", "ada@example.com"
        )  # fmt: skip
        assert [job.id for job in await emails.list_jobs("pending")] == [ada, int(deferred)]
        sent.clear()
        runs = await drain(store, tasks)
        assert sorted(run.outcome for run in runs) == ["ack", "ack"]
        assert sorted(sent) == ["ada@example.com: hi", "cy@example.com: hi"]
        done = await emails.get_job(ada)
        assert done.state == "completed"
        assert send_email.decode_result(done.result) == "sent to ada@example.com"


def test_t9_adefer_with_enqueues_in_an_asyncio_transaction(pg_dsn, migrated):
    producer = Producer(migrated)

    async def app() -> int:
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            async with conn.transaction():
                job = await send_email.adefer_with(
                    producer, conn, to="dee@example.com", subject="s"
                )
            with pytest.raises(RuntimeError):
                await async_view_that_fails(producer, conn)
            return int(job)

    job_id = asyncio.run(app())
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            f'SELECT id, concurrency_key FROM "{migrated}".jobs ORDER BY id'
        ).fetchall()
    assert rows == [(job_id, "dee@example.com")]


def test_t9_bad_calls_are_invalid_argument_and_nothing_is_sent(pg_dsn, migrated):
    producer = Producer(migrated)
    with psycopg.connect(pg_dsn) as conn:
        with pytest.raises(InvalidArgument, match="to"):
            send_email.defer_with(producer, conn, to=1, subject="hi")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="subject"):
            send_email.defer_with(producer, conn, to="a@example.com")  # type: ignore[call-arg]
        with pytest.raises(InvalidArgument, match="Producer"):
            send_email.defer_with(object(), conn, to="a", subject="b")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="Connection"):
            send_email.defer_with(producer, object(), to="a", subject="b")
        # Nothing was sent: the connection's transaction is still usable and empty.
        ((count,),) = conn.execute(f'SELECT count(*) FROM "{migrated}".jobs').fetchall()
        assert count == 0
