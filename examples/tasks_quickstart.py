"""Typed tasks: declare functions as tasks, defer calls of them, and serve them with a
worker (needs the ``tasks`` extra: ``pip install -e '.[tasks]'`` in a checkout).

- ``send_email`` and ``bill`` share the ``mail`` queue; the worker routes each job by its
  task name and decodes the arguments into the annotated types (a dataclass, a datetime,
  an enum, a list).
- A wrong argument is refused at ``defer`` time, before anything is enqueued.
- ``defer_many`` enqueues many calls in one statement; ``defer(tx, ...)`` enqueues with a
  transaction.
- ``resize`` is a plain ``def``: it runs in a worker thread.
- A job naming a task the worker does not know is dead-lettered with a clear error.

Run it with ``python examples/tasks_quickstart.py``.
"""

import dataclasses
import enum
import time
from datetime import UTC, datetime

import trio

import alkstore_trio
from alkstore_trio import Tasks, Worker

tasks = Tasks()
log: list[str] = []


class Plan(enum.Enum):
    FREE = "free"
    PRO = "pro"


@dataclasses.dataclass
class Line:
    sku: str
    cents: int


@tasks.task(name="send_email", queue="mail", max_attempts=5, unique_key="welcome:{to}")
async def send_email(to: str, subject: str) -> None:
    log.append(f"email to {to}: {subject}")


@tasks.task(name="bill", queue="mail")
async def bill(account: str, plan: Plan, lines: list[Line], at: datetime) -> int:
    total = sum(line.cents for line in lines)
    log.append(f"billed {account} ({plan.value}) {total} cents at {at:%Y-%m-%d}")
    return total


@tasks.task(name="resize", queue="thumbs")
def resize(path: str, width: int) -> None:
    time.sleep(0.01)  # blocking work: runs in a worker thread
    log.append(f"resized {path} to {width}px")


async def settled(store: alkstore_trio.Store) -> bool:
    stats = await store.stats()
    return all(q.pending_ready + q.pending_delayed + q.processing == 0 for q in stats.queues)


async def main() -> None:
    async with alkstore_trio.open_store("memory://") as store:
        await send_email.defer(store, to="ada@example.com", subject="welcome")
        again = await send_email.defer(store, to="ada@example.com", subject="welcome")
        assert not again.created  # unique_key: the first job still holds the key
        await bill.defer(
            store,
            account="acme",
            plan=Plan.PRO,
            lines=[Line("seat", 1200), Line("support", 300)],
            at=datetime(2026, 1, 31, tzinfo=UTC),
        )
        try:
            await bill.defer(store, account="acme", plan=Plan.PRO, lines=[], at="tomorrow")
        except alkstore_trio.InvalidArgument as exc:
            print("refused:", exc)
        await resize.defer_many(
            store, [resize.call(path=f"img{n}.png", width=128) for n in range(3)]
        )
        async with store.transaction() as tx:
            await send_email.defer(tx, to="bob@example.com", subject="invoice")
        await store.queue("mail").enqueue(b'{"v":1,"task":"retired_task","args":{}}')

        worker = Worker(store, tasks, poll_interval_s=0.05)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            deadline = trio.current_time() + 30
            while not await settled(store):
                assert trio.current_time() < deadline, "the worker never finished"
                await trio.sleep(0.01)
            worker.stop()

        (dead,) = await store.queue("mail").list_jobs("dead")
        print("dead-lettered:", dead.last_error)
        assert dead.last_error is not None
        assert dead.last_error.startswith("unknown task 'retired_task'")
        assert bill.decode_result(b"1500") == 1500

    for line in sorted(log):
        print(line)
    assert len(log) == 6


if __name__ == "__main__":
    trio.run(main)
