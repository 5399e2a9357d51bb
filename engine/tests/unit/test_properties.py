"""Properties over inputs nobody wrote down (hypothesis): payload parsing never fails with
anything but PayloadError, configuration never with anything but ConfigError naming a real
variable, a dead-letter request never breaks SQS's attribute limit or drops an attribute."""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from sqs_worker_engine.base.backoff import backoff_delay
from sqs_worker_engine.base.errors import NonRetryableError, PayloadError
from sqs_worker_engine.base.limits import MAX_VISIBILITY_SECONDS as MAX_LEASE_SECONDS
from sqs_worker_engine.base.limits import RETRY_BASES, retries_wait_at_least, retry_base_outlasting
from sqs_worker_engine.formats.dlq import (
    ATTRIBUTE_NAME,
    ERROR_ATTRIBUTES,
    MAX_ATTRIBUTES,
    MAX_ERROR_MESSAGE,
    dead_letter_request,
    decode_attribute,
    original_attributes,
)
from sqs_worker_engine.formats.payload import parse_payload
from sqs_worker_engine.process.settings import ConfigError, WorkerConfig, load_settings
from sqs_worker_engine.process.settings.fields import ALIASES
from sqs_worker_engine.process.settings.queues import QUEUE_OVERRIDES
from sqs_worker_engine.runtime.settling.delivery import extension_seconds

# No deadline: the machine running the suite may be busy. No example database: a failure
# prints its example (and how to replay it), and nothing is left in the project tree.
PROPERTY = settings(deadline=None, max_examples=150, database=None, suppress_health_check=[HealthCheck.too_slow])
TEXT = st.characters(codec="utf-8")  # no lone surrogates: what an SQS body or env var can hold


class Order(BaseModel):
    id: str
    amount: int = 0
    tags: list[str] = []


def nested(depth: int, opener: str) -> str:
    return opener * depth


BODIES = st.one_of(
    st.text(),
    st.text(alphabet=st.sampled_from('{}[]":,0123456789.eE+-truefalsnNaIiy \n\\u')),
    st.builds(nested, st.integers(1, 200_000), st.sampled_from(["[", '{"a":', "[{", " ["])),
    st.builds(lambda digits: "1" * digits, st.integers(1, 10_000)),
    st.builds(
        json.dumps,
        st.recursive(
            st.none() | st.booleans() | st.floats() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)
        ),
    ),
)


@PROPERTY
@given(BODIES)
def test_any_body_parses_or_raises_payload_error(body: str) -> None:
    for model in (None, Order, str):
        # Anything else (RecursionError, UnicodeError...) escapes and fails the test.
        with contextlib.suppress(PayloadError):
            parse_payload(model, body)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(alphabet=TEXT),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(alphabet=TEXT), children, max_size=5),
    max_leaves=25,
)


@PROPERTY
@given(JSON)
def test_json_payloads_round_trip(value: Any) -> None:
    assert parse_payload(None, json.dumps(value)) == value


@PROPERTY
@given(st.builds(Order, id=st.text(alphabet=TEXT), amount=st.integers(), tags=st.lists(st.text(alphabet=TEXT))))
def test_model_payloads_round_trip(order: Order) -> None:
    assert parse_payload(Order, order.model_dump_json()) == order


# -- settings ------------------------------------------------------------------------

OVERRIDE_VARS = [
    f"WORKER_QUEUE_{key}_{s}" for key in ("ORDERS", "RECEIPTS_FIFO", "NOPE") for s in (*QUEUE_OVERRIDES, "COLOUR")
]
VALUES = st.one_of(
    st.text(alphabet=TEXT, max_size=12),
    st.integers(-(10**40), 10**40).map(str),
    st.floats().map(str),
    st.sampled_from(
        [
            "",
            " ",
            "0",
            "1",
            "true",
            "inf",
            "-inf",
            "nan",
            "1e400",
            "1_000",
            "0x10",
            "\uff15",  # fullwidth 5
            "\u0663",  # Arabic-Indic 3
            "+5",
            " 5",
            "5.0",
            "0.00001/s",
            "1/h",
            "tcp://10.0.0.1:9102",
            "10.0.0.1",
            "orders",
            "orders,receipts.fifo",
            "orders,orders",
            "http://localhost:4566",
            "http://u:p@h:port",
            "http://h:99999",
            "https://[::1",
            "ftp://x",
            "postgresql://app:secret@db/x",
            "pkg.mod:router",
        ]
    ),
)
ENVIRONMENTS = st.dictionaries(st.sampled_from(sorted(ALIASES) + OVERRIDE_VARS), VALUES, max_size=8)


