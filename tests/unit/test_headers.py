"""D30: the ``Headers`` record, on its own (engines are covered by the conformance checks
``d30_*`` and the abuse tests)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime

import pytest

from alkstore_trio import Headers, Job
from alkstore_trio._core import NO_HEADERS


def test_d30_headers_are_a_read_only_mapping_iterated_in_key_order() -> None:
    headers = Headers({"b": "2", "a": "1", "Z": "0"})
    assert isinstance(headers, Mapping)
    assert list(headers) == ["Z", "a", "b"]
    assert list(headers.items()) == [("Z", "0"), ("a", "1"), ("b", "2")]
    assert headers["a"] == "1"
    assert headers.get("missing") is None
    assert "b" in headers
    assert 1 not in headers
    assert len(headers) == 3
    with pytest.raises(TypeError):
        headers["c"] = "3"  # type: ignore[index]
    with pytest.raises(AttributeError):
        headers.x = 1  # type: ignore[attr-defined]


def test_d30_headers_equal_any_mapping_with_the_same_items_and_hash_by_content() -> None:
    assert Headers({"a": "1", "b": "2"}) == {"b": "2", "a": "1"}
    assert Headers([("a", "1")]) == Headers({"a": "1"})
    assert Headers({"a": "1"}) != {"a": "2"}
    assert Headers() == {}
    assert Headers() != []
    assert hash(Headers({"a": "1", "b": "2"})) == hash(Headers({"b": "2", "a": "1"}))
    assert len({Headers({"a": "1"}), Headers([("a", "1")]), NO_HEADERS}) == 2


def test_d30_the_repr_of_headers_names_the_keys_and_never_a_value() -> None:
    text = repr(Headers({"traceparent": "00-secret-01", "tenant": "acme"}))
    assert text == "<Headers tenant, traceparent>"
    assert repr(NO_HEADERS) == "<Headers (none)>"


def test_d30_a_job_keeps_its_headers_out_of_its_repr_and_stays_hashable() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    job = Job(
        id=1,
        queue="q",
        payload=b"p",
        priority=0,
        state="pending",
        attempts=0,
        max_attempts=3,
        run_at=now,
        enqueued_at=now,
        visibility_timeout_s=300.0,
        backoff_base_s=5.0,
        expires_at=None,
        claimed_by=None,
        claimed_at=None,
        claim_expires_at=None,
        last_error=None,
        died_at=None,
    )
    assert job.headers is NO_HEADERS
    secret = dataclasses.replace(job, headers=Headers({"tenant": "SECRET-7"}))
    assert "SECRET-7" not in repr(secret)
    assert "tenant" not in repr(secret)
    assert secret != job
    assert len({job, secret, dataclasses.replace(secret)}) == 2
