"""A loopback TCP proxy (trio) between a worker process and the database, for the fault
tests (not a test module).

It forwards both ways, and can be told to:

- ``refusing = True``: close new connections at once (a database that cannot be reached
  again for a while); existing ones go on;
- ``latency_s``: deliver every chunk that many seconds after it arrived (each direction,
  order kept);
- :meth:`blackhole`: stop delivering anything, on every connection, while still accepting
  and reading (a network partition: the sender sees no error, its bytes just never
  arrive); new connections are accepted but not forwarded either. :meth:`heal` delivers
  everything held, in order (the partition heals and TCP retransmits what was sent).
"""

from __future__ import annotations

import math

import trio


class Proxy:
    """Forwards ``127.0.0.1:<port>`` (the port :meth:`serve` reports) to ``host:port``."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.refusing = False
        self.refused = 0
        self.latency_s = 0.0
        self.connections = 0
        self._open = trio.Event()
        self._open.set()

    @property
    def blackholed(self) -> bool:
        return not self._open.is_set()

    def blackhole(self) -> None:
        """Stop delivering (see the module docstring)."""
        if self._open.is_set():
            self._open = trio.Event()

    def heal(self) -> None:
        """Deliver again, starting with everything held."""
        self._open.set()

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on a free loopback port (reported through ``task_status``), forever."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._forward, listeners)

    async def _forward(self, client: trio.SocketStream) -> None:
        async with client:
            if self.refusing:
                self.refused += 1
                return
            self.connections += 1
            await self._open.wait()  # a black hole accepts, but forwards nothing
            server = await trio.open_tcp_stream(self.host, self.port)
            async with server, trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, client, server, nursery.cancel_scope)
                nursery.start_soon(self._pump, server, client, nursery.cancel_scope)

    async def _pump(
        self, source: trio.SocketStream, sink: trio.SocketStream, both: trio.CancelScope
    ) -> None:
        """Read ``source`` as it comes; deliver each chunk to ``sink`` ``latency_s``
        after it arrived, once the proxy is not black-holed."""
        send, receive = trio.open_memory_channel[tuple[float, bytes]](math.inf)

        async def deliver() -> None:
            async for due, data in receive:
                await trio.sleep_until(due)
                await self._open.wait()
                await sink.send_all(data)

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(deliver)
                while data := await source.receive_some(1 << 16):
                    send.send_nowait((trio.current_time() + self.latency_s, data))
                send.close()  # deliver the rest, then end
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            # Raised by either task, so grouped by the nursery: a reset session.
            pass
        both.cancel()  # one side ended: end both
