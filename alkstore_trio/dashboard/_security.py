"""The dashboard's guards (W2–W4), as one ASGI middleware in front of the pages.

Why a middleware of our own rather than a framework's: the checks are few, and each must
hold for every route, including routes added later, so they sit in front of all of them
and the pages never see a request that failed one. In order:

0. **Host** (W2), when a list is given (``serve_dashboard`` without auth): a request
   for another name than ours is refused (DNS rebinding).
1. **Authentication** (W2), when configured: an ``Authorization`` header with the bearer
   token, or HTTP basic auth with the configured user and password (or any user and the
   token as password, so a browser can log in with a token too). Compared in constant
   time. A bind beyond loopback without it refuses to start (:func:`check_bind`).
2. **State changes are POSTs** (W3): any other method than GET, HEAD and POST is refused.
3. **Read-only** (W4): a POST is refused before it reaches a page.
4. **Origin** (W3): a POST must say where it comes from (``Origin``, else ``Referer``), and
   that must be this server (the ``Host`` the browser sent) or an allowed origin.
5. **CSRF token** (W3): double submit. Every response without the cookie sets a random
   token in an ``HttpOnly``, ``SameSite=Strict`` cookie; the pages put the same token in
   every form; a POST whose form field differs from its cookie is refused. A foreign page
   can neither read the token nor, being cross-site, send the cookie.

Every response also gets headers that keep the pages from being framed, sniffed or made
to run scripts from anywhere but this server (W5: the Content-Security-Policy is a second
wall behind the escaping, not a replacement for it).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import secrets
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from .._errors import InvalidArgument

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The environment variable holding the bearer token (W2).
TOKEN_ENV: Final = "ALKSTORE_DASHBOARD_TOKEN"
#: The environment variable holding ``user:password`` for HTTP basic auth (W2).
BASIC_AUTH_ENV: Final = "ALKSTORE_DASHBOARD_BASIC_AUTH"
#: The cookie and the form field that carry the CSRF token (W3).
CSRF_COOKIE: Final = "alkstore_dashboard_csrf"
CSRF_FIELD: Final = "csrf"
#: The largest form a POST may send; the dashboard's forms are a few fields.
MAX_FORM_BYTES: Final = 16 * 1024

SECURITY_HEADERS: Final = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)


@dataclass(frozen=True, repr=False)
class Auth:
    """Who may use the dashboard (W2): a bearer token, a basic-auth user and password,
    or both. ``repr`` shows neither secret.

    Attributes:
        token: Accepted as ``Authorization: Bearer TOKEN``, or as the basic-auth password
            with any user name.
        user: The basic-auth user name (with ``password``).
        password: The basic-auth password (with ``user``).
    """

    token: str | None = None
    user: str | None = None
    password: str | None = None

    def __repr__(self) -> str:
        kinds = [k for k, on in (("token", self.token), ("basic", self.user)) if on]
        return f"Auth({'+'.join(kinds) or 'none'})"

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Auth | None:
        """The auth configured by :data:`TOKEN_ENV` and :data:`BASIC_AUTH_ENV`, or
        ``None`` when neither is set.

        Raises:
            InvalidArgument: a value is unusable (the message never shows it).
        """
        token = environ.get(TOKEN_ENV) or None
        basic = environ.get(BASIC_AUTH_ENV) or None
        if token is not None and len(token) < 16:
            raise InvalidArgument(f"{TOKEN_ENV} must be at least 16 characters long")
        user = password = None
        if basic is not None:
            user, colon, password = basic.partition(":")
            if not colon or not user or len(password) < 8:
                raise InvalidArgument(
                    f"{BASIC_AUTH_ENV} must be USER:PASSWORD with a user name and a password "
                    "of at least 8 characters"
                )
        if token is None and user is None:
            return None
        return cls(token=token, user=user, password=password)

    def allows(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header value carries these credentials."""
        if authorization is None:
            return False
        scheme, _, credentials = authorization.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer" and self.token is not None:
            return _same(credentials.strip(), self.token)
        if scheme != "basic":
            return False
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, _, password = decoded.partition(":")
        by_token = self.token is not None and _same(password, self.token)
        by_basic = (
            self.user is not None
            and self.password is not None
            and _same(user, self.user) & _same(password, self.password)
        )
        return by_token or by_basic


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name, as given to ``--bind``) is loopback only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_bind(bind: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) as a host and a port.

    Raises:
        InvalidArgument: not that shape, or the port is not 0-65535.
    """
    host, colon, port = bind.rpartition(":")
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidArgument(
            f"bind must be HOST:PORT, such as 127.0.0.1:8080 or [::1]:8080; got {bind[:60]!r}"
        )
    return host, int(port)


def check_bind(host: str, auth: Auth | None) -> None:
    """W2: refuse a bind beyond loopback without auth.

    Raises:
        InvalidArgument: ``host`` is not loopback and ``auth`` is ``None``.
    """
    if auth is None and not is_loopback(host):
        raise InvalidArgument(
            f"the dashboard binds to {host}, which is not loopback, and no auth is set: set "
            f"{TOKEN_ENV} (a token of at least 16 characters) or {BASIC_AUTH_ENV} "
            "(USER:PASSWORD), or bind to 127.0.0.1"
        )


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_cookie(scope: Scope) -> str | None:
    """The CSRF token of the request's cookie, if it has a well-formed one."""
    for name, value in scope["headers"]:
        if name != b"cookie":
            continue
        text: str = value.decode("latin-1")
        for part in text.split(";"):
            key, _, token = part.strip().partition("=")
            if key == CSRF_COOKIE and 20 <= len(token) <= 100:
                return token
    return None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            decoded: str = value.decode("latin-1")
            return decoded
    return None


