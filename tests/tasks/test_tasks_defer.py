"""T1-T4: the envelope, the checks of a defer, the task's options and defer_many, on the
memory engine and on PostgreSQL."""

from __future__ import annotations

import dataclasses
import enum
import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from alkstore_trio import InvalidArgument, QueueOpts, Tasks


class Tier(enum.Enum):
    FREE = "free"
    PRO = "pro"


@dataclasses.dataclass
class Line:
    sku: str
    qty: int


class Opaque:
    """A type msgspec cannot store without hooks."""


def make_tasks():
    tasks = Tasks()

    @tasks.task(name="send_email", queue="emails", priority=3, max_attempts=5)
    async def send_email(to: str, subject: str, urgent: bool = False) -> None:
        pass

    @tasks.task(name="bill", queue="billing")
    async def bill(
        account: uuid.UUID, when: datetime, tier: Tier, lines: list[Line], total: Decimal
    ) -> int:
        return len(lines)

    return tasks, send_email, bill


async def pending(store, queue):
    return await store.queue(queue).list_jobs("pending", limit=1000)


async def test_t1_the_payload_is_a_versioned_json_envelope_with_every_argument(any_store):
    _, send_email, bill = make_tasks()
    await send_email.defer(any_store, "ada@example.com", subject="hi")
    account = uuid.UUID(int=42)
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    await bill.defer(
        any_store, account=account, when=when, tier=Tier.PRO, lines=[Line("a", 2)],
        total=Decimal("9.50"),
    )  # fmt: skip
    (email,) = await pending(any_store, "emails")
    assert json.loads(email.payload) == {
        "v": 1,
        "task": "send_email",
        "args": {"to": "ada@example.com", "subject": "hi", "urgent": False},
    }
    (billed,) = await pending(any_store, "billing")
    assert json.loads(billed.payload) == {
        "v": 1,
        "task": "bill",
        "args": {
            "account": str(account),
            "when": "2026-01-02T03:04:05Z",
            "tier": "pro",
            "lines": [{"sku": "a", "qty": 2}],
            "total": "9.50",
        },
    }


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {"to": "a"}, "missing required argument `subject`"),
        ((), {"to": 1, "subject": "s"}, "Expected `str`, got `int` - at `to`"),
        ((), {"to": "a", "subject": "s", "cc": "b"}, "unknown argument `cc`"),
        (("a",), {"to": "a", "subject": "s"}, "argument 'to' is given twice"),
        (("a", "s", True, 4), {}, "takes 3 positional arguments; got 4"),
        ((), {"to": "a", "subject": "s", "urgent": "yes"}, "Expected `bool`, got `str`"),
    ],
)
async def test_t2_a_bad_call_is_invalid_argument_and_enqueues_nothing(
    any_store, args, kwargs, message
):
    _, send_email, _ = make_tasks()
    with pytest.raises(InvalidArgument, match="task 'send_email'") as raised:
        await send_email.defer(any_store, *args, **kwargs)
    assert message in str(raised.value)
    assert await pending(any_store, "emails") == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"when": "2026-01-02T03:04:05Z"}, "Expected `datetime`, got `str` - at `when`"),
        ({"account": "not-a-uuid"}, "Expected `uuid`, got `str` - at `account`"),
        ({"tier": "gold-secret"}, "Invalid enum value - at `tier`"),
        ({"lines": [{"sku": "a", "qty": "2"}]}, "Expected `int`, got `str` - at `lines[0].qty`"),
        ({"total": 9.5}, "at `total`"),
    ],
)
async def test_t2_values_are_checked_against_rich_annotations(memory_store, change, message):
    _, _, bill = make_tasks()
    call = {
        "account": uuid.uuid4(),
        "when": datetime.now(UTC),
        "tier": Tier.FREE,
        "lines": [Line("a", 1)],
        "total": Decimal("1"),
    }
    await bill.defer(memory_store, **call)
    with pytest.raises(InvalidArgument, match="invalid arguments") as raised:
        await bill.defer(memory_store, **{**call, **change})
    assert message in str(raised.value)
    assert "secret" not in str(raised.value)  # never an argument's value
    assert len(await pending(memory_store, "billing")) == 1


async def test_t2_a_structured_form_is_accepted_for_a_dataclass_and_an_enum(memory_store):
    _, _, bill = make_tasks()
    await bill.defer(
        memory_store, account=uuid.UUID(int=1), when=datetime.now(UTC), tier="pro",
        lines=[{"sku": "a", "qty": 1}], total=Decimal(2),
    )  # fmt: skip
    assert len(await pending(memory_store, "billing")) == 1


