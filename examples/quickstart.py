"""Quick start: a producer and a small claim loop on the embedded in-memory engine.

The producer enqueues a few jobs (one of them delayed); the consumer claims them in
batches, blocks on a wake listener when the queue is empty (with a short timeout as the
safety net: a delayed job sends no wake when it becomes due), and acks each job.

Run it with ``python examples/quickstart.py``.
"""

import json

import trio

import alkstore_trio

JOBS = 5


async def producer(emails: alkstore_trio.Queue) -> None:
    for number in range(JOBS - 1):
        payload = json.dumps({"to": f"user{number}@example.com"}).encode()
        await emails.enqueue(payload, priority=number % 2)
        await trio.sleep(0.01)
    # Ready in 0.2 s: found by the consumer's re-poll, not by a wake.
    await emails.enqueue(b'{"to": "later@example.com"}', delay_s=0.2)


async def consumer(store: alkstore_trio.Store, emails: alkstore_trio.Queue) -> list[str]:
    sent: list[str] = []
    async with store.open_wake_listener([emails]) as listener:
        while len(sent) < JOBS:
            handles = await emails.claim_batch("worker-1", 10)
            for handle in handles:
                message = json.loads(handle.job.payload)
                sent.append(message["to"])  # the "work"
                assert await handle.ack()
            if not handles:
                await listener.wait(timeout_s=0.05)
    return sent


async def main() -> None:
    async with alkstore_trio.open_store("memory://") as store:
        emails = store.queue("emails", alkstore_trio.QueueOpts(visibility_timeout_s=30))
        sent: list[str] = []

        async def consume() -> None:
            sent.extend(await consumer(store, emails))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            nursery.start_soon(producer, emails)

    for address in sent:
        print("sent to", address)
    assert len(sent) == JOBS
    assert sent[-1] == "later@example.com"  # the delayed job ran last


if __name__ == "__main__":
    trio.run(main)
