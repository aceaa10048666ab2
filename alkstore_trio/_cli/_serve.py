"""Running ``alkstore-trio worker``: a :class:`~alkstore_trio.Worker` until a signal stops
it, with progress on stderr and sd_notify under systemd (rule R7).

:mod:`.worker` parses the command line, :mod:`._handlers` loads the handlers, and
:func:`serve_worker` runs them.

Why the signals escalate the way they do. A deployer's ``systemctl stop`` or a user's
Ctrl-C first asks for a graceful stop: no new claims, running handlers get
``shutdown_grace_s`` to finish, the rest are cancelled and their jobs released, so
nothing waits for a lease to lapse. A user who cannot wait sends a second signal: the
running handlers are cancelled now and their jobs still released (the worker's
``stop(grace_s=0)``). Releasing needs the database; if it hangs (the database went away,
or a handler blocks the thread without checkpoints), a third signal ends the process at
once with ``os._exit``: raising ``KeyboardInterrupt`` would not do, because the worker
shields its finalization from cancellation for up to ``shutdown_grace_s + 30`` seconds.
The jobs it held are then reclaimed by other workers when their leases lapse.

All output goes to stderr (stdout stays empty): one line when the worker is ready, one
per signal, a status line every ``status_interval_s``, and a summary at exit.

Under systemd (``$NOTIFY_SOCKET`` set, e.g. ``Type=notify``) the command also speaks the
sd_notify protocol, without libsystemd: ``READY=1`` once the worker claims, ``STATUS=``
with each status line, ``STOPPING=1`` at the first stop signal, and, when the unit sets
``WatchdogSec=``, ``WATCHDOG=1`` every half watchdog interval from a task of the event
loop, so a handler that blocks the loop (sync work without checkpoints) gets the worker
restarted instead of silently stalling its leases.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NoReturn, TextIO

import trio

from .._runtime import Worker, WorkerStatistics

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping
    from contextlib import AbstractAsyncContextManager

    from .._runtime import Handler
    from .._store import Queue, Store

#: The signals that stop the worker (first: gracefully; second: now; third: exit).
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)
#: Exit status after a stop that cancelled running handlers or skipped the release.
EXIT_FORCED: Final = 130
#: The prefix of every line the command prints.
PREFIX: Final = "alkstore-trio worker:"


# --- status lines --------------------------------------------------------------------


def settled(stats: WorkerStatistics) -> int:
    """Jobs whose handler ran and whose outcome was applied: acked, retried or
    dead-lettered (jobs released by a stop are not counted)."""
    return stats.acked + stats.retried + stats.dead_lettered


def format_status(stats: WorkerStatistics, previous: WorkerStatistics, interval_s: float) -> str:
    """The periodic status line: counters since start, and the rate over the interval."""
    rate = (settled(stats) - settled(previous)) / interval_s if interval_s > 0 else 0.0
    return (
        f"{PREFIX} claimed {stats.claimed}, acked {stats.acked}, retried {stats.retried}, "
        f"dead {stats.dead_lettered}, in flight {stats.in_flight}; "
        f"{rate:.1f} jobs/s over the last {interval_s:.3g}s"
    )


def format_summary(stats: WorkerStatistics, wall_time_s: float) -> str:
    """The summary printed when the worker stops."""
    rate = settled(stats) / wall_time_s if wall_time_s > 0 else 0.0
    rows = [
        ("claimed", str(stats.claimed)),
        ("acked", str(stats.acked)),
        ("retried", str(stats.retried)),
        ("dead-lettered", str(stats.dead_lettered)),
        ("released", str(stats.released)),
        ("lease lost", str(stats.lease_lost)),
        ("handler errors", str(stats.handler_errors)),
        ("timed out", str(stats.timed_out)),
        ("wall time", f"{wall_time_s:.2f} s"),
        ("mean jobs/s", f"{rate:.1f}"),
        ("mean claim-to-start", f"{stats.claim_to_start_mean_s * 1000:.2f} ms"),
        ("mean run time", f"{stats.run_time_mean_s * 1000:.2f} ms"),
    ]
    width = max(len(key) for key, _ in rows) + 2
    lines = [f"{PREFIX} stopped worker {stats.worker_id}"]
    lines += [f"  {key + ':':<{width}}{value}" for key, value in rows]
    return "\n".join(lines)


# --- systemd -------------------------------------------------------------------------


class SystemdNotifier:
    """sd_notify(3) in a few lines: datagrams of ``KEY=value`` lines to the socket named
    by ``$NOTIFY_SOCKET`` (a path, or ``@name`` for the abstract namespace).

    Sending never blocks and never raises: a notification systemd cannot take (the socket
    gone, its buffer full) is dropped, and the first such failure is reported once
    through ``on_error``. Made by :meth:`from_environ`, which returns ``None`` outside
    systemd."""

    def __init__(
        self,
        address: str,
        *,
        watchdog_interval_s: float | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self._address = "\0" + address[1:] if address.startswith("@") else address
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._socket.setblocking(False)
        #: Seconds between ``WATCHDOG=1`` pings (half of ``WatchdogSec``), or None.
        self.watchdog_interval_s = watchdog_interval_s
        self._on_error = on_error
        self.failures = 0

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str], *, on_error: Callable[[str], None] | None = None
    ) -> SystemdNotifier | None:
        """The notifier systemd asked for, or ``None`` (no ``NOTIFY_SOCKET``).

        ``WATCHDOG_USEC`` turns the watchdog on when ``WATCHDOG_PID`` is unset or names
        this process (as ``sd_watchdog_enabled`` does)."""
        address = environ.get("NOTIFY_SOCKET", "")
        if not address or not (address.startswith(("/", "@"))):
            return None
        interval_s: float | None = None
        usec, pid = environ.get("WATCHDOG_USEC", ""), environ.get("WATCHDOG_PID", "")
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            interval_s = int(usec) / 2e6
        return cls(address, watchdog_interval_s=interval_s, on_error=on_error)

    def notify(self, **fields: object) -> None:
        """Send one notification: ``notify(READY=1, STATUS="...")``. Newlines in values
        are replaced (each field is one line of the datagram)."""
        lines = [f"{key}={str(value).replace(chr(10), ' ')}" for key, value in fields.items()]
        try:
            self._socket.sendto("\n".join(lines).encode(), self._address)
        except OSError as exc:
            self.failures += 1
            if self.failures == 1 and self._on_error is not None:
                self._on_error(
                    f"a systemd notification was not delivered ({type(exc).__name__}: "
                    f"{exc.strerror or exc}); later failures are not reported"
                )

    def close(self) -> None:
        self._socket.close()


async def _watchdog(notifier: SystemdNotifier, interval_s: float, started: trio.Event) -> None:
    """Ping systemd's watchdog every ``interval_s`` while the event loop runs."""
    await started.wait()
    while True:
        notifier.notify(WATCHDOG=1)
        await trio.sleep(interval_s)