async def test_t2_defer_inside_a_transaction_commits_and_rolls_back_with_it(any_store):
    _, send_email, _ = make_tasks()
    async with any_store.transaction() as tx:
        job_id = await send_email.defer(tx, to="a", subject="kept")
    assert [job.id for job in await pending(any_store, "emails")] == [job_id]

    class Boom(Exception):
        pass

    async def rolled_back():
        async with any_store.transaction() as tx:
            await send_email.defer(tx, to="a", subject="rolled back")
            raise Boom

    with pytest.raises(Boom):
        await rolled_back()
    assert [job.id for job in await pending(any_store, "emails")] == [job_id]


async def test_t2_the_target_must_be_a_store_or_a_transaction(memory_store):
    _, send_email, _ = make_tasks()
    with pytest.raises(InvalidArgument, match="target must be a Store or a Transaction"):
        await send_email.defer(memory_store.queue("emails"), to="a", subject="s")


def test_t2_a_signature_that_cannot_be_stored_is_refused_at_declaration():
    tasks = Tasks()

    async def star(*items: int) -> None: ...

    async def positional(a: int, /) -> None: ...

    async def opaque(lock: Opaque) -> None: ...

    with pytest.raises(InvalidArgument, match="named parameters only"):
        tasks.task(star)
    with pytest.raises(InvalidArgument, match="named parameters only"):
        tasks.task(positional)
    with pytest.raises(InvalidArgument, match="cannot be stored as JSON"):
        tasks.task(opaque)
    assert len(tasks) == 0


def test_t3_options_are_checked_at_declaration():
    tasks = Tasks()

    async def fn(user_id: int) -> None: ...

    bad = [
        ({"queue": "no spaces"}, "queue"),
        ({"priority": 2**31}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"unique_key": "user:{account}"}, "not a parameter of the task"),
        ({"unique_for_s": 60}, "unique_for_s needs a unique_key"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"concurrency_key": 7}, "concurrency_key must be a str template"),
        ({"every_s": 60, "schedule_args": {"user_id": "x"}}, "schedule_args"),
        ({"schedule_args": {"user_id": 1}}, "schedule_args needs cron= or every_s="),
        ({"catch_up": "skip"}, "catch_up needs cron= or every_s="),
        ({"every_s": 60, "schedule_args": {"user_id": 1}, "catch_up": "all"}, "catch_up"),
    ]
    for options, message in bad:
        with pytest.raises(InvalidArgument, match=message):
            tasks.task(**options)(fn)
    tasks.task(name="fn")(fn)
    with pytest.raises(InvalidArgument, match="already declared"):
        tasks.task(name="fn")(fn)
    assert list(tasks.tasks) == ["fn"]


async def test_t3_every_job_is_stamped_with_the_task_options(any_store, clock):
    tasks = Tasks()

    @tasks.task(
        name="sync_user",
        queue="users",
        priority=7,
        max_attempts=2,
        delay_s=60,
        unique_key="user:{user_id}",
        concurrency_key=lambda user_id, tenant: f"tenant:{tenant}",
        opts=QueueOpts(visibility_timeout_s=30),
    )
    async def sync_user(user_id: int, tenant: str) -> None: ...

    first = await sync_user.defer(any_store, user_id=1, tenant="acme")
    again = await sync_user.defer(any_store, user_id=1, tenant="acme")
    assert first.created
    assert (again, again.created) == (first, False)
    (job,) = await pending(any_store, "users")
    assert (job.priority, job.max_attempts, job.visibility_timeout_s) == (7, 2, 30)
    assert (job.unique_key, job.concurrency_key) == ("user:1", "tenant:acme")
    assert job.run_at - job.enqueued_at == timedelta(seconds=60)


async def test_t3_with_options_changes_the_options_of_its_defers_only(memory_store):
    _, send_email, _ = make_tasks()
    later = send_email.with_options(priority=-1, delay_s=5)
    await later.defer(memory_store, to="a", subject="s")
    await send_email.defer(memory_store, to="b", subject="s")
    jobs = await pending(memory_store, "emails")
    assert [job.priority for job in jobs] == [-1, 3]
    assert later.name == send_email.name
    with pytest.raises(InvalidArgument, match="priority"):
        send_email.with_options(priority="high")


