"""The dashboard's web surface through an in-process ASGI client (W1–W8), on the memory
and the PostgreSQL engine: pages, actions, and every guard of W2–W5."""

from __future__ import annotations

import base64
import re

import pytest
from _dashboard_client import Client

from alkstore_trio import InvalidArgument
from alkstore_trio.dashboard import Auth, check_bind, create_app, parse_bind, serve_dashboard
from alkstore_trio.dashboard._security import BASIC_AUTH_ENV, TOKEN_ENV, served_hosts

PROBES = ("<script>window.__xss=1</script>", '"><img src=x onerror="window.__xss=2">')


def form_token(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "the page has no CSRF field"
    return match.group(1)


async def dead_job(store, queue="emails", error="boom: smtp 550", payload=b"p"):
    q = store.queue(queue)
    enq = await q.enqueue(payload, max_attempts=1, priority=1000)  # claimed first
    handle = await q.claim_one("test-worker")
    assert handle is not None
    assert handle.id == enq
    await handle.fail(error)
    return int(enq)


async def test_w1_every_page_renders_from_the_store(store):
    q = store.queue("emails")
    await q.enqueue(b'{"to": "a@example.com"}', headers={"trace": "t-1"})
    dead_id = await dead_job(store)
    client = Client(create_app(store))
    overview = await client.get("/")
    assert overview.status == 200
    assert 'data-queue="emails"' in overview.text
    assert "htmx-2.0.11.min.js" in overview.text
    table = await client.get("/fragments/overview")
    assert table.status == 200
    assert "<html" not in table.text
    assert 'data-queue="emails"' in table.text
    jobs = await client.get("/jobs?queue=emails&state=pending")
    assert jobs.status == 200
    assert "a@example.com" in jobs.text
    page = await client.get(f"/jobs/{dead_id}")
    assert page.status == 200
    assert "boom: smtp 550" in page.text
    dead = await client.get("/dead")
    assert dead.status == 200
    assert f'data-job="{dead_id}"' in dead.text
    confirm = await client.get(f"/confirm?action=requeue&queue=emails&ids={dead_id}")
    assert "Requeue exactly 1 dead job" in confirm.text
    for path in ("/workers", "/periodic", "/limits?queue=emails"):
        assert (await client.get(path)).status == 200, path
    static = await client.get("/static/htmx-2.0.11.min.js")
    assert static.status == 200
    assert static.body.startswith(b"var htmx=")


async def test_w1_jobs_pages_are_keyed_by_the_last_id(store):
    q = store.queue("bulk")
    ids = [int(e) for e in await q.enqueue_many([b"x"] * 120)]
    client = Client(create_app(store))
    first = await client.get("/jobs?queue=bulk&state=pending")
    shown = [int(i) for i in re.findall(r'data-job="(\d+)"', first.text)]
    assert shown == ids[:50]
    assert f"after={ids[49]}" in first.text
    last = await client.get(f"/jobs?queue=bulk&state=pending&after={ids[99]}")
    assert [int(i) for i in re.findall(r'data-job="(\d+)"', last.text)] == ids[100:]
    assert 'id="next-page"' not in last.text


async def test_w1_the_app_mounts_under_a_prefix(store):
    await store.queue("emails").enqueue(b"x")
    client = Client(create_app(store))
    page = await client.get("/", root_path="/ops")
    assert 'href="/ops/static/dashboard.css"' in page.text
    assert "Path=/ops/;" in page.header("set-cookie")
    reply = await client.post(
        "/actions/pause", {"csrf": form_token(page.text), "queue": "emails"}, root_path="/ops"
    )
    assert reply.status == 303
    assert reply.header("location") == "/ops/"


async def test_w3_pause_resume_cancel_and_requeue_act_through_the_store(store):
    q = store.queue("emails")
    pending = await q.enqueue(b"x")
    dead_id = await dead_job(store)
    client = Client(create_app(store))
    token = form_token((await client.get("/")).text)
    reply = await client.post("/actions/pause", {"csrf": token, "queue": "emails"})
    assert (reply.status, reply.header("location")) == (303, "/")
    assert (await store.stats("emails")).queue("emails").paused
    assert 'class="badge paused"' in (await client.get("/")).text
    await client.post("/actions/resume", {"csrf": token, "queue": "emails"})
    assert not (await store.stats("emails")).queue("emails").paused
    reply = await client.post(
        "/actions/requeue", {"csrf": token, "queue": "emails", "ids": dead_id}
    )
    assert (reply.status, reply.header("location")) == (303, "/dead?requeued=1")
    assert (await store.get_job(dead_id)).state == "pending"
    again = await client.post(
        "/actions/requeue", {"csrf": token, "queue": "emails", "ids": dead_id}
    )
    assert again.status == 409
    reply = await client.post("/actions/cancel", {"csrf": token, "queue": "emails", "id": pending})
    assert reply.status == 303
    assert await store.get_job(pending) is None
    gone = await client.post("/actions/cancel", {"csrf": token, "queue": "emails", "id": pending})
    assert gone.status == 409


async def test_w3_a_post_without_the_token_or_from_elsewhere_is_refused(store):
    await store.queue("emails").enqueue(b"x")
    client = Client(create_app(store))
    token = form_token((await client.get("/")).text)
    refused = {
        "no token": await client.post("/actions/pause", {"queue": "emails"}),
        "wrong token": await client.post("/actions/pause", {"csrf": "x" * 43, "queue": "emails"}),
        "foreign origin": await client.post(
            "/actions/pause", {"csrf": token, "queue": "emails"}, origin="http://evil.test"
        ),
        "foreign port": await client.post(
            "/actions/pause", {"csrf": token, "queue": "emails"}, origin="http://dash.test:81"
        ),
        "no origin": await client.post(
            "/actions/pause", {"csrf": token, "queue": "emails"}, origin=None
        ),
        "null origin": await client.post(
            "/actions/pause", {"csrf": token, "queue": "emails"}, origin="null"
        ),
    }
    stranger = Client(client.app)  # no cookie: a page elsewhere copied a token
    refused["no cookie"] = await stranger.post("/actions/pause", {"csrf": token, "queue": "emails"})
    assert {why: r.status for why, r in refused.items()} == dict.fromkeys(refused, 403)
    assert not (await store.stats("emails")).queue("emails").paused
    referer = await client.request(
        "POST",
        "/actions/pause",
        form={"csrf": token, "queue": "emails"},
        headers=[("referer", "http://dash.test/")],
    )
    assert referer.status == 303


async def test_w3_only_get_head_and_post(store):
    client = Client(create_app(store))
    for method in ("PUT", "DELETE", "PATCH", "OPTIONS"):
        assert (await client.request(method, "/")).status == 405
    assert (await client.request("HEAD", "/")).status == 200


async def test_w3_a_form_over_16_kib_is_refused(store):
    await store.queue("emails").enqueue(b"x")
    client = Client(create_app(store))
    token = form_token((await client.get("/")).text)
    reply = await client.post(
        "/actions/pause", {"csrf": token, "queue": "emails", "pad": "x" * 17000}
    )
    assert reply.status == 413
    assert not (await store.stats("emails")).queue("emails").paused


async def test_w4_read_only_shows_no_action_and_refuses_posts(store):
    await store.queue("emails").enqueue(b"x")
    dead_id = await dead_job(store)
    client = Client(create_app(store, read_only=True))
    overview = await client.get("/")
    assert 'id="read-only"' in overview.text
    assert '<form method="post"' not in overview.text
    assert "Requeue…" not in (await client.get(f"/jobs/{dead_id}")).text
    assert "Requeue…" not in (await client.get("/dead")).text
    token = client.cookies["alkstore_dashboard_csrf"]
    reply = await client.post("/actions/pause", {"csrf": token, "queue": "emails"})
    assert reply.status == 403
    assert "read-only" in reply.text
    assert not (await store.stats("emails")).queue("emails").paused


async def test_w2_auth_is_required_on_every_request_when_set(store):
    auth = Auth(token="t" * 20, user="ops", password="correct horse")
    app = create_app(store, auth=auth)
    client = Client(app)
    plain = await client.get("/")
    assert plain.status == 401
    assert plain.header("www-authenticate").startswith("Basic ")
    assert "t" * 20 not in plain.text

    def basic(user, password):
        return [
            ("authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
        ]

    assert (await client.get("/", headers=[("authorization", "Bearer " + "t" * 20)])).status == 200
    assert (await client.get("/", headers=basic("ops", "correct horse"))).status == 200
    assert (await client.get("/", headers=basic("anyone", "t" * 20))).status == 200
    for wrong in (
        [("authorization", "Bearer " + "t" * 19)],
        basic("ops", "wrong horse"),
        basic("root", "correct horse"),
        [("authorization", "Basic !!!")],
        [("authorization", "Digest x")],
    ):
        assert (await client.get("/", headers=wrong)).status == 401
    assert (await client.get("/static/dashboard.css")).status == 401
    assert "correct horse" not in repr(auth)


def test_w2_auth_comes_from_the_environment_and_bad_values_are_refused():
    assert Auth.from_env({}) is None
    assert Auth.from_env({TOKEN_ENV: "s" * 16}) == Auth(token="s" * 16)
    assert Auth.from_env({BASIC_AUTH_ENV: "ops:12345678"}) == Auth(user="ops", password="12345678")
    for env in (
        {TOKEN_ENV: "short"},
        {BASIC_AUTH_ENV: "ops"},
        {BASIC_AUTH_ENV: ":12345678"},
        {BASIC_AUTH_ENV: "ops:1234"},
    ):
        with pytest.raises(InvalidArgument) as info:
            Auth.from_env(env)
        assert next(iter(env.values())) not in str(info.value).split("must")[0]


def test_w2_a_bind_beyond_loopback_needs_auth():
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
        check_bind(host, None)
    for host in ("0.0.0.0", "::", "10.0.0.5", "dash.example.com", "[::]"):
        with pytest.raises(InvalidArgument, match="not loopback"):
            check_bind(host, None)
        check_bind(host, Auth(token="t" * 16))
    assert parse_bind("[::1]:8080") == ("[::1]", 8080)
    for bad in ("8080", "host:", ":80", "host:99999", "host:http"):
        with pytest.raises(InvalidArgument, match="HOST:PORT"):
            parse_bind(bad)


async def test_w2_serve_refuses_to_start_beyond_loopback_without_auth(store):
    with pytest.raises(InvalidArgument, match="not loopback"):
        await serve_dashboard(store, "0.0.0.0:0")


async def test_w5_store_text_is_escaped_everywhere(store):
    q = store.queue("emails")
    job = await q.enqueue(PROBES[0].encode(), headers={PROBES[1]: PROBES[0], "h": PROBES[1]})
    dead_id = await dead_job(store, error=PROBES[1] + PROBES[0], payload=PROBES[1].encode())
    client = Client(create_app(store))
    pages = [
        await client.get(path)
        for path in (
            "/",
            "/jobs?queue=emails&state=pending",
            "/jobs?queue=emails&state=dead",
            f"/jobs/{job}",
            f"/jobs/{dead_id}",
            "/dead",
            f"/confirm?action=cancel&id={job}",
        )
    ]
    for page in pages:
        assert page.status == 200
        assert "<script>window" not in page.text
        assert "<img" not in page.text
        assert page.text.count("<script") == 1  # htmx only
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in pages[3].text
    assert "&#34;&gt;&lt;img src=x onerror=&#34;window.__xss=2&#34;&gt;" in pages[4].text
    csp = pages[0].header("content-security-policy")
    assert "script-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp
    assert pages[0].header("x-frame-options") == "DENY"
    assert pages[0].header("x-content-type-options") == "nosniff"


async def test_w6_previews_are_bounded_text_or_hex(store):
    q = store.queue("emails")
    text = await q.enqueue("é".encode() * 3000)  # 6000 bytes of UTF-8
    binary = await q.enqueue(b"\xff\xfe\x00\x01" * 10)
    client = Client(create_app(store))
    page = (await client.get(f"/jobs/{text}")).text
    assert "6000 bytes, shown as text (the first 4096 bytes)" in page
    assert "é" * 2048 in page
    assert "é" * 2049 not in page
    page = (await client.get(f"/jobs/{binary}")).text
    assert "40 bytes, shown as hex." in page
    assert "ff fe 00 01 ff fe" in page


async def test_w7_a_store_error_shows_its_type_only(store, caplog):
    client = Client(create_app(store, redact=lambda text: text.replace("s3cret", "***")))
    await client.get("/")
    await store.aclose()
    reply = await client.get("/jobs/1")
    assert reply.status == 503
    assert "StoreClosed" in reply.text
    assert all("s3cret" not in r.getMessage() for r in caplog.records)


async def test_w8_bad_input_is_a_400_and_unknown_jobs_a_404(store):
    await store.queue("emails").enqueue(b"x")
    client = Client(create_app(store))
    token = form_token((await client.get("/")).text)
    assert (await client.get("/jobs?queue=emails&state=sleeping")).status == 400
    assert (await client.get("/jobs?queue=emails&after=abc")).status == 400
    assert (await client.get("/jobs?queue=" + "q" * 300)).status == 400
    assert (await client.get("/jobs/999999")).status == 404
    assert (await client.get("/jobs?queue=emails&after=99999999999999999999")).status == 400
    assert (await client.get("/confirm?action=cancel&id=-99999999999999999999")).status == 400
    assert (await client.get("/dead?queue=" + "q" * 300)).status == 200  # a filter, no read
    assert (await client.get("/confirm?action=drop&id=1")).status == 400
    for form in ({"queue": "emails", "id": "x"}, {"queue": "", "id": "1"}, {"queue": "emails"}):
        reply = await client.post("/actions/cancel", {"csrf": token, **form})
        assert reply.status == 400
    assert (await client.post("/actions/drop", {"csrf": token, "queue": "emails"})).status == 404
    many = {"csrf": token, "queue": "emails", **{f"f{i}": "x" for i in range(30)}}
    assert (await client.post("/actions/pause", many)).status == 400
    assert (await store.stats("emails")).queue("emails").live == 1


async def test_w3_requeue_a_selection_counts_only_the_dead_jobs_of_the_queue(store):
    dead = [await dead_job(store) for _ in range(3)]
    live = int(await store.queue("emails").enqueue(b"live"))
    client = Client(create_app(store))
    confirm = await client.get(
        f"/confirm?action=requeue&queue=emails&ids={dead[0]},{dead[1]},{live}"
    )
    assert "Requeue exactly 3 dead jobs of queue emails" in confirm.text
    token = form_token(confirm.text)
    ids = f"{dead[0]},{dead[1]},{live}"
    reply = await client.post("/actions/requeue", {"csrf": token, "queue": "emails", "ids": ids})
    assert reply.header("location") == "/dead?requeued=2"
    assert [(await store.get_job(i)).state for i in dead] == ["pending", "pending", "dead"]
    assert "Requeued 2 jobs." in (await client.get("/dead?requeued=2")).text
    for bad in ("", "1,x", ",".join(["1"] * 1001), "-1"):
        reply = await client.post(
            "/actions/requeue", {"csrf": token, "queue": "emails", "ids": bad}
        )
        assert reply.status == 400, bad


async def test_w3_limits_are_set_and_cleared_through_the_store(store):
    await store.queue("api").enqueue(b"x")
    client = Client(create_app(store))
    token = form_token((await client.get("/limits?queue=api")).text)
    form = {"csrf": token, "queue": "api", "max_running": "4", "rate_per_s": "10", "burst": ""}
    reply = await client.post("/actions/limits", {**form, "max_running_per_key": "2"})
    assert reply.status == 303
    limits = await store.queue("api").limits()
    assert (limits.max_running, limits.rate_per_s, limits.burst, limits.max_running_per_key) == (
        4,
        10.0,
        10,
        2,
    )
    page = (await client.get("/limits?queue=api")).text
    assert 'name="max_running" inputmode="numeric" value="4"' in page
    cleared = {"csrf": token, "queue": "api", "max_running": "", "rate_per_s": "", "burst": ""}
    assert (await client.post("/actions/limits", cleared)).status == 303
    limits = await store.queue("api").limits()
    assert (limits.max_running, limits.rate_per_s, limits.max_running_per_key) == (None, None, None)
    for bad in ({"max_running": "0"}, {"max_running": "many"}, {"rate_per_s": "-1"}):
        reply = await client.post("/actions/limits", {"csrf": token, "queue": "api", **bad})
        assert reply.status == 400, bad
    assert (await store.queue("api").limits()).max_running is None


async def test_w1_workers_and_periodic_pages_show_who_holds_what(store):
    from alkstore_trio import Periodic

    q = store.queue("emails")
    await q.enqueue_many([b"a", b"b"])
    first = await q.claim_one("worker-one")
    await q.claim_one("worker-two")
    await store.fire_periodic([Periodic("digest", queue="emails", every_s=3600)])
    client = Client(create_app(store))
    page = (await client.get("/workers")).text
    assert 'data-worker="worker-one"' in page
    assert f"emails#{first.id}" in page
    assert 'data-worker="worker-two"' in page
    schedules = (await client.get("/periodic")).text
    assert 'data-schedule="digest"' in schedules
    assert "every:3600" in schedules


async def test_w1_a_large_error_group_lists_20_jobs_and_requeues_all(store):
    ids = [await dead_job(store, error="same") for _ in range(25)]
    client = Client(create_app(store))
    page = (await client.get("/dead")).text
    assert len(re.findall(r'<tr data-job="', page)) == 20
    assert "and 5 more" in page
    assert f"ids={','.join(map(str, ids))}" in page


async def test_w2_without_auth_only_our_own_host_names_are_answered(store):
    """DNS rebinding: a page of evil.test whose name now points at 127.0.0.1 is
    same-origin with the dashboard; its requests carry ``Host: evil.test``."""
    hosts = served_hosts("127.0.0.1", None, ["https://ops.example.com"])
    assert hosts == {"localhost", "127.0.0.1", "[::1]", "ops.example.com"}
    assert served_hosts("::1", None, ()) == {"localhost", "127.0.0.1", "[::1]"}
    assert served_hosts("0.0.0.0", Auth(token="t" * 16), ()) is None
    app = create_app(store, allowed_hosts=hosts)
    for host in ("127.0.0.1:8080", "localhost:8080", "[::1]:8080", "ops.example.com"):
        assert (await Client(app, host=host).get("/")).status == 200, host
    for host in ("evil.test", "evil.test:8080", "127.0.0.1.evil.test", "[::2]:8080"):
        reply = await Client(app, host=host).get("/")
        assert reply.status == 421, host
    rebound = Client(app, host="evil.test:8080")
    refused = await rebound.post(
        "/actions/pause", {"csrf": "x" * 43, "queue": "emails"}, origin="http://evil.test:8080"
    )
    assert refused.status == 421
    assert (await Client(create_app(store), host="any.example").get("/")).status == 200


async def test_w3_the_csrf_cookie_is_secure_over_https(store):
    client = Client(create_app(store))
    plain = await client.get("/")
    assert "; Secure" not in plain.header("set-cookie")
    secure = await Client(create_app(store)).get("/", scheme="https")
    assert secure.header("set-cookie").endswith("SameSite=Strict; Secure")


async def test_w8_a_bad_refresh_interval_is_refused(store):
    for bad in (0, -1, float("nan"), float("inf"), True, "5", None):
        with pytest.raises(InvalidArgument, match="refresh_s"):
            create_app(store, refresh_s=bad)


async def test_w3_purge_deletes_only_the_named_dead_jobs_of_the_queue(store):
    dead = [await dead_job(store) for _ in range(3)]
    live = int(await store.queue("emails").enqueue(b"live"))
    client = Client(create_app(store))
    confirm = await client.get(f"/confirm?action=purge&queue=emails&ids={dead[0]},{live}")
    assert "Delete for good exactly 2 dead jobs of queue emails" in confirm.text
    token = form_token(confirm.text)
    form = {"csrf": token, "queue": "emails", "ids": f"{dead[0]},{dead[1]},{live}"}
    reply = await client.post("/actions/purge", form)
    assert reply.header("location") == "/dead?purged=2"
    assert [await store.get_job(i) is None for i in dead] == [True, True, False]
    assert (await store.get_job(live)).state == "pending"
    again = await client.post("/actions/purge", {**form, "ids": str(dead[0])})
    assert again.status == 409
    assert "Purged 2 jobs." in (await client.get("/dead?purged=2")).text
    read_only = Client(create_app(store, read_only=True))
    page = (await read_only.get(f"/jobs/{dead[2]}")).text
    assert "Purge…" not in page
    assert "Purge" not in (await read_only.get("/dead")).text


async def test_w1_a_jobs_page_shows_its_progress_escaped(store):
    # Q19.7 on the job page: the text the handler last reported, escaped (W5).
    q = store.queue("emails")
    job_id = await q.enqueue(b"x")
    handle = await q.claim_one("w")
    assert handle is not None
    client = Client(create_app(store))
    assert '<td id="progress">-</td>' in (await client.get(f"/jobs/{job_id}")).text
    assert await handle.heartbeat(progress="3 of 10 " + PROBES[0])
    page = (await client.get(f"/jobs/{job_id}")).text
    assert '<td id="progress">3 of 10 &lt;script&gt;window.__xss=1&lt;/script&gt;</td>' in page
