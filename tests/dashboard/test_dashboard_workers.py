"""W1 with Q21: the workers page lists every registered worker, busy or idle, with its
host and pid, queues, slots, heartbeat age and state, beside the holders that never
registered; the registry's text is escaped (W5); a registry that cannot be read leaves
the held-jobs view working. Time is a manual clock: no test waits for it."""

from __future__ import annotations

from _dashboard_client import Client

from alkstore_trio import EngineError, WorkerRegistration, open_store
from alkstore_trio.dashboard import create_app
from alkstore_trio.engine import ForwardingEngine, MemoryEngine
from alkstore_trio.testing import ManualClock

PROBES = ("<script>window.__xss=1</script>", '"><img src=x onerror="window.__xss=2">')


def reg(worker_id, host="web-1", queues=("emails",)):
    return WorkerRegistration(worker_id, host, 8121, queues, 10, "1.0")


def row_of(page, worker_id):
    start = page.index(f'data-worker="{worker_id}"')
    return page[start : page.index("</tr>", start)]


async def test_w1_q21_idle_busy_gone_stopped_and_unregistered_workers():
    clock = ManualClock()
    async with open_store("memory://", clock=clock) as store:
        await store.beat_worker(reg("lost"), "start")
        await store.beat_worker(reg("done"), "start")
        await store.beat_worker(reg("done"), "stop")
        clock.advance(61)
        await store.beat_worker(reg("idle"), "start")
        await store.beat_worker(reg("busy"), "start")
        q = store.queue("emails")
        await q.enqueue_many([b"a", b"b"])
        mine = await q.claim_one("busy")
        old = await q.claim_one("old-release")
        clock.advance(42)
        page = (await Client(create_app(store)).get("/workers")).text
    expected = ["busy", "idle", "old-release", "lost", "done"]
    assert sorted(expected, key=lambda w: page.index(f'data-worker="{w}"')) == expected
    idle = row_of(page, "idle")
    assert 'data-state="running"' in idle
    assert "web-1 / 8121" in idle
    assert "42.0s ago" in idle
    assert f"emails#{mine.id}" in row_of(page, "busy")
    assert 'data-state="gone"' in row_of(page, "lost")
    assert "1.7m ago" in row_of(page, "lost")
    assert 'data-state="stopped"' in row_of(page, "done")
    unregistered = row_of(page, "old-release")
    assert 'data-state="unregistered"' in unregistered
    assert f"emails#{old.id}" in unregistered


async def test_w5_q21_registry_text_is_escaped(store):
    await store.beat_worker(reg(PROBES[0], host=PROBES[1]), "start")
    page = (await Client(create_app(store)).get("/workers")).text
    assert "<script>window" not in page
    assert "<img" not in page
    assert page.count("<script") == 1  # htmx only
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in page


class NoRegistry(ForwardingEngine):
    async def list_workers(self, gone_after_s, limit):
        raise EngineError("permission denied for table workers")


async def test_w1_q21_an_unreadable_registry_leaves_the_held_jobs_shown():
    async with open_store(NoRegistry(MemoryEngine())) as store:
        q = store.queue("emails")
        await q.enqueue(b"a")
        held = await q.claim_one("w-1")
        reply = await Client(create_app(store)).get("/workers")
    assert reply.status == 200
    assert 'id="registry-error"' in reply.text
    assert "EngineError" in reply.text
    assert "permission denied" not in reply.text  # W7: the type only
    assert f"emails#{held.id}" in reply.text
