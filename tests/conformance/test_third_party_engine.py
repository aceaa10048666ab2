"""Q14: an engine written outside the library, against the public seam only.

``RecordingEngine`` stands for a third party's engine: it is built from public names
alone (this module imports nothing private, which a test below checks), it is handed to
``open_store`` as an instance, and it passes the public conformance suite and the
state machine against the reference model. Because it forwards exactly the protocol's
methods (``ForwardingEngine`` has no ``__getattr__``), these runs also prove that the
store facade, the suite and the state machine need nothing of an engine beyond the
protocol.
"""

from __future__ import annotations

import ast
import random
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

import pytest
import trio
from _figures import run_counting_examples

from alkstore_trio import Enqueued, InvalidArgument, Job, Store, open_store
from alkstore_trio.engine import (
    Claim,
    Engine,
    EnqueueSpec,
    ForwardingEngine,
    MemoryEngine,
    OperatorPath,
    WorkPath,
)
from alkstore_trio.testing import ManualClock, check_conformance, engine_vs_model_test


class RecordingEngine(ForwardingEngine):
    """Counts every call the store makes, by operation, and the claims it acks."""

    def __init__(self, inner: Engine) -> None:
        super().__init__(inner)
        self.calls: Counter[str] = Counter()
        self.acked: list[Claim] = []

    async def claim(self, queue: str, worker_id: str, n: int) -> list[Job]:
        self.calls["claim"] += 1
        return await super().claim(queue, worker_id, n)

    async def ack(self, queue: str, claims: Sequence[Claim]) -> list[int]:
        self.calls["ack"] += 1
        self.acked.extend(claims)
        return await super().ack(queue, claims)

    async def enqueue(self, specs: Sequence[EnqueueSpec]) -> list[Enqueued]:
        self.calls["enqueue"] += 1
        return await super().enqueue(specs)


class RecordingHarness:
    """An engine harness for the recording engine over the in-memory engine."""

    name = "recording"

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.engines: list[RecordingEngine] = []

    @asynccontextmanager
    async def open_store(self, *, rng: random.Random | None = None) -> AsyncIterator[Store]:
        engine = RecordingEngine(MemoryEngine(self.clock))
        self.engines.append(engine)
        async with open_store(engine, rng=rng) as store:
            yield store

    async def now(self) -> datetime:
        return self.clock.now()

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)


async def test_q14_a_third_party_engine_passes_the_conformance_suite() -> None:
    harness = RecordingHarness()
    await check_conformance(harness)
    calls = sum((engine.calls for engine in harness.engines), Counter())
    assert min(calls["claim"], calls["ack"], calls["enqueue"]) > 0


_agree = engine_vs_model_test(RecordingHarness, steps=30, max_examples=40)


def test_q14_a_third_party_engine_agrees_with_the_reference_model(figures) -> None:
    figures.record(examples=run_counting_examples(_agree))


async def test_q13_a_single_ack_is_a_batch_of_one() -> None:
    engine = RecordingEngine(MemoryEngine(ManualClock()))
    async with open_store(engine) as store:
        queue = store.queue("q")
        job_id = await queue.enqueue(b"x")
        handle = await queue.claim_one("w")
        assert handle is not None
        assert await handle.ack()
    assert engine.acked == [Claim(job_id, 1)]
    assert engine.calls["ack"] == 1


async def test_q14_open_store_refuses_engine_options_given_with_an_instance() -> None:
    with pytest.raises(InvalidArgument, match="clock, schema cannot be given with an engine"):
        async with open_store(MemoryEngine(), clock=ManualClock(), schema="x"):
            pass  # pragma: no cover
    with pytest.raises(InvalidArgument, match="str such as 'memory://' or an engine instance"):
        async with open_store(object()):  # type: ignore[arg-type]
            pass  # pragma: no cover


async def test_q14_an_engine_instance_serves_one_store_once() -> None:
    engine = MemoryEngine(ManualClock())
    async with open_store(engine) as store:
        await store.queue("q").enqueue(b"x")
    with pytest.raises(InvalidArgument, match="opened before"):
        async with open_store(engine):
            pass  # pragma: no cover


async def test_q14_the_store_is_closed_when_its_engine_block_ends() -> None:
    engine = MemoryEngine(ManualClock())
    async with open_store(engine) as store:
        pass
    assert store.closed
    await trio.lowlevel.checkpoint()


def _protocol_methods(*protocols: type) -> set[str]:
    return {
        name
        for protocol in protocols
        for name in vars(protocol)
        if not name.startswith("_") and callable(vars(protocol)[name])
    }


def test_q14_the_forwarding_engine_forwards_every_method_of_the_protocol() -> None:
    wanted = _protocol_methods(Engine, WorkPath, OperatorPath)
    assert {"open", "claim", "ack", "get_job", "stats"} <= wanted
    forwarded = _protocol_methods(ForwardingEngine)
    assert forwarded == wanted, f"missing {wanted - forwarded}, extra {forwarded - wanted}"
    assert not hasattr(ForwardingEngine, "__getattr__")


def test_q14_this_module_uses_no_private_names_of_the_library() -> None:
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    private = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("alkstore_trio")
        and (
            any(part.startswith("_") for part in (node.module or "").split("."))
            or any(alias.name.startswith("_") for alias in node.names)
        )
    ]
    assert private == []