@PROPERTY
@given(ENVIRONMENTS)
def test_settings_refuse_only_with_config_error_naming_real_variables(env: dict[str, str]) -> None:
    try:
        config = load_settings(env)
    except ConfigError as exc:
        problems = exc.problems
    else:
        problems = []
    if problems:
        for var, message in problems:
            assert var in ALIASES or (var.startswith("WORKER_QUEUE_") and var in env), var
            assert message.strip(), var
        return
    # Whatever boots can be printed (`config`, and the start and stop log lines).
    json.dumps(config.describe())
    assert config.stalled_after > max(q.job_timeout for q in config.queues)
    assert all(q.job_timeout_ms < config.settings.shutdown_timeout_ms for q in config.queues)
    assert math.isfinite(config.stalled_after)


def taken_or_refused(env: dict[str, str], variable: str) -> WorkerConfig | None:
    """The configuration, or None when it is refused naming `variable` alone."""
    problems: list[tuple[str, str]] = []
    try:
        return load_settings(env)
    except ConfigError as exc:
        problems = exc.problems
    assert [name for name, _ in problems] == [variable], problems
    return None


WHOLE_NUMBER_TEXTS = st.one_of(
    st.text(alphabet=TEXT, max_size=8),
    st.integers(-(10**6), 10**6).map(str),
    st.from_regex(r"[ +\-]?[0-9_\u0660-\u0669\uff10-\uff19]{1,6}(\.0)?[ \n]?", fullmatch=True),
)


@PROPERTY
@given(WHOLE_NUMBER_TEXTS)
def test_a_per_queue_whole_number_is_taken_exactly_when_the_global_one_is(value: str) -> None:
    """One reader for both: per queue, int() took Unicode digits, `1_0`, `+5` and spaces."""

    def read(variable: str) -> int | None:
        config = taken_or_refused({"WORKER_QUEUES": "orders", "WORKER_PREFETCH": "0", variable: value}, variable)
        return None if config is None else config.queues[0].concurrency

    taken = read("WORKER_CONCURRENCY")
    assert taken == read("WORKER_QUEUE_ORDERS_CONCURRENCY")
    assert taken is None or str(taken) == value.lstrip("0") or (taken == 0 == int(value))


RATE_TEXTS = st.one_of(
    st.text(alphabet=TEXT, max_size=10),
    st.builds(
        "{}{}/{}".format,
        st.from_regex(r"[0-9\u0660-\u0669]{1,45}", fullmatch=True),
        st.from_regex(r"(\.[0-9]{1,45})?", fullmatch=True),
        st.sampled_from(["s", "min", "h"]),
    ),
)


@PROPERTY
@given(RATE_TEXTS)
def test_a_rate_limit_taken_is_finite_at_least_one_a_day_and_read_alike_globally_and_per_queue(value: str) -> None:
    def read(variable: str) -> float | None:
        config = taken_or_refused({"WORKER_QUEUES": "orders", variable: value}, variable)
        return None if config is None else config.queues[0].rate_limit

    rate = read("WORKER_RATE_LIMIT")
    assert rate == read("WORKER_QUEUE_ORDERS_RATE_LIMIT")
    assert rate is None or (math.isfinite(rate) and rate >= 1 / 86_400 and value.isascii())


# -- dead-letter requests -------------------------------------------------------------

ATTRIBUTE_NAMES = st.one_of(st.from_regex(r"[A-Za-z0-9_\-.]{1,16}", fullmatch=True), st.sampled_from(ERROR_ATTRIBUTES))
ATTRIBUTE_VALUES = st.one_of(
    st.builds(lambda s: {"DataType": "String", "StringValue": s}, st.text(alphabet=TEXT, min_size=1)),
    st.builds(lambda n: {"DataType": "Number", "StringValue": str(n)}, st.integers()),
    st.builds(lambda b: {"DataType": "Binary", "BinaryValue": b}, st.binary(min_size=1)),
)
MESSAGES = st.fixed_dictionaries(
    {
        "MessageId": st.text(alphabet=TEXT, min_size=1, max_size=200),
        "Body": st.text(alphabet=TEXT),
        "Attributes": st.fixed_dictionaries(
            {"ApproximateReceiveCount": st.integers(1, 1000).map(str)},
            optional={"MessageGroupId": st.text(alphabet=TEXT, min_size=1, max_size=128)},
        ),
        "MessageAttributes": st.dictionaries(ATTRIBUTE_NAMES, ATTRIBUTE_VALUES, max_size=12),
    }
)
ERRORS = st.builds(
    lambda cls, text: cls(text),
    st.sampled_from([NonRetryableError, PayloadError, ValueError, KeyError]),
    st.text(alphabet=TEXT),
)


