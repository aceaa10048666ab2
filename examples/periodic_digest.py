"""A digest every morning at 07:00 in Riga, sent once however many workers run (Q17).

Two workers declare the same schedule and both ask the store, every hour of a manual
clock, whether a fire time is due (this is what ``Worker(periodic=[...])`` does for you,
waking at the next fire time). The store enqueues each morning's job exactly once,
stamped with the schedule's name and the fire time it stands for, so the handler can be
idempotent per morning. The walk crosses the end of summer time (25 October 2026):
07:00 local is 04:00 UTC before it and 05:00 UTC after it. Then the workers are down
for three days: by default one catch-up run stands for the missed mornings.

Needs the ``cron`` extra: ``pip install 'alkstore_trio[cron]'``. Run it with
``python examples/periodic_digest.py``.
"""

from datetime import UTC, datetime

import trio

import alkstore_trio
from alkstore_trio.testing import ManualClock

DIGEST = alkstore_trio.Periodic(
    "morning-digest", "emails", cron="0 7 * * *", tz="Europe/Riga", payload=b"digest"
)


async def main() -> None:
    clock = ManualClock(datetime(2026, 10, 23, 12, tzinfo=UTC))
    async with alkstore_trio.open_store("memory://", clock=clock) as store:
        for _hour in range(4 * 24):  # four days, an hour at a time
            for _worker in ("worker-a", "worker-b"):
                tick = await store.fire_periodic([DIGEST])
                for fired in tick.fired:
                    print("enqueued job", fired.job_id, "for", fired.fire_at.isoformat())
            clock.advance(3600)

        emails = store.queue("emails")
        handles = await emails.claim_batch("mailer", 100)
        fire_times = [h.job.headers["alk-periodic-fire-at"] for h in handles]
        assert fire_times == [
            "2026-10-24T04:00:00+00:00",  # Saturday, summer time (UTC+3)
            "2026-10-25T05:00:00+00:00",  # Sunday: winter time from 04:00 local (UTC+2)
            "2026-10-26T05:00:00+00:00",
            "2026-10-27T05:00:00+00:00",
        ], fire_times
        assert all(h.job.headers["alk-periodic"] == "morning-digest" for h in handles)
        assert all(await emails.ack_handles(handles))

        clock.advance(3 * 86400)  # nobody ran for three days
        tick = await store.fire_periodic([DIGEST])
        print("after three days down:", [f.fire_at.isoformat() for f in tick.fired])
        assert len(tick.fired) == 2  # the latest missed morning, and this morning's
        (row,) = await store.list_periodic()
        print(f"{row.name}: {row.expression} in {row.tz}, next at {row.next_fire_at}")


if __name__ == "__main__":
    trio.run(main)
