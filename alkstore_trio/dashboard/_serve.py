"""Serving the dashboard with Hypercorn's trio worker (W1, W2)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from ._app import create_app
from ._security import check_bind, parse_bind, served_hosts

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from .._store import Store
    from ._security import Auth

_log = logging.getLogger("alkstore_trio.dashboard")


async def serve_dashboard(
    store: Store,
    bind: str = "127.0.0.1:8080",
    *,
    read_only: bool = False,
    auth: Auth | None = None,
    allowed_origins: Iterable[str] = (),
    redact: Callable[[str], str] | None = None,
    refresh_s: float = 5.0,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the dashboard of ``store`` on ``bind`` until cancelled.

    Args:
        store: An open store, kept open while this runs.
        bind: ``HOST:PORT``; port 0 picks a free port. W2: a host that is not loopback
            needs ``auth``; without ``auth`` only requests for the loopback names, the
            bind address and the allowed origins' names are answered (DNS rebinding).
        read_only: As for :func:`create_app`.
        auth: As for :func:`create_app`.
        allowed_origins: As for :func:`create_app`.
        redact: As for :func:`create_app`.
        refresh_s: As for :func:`create_app`.
        task_status: Started with the URLs it serves (``nursery.start`` returns them).

    Raises:
        InvalidArgument: ``bind`` is malformed, or not loopback without ``auth``
            (checked before anything is served).
    """
    host, _ = parse_bind(bind)
    check_bind(host, auth)
    allowed_origins = list(allowed_origins)
    app = create_app(
        store,
        read_only=read_only,
        auth=auth,
        allowed_origins=allowed_origins,
        redact=redact,
        refresh_s=refresh_s,
        allowed_hosts=served_hosts(host, auth, allowed_origins),
    )
    config = Config()
    config.bind = [bind]
    config.accesslog = None  # paths only ever; the pages log their actions themselves
    config.errorlog = _log
    config.graceful_timeout = 1.0
    await serve(app, config, mode="asgi", task_status=task_status)  # type: ignore[arg-type]
