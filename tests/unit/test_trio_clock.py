"""alkstore_trio.testing.TrioClock: a store clock that follows trio's (mock) clock."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
import trio

from alkstore_trio import InvalidArgument
from alkstore_trio.testing import TrioClock


async def test_trio_clock_moves_with_trio_mock_time(autojump_clock):
    start = datetime(2030, 6, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    clock = TrioClock(start)
    before = clock.now()
    assert before == start.astimezone(UTC) + timedelta(seconds=trio.current_time())
    await trio.sleep(90)
    assert clock.now() - before == timedelta(seconds=90)
    assert clock.now().tzinfo is UTC


async def test_trio_clock_default_start_is_2000(autojump_clock):
    assert TrioClock().now() == datetime(2000, 1, 1, tzinfo=UTC) + timedelta(
        seconds=trio.current_time()
    )


@pytest.mark.parametrize("start", [datetime(2000, 1, 1), "2000-01-01", 0])
def test_trio_clock_rejects_a_start_that_is_not_an_aware_datetime(start):
    with pytest.raises(InvalidArgument, match="start"):
        TrioClock(start)
