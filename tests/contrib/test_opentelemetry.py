"""alkstore_trio.contrib.opentelemetry: a span per job run, with the real OpenTelemetry
SDK and its in-memory exporter, linked to the enqueue through the job's headers (D30).

Spans are timed on trio's mock clock (anchored at the wall-clock start), so their
durations are exact. One test runs on PostgreSQL, in real time (it waits for events,
never for time).
"""

from __future__ import annotations

import secrets

import pytest
import trio
from _scenario import (
    CLAIMS,
    SCENARIO,
    enqueue_scenario,
    running,
    scenario_done,
    scenario_queue,
    scenario_worker,
    wait_until,
)
from opentelemetry import baggage, propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from alkstore_trio import (
    Headers,
    InvalidArgument,
    QueueOpts,
    Worker,
    asyncio_handler,
    open_store,
)
from alkstore_trio._runtime._asyncio import is_marked
from alkstore_trio.contrib.opentelemetry import JobTracing, trace_headers

S = 1_000_000_000  # nanoseconds


@pytest.fixture
def exporter():
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def runs(exporter):
    """The finished run spans by (payload name, attempt)."""
    return {
        (span.attributes["test.payload"], span.attributes["alkstore.job.attempt"]): span
        for span in exporter.get_finished_spans()
        if span.name == "process q"
    }


def linked(span):
    """The (trace id, span id) of the span's links (a link's context is remote)."""
    return [(link.context.trace_id, link.context.span_id) for link in span.links]


def ids(span_context):
    return [(span_context.trace_id, span_context.span_id)]


def duration_s(span):
    return (span.end_time - span.start_time) / S


async def test_r9_a_span_per_run_with_its_outcome_linked_to_the_enqueue(
    autojump_clock, store, provider, exporter
):
    tracer = provider.get_tracer("test")
    tracing = JobTracing(provider)
    queue = scenario_queue(store)
    with tracer.start_as_current_span("produce", kind=SpanKind.PRODUCER) as producer:
        headers = trace_headers()
        await enqueue_scenario(queue, headers=headers)
    seen = []

    def instrumented(handler):
        async def with_child_span(job):
            trace.get_current_span().set_attribute("test.payload", job.payload.decode())
            with tracer.start_as_current_span("inner work"):
                await handler(job)

        return tracing.handler(with_child_span)

    worker = scenario_worker(store, queue, wrap=instrumented, seen=seen)
    async with running(worker, tracing):
        await wait_until(lambda: scenario_done(worker))

    # The handler sees the jobs as enqueued: payloads untouched, the headers kept.
    assert {job.payload for job in seen} == {*SCENARIO, b"late"}
    assert {job.headers for job in seen} == {Headers(headers)}
    spans = runs(exporter)
    assert len(spans) == CLAIMS
    outcomes = {key: span.attributes["alkstore.job.outcome"] for key, span in spans.items()}
    assert outcomes == {
        ("ok1", 1): "ack",
        ("ok2", 1): "ack",
        ("late", 1): "ack",
        ("retry", 1): "retry",
        ("retry", 2): "ack",
        ("fail", 1): "dead",
        ("slow", 1): "retry",
        ("slow", 2): "ack",
        ("boom", 1): "retry",
        ("boom", 2): "ack",
        ("cancel", 1): "cancelled",
    }
    errors = {
        key: (span.status.status_code, span.attributes.get("alkstore.job.error"))
        for key, span in spans.items()
        if span.status.status_code != StatusCode.UNSET or "alkstore.job.error" in span.attributes
    }
    assert errors == {
        ("retry", 1): (StatusCode.UNSET, "not yet"),  # a Retry the handler chose
        ("fail", 1): (StatusCode.ERROR, "broken for good"),
        ("slow", 1): (StatusCode.ERROR, "job timed out after 50s (job_timeout_s)"),
        ("boom", 1): (StatusCode.ERROR, "ValueError: boom"),
    }  # R15: a cancelled run is no error
    assert spans[("slow", 1)].attributes["alkstore.job.timed_out"] is True
    assert [e.name for e in spans[("slow", 1)].events] == ["timeout"]
    # The wrapper recorded the handler's exception (with its traceback) on the span.
    boom_events = spans[("boom", 1)].events
    assert [e.name for e in boom_events] == ["exception", "handler_error"]
    assert boom_events[0].attributes["exception.type"] == "ValueError"
    assert "Traceback" in boom_events[0].attributes["exception.stacktrace"]

    durations = {key: duration_s(span) for key, span in spans.items()}
    expected = dict.fromkeys(spans, 1.0) | {("slow", 1): 50.0, ("cancel", 1): 10.0}
    assert durations == pytest.approx(expected, abs=1e-6)

    producer_context = producer.get_span_context()
    inner = [s for s in exporter.get_finished_spans() if s.name == "inner work"]
    assert len(inner) == CLAIMS
    for span in spans.values():
        assert span.kind == SpanKind.CONSUMER
        assert span.parent is None  # a root span, linked to the enqueue
        assert linked(span) == ids(producer_context)
        assert span.attributes["alkstore.job.queue"] == "q"
        assert span.attributes["messaging.destination.name"] == "q"
        assert span.attributes["messaging.message.id"] == str(span.attributes["alkstore.job.id"])
        assert span.attributes["alkstore.worker.id"] == "w1"
    run_span_ids = {span.context.span_id for span in spans.values()}
    assert {span.parent.span_id for span in inner} == run_span_ids


