"""A flaky actor under a one-for-one supervisor: restarted after each crash, then the
program stops cleanly.

The ``counter`` actor owns a running total and is reached only through its inbox, a trio
memory channel. A negative amount makes it crash, and the supervisor restarts it after a
short delay: the inbox survives the restart (it is an argument of the actor, owned by
``main``), while the total starts again from zero (it lived in the run that crashed). The
``ticker`` actor beside it is never disturbed: restarts are one for one. Leaving the
``async with`` block cancels both.

A second supervisor runs an actor that crashes every time it starts. Past its restart
budget the supervisor gives up and raises ``SupervisorEscalated``, with the last crash as
its ``__cause__``.

Run it with ``python examples/supervised_actor.py``.
"""

import logging
import sys

import trio

from alkstore_trio import SupervisorEscalated, open_supervisor


async def counter(inbox, *, task_status=trio.TASK_STATUS_IGNORED):
    """Add up amounts; answer a reply channel with the total. Crash on a negative amount."""
    total = 0  # reset by every restart
    task_status.started()
    async for message in inbox:
        if isinstance(message, int):
            if message < 0:
                raise ValueError(f"negative amount {message}")
            total += message
            print(f"counter: +{message} = {total}")
        else:
            message.send_nowait(total)


async def ticker(*, task_status=trio.TASK_STATUS_IGNORED):
    """A well-behaved sibling that counts ticks (its count survives the counter's crashes)."""
    ticks = 0
    task_status.started()
    while True:
        await trio.sleep(0.05)
        ticks += 1


async def hopeless(*, task_status=trio.TASK_STATUS_IGNORED):
    """Starts, then crashes at once, every time."""
    task_status.started()
    await trio.sleep(0.01)
    raise ConnectionError("the service is down")


class WithoutTracebacks(logging.Formatter):
    """Keeps this example's output short. Real records carry the crash's traceback."""

    def formatException(self, ei):
        return ""


def show_supervisor_logs():
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        WithoutTracebacks("  log %(levelname)s event=%(event)s restarts=%(restarts)s: %(message)s")
    )
    logger = logging.getLogger("alkstore_trio.supervisor")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


async def main() -> None:
    show_supervisor_logs()

    inbox_send, inbox_receive = trio.open_memory_channel(0)
    async with open_supervisor(
        name="example", max_restarts=3, restart_window_s=5.0, restart_delay_s=0.1
    ) as supervisor:
        await supervisor.start(counter, inbox_receive, name="counter")
        await supervisor.start(ticker, name="ticker")

        for amount in [1, 2, -5, 3, -1, 4]:
            await inbox_send.send(amount)  # waits while the counter is being restarted

        reply_send, reply_receive = trio.open_memory_channel(1)
        await inbox_send.send(reply_send)
        print("total since the last restart:", await reply_receive.receive())

        stats = supervisor.statistics()
        for child in stats.children:
            crash = child.last_crash.__name__ if child.last_crash else "none"
            print(f"{child.name}: {child.restarts} restarts, last crash: {crash}")
        assert stats.child("counter").restarts == 2
        assert stats.child("ticker").restarts == 0
    print("left the block: both actors were cancelled")

    try:
        async with open_supervisor(
            name="doomed", max_restarts=2, restart_window_s=1.0, restart_delay_s=0.01
        ) as supervisor:
            await supervisor.start(hopeless, name="hopeless")
            await trio.sleep_forever()
    except SupervisorEscalated as exc:
        print(f"escalated: child {exc.child!r} gave up; cause: {exc.__cause__!r}")
    print("stopped cleanly")


if __name__ == "__main__":
    trio.run(main)
