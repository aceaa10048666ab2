"""R7 under systemd: ``alkstore-trio worker`` speaks sd_notify when ``$NOTIFY_SOCKET`` is
set (``Type=notify`` units): ``READY=1`` once it claims, ``STATUS=`` lines, ``STOPPING=1``
at the first stop signal, and ``WATCHDOG=1`` pings when the unit sets ``WatchdogSec=``.

systemd's side is a real ``AF_UNIX`` datagram socket in a temporary directory; time is
trio's ``MockClock`` (the helpers come from ``test_cli_worker``).
"""

from __future__ import annotations

import io
import os
import signal
import socket
import sys

import pytest
import trio
import trio.testing
from test_cli_worker import frozen_nursery, serve_in

from alkstore_trio import open_store
from alkstore_trio._cli._serve import SystemdNotifier
from alkstore_trio.testing import TrioClock

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="AF_UNIX datagrams")


@pytest.fixture
def systemd(tmp_path):
    """systemd's notification socket: ``(address, receive)`` where ``receive()`` returns
    every notification sent so far, each as a dict."""
    path = str(tmp_path / "notify")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    server.setblocking(False)

    def receive() -> list[dict[str, str]]:
        got = []
        while True:
            try:
                data = server.recv(4096)
            except BlockingIOError:
                return got
            got.append(dict(line.split("=", 1) for line in data.decode().split("\n")))

    yield path, receive
    server.close()


async def handler(job):
    await trio.lowlevel.checkpoint()


async def serve_notifying(nursery, store, environ, signals, out, **options):
    return await serve_in(
        nursery, store, {"emails": handler}, signals=signals, out=out, environ=environ, **options
    )


async def test_r7_systemd_ready_status_then_stopping(mock_clock, systemd):
    address, receive = systemd
    send, signals = trio.open_memory_channel[int](10)
    out = io.StringIO()
    async with open_store("memory://", clock=TrioClock()) as store, frozen_nursery(mock_clock) as n:
        await store.queue("emails").enqueue_many([b"1", b"2"])
        result = await serve_notifying(
            n, store, {"NOTIFY_SOCKET": address}, signals, out, status_interval_s=10
        )
        (ready,) = receive()
        assert ready["READY"] == "1"
        assert ready["MAINPID"] == str(os.getpid())
        assert "serving emails on memory://" in ready["STATUS"]

        mock_clock.jump(10)
        await trio.testing.wait_all_tasks_blocked()
        (status,) = receive()
        assert status == {
            "STATUS": "claimed 2, acked 2, retried 0, dead 0, in flight 0; "
            "0.2 jobs/s over the last 10s"
        }

        send.send_nowait(signal.SIGTERM)
        await trio.testing.wait_all_tasks_blocked()
        assert result == [0]
        (stopping,) = receive()
        assert stopping == {"STOPPING": "1", "STATUS": "stopping: draining 0 running handler(s)"}
    assert "systemd" not in out.getvalue()  # every notification was delivered


async def test_r7_systemd_watchdog_pings_every_half_interval(mock_clock, systemd):
    address, receive = systemd
    send, signals = trio.open_memory_channel[int](10)
    environ = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "4000000"}  # WatchdogSec=4
    async with open_store("memory://", clock=TrioClock()) as store, frozen_nursery(mock_clock) as n:
        await serve_notifying(n, store, environ, signals, io.StringIO(), status_interval_s=0)
        assert [m for m in receive() if "WATCHDOG" in m] == [{"WATCHDOG": "1"}]
        for _ in range(3):
            mock_clock.jump(1.999)
            await trio.testing.wait_all_tasks_blocked()
            assert receive() == []
            mock_clock.jump(0.001)
            await trio.testing.wait_all_tasks_blocked()
            assert receive() == [{"WATCHDOG": "1"}]
        send.send_nowait(signal.SIGTERM)


async def test_r7_systemd_watchdog_meant_for_another_process_is_ignored(mock_clock, systemd):
    address, receive = systemd
    send, signals = trio.open_memory_channel[int](10)
    environ = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "1"}
    async with open_store("memory://", clock=TrioClock()) as store, frozen_nursery(mock_clock) as n:
        await serve_notifying(n, store, environ, signals, io.StringIO(), status_interval_s=0)
        mock_clock.jump(10)
        await trio.testing.wait_all_tasks_blocked()
        assert [m for m in receive() if "WATCHDOG" in m] == []
        send.send_nowait(signal.SIGTERM)


async def test_r7_systemd_an_undeliverable_notification_is_reported_once(mock_clock, tmp_path):
    send, signals = trio.open_memory_channel[int](10)
    out = io.StringIO()
    environ = {"NOTIFY_SOCKET": str(tmp_path / "nobody-listens"), "WATCHDOG_USEC": "2000000"}
    async with open_store("memory://", clock=TrioClock()) as store, frozen_nursery(mock_clock) as n:
        result = await serve_notifying(n, store, environ, signals, out, status_interval_s=0)
        mock_clock.jump(5)  # a few failed watchdog pings
        await trio.testing.wait_all_tasks_blocked()
        send.send_nowait(signal.SIGTERM)
        await trio.testing.wait_all_tasks_blocked()
        assert result == [0]  # the worker carries on without systemd
    assert out.getvalue().count("a systemd notification was not delivered") == 1


def test_r7_systemd_notifier_only_for_a_socket_address(tmp_path):
    assert SystemdNotifier.from_environ({}) is None
    assert SystemdNotifier.from_environ({"NOTIFY_SOCKET": ""}) is None
    assert SystemdNotifier.from_environ({"NOTIFY_SOCKET": "relative/path"}) is None
    notifier = SystemdNotifier.from_environ({"NOTIFY_SOCKET": str(tmp_path / "s")})
    assert notifier is not None
    assert notifier.watchdog_interval_s is None
    notifier.close()
    for usec in ("0", "-5", "soon"):
        notifier = SystemdNotifier.from_environ({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": usec})
        assert notifier is not None
        assert notifier.watchdog_interval_s is None
        notifier.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract AF_UNIX names")
def test_r7_systemd_abstract_socket_names_work():
    name = f"alkstore-test-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind("\0" + name)
    try:
        notifier = SystemdNotifier.from_environ({"NOTIFY_SOCKET": "@" + name})
        assert notifier is not None
        notifier.notify(READY=1, STATUS="two\nlines")
        notifier.close()
        assert server.recv(4096) == b"READY=1\nSTATUS=two lines"
    finally:
        server.close()