async def test_r9_spans_come_from_the_event_stream_without_the_wrapper(
    autojump_clock, store, provider, exporter
):
    tracer = provider.get_tracer("test")
    tracing = JobTracing(provider)
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    with tracer.start_as_current_span("produce") as producer:
        traced_id = await queue.enqueue(b"traced", headers=trace_headers())
        # Inside a transaction too, beside a header of the producer's own.
        async with store.transaction() as tx:
            mixed_id = await tx.enqueue(queue, b"mixed", headers={**trace_headers(), "t": "1"})
    plain_id = await queue.enqueue(b"plain")
    other_id = await queue.enqueue(b"other", headers={"tenant": "acme"})
    jobs = {}

    async def handler(job):
        jobs[job.id] = job
        await trio.sleep(3)

    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker, tracing):
        await wait_until(lambda: worker.statistics().acked == 4)
    payloads = {job_id: job.payload for job_id, job in jobs.items()}
    assert payloads == {
        traced_id: b"traced",
        mixed_id: b"mixed",
        plain_id: b"plain",
        other_id: b"other",
    }
    assert sorted(jobs[mixed_id].headers) == ["t", "traceparent"]
    spans = {
        span.attributes["alkstore.job.id"]: span
        for span in exporter.get_finished_spans()
        if span.name == "process q"
    }
    assert set(spans) == {traced_id, mixed_id, plain_id, other_id}
    assert linked(spans[traced_id]) == ids(producer.get_span_context())
    assert linked(spans[mixed_id]) == ids(producer.get_span_context())
    assert linked(spans[plain_id]) == []  # no headers: no link
    assert linked(spans[other_id]) == []  # headers, but no trace context in them
    for span in spans.values():
        assert span.attributes["alkstore.job.outcome"] == "ack"
        assert span.status.status_code == StatusCode.UNSET
        assert duration_s(span) == pytest.approx(3.0, abs=1e-6)


async def test_r7_a_released_run_ends_its_span_with_outcome_release(
    autojump_clock, store, provider, exporter
):
    tracing = JobTracing(provider)
    queue = store.queue("q")
    await queue.enqueue(b"x")
    started = trio.Event()

    async def forever(job):
        started.set()
        await trio.sleep_forever()

    worker = Worker(store, {queue: tracing.handler(forever)}, shutdown_grace_s=2)
    async with running(worker, tracing):
        await started.wait()
        await trio.sleep(5)
    (span,) = exporter.get_finished_spans()
    assert span.attributes["alkstore.job.outcome"] == "release"
    assert span.attributes["alkstore.job.error"] == "worker stopped"
    assert span.status.status_code == StatusCode.UNSET
    assert duration_s(span) == pytest.approx(7.0, abs=1e-6)  # 5 s, then the 2 s grace