async def test_t3_a_key_function_that_raises_is_invalid_argument(memory_store):
    tasks = Tasks()

    @tasks.task(queue="q", unique_key=lambda n: {}[n])
    async def fn(n: int) -> None: ...

    with pytest.raises(InvalidArgument, match="the unique_key function raised KeyError"):
        await fn.defer(memory_store, n=1)
    assert await pending(memory_store, "q") == []


async def test_t4_defer_many_is_one_enqueue_many(any_store, monkeypatch):
    tasks = Tasks()

    @tasks.task(name="notify", queue="notify", unique_key="n:{n}")
    async def notify(n: int, text: str = "") -> None: ...

    calls = []
    engine = any_store._engine
    original = engine.enqueue

    async def counting(specs):
        calls.append(len(specs))
        return await original(specs)

    monkeypatch.setattr(engine, "enqueue", counting)
    ids = await notify.defer_many(
        any_store, [notify.call(n=n) for n in range(1000)] + [notify.call(n=0)]
    )
    assert calls == [1001]
    assert [i.created for i in ids] == [True] * 1000 + [False]
    assert ids[-1] == ids[0]
    assert len(await any_store.queue("notify").list_jobs("pending", limit=1000)) == 1000


async def test_t4_one_bad_call_enqueues_nothing_and_names_its_index(any_store):
    tasks, send_email, _ = make_tasks()

    @tasks.task(name="other", queue="emails")
    async def other(to: str, subject: str, urgent: bool = False) -> None: ...

    good = send_email.call(to="a", subject="s")
    with pytest.raises(InvalidArgument, match="missing required argument `subject`"):
        send_email.call(to="a")  # a call is checked when it is made
    with pytest.raises(InvalidArgument, match=r"calls\[2\] is a call of task 'other'"):
        await send_email.defer_many(any_store, [good, good, other.call("a", "s"), good])
    with pytest.raises(InvalidArgument, match=r"calls\[1\] must be a call made with"):
        await send_email.defer_many(any_store, [good, {"to": "a", "subject": "s"}])
    with pytest.raises(InvalidArgument, match="one per job"):
        await send_email.defer_many(any_store, good)
    assert await pending(any_store, "emails") == []
    assert await send_email.defer_many(any_store, []) == []
    assert repr(good) == "<call of task 'send_email'>"  # never the arguments


async def test_t4_a_bad_key_of_one_call_enqueues_nothing_and_names_its_index(memory_store):
    tasks = Tasks()

    @tasks.task(name="keyed", queue="q", unique_key=lambda n: "x" * n)
    async def keyed(n: int) -> None: ...

    calls = [keyed.call(n=1), keyed.call(n=0)]  # the empty key is refused (Q15)
    with pytest.raises(InvalidArgument, match=r"calls\[1\]: "):
        await keyed.defer_many(memory_store, calls)
    assert await pending(memory_store, "q") == []


async def test_t4_defer_many_in_a_transaction_is_atomic_with_it(any_store):
    _, send_email, _ = make_tasks()
    async with any_store.transaction() as tx:
        ids = await send_email.defer_many(
            tx, [send_email.call(to="a", subject="1"), send_email.call(to="b", subject="2")]
        )
    assert [job.id for job in await pending(any_store, "emails")] == ids


async def test_t5_the_arguments_are_decoded_into_the_annotated_types():
    from alkstore_trio.testing import perform

    tasks = Tasks()
    received = {}

    @tasks.task(name="typed", queue="q")
    async def typed(
        account: uuid.UUID, when: datetime, tier: Tier, lines: list[Line], total: Decimal,
        tags: set[str], pair: tuple[int, str], by_sku: dict[str, Line], note: str | None = None,
    ) -> None:  # fmt: skip
        received.update({k: v for k, v in locals().items() if k != "received"})

    call = {
        "account": uuid.UUID(int=7),
        "when": datetime(2026, 2, 3, 4, 5, tzinfo=UTC),
        "tier": Tier.PRO,
        "lines": [Line("a", 1)],
        "total": Decimal("1.10"),
        "tags": {"x", "y"},
        "pair": (1, "one"),
        "by_sku": {"a": Line("a", 1)},
    }
    outcome = await perform(typed, **call)
    assert outcome.outcome == "ack"
    assert received == {**call, "note": None}
    assert type(received["lines"][0]) is Line
    assert type(received["tier"]) is Tier
