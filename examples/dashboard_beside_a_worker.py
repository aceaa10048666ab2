"""Serve the web dashboard beside a worker, in one trio program (W1).

A worker runs an ``emails`` handler that dead-letters a job without an address. The
dashboard (``serve_dashboard``) serves the same store from the same nursery, on a free
loopback port; the script then reads two of its pages, as an operator's browser would:
the overview, and the dead letters grouped by error. In production you would run
``alkstore-trio dashboard --dsn ...`` next to your workers instead, or mount
``create_app(store)`` in your own ASGI service (see docs/how-to/use-the-dashboard.md).

The script runs on the embedded in-memory engine. It needs the ``dashboard`` extra:
``pip install 'alkstore_trio[dashboard]'``. Run it with
``python examples/dashboard_beside_a_worker.py``.
"""

import json
import re
import urllib.request

import trio

import alkstore_trio
from alkstore_trio.dashboard import serve_dashboard


async def send_email(job: alkstore_trio.Job) -> None:
    if "to" not in json.loads(job.payload):
        raise alkstore_trio.Fail("payload has no 'to' field")


def read(url: str) -> str:
    with urllib.request.urlopen(url) as reply:
        return str(reply.read().decode("utf-8"))


async def main() -> None:
    async with alkstore_trio.open_store("memory://") as store:
        emails = store.queue("emails")
        worker = alkstore_trio.Worker(store, {emails: send_email})
        async with trio.open_nursery() as nursery:
            with worker.events(buffer=None) as events:
                await nursery.start(worker.run)
                (url, *_) = await nursery.start(serve_dashboard, store, "127.0.0.1:0")
                await emails.enqueue(b'{"to": "ops@example.com"}')
                await emails.enqueue(b'{"subject": "no address"}')
                with trio.fail_after(10):
                    async for event in events:
                        if event.kind == "dead":
                            break

            overview = await trio.to_thread.run_sync(read, url + "/")
            assert 'data-queue="emails"' in overview
            dead = await trio.to_thread.run_sync(read, url + "/dead")
            (group,) = re.findall(r'<code class="error">([^<]*)</code>', dead)
            print(f"dashboard at {url}: 1 dead job in emails, grouped under {group!r}")
            assert group == "payload has no &#39;to&#39; field"  # escaped, as every text
            worker.stop()
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