async def test_r9_spans_still_open_when_tracing_stops_end_as_incomplete(
    autojump_clock, store, provider, exporter
):
    tracing = JobTracing(provider)
    queue = store.queue("q")
    await queue.enqueue(b"x")
    started = trio.Event()

    async def forever(job):
        started.set()
        await trio.sleep_forever()

    worker = Worker(store, {queue: forever}, shutdown_grace_s=0)
    watching = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        await nursery.start(_watch, tracing, worker, watching)
        await nursery.start(worker.run)
        await started.wait()
        await trio.sleep(1)
        watching.cancel()
        await wait_until(lambda: exporter.get_finished_spans())
        (span,) = exporter.get_finished_spans()
        assert span.attributes["alkstore.job.outcome"] == "incomplete"
        assert span.status.status_code == StatusCode.ERROR
        worker.stop()


async def _watch(tracing, worker, scope, *, task_status=trio.TASK_STATUS_IGNORED):
    with scope:
        await tracing.run(worker, task_status=task_status)


async def test_r9_a_wrapped_handler_nobody_watches_makes_no_span_and_sees_the_job(
    autojump_clock, store, provider, exporter
):
    tracing = JobTracing(provider)
    queue = store.queue("q")
    with provider.get_tracer("test").start_as_current_span("produce"):
        headers = trace_headers()
        await queue.enqueue(b"hello", headers=headers)
    seen = []

    async def handler(job):
        seen.append((job.payload, job.headers))

    worker = Worker(store, {queue: tracing.handler(handler)})
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert seen == [(b"hello", headers)]
    assert [span.name for span in exporter.get_finished_spans()] == ["produce"]


async def test_r9_one_tracing_watches_a_worker_once(autojump_clock, store, provider):
    tracing = JobTracing(provider)

    async def handler(job):
        pass

    worker = Worker(store, {"q": tracing.handler(handler)})
    async with trio.open_nursery() as nursery:
        await nursery.start(tracing.run, worker)
        with pytest.raises(InvalidArgument, match="already watches"):
            await tracing.run(worker)
        nursery.cancel_scope.cancel()
    with pytest.raises(InvalidArgument, match="worker must be a Worker"):
        await tracing.run(None)


def test_r9_the_wrapper_keeps_the_asyncio_mark():
    tracing = JobTracing(TracerProvider())

    async def handler(job):
        pass

    assert is_marked(tracing.handler(asyncio_handler(handler)))
    assert not is_marked(tracing.handler(handler))
    with pytest.raises(InvalidArgument):
        tracing.handler("not a function")


def test_d30_trace_headers_carry_the_current_context_in_w3c_form(provider):
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("produce") as producer:
        headers = trace_headers()
    span_context = producer.get_span_context()
    assert headers == {
        "traceparent": f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
        f"{span_context.trace_flags:02x}"
    }
    # What the worker side reads back from a job's headers is the producer's span.
    extracted = propagate.extract(Headers(headers))
    assert ids(trace.get_current_span(extracted).get_span_context()) == ids(span_context)
    # An explicit context wins over the current one (there is none here).
    assert trace_headers(context=trace.set_span_in_context(producer)) == headers
    # Each call returns a new dict: adding headers to one changes no other.
    mine = trace_headers(context=trace.set_span_in_context(producer))
    mine["tenant"] = "acme"
    assert trace_headers(context=trace.set_span_in_context(producer)) == headers


def test_d30_without_an_active_span_there_are_no_trace_headers():
    assert trace_headers() == {}
    assert trace_headers(context=Context()) == {}


async def test_d30_the_largest_w3c_baggage_fits_in_the_job_headers(autojump_clock, store, provider):
    # However much baggage there is, the W3C propagator writes at most 8192 bytes of it:
    # with the traceparent, that stays under D30's 16 KiB.
    context = trace.set_span_in_context(provider.get_tracer("test").start_span("produce"))
    for n in range(60):
        context = baggage.set_baggage(f"key{n:02}", "v" * 190, context)
    headers = trace_headers(context=context)
    assert 8000 < len(headers["baggage"]) <= 8192
    queue = store.queue("q")
    job = await queue.get_job(await queue.enqueue(b"x", headers=headers))
    assert job is not None
    assert job.headers == headers
    extracted = propagate.extract(job.headers)
    assert baggage.get_baggage("key39", extracted) == "v" * 190