# --- signals -------------------------------------------------------------------------


def exit_now() -> NoReturn:
    """End the process at once with status 130, skipping every cleanup (the third
    signal). Flushes our own output first."""
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
    os._exit(EXIT_FORCED)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class _Stopper:
    """What each stop signal does, in order (R7): see the module docstring."""

    def __init__(self, *, out: TextIO, grace_s: float, force_exit: Callable[[], NoReturn]) -> None:
        self.out = out
        self.grace_s = grace_s
        self.force_exit = force_exit
        self.worker: Worker | None = None
        #: Cancelled by a signal that arrives before the worker exists.
        self.startup = trio.CancelScope()
        self.received = 0
        #: Set when running under systemd (``$NOTIFY_SOCKET``).
        self.notifier: SystemdNotifier | None = None

    def say(self, message: str) -> None:
        print(f"{PREFIX} {message}", file=self.out, flush=True)

    def on_signal(self, signum: int) -> None:
        self.received += 1
        name = _signal_name(signum)
        worker = self.worker
        if worker is None:
            if self.received == 1:
                self.say(f"{name}: stopping before the worker started (nothing was claimed)")
                self.startup.cancel()
                return
            self.say(f"{name} again: exiting now")
            self.force_exit()
        running = worker.statistics().in_flight
        if self.received == 1:
            if self.notifier is not None:
                self.notifier.notify(
                    STOPPING=1, STATUS=f"stopping: draining {running} running handler(s)"
                )
            self.say(
                f"{name}: stopping: no new claims; {running} running handler(s) get up to "
                f"{self.grace_s:g}s to finish, then are cancelled and their jobs released. "
                "Press Ctrl-C (or send SIGTERM) again to cancel them now"
            )
            worker.stop()
        elif self.received == 2:
            self.say(
                f"{name} again: cancelling {running} running handler(s) now and releasing "
                "their jobs. A third signal exits at once (their leases then lapse)"
            )
            worker.stop(grace_s=0)
        else:
            self.say(
                f"{name} a third time: exiting now; {running} claimed job(s) will be "
                "reclaimed by other workers when their leases lapse"
            )
            self.force_exit()


async def _watch_signals(signals: AsyncIterator[int], stopper: _Stopper) -> None:
    async for signum in signals:
        stopper.on_signal(signum)


# --- the command ---------------------------------------------------------------------


@dataclass(slots=True)
class _Started:
    """The ``task_status`` given to :meth:`Worker.run`: prints the ready line and notes
    the time. (The worker runs in the command's main task rather than under
    ``nursery.start``, so its exception reaches the command unwrapped.)"""

    stopper: _Stopper
    line: str
    event: trio.Event
    at: float = 0.0

    def started(self, value: None = None) -> None:
        self.at = trio.current_time()
        self.stopper.say(self.line)
        if self.stopper.notifier is not None:
            self.stopper.notifier.notify(READY=1, STATUS=self.line, MAINPID=os.getpid())
        self.event.set()


