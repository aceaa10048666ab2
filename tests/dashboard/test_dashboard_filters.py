"""Issue 17 / D26.1 on the jobs page: the queue, state, key and header filters, kept by
the next-page and continue links, escaped wherever they are shown; a bounded header
search that says how far it searched. The in-process ASGI client on both engines, and
the filtered listing and an XSS probe in a filter in a real browser."""

from __future__ import annotations

import html
import re
import urllib.parse

import pytest
from _dashboard_client import Client

from alkstore_trio import HEADER_SCAN_ROWS
from alkstore_trio.dashboard import create_app

PROBE = '"><img src=x onerror="window.__xss=3"><script>window.__xss=4</script>'


def ids_of(text: str) -> list[int]:
    return [int(found) for found in re.findall(r'data-job="(\d+)"', text)]


def link(text: str, element_id: str) -> str | None:
    match = re.search(rf'id="{element_id}" href="([^"]+)"', text)
    return None if match is None else html.unescape(match.group(1))


async def test_w1_the_jobs_page_filters_by_key_and_header_across_pages(store):
    q = store.queue("tenants")
    wanted = []
    for i in range(60):
        wanted.append(
            int(await q.enqueue(b"%d" % i, concurrency_key="acme_1", headers={"t": "50%"}))
        )
        await q.enqueue(b"other", concurrency_key="acme-1", headers={"t": "50"})
    unique = int(await q.enqueue(b"u", unique_key="acme_1"))
    client = Client(create_app(store))
    first = await client.get(
        "/jobs?" + urllib.parse.urlencode({"queue": "tenants", "state": "pending", "key": "acme_1"})
    )
    assert first.status == 200
    assert ids_of(first.text) == wanted[:50]
    assert 'name="key" value="acme_1"' in first.text  # the form keeps the filter
    following = link(first.text, "next-page")
    assert following is not None
    assert "key=acme_1" in following
    second = await client.get(following)
    assert ids_of(second.text) == [*wanted[50:], unique]
    assert link(second.text, "next-page") is None
    both = await client.get(
        "/jobs?"
        + urllib.parse.urlencode(
            {"queue": "tenants", "state": "pending", "key": "acme_1", "header": "t", "value": "50%"}
        )
    )
    assert ids_of(both.text) == wanted[:50]
    assert "header=t&value=50%25" in (link(both.text, "next-page") or "")
    none = await client.get(
        "/jobs?"
        + urllib.parse.urlencode(
            {"queue": "tenants", "state": "pending", "header": "t", "value": "5_%"}
        )
    )
    assert ids_of(none.text) == []
    assert "that match" in none.text
    bad = await client.get("/jobs?queue=tenants&state=pending&value=x")
    assert bad.status == 400
    too_long = await client.get("/jobs?queue=tenants&state=pending&key=" + "k" * 257)
    assert too_long.status == 400
    assert "key" in too_long.text


async def test_w1_a_header_search_says_how_far_it_searched_and_continues(store):
    q = store.queue("scan")
    ids: list[int] = []
    for _ in range(HEADER_SCAN_ROWS // 1000):
        ids += await q.enqueue_many([b"x"] * 1000, headers={"kind": "common"})
    rare = int(await q.enqueue(b"rare", headers={"kind": "rare"}))
    client = Client(create_app(store))
    page = await client.get("/jobs?queue=scan&state=pending&header=kind&value=rare")
    assert ids_of(page.text) == []
    last = ids[HEADER_SCAN_ROWS - 1]
    assert f"Searched up to #{last}" in page.text
    go_on = link(page.text, "continue-search")
    assert go_on is not None
    assert f"after={last}" in go_on
    assert "header=kind&value=rare" in go_on
    rest = await client.get(go_on)
    assert ids_of(rest.text) == [rare]
    assert "Searched up to" not in rest.text


async def test_w5_filter_values_are_escaped_where_they_are_shown(store):
    await store.queue("xss").enqueue(b"x", unique_key=PROBE, headers={PROBE: PROBE})
    client = Client(create_app(store))
    query = {"queue": "xss", "state": "pending", "key": PROBE, "header": PROBE, "value": PROBE}
    page = await client.get("/jobs?" + urllib.parse.urlencode(query))
    assert page.status == 200
    assert len(ids_of(page.text)) == 1  # the exact match, quotes and all
    assert PROBE not in page.text
    assert "<img" not in page.text
    assert page.text.count("<script") == 1  # htmx only


@pytest.mark.xdist_group("browser")
async def test_w1_a_filtered_listing_in_the_browser(browser, pg_store):
    q = pg_store.queue("browse")
    keyed = [int(await q.enqueue(b"k%d" % i, unique_key=f"order-{i}")) for i in range(3)]
    tagged = int(await q.enqueue(b"tagged", headers={"tenant": "acme"}, concurrency_key="order-1"))
    await browser.open("/jobs?queue=browse&state=pending")
    await browser.type("#job-filters input[name=key]", "order-1")
    await browser.click("#job-filters button")
    await browser.wait_for("#jobs")
    assert [int(t) for t in await browser.texts("#jobs tbody td.num a")] == [keyed[1], tagged]
    await browser.type("#job-filters input[name=key]", "")
    await browser.type("#job-filters input[name=header]", "tenant")
    await browser.type("#job-filters input[name=value]", "acme")
    await browser.click("#job-filters button")
    await browser.wait_for_text("#jobs", "tagged")
    assert [int(t) for t in await browser.texts("#jobs tbody td.num a")] == [tagged]
    assert (
        await browser.script("return document.querySelector('input[name=header]').value")
        == "tenant"
    )


@pytest.mark.xdist_group("browser")
async def test_w5_an_xss_probe_in_a_filter_does_not_run_in_the_browser(browser, pg_store):
    await pg_store.queue("xss").enqueue(b"x", unique_key=PROBE)
    query = {"queue": "xss", "state": "pending", "key": PROBE, "header": PROBE, "value": PROBE}
    await browser.open("/jobs?" + urllib.parse.urlencode(query))
    await browser.wait_for("#job-filters")
    assert await browser.script("return window.__xss === undefined") is True
    assert await browser.count("img") == 0
    assert await browser.count("script") == 1  # htmx only
    value = await browser.script("return document.querySelector('input[name=key]').value")
    assert value == PROBE  # shown back as the text typed, not as markup
    await browser.open("/jobs?" + urllib.parse.urlencode({**query, "header": "", "value": ""}))
    await browser.wait_for("#jobs")
    assert await browser.count("#jobs tbody tr") == 1
    assert await browser.script("return window.__xss === undefined") is True
