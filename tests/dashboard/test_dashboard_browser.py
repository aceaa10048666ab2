"""The dashboard in a real browser (issue 17): Debian's chromium, headless, driven by
Selenium, on the dashboard served by Hypercorn's trio worker over a real PostgreSQL
store. One browser serves every test of the session (the ``chromium`` fixture); these
tests share one xdist group so that it is one browser per run.

Each test waits for what the page shows (``Browser.wait_for`` polls the DOM), never
for a time.
"""

from __future__ import annotations

import pytest
import trio

from alkstore_trio import Periodic, Worker

pytestmark = pytest.mark.xdist_group("browser")

PROBES = ("<script>window.__xss=1</script>", '"><img src=x onerror="window.__xss=2">')


async def dead_job(store, queue, error, payload=b"p"):
    q = store.queue(queue)
    job_id = int(await q.enqueue(payload, max_attempts=1, priority=1000))
    handle = await q.claim_one("test-worker")
    assert handle is not None
    assert handle.id == job_id
    await handle.fail(error)
    return job_id


async def test_w1_every_page_loads_in_the_browser(browser, pg_store, tmp_path):
    emails = pg_store.queue("emails")
    job = int(await emails.enqueue(b'{"to": "ops@example.com"}', headers={"trace": "abc"}))
    await emails.enqueue_many([b"later"] * 3, delay_s=3600)
    dead_id = await dead_job(pg_store, "emails", "smtp: 550 mailbox unavailable")
    for _ in range(2):
        await dead_job(pg_store, "emails", "smtp: 550 mailbox unavailable")
    await dead_job(pg_store, "emails", "TimeoutError: smtp.example.com:25")
    await dead_job(pg_store, "reports", "KeyError: 'customer'")
    await pg_store.queue("reports").set_limits(max_running=2, rate_per_s=5)
    await pg_store.queue("reports").enqueue_many([b'{"report": "daily"}'] * 2)
    held = await pg_store.queue("reports").claim_batch("host-a:4711:9f2c", 2)
    await pg_store.fire_periodic([Periodic("nightly-digest", queue="reports", cron="0 6 * * *")])

    await browser.open("/")
    await browser.wait_for('tr[data-queue="emails"]')
    assert await browser.count("#queues tbody tr") == 2
    await browser.screenshot("overview", tmp_path)
    await browser.open("/jobs?queue=emails&state=pending")
    await browser.wait_for(f'tr[data-job="{job}"]')
    await browser.screenshot("jobs", tmp_path)
    await browser.open(f"/jobs/{job}")
    assert await browser.texts("#job-state") == ["pending"]
    assert await browser.texts("#payload") == ['{"to": "ops@example.com"}']
    await browser.screenshot("job", tmp_path)
    await browser.open("/dead")
    await browser.wait_for(f'tr[data-job="{dead_id}"]')
    assert await browser.count("section.dead-queue") == 2
    await browser.screenshot("dead", tmp_path)
    await browser.open("/workers")
    await browser.wait_for('tr[data-worker="host-a:4711:9f2c"]')
    assert f"reports#{held[0].id}" in " ".join(await browser.texts("#workers td"))
    await browser.screenshot("workers", tmp_path)
    await browser.open("/periodic")
    await browser.wait_for('tr[data-schedule="nightly-digest"]')
    await browser.screenshot("periodic", tmp_path)
    await browser.open(f"/confirm?action=requeue&queue=emails&ids={dead_id}")
    assert "exactly 1 dead job" in (await browser.texts("#question"))[0]
    # htmx loaded (the CSP let it run), and the overview's table refreshes through it.
    await browser.open("/")
    assert await browser.script("return typeof window.htmx") == "object"


async def test_w9_the_overview_refreshes_itself_with_the_rates(open_browser, pg_store):
    """htmx, allowed by the CSP, swaps in the refreshed table: the acked rate appears
    without a reload (the dashboard refreshes every 0.3 s here)."""
    browser = await open_browser(refresh_s=0.3)
    q = pg_store.queue("live")
    await q.enqueue_many([b"x"] * 4)
    await browser.open("/")
    await browser.wait_for('tr[data-queue="live"]')
    assert await browser.count(".acked-rate") == 0
    await browser.script("document.body.dataset.loaded = 'yes'")
    for handle in await q.claim_batch("w", 4):
        await handle.ack()
    await browser.wait_for_text('tr[data-queue="live"] td.num:nth-child(9)', "4")
    await browser.wait_for('tr[data-queue="live"] .acked-rate')
    await browser.wait_for('tr[data-queue="live"] svg.spark polyline')
    assert await browser.script("return document.body.dataset.loaded") == "yes"  # no reload


