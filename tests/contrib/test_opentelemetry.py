"""alkstore_trio.contrib.opentelemetry: a span per job run, with the real OpenTelemetry
SDK and its in-memory exporter.

Spans are timed on trio's mock clock (anchored at the wall-clock start), so their
durations are exact.
"""

from __future__ import annotations

import pytest
import trio
from _scenario import (
    CLAIMS,
    enqueue_scenario,
    running,
    scenario_done,
    scenario_queue,
    scenario_worker,
    wait_until,
)
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from alkstore_trio import InvalidArgument, QueueOpts, Worker, asyncio_handler
from alkstore_trio._runtime._asyncio import is_marked
from alkstore_trio.contrib.opentelemetry import (
    MAGIC,
    JobTracing,
    extract_trace_context,
    inject_trace_context,
)

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
        await enqueue_scenario(queue, wrap=inject_trace_context)

    def instrumented(handler):
        async def with_child_span(job):
            trace.get_current_span().set_attribute("test.payload", job.payload.decode())
            with tracer.start_as_current_span("inner work"):
                await handler(job)

        return tracing.handler(with_child_span)

    worker = scenario_worker(store, queue, wrap=instrumented)
    async with running(worker, tracing):
        await wait_until(lambda: scenario_done(worker))

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
        ("lost", 1): "lease_lost",
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
        ("lost", 1): (StatusCode.ERROR, None),
    }
    assert spans[("slow", 1)].attributes["alkstore.job.timed_out"] is True
    assert [e.name for e in spans[("slow", 1)].events] == ["timeout"]
    # The wrapper recorded the handler's exception (with its traceback) on the span.
    boom_events = spans[("boom", 1)].events
    assert [e.name for e in boom_events] == ["exception", "handler_error"]
    assert boom_events[0].attributes["exception.type"] == "ValueError"
    assert "Traceback" in boom_events[0].attributes["exception.stacktrace"]

    durations = {key: duration_s(span) for key, span in spans.items()}
    expected = dict.fromkeys(spans, 1.0) | {("slow", 1): 50.0, ("lost", 1): 10.0}
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
        traced_id = await queue.enqueue(inject_trace_context(b"traced"))
    plain_id = await queue.enqueue(b"plain")
    payloads = []

    async def handler(job):
        payload, _ = extract_trace_context(job.payload)
        payloads.append(payload)
        await trio.sleep(3)

    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker, tracing):
        await wait_until(lambda: worker.statistics().acked == 2)
    assert sorted(payloads) == [b"plain", b"traced"]
    spans = {
        span.attributes["alkstore.job.id"]: span
        for span in exporter.get_finished_spans()
        if span.name == "process q"
    }
    assert set(spans) == {traced_id, plain_id}
    assert linked(spans[traced_id]) == ids(producer.get_span_context())
    assert linked(spans[plain_id]) == []
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


async def test_r9_a_wrapped_handler_nobody_watches_makes_no_span_but_unwraps(
    autojump_clock, store, provider, exporter
):
    tracing = JobTracing(provider)
    queue = store.queue("q")
    with provider.get_tracer("test").start_as_current_span("produce"):
        await queue.enqueue(inject_trace_context(b"hello"))
    payloads = []

    async def handler(job):
        payloads.append(job.payload)

    worker = Worker(store, {queue: tracing.handler(handler)})
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert payloads == [b"hello"]
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


def test_r9_inject_then_extract_round_trips_the_payload_and_context(provider):
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("produce") as producer:
        wrapped = inject_trace_context(b"\x00binary\npayload")
    assert wrapped.startswith(MAGIC)
    payload, context = extract_trace_context(wrapped)
    assert payload == b"\x00binary\npayload"
    assert ids(trace.get_current_span(context).get_span_context()) == ids(
        producer.get_span_context()
    )
    # An explicit context wins over the current one (there is none here).
    again = inject_trace_context(bytearray(b"x"), context=trace.set_span_in_context(producer))
    assert extract_trace_context(again)[0] == b"x"


def test_r9_without_an_active_span_the_payload_is_unchanged():
    assert inject_trace_context(b"plain") == b"plain"
    assert inject_trace_context(memoryview(b"plain")) == b"plain"
    assert extract_trace_context(b"plain") == (b"plain", None)


@pytest.mark.parametrize(
    "payload",
    [
        MAGIC,
        MAGIC + b"no newline",
        MAGIC + b"not json\nbody",
        MAGIC + b'["a list"]\nbody',
        MAGIC + b'{"traceparent": 1}\nbody',
        MAGIC + b"{" + b" " * 9000 + b"}\nbody",
        b"x" + MAGIC + b"{}\nbody",
    ],
)
def test_r9_a_payload_that_is_not_an_envelope_passes_through(payload):
    assert extract_trace_context(payload) == (payload, None)


@pytest.mark.parametrize("payload", ["text", None, 12])
def test_r9_inject_rejects_what_is_not_bytes(payload):
    with pytest.raises(InvalidArgument, match="payload must be bytes"):
        inject_trace_context(payload)


def test_r9_tracing_rejects_a_provider_that_is_not_one():
    with pytest.raises(InvalidArgument, match="tracer_provider"):
        JobTracing(tracer_provider="jaeger")
