"""The PostgreSQL engine's wake listener: one LISTEN connection per store, owned by a
listener task, on the wake channel of every queue some wake listener is subscribed to
and (Q19.4) the done channel of every queue some waiter is. It forwards notifications
into the store's :class:`WakeHub`, reconnects with capped backoff, and wakes everyone
after reconnecting, since notifications sent while it was away are lost.

:class:`Listening` is a part of :class:`~._backend.PostgresEngine` (its base class), kept
in a module of its own.
"""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Final

import psycopg
import trio

from ..._errors import StoreClosed
from . import _notes, _sql

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from .._wake import DoneListener, WakeHub, WakeListener
    from . import _driver

logger = logging.getLogger("alkstore_trio.postgres")

_LISTEN_BACKOFF_START_S: Final = 0.05
_LISTEN_BACKOFF_MAX_S: Final = 5.0


class Listening:
    """The wake and done listeners of :class:`~._backend.PostgresEngine`, and the
    listener actor behind them (the engine sets the attributes below)."""

    wakes: WakeHub
    _schema: str
    _closed: bool
    #: False: no LISTEN connection (poll-only mode).
    _listen: bool
    _nursery: trio.Nursery | None
    _channels: dict[str, str]  # channel -> queue
    _done_channels: dict[str, str]  # Q19.4: done channel -> queue
    _listening: set[str]
    _listen_changed: bool
    _listen_wait: trio.CancelScope | None
    _listen_progress: trio.Event
    _listener_started: bool

    async def _listen_connect(self) -> _driver.Connection:
        raise NotImplementedError

    def _channel(self, queue: str) -> str:
        channel = _sql.wake_channel(self._schema, queue)
        self._channels.setdefault(channel, queue)
        return channel

    def _done_channel(self, queue: str) -> str:
        channel = _sql.done_channel(self._schema, queue)
        self._done_channels.setdefault(channel, queue)
        return channel

    def open_wake_listener(
        self, queues: frozenset[str]
    ) -> AbstractAsyncContextManager[WakeListener]:
        if self._closed:
            raise StoreClosed("the store is closed")
        return self._open_wake_listener(queues)

    @asynccontextmanager
    async def _open_wake_listener(self, queues: frozenset[str]) -> AsyncIterator[WakeListener]:
        channels = {self._channel(queue) for queue in queues}
        async with self.wakes.open_listener(queues) as listener:
            if self._listen:
                await self._wait_listening(channels)
            yield listener

    def open_done_listener(
        self, queue: str, job_ids: frozenset[int]
    ) -> AbstractAsyncContextManager[DoneListener]:
        if self._closed:
            raise StoreClosed("the store is closed")
        return self._open_done_listener(queue, job_ids)

    @asynccontextmanager
    async def _open_done_listener(
        self, queue: str, job_ids: frozenset[int]
    ) -> AsyncIterator[DoneListener]:
        """Q19.4: the LISTEN session also listens on the queue's done channel from now
        on (before the waiter's first read); poll-only mode listens on nothing."""
        channel = self._done_channel(queue)
        async with self.wakes.open_done_listener(queue, job_ids) as listener:
            if self._listen:
                await self._wait_listening({channel})
            yield listener

    # -- the listener ------------------------------------------------------------------

    async def _wait_listening(self, channels: set[str]) -> None:
        """Return once the LISTEN connection listens on every channel in ``channels``."""
        if not self._listener_started:
            if self._nursery is None:
                raise StoreClosed("the store is not running")
            self._listener_started = True
            self._nursery.start_soon(self._serve_listener)
        self._poke_listener()
        while not channels <= self._listening:
            if self._closed:
                raise StoreClosed("the store is closed")
            progress = self._listen_progress
            await progress.wait()

    def _report_progress(self) -> None:
        self._listen_progress.set()
        self._listen_progress = trio.Event()

    async def _serve_listener(self) -> None:
        """The listener actor: keep a LISTEN connection on every subscribed channel and
        forward notifications as wakes, reconnecting with capped exponential backoff."""
        backoff = _LISTEN_BACKOFF_START_S
        connected_before = False
        while not self._closed:
            try:
                conn = await self._listen_connect()
            except (psycopg.Error, OSError) as exc:
                logger.warning("wake listener cannot connect (%s); retrying", type(exc).__name__)
                await trio.sleep(backoff)
                backoff = min(backoff * 2, _LISTEN_BACKOFF_MAX_S)
                continue
            try:
                backoff = _LISTEN_BACKOFF_START_S
                reconnected, connected_before = connected_before, True
                await self._listen_on(conn, reconnected=reconnected)
            except (psycopg.Error, OSError) as exc:
                logger.warning(
                    "wake listener connection lost (%s); reconnecting", type(exc).__name__
                )
            finally:
                self._listening.clear()
                with trio.CancelScope(shield=True):
                    await conn.aclose()
        self._report_progress()

    async def _listen_on(self, conn: _driver.Connection, *, reconnected: bool) -> None:
        wake_everyone = reconnected
        while not self._closed:
            self._listen_changed = False
            wanted = {self._channel(queue) for queue in self.wakes.subscribed_queues()}
            wanted |= {self._done_channel(q) for q in self.wakes.subscribed_done_queues()}
            new = wanted - self._listening
            if new:
                await conn.listen(sorted(new))
                self._listening |= new
            self._report_progress()
            if wake_everyone:
                # Notifications sent while the connection was down are lost: wake
                # everyone so their claim loops look for work once.
                self.wakes.publish_all()
                wake_everyone = False
            notes: list[_driver.Notify] = []
            with trio.CancelScope() as self._listen_wait:
                if self._listen_changed:
                    self._listen_wait.cancel()
                notes = await conn.wait_notifies(timeout_s=None)
            self._listen_wait = None
            self._publish_notes(notes)

    def _publish_notes(self, notes: list[_driver.Notify]) -> None:
        """Hand the notifications to the wake hub (:func:`._notes.publish`)."""
        _notes.publish(self.wakes, self._channels, notes, self._done_channels)

    def _poke_listener(self) -> None:
        """Make the listener task look at its channels again (or notice the close)."""
        self._listen_changed = True
        if self._listen_wait is not None:
            self._listen_wait.cancel()