@PROPERTY
@given(MESSAGES, ERRORS, st.booleans())
def test_dead_letter_request_keeps_every_attribute_within_the_limit(
    message: dict[str, Any], error: BaseException, fifo: bool
) -> None:
    request = dead_letter_request(message, "dlq-url", "orders", error, "worker-1", fifo)
    attrs = request["MessageAttributes"]
    assert len(attrs) <= MAX_ATTRIBUTES
    assert set(ERROR_ATTRIBUTES) <= set(attrs)
    assert all(a["StringValue"] for name, a in attrs.items() if name in ERROR_ATTRIBUTES), "SQS refuses empty values"
    assert len(attrs["x-error-message"]["StringValue"]) <= MAX_ERROR_MESSAGE
    assert attrs["x-error-type"]["StringValue"] == type(error).__name__
    originals = message["MessageAttributes"]
    kept = {k: v for k, v in attrs.items() if k not in ERROR_ATTRIBUTES}
    context = json.loads(attrs["x-error-context"]["StringValue"])
    aside = context.get("attributes", {})
    assert all(originals[k] == v for k, v in kept.items()), "kept attributes are unchanged"
    assert not set(kept) & set(aside) and set(kept) | set(aside) == set(originals), "nothing dropped"
    assert all(decode_attribute(aside[k]) == originals[k] for k in aside), "each moved aside with its type"
    copy = {"MessageId": "d", "Body": request["MessageBody"], "Attributes": {}, "MessageAttributes": attrs}
    restored = original_attributes(copy["MessageAttributes"])
    if len(originals) <= MAX_ATTRIBUTES and all(ATTRIBUTE_NAME.fullmatch(name) for name in originals):
        assert restored == originals, "redrive (and the worker) restores them all"
    else:  # more than a message can carry (LocalStack takes 11): no record unfolds past SQS's rules
        assert restored == attrs or (restored == originals and len(restored) <= MAX_ATTRIBUTES)
    assert context["message_id"] == message["MessageId"] and context["source_queue"] == "orders"
    assert request["MessageBody"] == message["Body"]
    if fifo:
        assert 1 <= len(request["MessageDeduplicationId"]) <= 128 and request["MessageGroupId"]
    else:
        assert request.get("MessageGroupId") == message["Attributes"].get("MessageGroupId"), "a fair queue's tenant"
        assert "MessageDeduplicationId" not in request


# -- timing arithmetic ------------------------------------------------------------------


@PROPERTY
@given(st.integers(-5, 10_000), st.floats(0, 1e6), st.floats(0, 1e6), st.floats(0, 1))
def test_backoff_stays_within_half_a_step_and_the_cap(attempt: int, base: float, cap: float, rand: float) -> None:
    delay = backoff_delay(attempt, base, cap, rand)
    step = min(cap, base * 2.0 ** min(max(attempt - 1, 0), 32))
    assert step / 2 <= delay <= step <= cap or math.isclose(delay, step)


@PROPERTY
@given(st.integers(1, 40), st.floats(0, 1e4), st.floats(0, 1e4))
def test_the_least_the_retries_wait_is_the_backoff_with_the_jitter_at_its_least(
    attempts: int, base: float, cap: float
) -> None:
    """What the templates size the retry base by is the engine's own backoff, retry by retry."""
    least = sum(backoff_delay(retry, base, cap, rand=0.0) for retry in range(1, attempts))
    assert math.isclose(retries_wait_at_least(base, attempts, cap), least, rel_tol=1e-9, abs_tol=1e-9)


@PROPERTY
@given(st.integers(1, 1000), st.floats(0, 3600))
def test_the_retry_base_is_the_smallest_whose_retries_outlast(attempts: int, seconds: float) -> None:
    base = retry_base_outlasting(attempts, seconds)
    assert base in RETRY_BASES
    outlasting = [b for b in RETRY_BASES if retries_wait_at_least(b, attempts) >= seconds]
    if attempts <= 1:
        assert base == RETRY_BASES[0]  # no retry to size
    elif outlasting:
        assert base == outlasting[0]
    else:
        assert base == RETRY_BASES[-1]  # none outlasts: the one that comes closest


@PROPERTY
@given(st.integers(0, MAX_LEASE_SECONDS), st.floats(0, 1e6), st.floats(0, 2 * MAX_LEASE_SECONDS))
def test_lease_extension_never_passes_twelve_hours(visibility: int, received_at: float, held_for: float) -> None:
    now = received_at + held_for
    seconds = extension_seconds(visibility, received_at, now)
    assert 0 <= seconds <= visibility
    assert (now - received_at) + seconds < MAX_LEASE_SECONDS or seconds == 0
