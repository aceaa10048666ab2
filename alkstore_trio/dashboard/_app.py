"""The dashboard's pages and actions: a Starlette app around one open :class:`Store`.

Every read is one of the store's own (``stats``, ``get_job``, ``Queue.list_jobs``); every
action is one of its calls (``pause``, ``resume``, ``cancel``, ``requeue_dead``). Pages
are rendered on the server by Jinja with autoescape on (W5); the only script is the
vendored htmx, which refreshes the overview's table.
"""

from __future__ import annotations

import contextlib
import logging
import urllib.parse
from typing import TYPE_CHECKING, Any, Final, TypeGuard

import jinja2
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .._core import QueueLimits
from .._errors import AlkstoreError, EngineError, InvalidArgument
from . import _live, _views
from ._jobs_filter import JobsFilter, JobsPage, read_page
from ._security import CSRF_FIELD, MAX_FORM_BYTES, Auth, Guard, csrf_cookie, form_csrf_ok

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Mapping

    from starlette.requests import Request

    from .._core import JobState, StoreStats
    from .._store import Store

    #: A page's read: its template and the values it renders.
    _Page = Callable[[], Awaitable[tuple[str, dict[str, object]]]]

_log = logging.getLogger("alkstore_trio.dashboard")

#: The states the jobs page filters by (``Queue.list_jobs``'s).
STATES: Final = ("pending", "processing", "cancelling", "dead", "completed", "cancelled")
#: Dead jobs of one queue the dead-letter page groups (the oldest first).
DEAD_SCAN: Final = 1000
#: Dead jobs a group lists (its requeue takes all of the group's).
DEAD_ROWS_SHOWN: Final = 20
#: Processing jobs of one queue the workers page reads.
WORKERS_SCAN: Final = 1000
#: Seconds between two refreshes of the overview's table.
REFRESH_S: Final = 5

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("alkstore_trio.dashboard", "templates"),
    autoescape=True,  # W5: every template, whatever its name
    undefined=jinja2.StrictUndefined,
)
_TEMPLATES.filters["iso"] = _views.iso
_TEMPLATES.filters["age"] = _views.age
_TEMPLATES.filters["list_preview"] = _views.list_preview