class _OneHeaderPropagator(TextMapPropagator):
    """A propagator of its own format: ``x-trace: TRACE_ID/SPAN_ID`` in hex."""

    def inject(self, carrier, context=None, setter=None):
        span_context = trace.get_current_span(context).get_span_context()
        if span_context.is_valid:
            carrier["x-trace"] = f"{span_context.trace_id:032x}/{span_context.span_id:016x}"

    def extract(self, carrier, context=None, getter=None):
        value = carrier.get("x-trace")
        if value is None:
            return Context()
        trace_id, span_id = (int(part, 16) for part in value.split("/"))
        span_context = trace.SpanContext(trace_id, span_id, is_remote=True)
        return trace.set_span_in_context(trace.NonRecordingSpan(span_context))

    @property
    def fields(self):
        return {"x-trace"}


@pytest.fixture
def one_header_propagator():
    previous = propagate.get_global_textmap()
    propagate.set_global_textmap(_OneHeaderPropagator())
    try:
        yield
    finally:
        propagate.set_global_textmap(previous)


async def test_d30_the_configured_global_propagator_writes_and_reads_the_headers(
    autojump_clock, store, provider, exporter, one_header_propagator
):
    tracing = JobTracing(provider)
    queue = store.queue("q")
    with provider.get_tracer("test").start_as_current_span("produce") as producer:
        headers = trace_headers()
        await queue.enqueue(b"x", headers=headers)
    assert list(headers) == ["x-trace"]

    async def handler(job):
        pass

    worker = Worker(store, {queue: tracing.handler(handler)})
    async with running(worker, tracing):
        await wait_until(lambda: worker.statistics().acked == 1)
    (span,) = (s for s in exporter.get_finished_spans() if s.name == "process q")
    assert linked(span) == ids(producer.get_span_context())


def test_r9_tracing_rejects_a_provider_that_is_not_one():
    with pytest.raises(InvalidArgument, match="tracer_provider"):
        JobTracing(tracer_provider="jaeger")


# -- on PostgreSQL ---------------------------------------------------------------------


@pytest.fixture
def pg_schema(pg_dsn):
    """A fresh schema name; the schema is dropped after the test."""
    psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL test needs psycopg 3")
    from psycopg import sql

    name = "t_otel_" + secrets.token_hex(6)
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


async def test_d30_runs_link_to_the_enqueue_across_stores_on_postgresql(
    pg_dsn, pg_schema, provider, exporter
):
    tracer = provider.get_tracer("test")
    async with open_store(pg_dsn, schema=pg_schema, migrate="apply", listen=False) as producer:
        queue = producer.queue("q")
        with tracer.start_as_current_span("produce") as produce:
            first = await queue.enqueue(b"first", headers=trace_headers())
            async with producer.transaction() as tx:
                second = await tx.enqueue(queue, b"second", headers=trace_headers())
        untraced = await queue.enqueue(b"untraced")

    # The worker's store is another one: the context reached it through the table.
    tracing = JobTracing(provider)
    seen = {}

    async def handler(job):
        seen[job.id] = job.payload
        with tracer.start_as_current_span("inner work"):
            pass

    async with open_store(pg_dsn, schema=pg_schema, listen=False) as store:
        worker = Worker(store, {"q": tracing.handler(handler)})
        with worker.events() as events:
            async with trio.open_nursery() as nursery:
                await nursery.start(tracing.run, worker)
                await nursery.start(worker.run)
                acked = 0
                async for event in events:
                    acked += event.kind == "ack"
                    if acked == 3:
                        worker.stop()
    assert seen == {first: b"first", second: b"second", untraced: b"untraced"}
    spans = {
        span.attributes["alkstore.job.id"]: span
        for span in exporter.get_finished_spans()
        if span.name == "process q"
    }
    assert linked(spans[first]) == ids(produce.get_span_context())
    assert linked(spans[second]) == ids(produce.get_span_context())
    assert linked(spans[untraced]) == []
    inner = [s for s in exporter.get_finished_spans() if s.name == "inner work"]
    assert {s.parent.span_id for s in inner} == {s.context.span_id for s in spans.values()}