async def _report_status(
    worker: Worker, interval_s: float, stopper: _Stopper, started: trio.Event
) -> None:
    await started.wait()
    previous, since = worker.statistics(), trio.current_time()
    while True:
        await trio.sleep(interval_s)
        stats, now = worker.statistics(), trio.current_time()
        line = format_status(stats, previous, now - since)
        print(line, file=stopper.out, flush=True)
        if stopper.notifier is not None:
            status = line.removeprefix(PREFIX).strip()
            stopper.notifier.notify(STATUS=f"stopping: {status}" if stopper.received else status)
        previous, since = stats, now


async def serve_worker(
    open_store: Callable[[], AbstractAsyncContextManager[Store]],
    handlers: Mapping[str, Handler],
    options: Mapping[str, Any],
    *,
    where: str,
    status_interval_s: float,
    signals: AsyncIterator[int] | None = None,
    out: TextIO | None = None,
    force_exit: Callable[[], NoReturn] = exit_now,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Open the store, run a :class:`Worker` on it until a stop signal (R7), and print
    the summary.

    Args:
        open_store: Opens the store (called once, after the signal receiver is set up,
            so a signal during a slow connect stops the command cleanly).
        handlers: By queue name (from :func:`load_handlers`).
        options: The keyword arguments of :class:`Worker`.
        where: The store, for the ready line (never with a password).
        status_interval_s: Seconds between status lines (0: none).
        signals: Where stop signals come from (default: SIGINT and SIGTERM, received
            with :func:`trio.open_signal_receiver`); tests pass a channel.
        out: Where lines go (default ``sys.stderr``).
        force_exit: What the third signal calls (default :func:`exit_now`).
        environ: Where ``NOTIFY_SOCKET``, ``WATCHDOG_USEC`` and ``WATCHDOG_PID`` are read
            (default ``os.environ``): under systemd the command speaks sd_notify.

    Returns:
        0 after a graceful stop (first signal), 130 after a forced one (second signal).

    Raises:
        AlkstoreError: Opening the store failed (``EngineError``, ``SchemaError``), an
            option was invalid (``InvalidArgument``), or the worker failed
            (``SupervisorEscalated``, after releasing its claims); raised unwrapped,
            after the summary, for the caller to print as one line.
    """
    stopper = _Stopper(
        out=sys.stderr if out is None else out,
        grace_s=float(options.get("shutdown_grace_s", 30.0)),
        force_exit=force_exit,
    )
    stopper.notifier = SystemdNotifier.from_environ(
        os.environ if environ is None else environ, on_error=stopper.say
    )
    try:
        if signals is not None:
            return await _serve(
                stopper, signals, open_store, handlers, options, where, status_interval_s
            )
        with trio.open_signal_receiver(*STOP_SIGNALS) as received:
            return await _serve(
                stopper, received, open_store, handlers, options, where, status_interval_s
            )
    finally:
        if stopper.notifier is not None:
            stopper.notifier.close()


async def _serve(
    stopper: _Stopper,
    signals: AsyncIterator[int],
    open_store: Callable[[], AbstractAsyncContextManager[Store]],
    handlers: Mapping[str, Handler],
    options: Mapping[str, Any],
    where: str,
    status_interval_s: float,
) -> int:
    failure: Exception | None = None
    summary: str | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_signals, signals, stopper)
        try:
            with stopper.startup:
                async with open_store() as store:
                    by_queue: dict[str | Queue, Handler] = dict(handlers.items())
                    worker = Worker(store, by_queue, **options)
                    stopper.worker = worker
                    started = _Started(stopper, _ready_line(worker, where), trio.Event())
                    notifier = stopper.notifier
                    if status_interval_s > 0:
                        nursery.start_soon(
                            _report_status, worker, status_interval_s, stopper, started.event
                        )
                    if notifier is not None and notifier.watchdog_interval_s is not None:
                        nursery.start_soon(
                            _watchdog, notifier, notifier.watchdog_interval_s, started.event
                        )
                    try:
                        await worker.run(task_status=started)
                    finally:
                        if started.event.is_set():
                            wall_s = trio.current_time() - started.at
                            summary = format_summary(worker.statistics(), wall_s)
        except Exception as exc:  # printed by the caller, after the summary
            failure = exc
        finally:
            nursery.cancel_scope.cancel()
    if summary is not None:
        print(summary, file=stopper.out, flush=True)
    if failure is not None:
        raise failure
    return EXIT_FORCED if stopper.received >= 2 else 0


def _ready_line(worker: Worker, where: str) -> str:
    queues = ", ".join(queue.name for queue in worker.queues)
    # R14: a worker with only --periodic serves no queue.
    serving = f"serving {queues}" if queues else "firing periodic schedules only (no queue)"
    return f"worker {worker.worker_id} {serving} on {where}; Ctrl-C or SIGTERM stops it gracefully"
