"""Fixtures of the dashboard tests: a store per engine, an in-process ASGI client, the
dashboard served on a free port, and one headless chromium for the whole session.

The browser is Debian's ``chromium`` driven through ``chromedriver`` by Selenium (no
browser download). Without it the browser tests are skipped with one line saying how to
install it, except under ``ALKSTORE_REQUIRE_PG=1`` or ``ALKSTORE_REQUIRE_BROWSER=1`` (CI,
whose ``.ci/run`` installs it), where a missing browser fails them.
"""

from __future__ import annotations

import os
import shutil
import urllib.parse
from pathlib import Path

import pytest
import trio
from _postgres_fixtures import postgres_fixtures

from alkstore_trio import open_store
from alkstore_trio.dashboard import serve_dashboard

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: How long a browser step may wait for the page to show what it expects.
WAIT_S = 15.0


_postgres = postgres_fixtures()
make_schema = _postgres.make_schema
schema = _postgres.schema


@pytest.fixture
async def pg_store(pg_dsn, schema):
    """A PostgreSQL store on a fresh, migrated schema (dropped after the test)."""
    async with open_store(pg_dsn, schema=schema, migrate="apply", pool_size=4) as store:
        yield store


@pytest.fixture(params=["memory", "postgres"])
async def store(request):
    """The dashboard's rules hold on every engine: a memory store, and a PostgreSQL one
    (on a fresh, migrated schema, dropped after the test)."""
    if request.param == "memory":
        async with open_store("memory://") as memory:
            yield memory
        return
    dsn = request.getfixturevalue("pg_dsn")
    name = request.getfixturevalue("make_schema")()
    async with open_store(dsn, schema=name, migrate="apply", pool_size=4) as pg:
        yield pg


# -- the browser ------------------------------------------------------------------------


def _browser_missing() -> str | None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        return (
            f"no {' or '.join(missing)}: the browser tests need Debian's chromium and "
            "chromium-driver (apt-get install -y chromium chromium-driver)"
        )
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed; pip install -e '.[dev]'"
    return None


@pytest.fixture(scope="session")
def chromium():
    """One headless chromium for the session's browser tests (started on first use)."""
    if (why := _browser_missing()) is not None:
        if "1" in (
            os.environ.get("ALKSTORE_REQUIRE_PG"),
            os.environ.get("ALKSTORE_REQUIRE_BROWSER"),
        ):
            pytest.fail(f"a browser is required here, but {why}", pytrace=False)
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--disable-extensions",
        "--no-first-run",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree("/tmp/.org.chromium.Chromium.none", ignore_errors=True)


class Browser:
    """The session's chromium, driven from trio: each step runs in a thread, so the
    dashboard served by this same trio run answers meanwhile."""

    def __init__(self, driver, base_url: str) -> None:
        self.driver = driver
        self.base = base_url

    async def _run(self, fn, *args):
        return await trio.to_thread.run_sync(fn, *args)

    async def open(self, path: str) -> None:
        await self.open_url(self.base + path)

    async def open_url(self, url: str) -> None:
        await self._run(self.driver.get, url)

    async def click(self, css: str) -> None:
        """Click the element ``css``; found again if the overview's refresh swapped it
        out between finding and clicking."""

        def click():
            from selenium.common.exceptions import StaleElementReferenceException
            from selenium.webdriver.common.by import By

            for attempt in range(3):
                try:
                    self.driver.find_element(By.CSS_SELECTOR, css).click()
                    return
                except StaleElementReferenceException:
                    if attempt == 2:
                        raise

        await self._run(click)

    async def type(self, css: str, text: str) -> None:
        """Replace the text of the input ``css`` with ``text``."""

        def type_():
            from selenium.webdriver.common.by import By

            element = self.driver.find_element(By.CSS_SELECTOR, css)
            element.clear()
            element.send_keys(text)

        await self._run(type_)

    async def texts(self, css: str) -> list[str]:
        """The visible text of every element ``css``, read in one step of the page's own
        thread (a refresh cannot swap an element out halfway)."""
        return await self.script(
            "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText)", css
        )

    async def count(self, css: str) -> int:
        return len(await self.texts(css))

    async def script(self, source: str, *args):
        return await self._run(self.driver.execute_script, source, *args)

    async def path(self) -> str:
        url = await self._run(lambda: self.driver.current_url)
        return urllib.parse.urlsplit(url).path

    async def wait_for(self, css: str, present: bool = True) -> None:
        """Until an element matching ``css`` is there (or, ``present=False``, gone)."""

        def wait():
            from selenium.webdriver.common.by import By
            from selenium.webdriver.support.ui import WebDriverWait

            WebDriverWait(self.driver, WAIT_S, poll_frequency=0.05).until(
                lambda d: bool(d.find_elements(By.CSS_SELECTOR, css)) == present,
                message=f"{css} {'never appeared' if present else 'never went'}",
            )

        await self._run(wait)

    async def wait_for_text(self, css: str, text: str) -> None:
        """Until the first element matching ``css`` contains ``text``."""
        read = "const e = document.querySelector(arguments[0]); return e ? e.innerText : null"

        def wait():
            from selenium.webdriver.support.ui import WebDriverWait

            WebDriverWait(self.driver, WAIT_S, poll_frequency=0.05).until(
                lambda d: text in (d.execute_script(read, css) or ""),
                message=f"{text!r} never appeared in {css}",
            )

        await self._run(wait)

    async def screenshot(self, name: str, tmp_path: Path) -> Path:
        """A PNG of the page: into docs/images when ``ALKSTORE_SCREENSHOTS=docs`` (``just
        screenshots``), else into the test's temporary folder."""
        folder = (
            ROOT / "docs" / "images"
            if os.environ.get("ALKSTORE_SCREENSHOTS") == "docs"
            else tmp_path
        )
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"dashboard-{name}.png"
        assert await self._run(self.driver.save_screenshot, str(path))
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        return path


@pytest.fixture
async def open_browser(chromium, pg_store, nursery):
    """``await open_browser(**options)``: the dashboard of ``pg_store`` served with these
    ``serve_dashboard`` options on a free loopback port, and the browser on it (its
    cookies cleared: each test starts as a new visitor)."""

    async def start(**options):
        urls = await nursery.start(
            lambda task_status: serve_dashboard(
                pg_store, "127.0.0.1:0", task_status=task_status, **options
            )
        )
        base = next(u for u in urls if u.startswith("http://127.0.0.1:"))
        await trio.to_thread.run_sync(chromium.delete_all_cookies)
        return Browser(chromium, base)

    return start


@pytest.fixture
async def browser(open_browser):
    """The dashboard of ``pg_store`` with its defaults, and the browser on it."""
    return await open_browser()
