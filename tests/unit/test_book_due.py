"""R11 in the claim book, with no event loop: when a short claim asks for a lookup of
the queue's next due time, and which announced due times need a timer wake."""

from __future__ import annotations

import math
from dataclasses import dataclass

from alkstore_trio._runtime._book import ClaimBook


@dataclass
class FakeJob:
    id: int
    queue: str = "a"
    attempts: int = 1
    max_attempts: int = 3
    visibility_timeout_s: float = 30.0


@dataclass
class FakeHandle:
    job: FakeJob


def book():
    return ClaimBook(("a", "b"), concurrency=10, claim_batch_max=5, heartbeat_interval_s=None)


def test_r11_a_short_claim_looks_up_an_unknown_due_time_once():
    b = book()
    b.claimed("a", [], 5, sent_at=0.0, now=0.0)
    assert b.lookups == {"a"}
    assert b.looked_up("a", math.inf, sent_at=0.0) is False  # none: no timer
    assert b.lookups == set()
    b.wake({"a"})
    b.claimed("a", [], 5, sent_at=1.0, now=1.0)
    assert b.lookups == set()  # known: no delayed job, wakes announce new ones


def test_r11_a_full_claim_never_looks_up():
    b = book()
    b.claimed("a", [FakeHandle(FakeJob(i)) for i in range(5)], 5, sent_at=0.0, now=0.0)
    assert b.lookups == set()
    assert "a" in b.woken


def test_r11_a_passed_due_time_is_looked_up_again_after_a_short_claim():
    b = book()
    assert b.looked_up("a", 10.0, sent_at=0.0) is True  # a timer wake at 10
    b.claimed("a", [], 5, sent_at=5.0, now=5.0)
    assert b.lookups == set()  # 10 is still ahead: nothing earlier is unannounced
    b.claimed("a", [], 5, sent_at=10.0, now=10.0)
    assert b.lookups == {"a"}


def test_r11_a_lookup_replaces_a_due_time_that_had_passed():
    b = book()
    b.looked_up("a", 10.0, sent_at=0.0)
    b.claimed("a", [], 5, sent_at=10.0, now=10.0)  # 10 passed: look up again
    assert b.looked_up("a", math.inf, sent_at=10.0) is False  # nothing delayed any more
    b.wake({"a"})
    b.claimed("a", [], 5, sent_at=11.0, now=11.0)
    assert b.lookups == set()  # known: nothing delayed; not one lookup per short claim


def test_r11_a_lookup_wakes_the_queue_for_one_more_claim():
    # A job due between the short claim and the lookup is in neither answer: the claim
    # that follows the lookup takes it.
    b = book()
    b.claimed("a", [], 5, sent_at=0.0, now=0.0)
    assert "a" not in b.woken
    b.looked_up("a", 10.0, sent_at=0.0)
    assert "a" in b.woken
    b.claimed("a", [], 5, sent_at=0.1, now=0.1)  # that claim is short too
    assert b.lookups == set()  # 10 is known and ahead: no second lookup, no loop


def test_r11_a_lookup_keeps_an_earlier_due_time_announced_while_it_was_on_its_way():
    b = book()
    b.looked_up("a", 10.0, sent_at=0.0)
    b.claimed("a", [], 5, sent_at=10.0, now=10.0)
    assert b.lookups == {"a"}
    assert b.announced("a", 12.0, now=10.5) is True  # a wake, while the lookup travels
    b.looked_up("a", 30.0, sent_at=10.0)
    assert b.due["a"] == 30.0  # the wake's timer at 12 was asked for already
    b.looked_up("a", 40.0, sent_at=11.0)
    assert b.due["a"] == 30.0  # 30 is still ahead and earlier: it stays


def test_r11_an_announced_due_time_needs_a_timer_only_when_earlier_than_the_known_one():
    b = book()
    assert b.announced("a", 50.0, now=0.0) is True  # unknown: wake then, stay unknown
    assert "a" not in b.due
    b.looked_up("a", 20.0, sent_at=0.0)
    assert b.announced("a", 30.0, now=1.0) is False  # the wake at 20 comes first
    assert b.announced("a", 15.0, now=1.0) is True
    assert b.due["a"] == 15.0
    assert b.announced("a", 40.0, now=16.0) is True  # 15 passed: what follows is unknown


def test_r11_the_repoll_forgets_every_due_time_and_a_backoff_retry_looks_up_at_once():
    b = book()
    b.looked_up("a", math.inf, sent_at=0.0)
    b.looked_up("b", 9.0, sent_at=0.0)
    b.tick()
    assert b.due == {}
    b.retried_unknown("b")
    assert b.lookups == {"b"}
    b.lookup_failed("b")
    assert b.lookups == set()
    assert "b" not in b.due
