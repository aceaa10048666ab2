"""The pure validators of ``_core/_validate.py`` and ``QueueOpts`` (Q1, Q2, Q3, Q4, Q6, Q12).

Every check raises :class:`InvalidArgument` (also a ``ValueError``) before any effect; the
message names the parameter and never shows payload bytes. Sync tests, no event loop.
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo

import pytest

from alkstore_trio import Enqueued, InvalidArgument
from alkstore_trio._core import DEFAULT_OPTS, QueueOpts, enqueue_specs
from alkstore_trio._core import _validate as v

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
HUNDRED_YEARS_S = 100 * 365 * 24 * 3600
SECRET = b"TOP-SECRET-PAYLOAD"

# Values no duration accepts: NaN, infinities, bools, non-numbers.
NOT_A_DURATION = [
    math.nan,
    math.inf,
    -math.inf,
    True,
    False,
    "5",
    None,
    b"5",
    [5],
    complex(1, 0),
]


def _msg(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    return str(excinfo.value)


# -- the error type ------------------------------------------------------------------------


def test_q12_invalid_argument_is_a_value_error():
    with pytest.raises(ValueError, match="priority"):
        v.check_priority("high")


# -- Q1 queue names ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "a",
        "Z",
        "0",
        "emails",
        "emails.high",
        "tenant-1:emails_v2",
        "a" * 63,
        "9lives",
        "alk",
        "alk-x",
        "alkx_y",
        "a_",
        "a.",
        "a-",
        "a:",
    ],
)
def test_q1_valid_queue_names_are_returned_unchanged(name):
    assert v.check_queue_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("", id="empty"),
        pytest.param("a" * 64, id="64-chars"),
        pytest.param("_a", id="leading-underscore"),
        pytest.param("-a", id="leading-dash"),
        pytest.param(".a", id="leading-dot"),
        pytest.param(":a", id="leading-colon"),
        pytest.param("a b", id="space"),
        pytest.param(" a", id="leading-space"),
        pytest.param("a/b", id="slash"),
        pytest.param("a*", id="star"),
        pytest.param("a\n", id="trailing-newline"),
        pytest.param("a\x00", id="nul"),
        pytest.param("\x00", id="only-nul"),
        pytest.param("em\u0430ils", id="cyrillic-a-lookalike"),
        pytest.param("\u0430", id="cyrillic-a-alone"),
        pytest.param("\u212aelvin", id="kelvin-sign"),
        pytest.param("\uff41", id="fullwidth-a"),
        pytest.param("\u0661", id="arabic-indic-digit"),
        pytest.param("a\ud800", id="lone-surrogate"),
        pytest.param("caf\u00e9", id="accented"),
        pytest.param("a\u200b", id="zero-width-space"),
    ],
)
def test_q1_bad_queue_names_are_rejected(name):
    with pytest.raises(InvalidArgument, match="queue name"):
        v.check_queue_name(name)


@pytest.mark.parametrize("name", [None, 1, b"emails", ["emails"], 3.5])
def test_q1_queue_name_must_be_a_str(name):
    with pytest.raises(InvalidArgument, match="queue name"):
        v.check_queue_name(name)


@pytest.mark.parametrize("name", ["alk_", "alk_jobs", "alk_" + "x" * 59])
def test_q1_alk_prefix_is_reserved(name):
    with pytest.raises(InvalidArgument, match="reserved") as excinfo:
        v.check_queue_name(name)
    assert "alk_" in _msg(excinfo)


def test_q1_queue_name_boundary_63_accepted_64_rejected():
    assert v.check_queue_name("q" * 63) == "q" * 63
    with pytest.raises(InvalidArgument):
        v.check_queue_name("q" * 64)


def test_q12_queue_name_message_shows_the_offending_value():
    with pytest.raises(InvalidArgument) as excinfo:
        v.check_queue_name("bad name")
    assert "'bad name'" in _msg(excinfo)


def test_q12_long_offending_values_are_shortened_in_messages():
    with pytest.raises(InvalidArgument) as excinfo:
        v.check_queue_name("x" * 10_000)
    assert len(_msg(excinfo)) < 300


# -- Q1 QueueOpts --------------------------------------------------------------------------


def test_q1_queue_opts_defaults_are_the_contract_defaults():
    opts = QueueOpts()
    assert opts == DEFAULT_OPTS
    assert opts.visibility_timeout_s == 300
    assert opts.max_attempts == 3
    assert opts.backoff_base_s == 5
    assert opts.expires_in_s is None
    assert opts.dead_letter_retention_s is None


def test_q1_queue_opts_is_frozen():
    opts = QueueOpts()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.max_attempts = 10  # type: ignore[misc]


def test_q1_queue_opts_durations_are_stored_as_floats():
    opts = QueueOpts(
        visibility_timeout_s=10,
        backoff_base_s=0,
        expires_in_s=60,
        dead_letter_retention_s=0,
    )
    for name in (
        "visibility_timeout_s",
        "backoff_base_s",
        "expires_in_s",
        "dead_letter_retention_s",
    ):
        value = getattr(opts, name)
        assert type(value) is float, name
    assert opts.visibility_timeout_s == 10.0
    assert opts.backoff_base_s == 0.0
    assert opts.expires_in_s == 60.0
    assert opts.dead_letter_retention_s == 0.0


DURATION_OPTS = [
    "visibility_timeout_s",
    "backoff_base_s",
    "expires_in_s",
    "dead_letter_retention_s",
]
OPTIONAL_OPTS = {"expires_in_s", "dead_letter_retention_s"}


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        (field, bad)
        for field in DURATION_OPTS
        for bad in NOT_A_DURATION
        if not (bad is None and field in OPTIONAL_OPTS)
    ],
)
def test_q1_queue_opts_reject_non_finite_bool_and_wrong_type_durations(field, bad):
    with pytest.raises(InvalidArgument, match=field):
        QueueOpts(**{field: bad})


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("visibility_timeout_s", 0),
        ("visibility_timeout_s", 0.0),
        ("visibility_timeout_s", -0.0),
        ("visibility_timeout_s", -1),
        ("backoff_base_s", -1),
        ("backoff_base_s", -1e-9),
        ("expires_in_s", 0),
        ("expires_in_s", -5),
        ("dead_letter_retention_s", -1),
        ("dead_letter_retention_s", -1e-9),
    ],
)
def test_q1_queue_opts_reject_out_of_range_durations(field, bad):
    with pytest.raises(InvalidArgument, match=field):
        QueueOpts(**{field: bad})


@pytest.mark.parametrize(
    ("field", "ok"),
    [
        ("visibility_timeout_s", 1e-6),
        ("backoff_base_s", 0),
        ("dead_letter_retention_s", 0),
        ("expires_in_s", 0.5),
        ("expires_in_s", None),
        ("dead_letter_retention_s", None),
    ],
)
def test_q1_queue_opts_accept_boundary_values(field, ok):
    opts = QueueOpts(**{field: ok})
    assert getattr(opts, field) == ok


@pytest.mark.parametrize("field", DURATION_OPTS)
def test_q1_queue_opts_durations_are_at_most_100_years(field):
    assert getattr(QueueOpts(**{field: HUNDRED_YEARS_S}), field) == HUNDRED_YEARS_S
    with pytest.raises(InvalidArgument, match=field):
        QueueOpts(**{field: HUNDRED_YEARS_S + 1})
    with pytest.raises(InvalidArgument, match=field):
        QueueOpts(**{field: 1e300})


@pytest.mark.parametrize("field", DURATION_OPTS)
def test_q1_queue_opts_huge_int_duration_is_invalid_argument_not_overflow(field):
    """An int too large for a float must be refused like any other huge value."""
    with pytest.raises(InvalidArgument, match=field):
        QueueOpts(**{field: 10**400})


@pytest.mark.parametrize("bad", [0, -1, True, False, 1.0, 3.5, "3", None, INT32_MAX + 1, 2**63])
def test_q1_queue_opts_max_attempts_must_be_an_int_from_1_to_int32_max(bad):
    with pytest.raises(InvalidArgument, match="max_attempts"):
        QueueOpts(max_attempts=bad)


@pytest.mark.parametrize("ok", [1, 2, INT32_MAX])
def test_q1_queue_opts_max_attempts_boundaries_accepted(ok):
    assert QueueOpts(max_attempts=ok).max_attempts == ok


def test_q1_queue_opts_replace_revalidates():
    with pytest.raises(InvalidArgument, match="visibility_timeout_s"):
        dataclasses.replace(QueueOpts(), visibility_timeout_s=-1)


def test_q1_queue_opts_positional_arguments_are_validated_too():
    with pytest.raises(InvalidArgument, match="max_attempts"):
        QueueOpts(300, 0)


def test_q12_queue_opts_message_names_parameter_and_value():
    with pytest.raises(InvalidArgument) as excinfo:
        QueueOpts(visibility_timeout_s=-7.5)
    assert "visibility_timeout_s" in _msg(excinfo)
    assert "-7.5" in _msg(excinfo)


# -- durations in general (decision 8) -----------------------------------------------------


@pytest.mark.parametrize("bad", NOT_A_DURATION)
def test_q12_check_duration_rejects_non_numbers_and_non_finite(bad):
    with pytest.raises(InvalidArgument, match="delay_s"):
        v.check_duration("delay_s", bad)


@pytest.mark.parametrize(
    "ok", [0, -1, 1.5, -(HUNDRED_YEARS_S), HUNDRED_YEARS_S, float(HUNDRED_YEARS_S), 5e-324]
)
def test_q2_check_duration_without_bound_accepts_negative_and_up_to_100_years(ok):
    result = v.check_duration("delay_s", ok)
    assert type(result) is float
    assert result == ok


@pytest.mark.parametrize(
    "bad",
    [HUNDRED_YEARS_S + 1, -(HUNDRED_YEARS_S + 1), 1e300, -1e300, 2**63, INT64_MAX],
)
def test_q2_check_duration_rejects_more_than_100_years(bad):
    with pytest.raises(InvalidArgument, match="delay_s"):
        v.check_duration("delay_s", bad)


@pytest.mark.parametrize("bad", [10**400, -(10**400), 2**1024], ids=["1e400", "-1e400", "2**1024"])
def test_q12_check_duration_huge_int_is_invalid_argument_not_overflow_error(bad):
    """``float(10**400)`` raises OverflowError; the validator must turn it into an
    InvalidArgument naming the parameter (Q12: bad input is InvalidArgument)."""
    with pytest.raises(InvalidArgument, match="delay_s"):
        v.check_duration("delay_s", bad)


def test_q12_check_duration_min_bound_inclusive_and_exclusive():
    assert v.check_duration("x", 0, min_s=0) == 0.0
    with pytest.raises(InvalidArgument, match=r"x must be >= 0"):
        v.check_duration("x", -0.001, min_s=0)
    with pytest.raises(InvalidArgument, match=r"x must be > 0"):
        v.check_duration("x", 0, min_s=0, min_inclusive=False)
    assert v.check_duration("x", 1e-9, min_s=0, min_inclusive=False) == 1e-9


def test_q12_check_optional_duration_passes_none_through():
    assert v.check_optional_duration("extend_s", None, min_s=0) is None
    assert v.check_optional_duration("extend_s", 3, min_s=0) == 3.0
    with pytest.raises(InvalidArgument, match="extend_s"):
        v.check_optional_duration("extend_s", math.nan, min_s=0)


def test_q12_duration_message_names_parameter_and_value():
    with pytest.raises(InvalidArgument) as excinfo:
        v.check_duration("extend_s", math.inf)
    assert "extend_s" in _msg(excinfo)
    assert "inf" in _msg(excinfo)


# -- ints: priority, max_attempts, job ids, batch size (decision 9) ------------------------


@pytest.mark.parametrize("ok", [0, 1, -1, INT32_MAX, INT32_MIN])
def test_q2_priority_accepts_the_int32_range(ok):
    assert v.check_priority(ok) == ok


@pytest.mark.parametrize(
    "bad", [INT32_MAX + 1, INT32_MIN - 1, 2**63, True, False, 1.0, "1", None, math.nan]
)
def test_q2_priority_rejects_outside_int32_and_non_ints(bad):
    with pytest.raises(InvalidArgument, match="priority"):
        v.check_priority(bad)


def test_q2_priority_message_names_bounds_and_value():
    with pytest.raises(InvalidArgument) as excinfo:
        v.check_priority(INT32_MAX + 1)
    assert str(INT32_MAX + 1) in _msg(excinfo)
    assert str(INT32_MAX) in _msg(excinfo)


def test_q2_per_job_max_attempts_override():
    assert v.check_optional_max_attempts(None) is None
    assert v.check_optional_max_attempts(1) == 1
    assert v.check_optional_max_attempts(INT32_MAX) == INT32_MAX
    for bad in (0, -1, INT32_MAX + 1, True, 2.0):
        with pytest.raises(InvalidArgument, match="max_attempts"):
            v.check_optional_max_attempts(bad)


@pytest.mark.parametrize("ok", [0, 1, -1, INT64_MAX, INT64_MIN])
def test_q8_job_id_accepts_the_int64_range(ok):
    assert v.check_job_id(ok) == ok


@pytest.mark.parametrize("bad", [INT64_MAX + 1, INT64_MIN - 1, True, 1.0, "1", None])
def test_q8_job_id_rejects_outside_int64_and_non_ints(bad):
    with pytest.raises(InvalidArgument, match="job_id"):
        v.check_job_id(bad)


def test_q6_job_ids_are_deduplicated_in_order():
    assert v.check_job_ids([3, 1, 3, 2, 1]) == [3, 1, 2]
    assert v.check_job_ids(iter([5, 5])) == [5]
    assert v.check_job_ids(i for i in (7, 8)) == [7, 8]
    assert v.check_job_ids([]) == []
    assert v.check_job_ids(range(3)) == [0, 1, 2]


@pytest.mark.parametrize("bad", [5, None, "123", b"\x01\x02", bytearray(b"\x01"), 1.5])
def test_q6_job_ids_must_be_an_iterable_of_ints(bad):
    with pytest.raises(InvalidArgument, match="ids"):
        v.check_job_ids(bad)


@pytest.mark.parametrize("bad_item", [True, 1.0, "1", None, INT64_MAX + 1])
def test_q6_job_ids_reject_a_bad_item(bad_item):
    with pytest.raises(InvalidArgument, match="job_id"):
        v.check_job_ids([1, bad_item])


def test_q6_job_ids_message_never_shows_bytes():
    with pytest.raises(InvalidArgument) as excinfo:
        v.check_job_ids(SECRET)
    assert "SECRET" not in _msg(excinfo)


@pytest.mark.parametrize("ok", [1, 0, -5, 10**6])
def test_q3_batch_size_any_int(ok):
    assert v.check_batch_size(ok) == ok


@pytest.mark.parametrize("bad", [True, False, 1.0, "1", None, math.inf])
def test_q3_batch_size_must_be_an_int(bad):
    with pytest.raises(InvalidArgument, match=r"\bn\b"):
        v.check_batch_size(bad)


# -- datetimes -----------------------------------------------------------------------------


class _NoOffset(tzinfo):
    def utcoffset(self, dt):
        return None

    def dst(self, dt):
        return None

    def tzname(self, dt):
        return None


def test_q2_run_at_accepts_aware_datetimes():
    aware = datetime(2030, 1, 1, tzinfo=UTC)
    assert v.check_optional_run_at(aware) == aware
    plus2 = datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=2)))
    assert v.check_optional_run_at(plus2) == plus2
    assert v.check_optional_run_at(None) is None


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(datetime(2030, 1, 1), id="naive"),
        pytest.param(datetime(2030, 1, 1, tzinfo=_NoOffset()), id="tzinfo-without-offset"),
        pytest.param(date(2030, 1, 1), id="date"),
        pytest.param("2030-01-01T00:00:00Z", id="str"),
        pytest.param(1893456000, id="epoch-int"),
    ],
)
def test_q2_run_at_rejects_naive_and_non_datetimes(bad):
    with pytest.raises(InvalidArgument, match="run_at"):
        v.check_optional_run_at(bad)


def test_q12_naive_run_at_message_says_timezone_aware():
    with pytest.raises(InvalidArgument, match="timezone-aware"):
        v.check_aware_datetime("run_at", datetime(2030, 1, 1))


# -- Q2 payload ----------------------------------------------------------------------------


def test_q2_payload_bytes_is_returned_as_is():
    payload = b"\x00\xffabc"
    assert v.check_payload(payload, 100) is payload


@pytest.mark.parametrize(
    "payload",
    [
        bytearray(b"\x00\x01abc"),
        memoryview(b"\x00\x01abc"),
        memoryview(bytearray(b"\x00\x01abc")),
    ],
)
def test_q2_payload_bytearray_and_memoryview_become_bytes(payload):
    result = v.check_payload(payload, 100)
    assert type(result) is bytes
    assert result == b"\x00\x01abc"


def test_q2_payload_is_copied_not_aliased():
    source = bytearray(b"abc")
    result = v.check_payload(source, 100)
    source[0] = ord("z")
    assert result == b"abc"


def test_q2_payload_non_contiguous_memoryview_is_converted():
    assert v.check_payload(memoryview(b"abcdef")[::2], 100) == b"ace"


def test_q2_payload_size_counts_bytes_not_items():
    ints = array("i", [1, 2])
    raw = ints.tobytes()
    assert v.check_payload(memoryview(ints), len(raw)) == raw
    with pytest.raises(InvalidArgument, match="payload"):
        v.check_payload(memoryview(ints), len(raw) - 1)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("text", id="str"),
        pytest.param("", id="empty-str"),
        pytest.param(None, id="none"),
        pytest.param(5, id="int"),
        pytest.param([1, 2], id="list"),
        pytest.param({"a": 1}, id="dict"),
        pytest.param(array("b", [1]), id="array-without-memoryview"),
    ],
)
def test_q2_payload_str_and_other_types_are_rejected(bad):
    with pytest.raises(InvalidArgument, match="payload"):
        v.check_payload(bad, 100)


def test_q2_payload_str_message_says_encode_it():
    with pytest.raises(InvalidArgument, match="encode") as excinfo:
        v.check_payload("TOP-SECRET-TEXT", 100)
    assert "TOP-SECRET-TEXT" not in _msg(excinfo)


def test_q2_payload_size_boundary_at_default_limit():
    limit = v.DEFAULT_MAX_PAYLOAD_BYTES
    assert limit == 1024 * 1024
    assert len(v.check_payload(b"\x00" * limit, limit)) == limit
    with pytest.raises(InvalidArgument, match="payload") as excinfo:
        v.check_payload(b"\x00" * (limit + 1), limit)
    assert str(limit) in _msg(excinfo)
    assert str(limit + 1) in _msg(excinfo)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_q2_payload_size_boundary_small_limit(kind):
    assert v.check_payload(kind(b"x" * 10), 10) == b"x" * 10
    with pytest.raises(InvalidArgument, match="payload"):
        v.check_payload(kind(b"x" * 11), 10)


def test_q2_empty_payload_allowed_even_with_zero_limit():
    assert v.check_payload(b"", 0) == b""
    with pytest.raises(InvalidArgument):
        v.check_payload(b"x", 0)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_q12_payload_messages_never_contain_payload_bytes(kind):
    payload = kind(SECRET * 10)
    with pytest.raises(InvalidArgument) as excinfo:
        v.check_payload(payload, 5)
    message = _msg(excinfo)
    assert "TOP-SECRET" not in message
    assert "payload" in message


def test_q12_released_memoryview_payload_is_invalid_argument():
    """A released memoryview is unusable input: InvalidArgument, not a bare ValueError."""
    view = memoryview(SECRET)
    view.release()
    with pytest.raises(InvalidArgument, match="payload"):
        v.check_payload(view, 100)


def test_q12_show_never_renders_bytes_content():
    for value in (SECRET, bytearray(SECRET), memoryview(SECRET)):
        shown = v._show(value)
        assert "SECRET" not in shown
        assert str(len(SECRET)) in shown


# -- Q3 worker_id, Q4 error text (decision 9) ----------------------------------------------


@pytest.mark.parametrize("ok", ["w", "worker-1@host:42", "x" * 200, "\u00e9\u4e2d\U0001f600", " "])
def test_q3_worker_id_accepts_non_empty_text_up_to_200_chars(ok):
    assert v.check_worker_id(ok) == ok


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("", id="empty"),
        pytest.param("x" * 201, id="201-chars"),
        pytest.param("a\x00b", id="nul"),
        pytest.param("a\ud800", id="lone-high-surrogate"),
        pytest.param("\udc00", id="lone-low-surrogate"),
        pytest.param("\ud83d\ude00", id="surrogate-pair-as-two-code-points"),
        pytest.param(None, id="none"),
        pytest.param(b"worker", id="bytes"),
        pytest.param(1, id="int"),
    ],
)
def test_q3_worker_id_rejects_empty_long_nul_surrogates_and_non_str(bad):
    with pytest.raises(InvalidArgument, match="worker_id"):
        v.check_worker_id(bad)


def test_q3_worker_id_length_counts_characters_not_bytes():
    wide = "\U0001f600" * 200  # 800 UTF-8 bytes, 200 characters
    assert v.check_worker_id(wide) == wide
    with pytest.raises(InvalidArgument, match="worker_id"):
        v.check_worker_id(wide + "x")


@pytest.mark.parametrize("ok", [None, "", "boom", "x" * 65536, "line1\nline2\ttab"])
def test_q4_error_text_accepts_none_empty_and_up_to_65536_chars(ok):
    assert v.check_error_text(ok) == ok


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("x" * 65537, id="65537-chars"),
        pytest.param("bad\x00thing", id="nul"),
        pytest.param("bad\udfff", id="lone-surrogate"),
        pytest.param(b"boom", id="bytes"),
        pytest.param(ValueError("boom"), id="exception-object"),
        pytest.param(5, id="int"),
    ],
)
def test_q4_error_text_rejects_long_nul_surrogate_and_non_str(bad):
    with pytest.raises(InvalidArgument, match="error"):
        v.check_error_text(bad)


def test_q12_long_text_message_does_not_echo_the_text():
    with pytest.raises(InvalidArgument) as excinfo:
        v.check_error_text("E" * 70_000)
    assert "65536" in _msg(excinfo)
    assert "70000" in _msg(excinfo)
    assert len(_msg(excinfo)) < 300


# -- Q2 enqueue_specs: all validation before any effect ------------------------------------


def _specs(payloads, **kwargs):
    options = {"priority": 0, "delay_s": None, "run_at": None, "max_attempts": None}
    options.update(kwargs)
    return enqueue_specs("q", QueueOpts(), payloads, max_payload_bytes=10, **options)


def test_q2_enqueue_specs_stamp_the_queue_opts():
    opts = QueueOpts(visibility_timeout_s=7, max_attempts=4, backoff_base_s=2, expires_in_s=9)
    (spec,) = enqueue_specs(
        "q",
        opts,
        [bytearray(b"ab")],
        max_payload_bytes=10,
        priority=3,
        delay_s=-4,
        run_at=None,
        max_attempts=None,
    )
    assert spec.queue == "q"
    assert spec.payload == b"ab"
    assert type(spec.payload) is bytes
    assert spec.priority == 3
    assert spec.delay_s == 0.0  # Q2.1: a negative delay means now
    assert spec.max_attempts == 4
    assert spec.visibility_timeout_s == 7.0
    assert spec.backoff_base_s == 2.0
    assert spec.expires_in_s == 9.0


def test_q2_enqueue_specs_per_job_max_attempts_override_wins():
    specs = _specs([b"a", b"b"], max_attempts=9)
    assert [s.max_attempts for s in specs] == [9, 9]


def test_q2_enqueue_specs_reject_a_bad_payload_anywhere_in_the_batch():
    with pytest.raises(InvalidArgument, match="payload"):
        _specs([b"ok", b"ok", "not bytes"])
    with pytest.raises(InvalidArgument, match="payload"):
        _specs([b"ok", b"x" * 11])


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"priority": 2**31}, "priority"),
        ({"delay_s": math.nan}, "delay_s"),
        ({"delay_s": True}, "delay_s"),
        ({"run_at": datetime(2030, 1, 1)}, "run_at"),
        ({"max_attempts": 0}, "max_attempts"),
    ],
)
def test_q2_enqueue_specs_reject_bad_options(kwargs, param):
    with pytest.raises(InvalidArgument, match=param):
        _specs([b"a"], **kwargs)


def test_q2_enqueue_specs_empty_batch_is_empty():
    assert _specs([]) == []


def test_q2_enqueue_spec_repr_hides_the_payload():
    (spec,) = _specs([b"SECRETXY"])
    assert "SECRETXY" not in repr(spec)


# -- Q15 unique keys ------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["k", "k" * 256, "Zürich ✓", "with space", "'); --"])
def test_q15_unique_key_accepts_storable_text_up_to_256_characters(key):
    assert v.check_unique_key(key) == key


@pytest.mark.parametrize("key", ["", "k" * 257, "a\x00b", "\ud800", 5, b"k", None])
def test_q15_unique_key_rejects_anything_else_without_showing_it(key):
    with pytest.raises(InvalidArgument, match="unique_key") as info:
        v.check_unique_key(key)
    if isinstance(key, str) and len(key) > 1:
        assert key not in str(info.value)


def test_q15_unique_keys_need_one_entry_per_payload():
    assert v.check_unique_keys(("a", None), 2) == ["a", None]
    for keys in (["a"], ["a", "b", "c"], "ab", 5):
        with pytest.raises(InvalidArgument, match="unique_keys"):
            v.check_unique_keys(keys, 2)


def test_q15_enqueue_specs_carry_the_key_and_the_window_of_keyed_specs_only():
    specs = _specs([b"a", b"b"], unique_keys=["k", None], unique_for_s=30)
    assert [(s.unique_key, s.unique_for_s) for s in specs] == [("k", 30.0), (None, None)]
    with pytest.raises(InvalidArgument, match="unique_for_s needs a unique_key"):
        _specs([b"a"], unique_for_s=30)
    with pytest.raises(InvalidArgument, match="unique_for_s"):
        _specs([b"a"], unique_keys=["k"], unique_for_s=0)


def test_q15_enqueued_is_the_id_with_a_read_only_created_flag():
    import pickle

    found = Enqueued.existing(7)
    assert (found, found.created, Enqueued(7).created) == (7, False, True)
    assert (str(found), f"{found}", repr(found)) == ("7", "7", "Enqueued(7, created=False)")
    assert hash(found) == hash(7)
    assert isinstance(found, Enqueued)
    assert pickle.loads(pickle.dumps(found)).created is False
    with pytest.raises(AttributeError):
        found.created = True  # type: ignore[misc]
    assert type(v.check_job_id(found)) is int  # engines get plain ints