def _hostname(host: str | None) -> str | None:
    """The name of a ``Host`` header, without its port (``[::1]`` for IPv6)."""
    if host is None:
        return None
    host = host.strip().lower()
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.rpartition(":")[0] if ":" in host else host


#: The names a browser uses for a loopback address: the only ones a dashboard bound to
#: loopback without auth answers to (W2).
LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "[::1]"})


def served_hosts(
    bind_host: str, auth: Auth | None, allowed_origins: Iterable[str]
) -> frozenset[str] | None:
    """W2: the ``Host`` names the server answers to: without auth, the loopback names,
    the bind address and the allowed origins' names; with auth, any (``None``)."""
    if auth is not None:
        return None
    bound = bind_host.lower()
    if ":" in bound and not bound.startswith("["):
        bound = f"[{bound}]"  # an IPv6 address, as a Host header writes it
    names = {*LOOPBACK_HOSTS, bound}
    for origin in allowed_origins:
        names.add(_hostname(urllib.parse.urlsplit(origin).netloc) or "")
    return frozenset(names - {""})


def _origin_netloc(scope: Scope) -> str | None:
    """The ``host[:port]`` a POST says it comes from: its Origin, else its Referer."""
    for name in (b"origin", b"referer"):
        value = _header(scope, name)
        if value and value != "null":
            parts = urllib.parse.urlsplit(value)
            return f"{parts.scheme}://{parts.netloc}".lower() if parts.netloc else None
    return None


class Guard:
    """The ASGI middleware of W2–W5 around the dashboard's pages (see the module)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        auth: Auth | None,
        read_only: bool,
        allowed_origins: Iterable[str] = (),
        allowed_hosts: Iterable[str] | None = None,
    ) -> None:
        self._app = app
        self._auth = auth
        self._read_only = read_only
        self._allowed = frozenset(o.rstrip("/").lower() for o in allowed_origins)
        self._hosts = None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self._app(scope, receive, send)
            return  # no websockets
        if self._hosts is not None and _hostname(_header(scope, b"host")) not in self._hosts:
            # W2: a page on another site whose name was re-pointed at this address (DNS
            # rebinding) would be same-origin with it: refuse any Host but ours.
            await _refuse(send, 421, "refused: this dashboard is not served under that name", [])
            return
        if self._auth is not None and not self._auth.allows(_header(scope, b"authorization")):
            await _refuse(
                send,
                401,
                "authentication required",
                [(b"www-authenticate", b'Basic realm="alkstore-trio dashboard"')],
            )
            return
        method = scope["method"]
        if method not in ("GET", "HEAD", "POST"):
            await _refuse(send, 405, "method not allowed", [(b"allow", b"GET, HEAD, POST")])
            return
        cookie = csrf_cookie(scope)
        if method == "POST":
            problem = self._post_problem(scope, cookie)
            if problem is not None:
                await _refuse(send, 403, problem, [])
                return
        token = cookie or new_csrf_token()
        scope.setdefault("state", {})["csrf_token"] = token
        scope["state"]["read_only"] = self._read_only

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.extend(SECURITY_HEADERS)
                if cookie is None:
                    headers.append((b"set-cookie", _cookie(scope, token)))
                message = {**message, "headers": headers}
            await send(message)

        await self._app(scope, receive, send_with_headers)

    def _post_problem(self, scope: Scope, cookie: str | None) -> str | None:
        """Why this POST is refused before its form is read, or ``None``."""
        if self._read_only:
            return "the dashboard is read-only"
        origin = _origin_netloc(scope)
        host = _header(scope, b"host")
        if origin is None:
            return "refused: the request says neither Origin nor Referer"
        if origin not in self._allowed and (
            host is None or urllib.parse.urlsplit(origin).netloc != host.lower()
        ):
            return "refused: the request comes from another origin"
        if cookie is None:
            return "refused: no CSRF cookie (reload the page and try again)"
        return None


def _cookie(scope: Scope, token: str) -> bytes:
    """W3's CSRF cookie: for the app's path (its mount prefix), unreadable by scripts,
    never sent cross-site, and over HTTPS only when served over HTTPS."""
    path = (scope.get("root_path") or "") + "/"
    secure = "; Secure" if scope.get("scheme") == "https" else ""
    value = f"{CSRF_COOKIE}={token}; Path={path}; HttpOnly; SameSite=Strict{secure}"
    return value.encode("latin-1")


def form_csrf_ok(form: Mapping[str, str], cookie: str | None) -> bool:
    """W3: the form's token equals the cookie's (constant-time)."""
    given = form.get(CSRF_FIELD)
    return cookie is not None and given is not None and _same(given, cookie)


async def _refuse(send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]]) -> None:
    body = text.encode("utf-8") + b"\n"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode("ascii")),
                *SECURITY_HEADERS,
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