async def test_w3_requeue_a_dead_job_and_see_it_leave_the_dead_list(browser, pg_store):
    dead_id = await dead_job(pg_store, "emails", "smtp: 550")
    other = await dead_job(pg_store, "emails", "smtp: 550")
    await browser.open("/dead")
    await browser.click(f'tr[data-job="{dead_id}"] a.requeue')
    await browser.wait_for("#question")
    assert (
        f"exactly 1 dead job of queue emails (job {dead_id})"
        in (await browser.texts("#question"))[0]
    )
    await browser.click("#confirm")
    await browser.wait_for(f'tr[data-job="{other}"]')
    await browser.wait_for(f'tr[data-job="{dead_id}"]', present=False)
    assert await browser.path() == "/dead"
    assert await browser.texts("#requeued") == ["Requeued 1 job."]
    job = await pg_store.get_job(dead_id)
    assert (job.state, job.attempts) == ("pending", 0)


async def test_w3_requeue_a_whole_error_group_after_a_confirmation_with_its_count(
    browser, pg_store
):
    group = [await dead_job(pg_store, "emails", "smtp: 421 try later") for _ in range(3)]
    lone = await dead_job(pg_store, "emails", "KeyError: 'to'")
    await browser.open("/dead?queue=emails")
    await browser.click("details.dead-group:first-of-type a.requeue-group")
    await browser.wait_for("#question")
    assert "Requeue exactly 3 dead jobs of queue emails" in (await browser.texts("#question"))[0]
    await browser.click("#confirm")
    await browser.wait_for("#requeued")
    assert await browser.texts("#requeued") == ["Requeued 3 jobs."]
    assert await browser.count("tr[data-job]") == 1
    assert [(await pg_store.get_job(i)).state for i in group] == ["pending"] * 3
    assert (await pg_store.get_job(lone)).state == "dead"


async def test_w3_requeue_a_selection_of_dead_jobs(browser, pg_store):
    ids = [await dead_job(pg_store, "emails", f"error {i}") for i in range(4)]
    await browser.open("/dead?queue=emails")
    await browser.click(f'tr[data-job="{ids[0]}"] input[type=checkbox]')
    await browser.click(f'tr[data-job="{ids[2]}"] input[type=checkbox]')
    await browser.click("button.requeue-selected")
    await browser.wait_for("#question")
    assert "Requeue exactly 2 dead jobs of queue emails" in (await browser.texts("#question"))[0]
    await browser.click("#confirm")
    await browser.wait_for("#requeued")
    states = [(await pg_store.get_job(i)).state for i in ids]
    assert states == ["pending", "dead", "pending", "dead"]


async def test_w3_purge_a_dead_job_and_a_selection_for_good(browser, pg_store):
    ids = [await dead_job(pg_store, "emails", f"error {i}") for i in range(4)]
    await browser.open("/dead?queue=emails")
    await browser.click(f'tr[data-job="{ids[0]}"] a.purge')
    await browser.wait_for("#question")
    question = (await browser.texts("#question"))[0]
    assert f"Delete for good exactly 1 dead job of queue emails (job {ids[0]})" in question
    await browser.click("#confirm")
    await browser.wait_for("#purged")
    assert await browser.texts("#purged") == ["Purged 1 job."]
    await browser.wait_for(f'tr[data-job="{ids[0]}"]', present=False)
    await browser.click(f'tr[data-job="{ids[1]}"] input[type=checkbox]')
    await browser.click(f'tr[data-job="{ids[3]}"] input[type=checkbox]')
    await browser.click("button.purge-selected")
    await browser.wait_for("#question")
    assert "Delete for good exactly 2 dead jobs" in (await browser.texts("#question"))[0]
    await browser.click("#confirm")
    await browser.wait_for("#purged")
    assert [await pg_store.get_job(i) is None for i in ids] == [True, True, False, True]


