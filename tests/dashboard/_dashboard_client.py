"""An in-process ASGI client for the dashboard tests: requests go straight to the app in
the test's own trio run, as a browser at ``http://dash.test`` would send them (cookies
kept, so the CSRF double submit works as in a browser)."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

import trio


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)

    def cookie(self) -> str | None:
        """The CSRF token this reply set in its cookie, if it did."""
        for name, value in self.headers:
            if name == "set-cookie" and value.startswith("alkstore_dashboard_csrf="):
                return value.split(";")[0].partition("=")[2]
        return None


@dataclass
class Client:
    """Calls an ASGI app in this trio run, as a browser at ``http://dash.test`` would."""

    app: object
    host: str = "dash.test"
    cookies: dict[str, str] = field(default_factory=dict)

    async def request(
        self, method, path, *, form=None, headers=(), body=None, root_path="", scheme="http"
    ):
        if form is not None:
            body = urllib.parse.urlencode(form).encode()
            headers = [*headers, ("content-type", "application/x-www-form-urlencoded")]
        body = body or b""
        path, _, query = path.partition("?")
        sent = [("host", self.host), *headers]
        if self.cookies:
            sent.append(("cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items())))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": scheme,
            "path": root_path + path,
            "raw_path": (root_path + path).encode(),
            "root_path": root_path,
            "query_string": query.encode(),
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in sent],
            "client": ("127.0.0.1", 50000),
            "server": (self.host, 80),
        }
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        out: list[dict] = []

        async def receive():
            if not messages:  # the app waits for a disconnect that never comes
                await trio.sleep_forever()
            return messages.pop(0)

        async def send(message):
            out.append(message)

        await self.app(scope, receive, send)
        start = next(m for m in out if m["type"] == "http.response.start")
        reply = Reply(
            start["status"],
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start.get("headers", [])],
            b"".join(m.get("body", b"") for m in out if m["type"] == "http.response.body"),
        )
        if (token := reply.cookie()) is not None:
            self.cookies["alkstore_dashboard_csrf"] = token
        return reply

    async def get(self, path, **kwargs):
        return await self.request("GET", path, **kwargs)

    async def post(self, path, form, *, origin="http://dash.test", **kwargs):
        headers = [("origin", origin)] if origin is not None else []
        return await self.request("POST", path, form=form, headers=headers, **kwargs)