class _Problem(Exception):
    """A request the page cannot serve: its status and a message (shown escaped)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def create_app(
    store: Store,
    *,
    read_only: bool = False,
    auth: Auth | None = None,
    allowed_origins: Iterable[str] = (),
    redact: Callable[[str], str] | None = None,
    refresh_s: float = REFRESH_S,
    allowed_hosts: Iterable[str] | None = None,
) -> Guard:
    """The dashboard as an ASGI app serving ``store``, to run or to mount (W1).

    The app never opens or closes the store: open it for as long as the app serves. Mount
    it under a prefix with Starlette's ``Mount("/jobs-admin", app)`` or any ASGI router
    that sets ``root_path``; links and the CSRF cookie follow the prefix.

    Args:
        store: An open store (PostgreSQL in production; any engine works).
        read_only: W4: show no actions and refuse every POST.
        auth: W2: credentials every request must carry (:class:`Auth`), or ``None``
            when the host application authenticates in front of it, or on loopback.
        allowed_origins: W3: origins (``https://ops.example.com``) accepted on a POST
            besides the server's own, such as a TLS proxy's public origin.
        redact: Applied to an error's text before it is logged (the command line masks
            the DSN's password with it); the pages never show an error's text from the
            store.
        allowed_hosts: W2: the only ``Host`` names answered (``localhost``, ``[::1]``),
            anything else gets ``421``; ``None`` answers any (your service checks).
            :func:`serve_dashboard` sets it when it serves without auth.
        refresh_s: W9: seconds between two refreshes of the overview's table (> 0);
            open pages share one ``stats`` reading per interval.

    Returns:
        The ASGI app.

    Raises:
        InvalidArgument: ``refresh_s`` is not a number of seconds > 0.
    """
    if isinstance(refresh_s, bool) or not isinstance(refresh_s, int | float):
        raise InvalidArgument(f"refresh_s must be a number of seconds > 0; got {refresh_s!r}")
    if not 0 < refresh_s < 86400:
        raise InvalidArgument(f"refresh_s must be a number of seconds > 0; got {refresh_s!r}")
    pages = _Pages(store, redact or (lambda text: text), float(refresh_s))
    app = Starlette(
        routes=[
            Route("/", pages.overview, name="overview"),
            Route("/fragments/overview", pages.overview_table, name="overview_table"),
            Route("/jobs", pages.jobs, name="jobs"),
            Route("/jobs/{job_id:int}", pages.job, name="job"),
            Route("/dead", pages.dead, name="dead"),
            Route("/workers", pages.workers, name="workers"),
            Route("/periodic", pages.periodic, name="periodic"),
            Route("/limits", pages.limits, name="limits"),
            Route("/confirm", pages.confirm, name="confirm"),
            Route("/actions/{action:str}", pages.act, methods=["POST"], name="act"),
            Mount(
                "/static",
                StaticFiles(packages=[("alkstore_trio.dashboard", "static")]),
                name="static",
            ),
        ],
        # W9: while the server runs the app's lifespan, stale readings refresh in the
        # background (a mount without it reads inline, as before).
        lifespan=lambda _app: pages.background(),
    )
    return Guard(
        app,
        auth=auth,
        read_only=read_only,
        allowed_origins=allowed_origins,
        allowed_hosts=allowed_hosts,
    )


class _Pages:
    """The route handlers, over one store."""

    def __init__(self, store: Store, redact: Callable[[str], str], refresh_s: float) -> None:
        self._store = store
        self._redact = redact
        self._refresh_s = refresh_s
        # A page's refresh a little early still gets the shared reading.
        self._shared = _live.SharedStats(store, refresh_s * 0.9)

    def background(self) -> contextlib.AbstractAsyncContextManager[None]:
        """W9: the app's lifespan: refresh stale readings in the background."""
        return self._shared.background()

    def _overview_values(self, stats: StoreStats) -> dict[str, object]:
        samples = list(self._shared.samples)
        series = {q.queue: _live.rates(samples, q.queue) for q in stats.queues}
        return {
            "stats": stats,
            "rates": series,
            "sparkline": _live.sparkline,
            "chart": (_live.CHART_WIDTH, _live.CHART_HEIGHT),
        }

    async def _render(
        self, request: Request, template: str, status: int = 200, /, **context: object
    ) -> Response:
        html = _TEMPLATES.get_template(template).render(
            request=request,
            root=request.scope.get("root_path", ""),
            csrf_field=CSRF_FIELD,
            csrf_token=request.state.csrf_token,
            read_only=request.state.read_only,
            refresh_s=f"{self._refresh_s:g}",
            **context,
        )
        return HTMLResponse(html, status_code=status)

    async def _run(self, request: Request, page: _Page) -> Response:
        try:
            template, values = await page()
        except _Problem as problem:
            return await self._render(
                request, "problem.html", problem.status, message=problem.message
            )
        except InvalidArgument as exc:  # W8: a value from the URL the store refused
            return await self._render(request, "problem.html", 400, message=str(exc))
        except AlkstoreError as exc:
            return await self._store_failed(request, exc)
        return await self._render(request, template, 200, **values)

    async def _store_failed(self, request: Request, exc: AlkstoreError) -> Response:
        """W7: the store's error text may name the server: it is logged (redacted),
        never shown."""
        _log.warning(
            "dashboard: %s on %s: %s",
            type(exc).__name__,
            request.url.path,
            self._redact(" ".join(str(exc).split())),
        )
        return await self._render(
            request,
            "problem.html",
            503,
            message=f"the store failed ({type(exc).__name__}); see the dashboard's log",
        )

    # -- pages -------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        async def page() -> tuple[str, dict[str, object]]:
            stats = await self._shared.read()
            return "overview.html", self._overview_values(stats)

        return await self._run(request, page)

    async def overview_table(self, request: Request) -> Response:
        """W9: the table the open overviews refresh, from one shared reading."""

        async def page() -> tuple[str, dict[str, object]]:
            stats = await self._shared.read()
            return "overview_table.html", self._overview_values(stats)

        return await self._run(request, page)

    async def jobs(self, request: Request) -> Response:
        async def page() -> tuple[str, dict[str, object]]:
            params = request.query_params
            stats = await self._shared.read()
            queues = [entry.queue for entry in stats.queues]
            queue = params.get("queue") or (queues[0] if queues else None)
            state = params.get("state") or "pending"
            if not _is_state(state):
                raise _Problem(400, f"state must be one of {', '.join(STATES)}")
            after = _int_param(params, "after")
            chosen = JobsFilter.of(params, queue or "", state)  # issue 17: D26.1's filters
            found = JobsPage([], None, None)
            if queue is not None:
                found = await read_page(self._store.queue(queue), chosen, after)
                if queue not in queues:  # only kept rows, or none yet: still choosable
                    queues.insert(0, queue)
            root = request.scope.get("root_path", "")
            return "jobs.html", {
                "queues": queues,
                "queue": queue,
                "state": state,
                "states": STATES,
                "jobs": found.jobs,
                "after": after,
                "chosen": chosen,
                "first_href": chosen.href(root),
                "next_href": None
                if found.next_after is None
                else chosen.href(root, found.next_after),
                "searched_to": found.searched_to,
                "continue_href": None
                if found.searched_to is None
                else chosen.href(root, found.searched_to),
            }

        return await self._run(request, page)

    async def job(self, request: Request) -> Response:
        async def page() -> tuple[str, dict[str, object]]:
            job_id: int = request.path_params["job_id"]
            job = await self._store.get_job(job_id)
            if job is None:
                raise _Problem(
                    404,
                    f"no job {job_id}: it was never enqueued, or it finished (acked, "
                    "cancelled or purged) in a queue that keeps no history",
                )
            result = None if job.result is None else _views.preview(job.result)
            return "job.html", {
                "job": job,
                "payload": _views.preview(job.payload),
                "result": result,
                "live": job.state in ("pending", "processing", "cancelling"),
            }

        return await self._run(request, page)

    async def dead(self, request: Request) -> Response:
        async def page() -> tuple[str, dict[str, object]]:
            stats = await self._shared.read()
            wanted = request.query_params.get("queue")
            queues = [e for e in stats.queues if e.dead and (wanted in (None, "", e.queue))]
            sections = []
            for entry in queues:
                jobs = await self._store.queue(entry.queue).list_jobs("dead", limit=DEAD_SCAN)
                sections.append((entry, _views.group_by_error(jobs)))
            requeued = _int_param(request.query_params, "requeued")
            purged = _int_param(request.query_params, "purged")
            return "dead.html", {
                "sections": sections,
                "scan": DEAD_SCAN,
                "rows_per_group": DEAD_ROWS_SHOWN,
                "queue": wanted,
                "requeued": requeued,
                "purged": purged,
            }

        return await self._run(request, page)

    async def confirm(self, request: Request) -> Response:
        """A page that states exactly what an action will do, with the POST form:
        cancel one job (``id``), or requeue or purge the dead jobs ``ids`` of ``queue``."""

        async def page() -> tuple[str, dict[str, object]]:
            params = request.query_params
            action = params.get("action", "")
            if action == "cancel":
                job_id = _int_param(params, "id")
                if job_id is None:
                    raise _Problem(400, "id is required")
                job = await self._store.get_job(job_id)
                if job is None:
                    raise _Problem(404, f"no job {job_id}")
                return "confirm.html", {"action": action, "job": job, "queue": job.queue}
            if action in ("requeue", "purge"):
                queue = _queue_name(self._store, params.get("queue", ""))
                # A selection's checkboxes send ids=1&ids=2; a link sends ids=1,2.
                ids = _ids_param({"ids": ",".join(params.getlist("ids"))})
                return "confirm.html", {
                    "action": action,
                    "queue": queue,
                    "ids": ids,
                    "ids_text": ",".join(map(str, ids)),
                }
            raise _Problem(400, "action must be requeue, purge or cancel")

        return await self._run(request, page)

    async def workers(self, request: Request) -> Response:
        """Every registered worker, idle or busy (Q21), and who holds which jobs: the
        processing and cancelling rows by ``claimed_by``."""

        async def page() -> tuple[str, dict[str, object]]:
            stats = await self._shared.read()
            registry_error = None
            try:
                registered = await self._store.list_workers()
            except EngineError as exc:  # e.g. a reader role granted before migration 15
                _log.warning(
                    "dashboard: %s reading the worker registry: %s",
                    type(exc).__name__,
                    self._redact(" ".join(str(exc).split())),
                )
                registered, registry_error = [], type(exc).__name__
            held = []
            for entry in stats.queues:
                if not (entry.processing or entry.cancelling):
                    continue
                queue = self._store.queue(entry.queue)
                for state in ("processing", "cancelling"):
                    if getattr(entry, state):
                        held += await queue.list_jobs(state, limit=WORKERS_SCAN)
            return "workers.html", {
                "workers": _views.by_worker(held, stats.now, registered),
                "registry_error": registry_error,
                "scan": WORKERS_SCAN,
                "now": stats.now,
            }

        return await self._run(request, page)

    async def periodic(self, request: Request) -> Response:
        async def page() -> tuple[str, dict[str, object]]:
            schedules = await self._store.list_periodic()
            return "periodic.html", {"schedules": schedules}

        return await self._run(request, page)

    async def limits(self, request: Request) -> Response:
        async def page() -> tuple[str, dict[str, object]]:
            name = _queue_name(self._store, request.query_params.get("queue", ""))
            entry = (await self._shared.read()).queue(name)
            limits = entry.limits if entry is not None and entry.limits else QueueLimits()
            return "limits.html", {"queue": name, "limits": limits}

        return await self._run(request, page)

    # -- actions -----------------------------------------------------------------------

    async def act(self, request: Request) -> Response:
        """Run one action (the guard checked the method, read-only and Origin) and
        redirect to the page to see its effect (post/redirect/get)."""
        body = await _read_body(request)
        if body is None:
            return await self._render(request, "problem.html", 413, message="form too large")
        try:
            fields = urllib.parse.parse_qsl(body.decode("utf-8", "replace"), max_num_fields=20)
        except ValueError:
            return await self._render(request, "problem.html", 400, message="too many fields")
        form = dict(fields)
        if not form_csrf_ok(form, csrf_cookie(request.scope)):
            return await self._render(
                request, "problem.html", 403, message="refused: missing or wrong CSRF token"
            )
        action = request.path_params["action"]
        try:
            try:
                target = await self._act(action, form)
            finally:
                self._shared.invalidate()  # the next page shows the action's effect
        except _Problem as problem:
            return await self._render(
                request, "problem.html", problem.status, message=problem.message
            )
        except InvalidArgument as exc:
            return await self._render(request, "problem.html", 400, message=str(exc))
        except AlkstoreError as exc:
            return await self._store_failed(request, exc)
        root = request.scope.get("root_path", "")
        return RedirectResponse(root + target, status_code=303)

    async def _act(self, action: str, form: Mapping[str, str]) -> str:
        """Carry out the action; the path to redirect to."""
        if action not in ("pause", "resume", "cancel", "requeue", "purge", "limits"):
            raise _Problem(404, "no such action")
        queue = self._store.queue(_queue_name(self._store, form.get("queue", "")))
        if action in ("pause", "resume"):
            await (queue.pause() if action == "pause" else queue.resume())
            _log.info("dashboard: %s queue %r", action, queue.name)
            return "/"
        if action == "limits":
            limits = await queue.set_limits(**_limit_args(form))
            _log.info("dashboard: limits of queue %r set to %r", queue.name, limits)
            return "/"
        if action == "cancel":
            job_id = _int_param(form, "id")
            if job_id is None:
                raise _Problem(400, "id is required")
            done = await queue.cancel(job_id)
            _log.info("dashboard: cancel job %d of queue %r: %s", job_id, queue.name, done)
            if not done:
                raise _Problem(409, f"job {job_id} has no live row to cancel in {queue.name!r}")
            return f"/jobs/{job_id}"
        ids = _ids_param(form)
        if action == "purge":
            purged = await queue.purge_dead(ids=ids)
            _log.info(
                "dashboard: purged %d of %d dead jobs of queue %r", purged, len(ids), queue.name
            )
            if not purged:
                raise _Problem(409, f"none of the {len(ids)} jobs is a dead job of {queue.name!r}")
            return f"/dead?purged={purged}"
        moved = await queue.requeue_dead(ids)
        _log.info("dashboard: requeued %d of %d dead jobs of queue %r", moved, len(ids), queue.name)
        if not moved:
            raise _Problem(409, f"none of the {len(ids)} jobs is a dead job of {queue.name!r}")
        return f"/dead?requeued={moved}"


def _is_state(state: str) -> TypeGuard[JobState]:
    return state in STATES


def _queue_name(store: Store, name: str) -> str:
    """``name`` if it is a valid queue name (W8: else a 400)."""
    try:
        return store.queue(name).name
    except InvalidArgument as exc:
        raise _Problem(400, str(exc)) from None


def _ids_param(params: Mapping[str, str]) -> list[int]:
    """W8: ``ids``, 1 to :data:`DEAD_SCAN` job ids separated by commas."""
    raw = params.get("ids", "")
    parts = [part.strip() for part in raw.split(",") if part.strip()]
    if not 1 <= len(parts) <= DEAD_SCAN or not all(p.isdigit() and len(p) <= 19 for p in parts):
        raise _Problem(400, f"ids must be 1 to {DEAD_SCAN} job ids separated by commas")
    return sorted({int(part) for part in parts})


def _limit_args(form: Mapping[str, str]) -> dict[str, Any]:
    """W3's limits form as ``Queue.set_limits`` arguments: an empty field clears its
    limit; an empty burst with a rate takes the rate's default burst."""
    args: dict[str, Any] = {}  # Queue.set_limits checks each (InvalidArgument: W8)
    for name in ("max_running", "rate_per_s", "burst", "max_running_per_key"):
        raw = form.get(name, "").strip()
        if not raw:
            if name != "burst" or not form.get("rate_per_s", "").strip():
                args[name] = None
            continue
        try:
            args[name] = float(raw) if name == "rate_per_s" else int(raw)
        except ValueError:
            raise _Problem(400, f"{name} must be a number, or empty for no limit") from None
    return args


def _int_param(params: Mapping[str, str], name: str) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if not raw.lstrip("-").isdigit() or len(raw) > 20:
        raise _Problem(400, f"{name} must be an integer")
    return int(raw)


async def _read_body(request: Request) -> bytes | None:
    """The request's body, or ``None`` when it exceeds :data:`MAX_FORM_BYTES`."""
    chunks = []
    size = 0
    async with contextlib.aclosing(request.stream()) as stream:
        async for chunk in stream:
            size += len(chunk)
            if size > MAX_FORM_BYTES:
                return None
            chunks.append(chunk)
    return b"".join(chunks)
