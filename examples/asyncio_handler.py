"""A handler written for asyncio, run by the trio worker through trio-asyncio.

``fetch_quote`` is ordinary asyncio code: it calls an asyncio client (``QuoteService``,
standing in for aiohttp or any asyncio SDK) under ``asyncio.wait_for``, and the client
limits itself with an ``asyncio.Semaphore``. ``@asyncio_handler`` is all it takes to
register it with a :class:`~alkstore_trio.Worker`: the worker opens one trio-asyncio loop
for its run, so the client, created on first use, serves every job on that one loop.

The outcomes are the usual ones: returning acks the job, ``raise Retry(...)`` retries it
(the flaky symbol fails once), and a job that outlives ``job_timeout_s`` would be
cancelled with ``asyncio.CancelledError`` and retried.

Run it with ``python examples/asyncio_handler.py`` (the embedded in-memory engine), or
give a PostgreSQL URL as the argument to run it there (in the default schema, created
if needed).
It needs the ``asyncio`` extra: ``pip install 'alkstore-trio[asyncio]'``.
"""

import asyncio
import sys

import trio

import alkstore_trio
from alkstore_trio import Retry, asyncio_handler

SYMBOLS = ["ACME", "GLOBEX", "INITECH", "FLAKY", "UMBRELLA"]


class QuoteService:
    """An asyncio client: at most two requests at once, and one hiccup."""

    def __init__(self) -> None:
        self.limit = asyncio.Semaphore(2)
        self.failed_once: set[str] = set()
        self.loops: set[int] = set()

    async def quote(self, symbol: str) -> float:
        async with self.limit:
            self.loops.add(id(asyncio.get_running_loop()))
            await asyncio.sleep(0.01)  # the network round trip
            if symbol == "FLAKY" and symbol not in self.failed_once:
                self.failed_once.add(symbol)
                raise ConnectionError("connection reset by peer")
            return round(sum(map(ord, symbol)) / 10, 2)


service: QuoteService | None = None
quotes: dict[str, float] = {}


@asyncio_handler
async def fetch_quote(job: alkstore_trio.Job) -> None:
    global service
    if service is None:
        service = QuoteService()  # created on the worker's asyncio loop, kept for its run
    symbol = job.payload.decode()
    try:
        price = await asyncio.wait_for(service.quote(symbol), timeout=1.0)
    except ConnectionError as exc:
        raise Retry(delay_s=0.05, error=f"ConnectionError: {exc}") from exc
    quotes[symbol] = price
    print(f"attempt {job.attempts}: {symbol} = {price}")


async def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else "memory://"
    async with alkstore_trio.open_store(url, migrate="apply") as store:
        queue = store.queue("quotes")
        await queue.enqueue_many([symbol.encode() for symbol in SYMBOLS])
        worker = alkstore_trio.Worker(
            store, {queue: fetch_quote}, concurrency=3, job_timeout_s=5, poll_interval_s=0.1
        )
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                # A service would run the worker until stopped; the example polls its
                # counters to stop once every quote is in.
                while worker.statistics().acked < len(SYMBOLS):  # noqa: ASYNC110
                    await trio.sleep(0.01)
                worker.stop()

    stats = worker.statistics()
    print(f"acked {stats.acked}, retried {stats.retried}")
    assert sorted(quotes) == sorted(SYMBOLS)
    assert (stats.acked, stats.retried) == (len(SYMBOLS), 1)
    assert service is not None
    assert len(service.loops) == 1  # one asyncio loop for the whole run


if __name__ == "__main__":
    trio.run(main)