async def test_w1_edit_a_queues_limits(browser, pg_store):
    await pg_store.queue("api").enqueue(b"x")
    await browser.open("/")
    await browser.click('tr[data-queue="api"] a.edit-limits')
    await browser.wait_for("#limits")
    await browser.type('input[name="max_running"]', "3")
    await browser.type('input[name="rate_per_s"]', "2.5")
    await browser.click("#save-limits")
    await browser.wait_for('tr[data-queue="api"] .limit')
    limits = await pg_store.queue("api").limits()
    assert (limits.max_running, limits.rate_per_s, limits.burst) == (3, 2.5, 3)
    assert "max_running=3" in " ".join(await browser.texts('tr[data-queue="api"] .limit'))


async def test_w3_pause_a_queue_and_see_the_worker_stop_taking_its_jobs(browser, pg_store):
    ran: list[bytes] = []
    done = {"a": trio.Event(), "b": trio.Event()}

    async def handler(job):
        ran.append(job.payload)
        if (event := done.get(job.payload.decode()[0])) is not None:
            event.set()

    worker = Worker(pg_store, {"paused-q": handler, "other-q": handler}, poll_interval_s=0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await pg_store.queue("paused-q").enqueue(b"warm-up")  # the queue has a row
        await browser.open("/")
        await browser.wait_for('tr[data-queue="paused-q"] button.pause')
        await browser.click('tr[data-queue="paused-q"] button.pause')
        await browser.wait_for('tr[data-queue="paused-q"] .badge.paused')
        assert (await pg_store.stats("paused-q")).queue("paused-q").paused
        await pg_store.queue("paused-q").enqueue(b"a: held by the pause")
        await pg_store.queue("other-q").enqueue(b"b: runs meanwhile")
        await done["b"].wait()  # the worker claims and runs the other queue's job ...
        assert b"a: held by the pause" not in ran  # ... but not the paused queue's
        assert (await pg_store.stats("paused-q")).queue("paused-q").pending_ready >= 1
        await browser.click('tr[data-queue="paused-q"] button.resume')
        await browser.wait_for('tr[data-queue="paused-q"] button.pause')
        await done["a"].wait()
        worker.stop(grace_s=0)
    assert b"a: held by the pause" in ran


async def test_w3_cancel_a_running_job(browser, pg_store):
    started = trio.Event()
    stopped = trio.Event()

    async def handler(job):
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            stopped.set()

    worker = Worker(pg_store, {"long": handler}, poll_interval_s=0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        job_id = int(await pg_store.queue("long").enqueue(b"a long report"))
        await started.wait()
        await browser.open("/workers")
        assert await browser.count(f'tr[data-worker="{worker.worker_id}"]') == 1
        await browser.open(f"/jobs/{job_id}")
        assert await browser.texts("#job-state") == ["processing"]
        await browser.click("#cancel")
        await browser.wait_for("#question")
        await browser.click("#confirm")
        await stopped.wait()  # the handler was cancelled (R15)
        worker.stop(grace_s=0)
    assert await pg_store.get_job(job_id) is None  # recorded cancelled: no row kept
    assert (await pg_store.stats("long")).queue("long").cancelled_total == 1


async def test_w5_xss_probes_do_not_run(browser, pg_store):
    q = pg_store.queue("xss")
    live = int(await q.enqueue(PROBES[0].encode(), headers={"x": PROBES[1], PROBES[1]: "v"}))
    dead = await dead_job(pg_store, "xss", PROBES[1] + " " + PROBES[0], payload=PROBES[1].encode())
    pages = [
        "/",
        "/jobs?queue=xss&state=pending",
        "/jobs?queue=xss&state=dead",
        f"/jobs/{live}",
        f"/jobs/{dead}",
        "/dead",
        f"/confirm?action=cancel&id={live}",
    ]
    for path in pages:
        await browser.open(path)
        assert await browser.script("return window.__xss === undefined") is True, path
        assert await browser.count("img") == 0, path
        assert await browser.count("script") == 1, path  # htmx only
    await browser.open(f"/jobs/{live}")
    assert await browser.texts("#payload") == [PROBES[0]]
    assert PROBES[1] in await browser.texts("#headers td")
    await browser.open(f"/jobs/{dead}")
    assert await browser.texts("#last-error") == [PROBES[1] + " " + PROBES[0]]


async def test_w3_a_forged_post_from_another_origin_is_refused(browser, pg_store, nursery):
    """A page on another origin (another port of the same host: same site, so the
    browser even sends the SameSite cookie) posts a form to the dashboard: the Origin
    check refuses it."""
    await pg_store.queue("emails").enqueue(b"x")
    await browser.open("/")  # the victim has the dashboard's cookie
    await browser.wait_for('tr[data-queue="emails"] button.pause')
    token = await browser.script("return document.querySelector('input[name=csrf]').value")
    evil = await nursery.start(_serve_forger, browser.base + "/actions/pause", token)
    assert evil.rpartition(":")[2] != browser.base.rpartition(":")[2]
    await browser.open_url(evil)
    await browser.wait_for_text("body", "another origin")
    assert await browser.path() == "/actions/pause"
    assert not (await pg_store.stats("emails")).queue("emails").paused


async def _serve_forger(target, token, *, task_status):
    """Serve, on a free port, a page that posts a forged pause to ``target`` at once
    (with the victim's real CSRF token, as if it had leaked: only the Origin check is
    left to stop it); started with the page's URL."""
    from hypercorn.config import Config
    from hypercorn.trio import serve
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    page = (
        f"<!doctype html><form id=f method=post action='{target}'>"
        f"<input name=csrf value='{token}'><input name=queue value=emails></form>"
        "<script>document.getElementById('f').submit()</script>"
    )

    async def forged(request):
        return HTMLResponse(page)

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    app = Starlette(routes=[Route("/", forged)])
    await serve(app, config, task_status=_FirstUrl(task_status))


class _FirstUrl:
    """Hypercorn's ``task_status``, passing on only the loopback URL it serves."""

    def __init__(self, status):
        self._status = status

    def started(self, urls):
        self._status.started(next(u for u in urls if u.startswith("http://127.0.0.1:")))


async def test_w1_q21_an_idle_registered_worker_shows_with_its_heartbeat_age(
    browser, pg_store, schema, tmp_path
):
    # A worker that holds no job, which the held-jobs view could not show, and one that
    # went silent (its last beat back-dated 5 minutes), beside a holder that never
    # registered (a worker of an older release).
    from alkstore_trio import WorkerRegistration

    idle = WorkerRegistration("web-1:8121:idle", "web-1", 8121, ("emails",), 10, "1.0")
    lost = WorkerRegistration("web-2:77:lost", "web-2", 77, ("emails", "reports"), 4, "1.0")
    await pg_store.beat_worker(idle, "start")
    await pg_store.beat_worker(lost, "start")
    async with pg_store.transaction() as tx:
        await tx.execute(
            f'UPDATE "{schema}".workers SET heartbeat_at = heartbeat_at - '
            "interval '5 minutes' WHERE worker_id = 'web-2:77:lost'"
        )
    await pg_store.queue("reports").enqueue(b"r")
    held = await pg_store.queue("reports").claim_one("old-release:1:abc")
    await browser.open("/workers")
    await browser.wait_for('tr[data-worker="web-1:8121:idle"]')
    row = 'tr[data-worker="web-1:8121:idle"]'
    assert (await browser.texts(f"{row} td"))[:6] == [
        "web-1:8121:idle", "running", "web-1 / 8121", "emails", "10",
        (await browser.texts(f"{row} td.heartbeat-age"))[0],
    ]  # fmt: skip
    assert (await browser.texts(f"{row} td.heartbeat-age"))[0].endswith("s ago")
    gone = 'tr[data-worker="web-2:77:lost"]'
    assert await browser.texts(f"{gone} td.heartbeat-age") == ["5.0m ago"]
    assert (await browser.texts(f"{gone} td"))[1] == "gone"
    old = 'tr[data-worker="old-release:1:abc"]'
    assert (await browser.texts(f"{old} td"))[1] == "unregistered"
    assert f"reports#{held.id}" in " ".join(await browser.texts(f"{old} td"))
    await browser.screenshot("workers-registry", tmp_path)
