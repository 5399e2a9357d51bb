"""Hostile and malformed input: message bodies and attributes, and configuration.

A message the worker cannot use goes to the DLQ with the reason recorded (or, when even that
does not fit, back to SQS until its redrive policy dead-letters it); one it can use is
handled. Nothing crashes the worker, wedges a slot, or holds the queue up. A configuration
value the worker cannot run with is refused at boot with a line naming the variable, never
with a traceback.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from pydantic import BaseModel

from sqs_worker_engine import Job, Router
from sqs_worker_engine.formats.dlq import original_attributes
from sqs_worker_engine.process.settings import ConfigError, load_settings
from sqs_worker_engine.process.settings.fields import ALIASES

from ..chaos import report
from ..support import PACKAGE, PROJECT_ROOT, REGION, Sqs, env_for, running_worker, wait_for

MAX_BODY = 1024 * 1024  # SQS's limit on a message: body and attributes together


class Work(BaseModel):
    id: str
    n: int = 0


def digest(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def attr(value: str | bytes, data_type: str = "String") -> dict[str, Any]:
    if isinstance(value, bytes):
        return {"DataType": data_type if data_type != "String" else "Binary", "BinaryValue": value}
    return {"DataType": data_type, "StringValue": value}


@dataclass
class Case:
    name: str
    queue: str  # "typed" (a pydantic model), "loose" (any JSON)
    body: str
    expect: str  # "dead_letter", "handled", "redrive" (SQS dead-letters it), "refused" (SQS says no)
    extra: dict[str, Any] = field(default_factory=dict)


TEN_ATTRIBUTES = {f"a{i}": attr(f"v{i}") for i in range(10)}
PAD = '{"id": "big", "pad": "' + "x" * (MAX_BODY - len('{"id": "big", "pad": ""}')) + '"}'

CASES = [
    # Bodies that are not JSON, or not the JSON the handler asked for.
    Case("not json", "typed", "not json at all", "dead_letter"),
    Case("truncated", "typed", '{"id": "x"', "dead_letter"),
    Case("whitespace only", "typed", " \n\t ", "dead_letter"),
    Case("byte order mark", "typed", '\ufeff{"id": "bom"}', "dead_letter"),
    *(Case(f"shape {b}", "typed", b, "dead_letter") for b in ("[]", "null", "42", '"text"', "true")),
    Case("wrong type", "typed", '{"id": 5}', "dead_letter"),
    Case("missing field", "typed", '{"n": 1}', "dead_letter"),
    Case("NaN", "typed", '{"id": "x", "n": NaN}', "dead_letter"),
    Case("huge number", "typed", '{"id": "x", "n": 1' + "0" * 5000 + "}", "dead_letter"),
    Case("deep nesting", "typed", "[" * 100_000, "dead_letter"),
    Case("escaped lone surrogate", "typed", '{"id": "\\ud800"}', "dead_letter"),
    Case("loose: deep nesting", "loose", "[" * 100_000, "dead_letter"),
    Case("loose: huge number", "loose", "1" + "0" * 5000, "dead_letter"),
    Case("loose: not json", "loose", "<xml/>", "dead_letter"),
    # Odd but valid: handled.
    Case("unicode", "typed", '{"id": "ünï-😀-\u202e-\u2028"}', "handled"),
    Case("duplicate keys", "typed", '{"id": "first", "id": "dup-last"}', "handled"),
    Case("loose: NaN", "loose", '{"v": NaN}', "handled"),
    Case("loose: escaped lone surrogate", "loose", '"\\ud800"', "handled"),
    Case("largest body", "typed", PAD, "handled"),
    # The largest body leaves no room for the error attributes: the DLQ send is refused, the
    # message is retried, and SQS's redrive policy dead-letters it.
    Case("largest invalid body", "typed", "y" * MAX_BODY, "redrive"),
    # Attributes.
    Case(
        "binary attribute, invalid UTF-8",
        "typed",
        "bad-binary",
        "dead_letter",
        {"MessageAttributes": {"raw": attr(b"\xff\xfe\x80\x00\xc3(")}},
    ),
    Case("ten attributes", "typed", "bad-ten", "dead_letter", {"MessageAttributes": TEN_ATTRIBUTES}),
    Case("ten attributes, valid", "typed", '{"id": "ten"}', "handled", {"MessageAttributes": TEN_ATTRIBUTES}),
    Case(
        "spoofed error attributes",
        "typed",
        "bad-spoof",
        "dead_letter",
        {"MessageAttributes": {"x-error-type": attr("Spoofed"), "x-error-message": attr("spoofed")}},
    ),
    Case(
        "custom types",
        "typed",
        "bad-types",
        "dead_letter",
        {"MessageAttributes": {"n": attr("1e999", "Number"), "c": attr("v", "String.custom-ü")}},
    ),
    Case(
        "trace header",
        "typed",
        '{"id": "trace"}',
        "handled",
        {"MessageSystemAttributes": {"AWSTraceHeader": attr("Root=garbage;;;=")}},
    ),
    # FIFO attributes on a standard queue: what SQS lets through must be handled.
    Case("group id on a standard queue", "typed", '{"id": "grouped"}', "handled", {"MessageGroupId": "g"}),
    Case(
        "deduplication id on a standard queue", "typed", '{"id": "dedup"}', "refused", {"MessageDeduplicationId": "d"}
    ),
    # What SQS itself refuses: tried, so the test knows what can reach a worker.
    Case("empty body", "typed", "", "refused"),
    *(Case(f"invalid character {c!r}", "typed", '{"id": "' + c + '"}', "refused") for c in ("\x00", "\x01", "\ufffe")),
    Case("body over the limit", "typed", "z" * (MAX_BODY + 1), "refused"),
    Case("reserved attribute name", "typed", '{"id": "aws"}', "refused", {"MessageAttributes": {"AWS.x": attr("v")}}),
]


def test_hostile_messages_are_dead_lettered_or_handled_and_never_wedge_the_worker(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    queues = {"typed": sqs.create(max_receive=2), "loose": sqs.create(max_receive=2)}
    router = Router()
    handled: list[tuple[str, str]] = []

    @router.handler(queues["typed"].name, payload=Work)
    async def typed(job: Job[Work]) -> None:
        handled.append(("typed", digest(job.body)))

    @router.handler(queues["loose"].name)
    async def loose(job: Job[Any]) -> None:
        handled.append(("loose", digest(job.body)))

    refused: dict[str, str] = {}
    for case in CASES:
        try:
            sqs.client.send_message(QueueUrl=queues[case.queue].url, MessageBody=case.body, **case.extra)
        except ClientError as exc:
            refused[case.name] = exc.response["Error"]["Code"]
    assert sorted(refused) == sorted(c.name for c in CASES if c.expect == "refused"), refused

    expected_handled = Counter((c.queue, digest(c.body)) for c in CASES if c.expect == "handled")
    expected_dead = {
        q: Counter(digest(c.body) for c in CASES if c.queue == q and c.expect in ("dead_letter", "redrive"))
        for q in queues
    }
    canaries = [{"id": f"canary-{i}"} for i in range(3)]
    env = env_for(
        localstack_endpoint,
        f"{queues['typed'].name},{queues['loose'].name}",
        health_file,
        WORKER_CONCURRENCY=2,
        WORKER_WAIT_TIME_SECONDS=1,
    )
    state: dict[str, Any] = {}

    async def scenario() -> None:
        async with running_worker(env, router) as worker:

            def dead(q: str) -> int:
                return sqs.counts(queues[q].dlq_url or "")[0]

            await wait_for(lambda: Counter(handled) == expected_handled, 90, "the usable messages")
            await wait_for(lambda: all(dead(q) == sum(expected_dead[q].values()) for q in queues), 90, "the DLQs")
            await wait_for(lambda: all(sqs.counts(queues[q].url) == (0, 0) for q in queues), 60, "the queues to empty")
            # The queues still flow: nothing in front of these got stuck.
            for q in queues:
                sqs.send(queues[q], canaries)
            await wait_for(lambda: len(handled) == sum(expected_handled.values()) + 6, 60, "the canaries")
            state["running"] = worker.state.value
            state["worker"] = worker

    asyncio.run(scenario())
    assert state["running"] == "running", "the worker kept running"
    # Stopped, a worker holds nothing: every slot given back, no lease kept alive, no job
    # left (a message that broke its job would hold its slot, and its lease would keep it
    # hidden from every other worker).
    pools = [(p.admission.held, len(p.book), len(p.runs), p.active) for p in state["worker"].pools]
    assert pools == [(0, 0, 0, 0)] * 2, f"slots, leases, runs or handlers leaked: {pools}"
    for q in queues:
        assert sqs.counts(queues[q].url) == (0, 0)
    dead = {q: sqs.receive_all(queues[q].dlq_url or "") for q in queues}
    for q in queues:
        assert Counter(digest(m["Body"]) for m in dead[q]) == expected_dead[q], q
    by_body = {digest(m["Body"]): m for q in queues for m in dead[q]}
    reasons = {
        c.name: by_body[digest(c.body)].get("MessageAttributes", {}).get("x-error-type", {}).get("StringValue")
        for c in CASES
        if c.expect in ("dead_letter", "redrive")
    }
    assert reasons == {
        name: None if next(c for c in CASES if c.name == name).expect == "redrive" else "PayloadError"
        for name in reasons
    }, reasons
    attrs = {
        c.name: by_body[digest(c.body)]["MessageAttributes"]
        for c in CASES
        if c.name in ("binary attribute, invalid UTF-8", "ten attributes", "spoofed error attributes", "custom types")
    }
    assert attrs["binary attribute, invalid UTF-8"]["raw"]["BinaryValue"] == b"\xff\xfe\x80\x00\xc3("
    ten = attrs["ten attributes"]
    assert len(ten) == 10, "SQS's limit: seven originals kept, three error attributes"
    assert original_attributes(ten) == TEN_ATTRIBUTES, "nothing dropped"
    spoofed = attrs["spoofed error attributes"]
    assert "spoofed" not in (spoofed["x-error-type"]["StringValue"] + spoofed["x-error-message"]["StringValue"]).lower()
    assert original_attributes(spoofed) == {
        "x-error-type": attr("Spoofed"),
        "x-error-message": attr("spoofed"),
    }, "the producer's own, moved aside for redrive to restore"
    assert attrs["custom types"]["n"] == {"DataType": "Number", "StringValue": "1e999"}
    assert attrs["custom types"]["c"]["DataType"] == "String.custom-ü"
    report.add(
        "hostile_input",
        malformed_inputs_tried=len(CASES),
        dead_lettered_with_reason=sum(1 for c in CASES if c.expect == "dead_letter"),
        dead_lettered_by_redrive=sum(1 for c in CASES if c.expect == "redrive"),
        handled=sum(1 for c in CASES if c.expect == "handled"),
        refused_by_sqs=refused,
    )


# -- configuration -------------------------------------------------------------------

# Bad values per variable, by kind. Every variable the settings read is here, or in
# FREE_FORM with the reason it has no bad value (test_every_setting_is_covered).
INT = {"empty": "", "negative": "-1", "malformed": "ten", "absurd": "1" + "0" * 30}
FLOAT = {**INT, "absurd": "1e400", "nan": "nan"}
# A whole number is digits 0-9 alone, as per-queue ones are (int() took all of these).
WHOLE = {**INT, "unicode_digits": "\uff15", "underscores": "1_0", "plus": "+5", "spaces": " 5 "}
BAD: dict[str, dict[str, str]] = {
    **{
        var: WHOLE
        for var in (
            "WORKER_CONCURRENCY",
            "WORKER_JOB_TIMEOUT_MS",
            "WORKER_SHUTDOWN_TIMEOUT_MS",
            "WORKER_VISIBILITY_TIMEOUT_SECONDS",
            "WORKER_WAIT_TIME_SECONDS",
            "WORKER_POLLERS",
            "WORKER_ACK_FLUSH_MS",
            "WORKER_MAX_RECEIVE_COUNT",
            "WORKER_PROCESS_POOL_SIZE",
            "WORKER_METRICS_PORT",
            "WORKER_SCALE_IN_PROTECTION_MINUTES",
            "WORKER_LARGE_PAYLOAD_THRESHOLD_BYTES",
            "WORKER_LARGE_PAYLOAD_MAX_BYTES",
            "WORKER_GROUP_CONCURRENCY",
            "WORKER_PREFETCH",
            "WORKER_CONCURRENCY_FLOOR",
            "WORKER_MAX_JOBS",
            "WORKER_SHARED_CONCURRENCY",
            "WORKER_RATE_BURST",
            "DB_POOL_SIZE",
        )
    },
    **{
        var: FLOAT
        for var in (
            "WORKER_HEARTBEAT_FRACTION",
            "WORKER_RETRY_BASE_SECONDS",
            "WORKER_RETRY_MAX_SECONDS",
            "WORKER_BACKLOG_SAMPLE_SECONDS",
        )
    },
    # Infinity would never exit: unset is the way to say that.
    "WORKER_IDLE_EXIT_SECONDS": {**FLOAT, "infinite": "inf"},
    # Infinity would switch liveness off without a word.
    "WORKER_STALLED_AFTER_SECONDS": {**FLOAT, "infinite": "inf"},
    "WORKER_DRAIN_POLLS": {"empty": "", "malformed": "maybe", "absurd": "2"},
    "LOG_PAYLOADS": {"empty": "", "malformed": "perhaps", "absurd": "-1"},
    "WORKER_LARGE_PAYLOAD_DELETE": {"empty": "", "malformed": "later", "absurd": "2"},
    "WORKER_TRACE_PARENT": {"empty": "", "malformed": "sometimes", "absurd": "2"},
    "WORKER_SNS_VERIFY_SIGNATURES": {"empty": "", "malformed": "rarely", "absurd": "2"},
    "WORKER_ADAPTIVE_CONCURRENCY": {"empty": "", "malformed": "adaptive", "absurd": "2"},
    # Empty means no priority (unset); anything but the two words is refused.
    "WORKER_PRIORITY": {"malformed": "urgent", "absurd": "strict;weighted"},
    "WORKER_EVENT_LOOP": {"empty": "", "malformed": "trio"},
    "WORKER_METRICS_EXPORTER": {"empty": "", "malformed": "statsd", "case": "OTLP"},
    # Empty means no limit; slower than one start a day is a queue that never starts again.
    "WORKER_RATE_LIMIT": {
        "malformed": "fast",
        "no_unit": "50",
        "zero": "0/s",
        "negative": "-5/s",
        "per_day": "9/day",
        "tiny": "0." + "0" * 37 + "28/s",
        "infinite": "1" * 400 + "/s",
        "unicode_digits": "\u0663/s",
    },
    # S3's bucket-name rule; empty means none.
    "WORKER_LARGE_PAYLOAD_BUCKET": {"malformed": "My_Bucket", "absurd": "b" * 64, "path": "bucket/prefix"},
    "WORKER_LARGE_PAYLOAD_READ_BUCKETS": {"malformed": "ok-bucket,My_Bucket", "path": "bucket/prefix"},
    "LOG_LEVEL": {"empty": "", "malformed": "LOUD"},
    "LOG_FORMAT": {"empty": "", "malformed": "yaml", "absurd": "json;text"},
    "WORKER_QUEUES": {"empty": "", "commas": " , ", "malformed": "bad name", "absurd": "q" * 81, "twice": "a,a"},
    "WORKER_HANDLERS": {"empty": "", "malformed": "no-colon", "absurd": "a:b:c"},
    "WORKER_ID": {"empty": "", "absurd": "w" * 129},
    "WORKER_METRICS_HOST": {"empty": ""},
    "OTEL_SERVICE_NAME": {"empty": ""},
    "AWS_REGION": {"empty": "", "malformed": "mars", "absurd": "us-east-1; rm -rf /"},
    "AWS_DEFAULT_REGION": {"malformed": "mars"},
    **{
        var: {
            "malformed": "localhost:4566",
            "no_host": "http://",
            "bad_port": "http://h:port",
            "absurd": "http://h:99999",
        }
        for var in ("AWS_ENDPOINT_URL", "ECS_AGENT_URI")
    },
    # Free-form (a URL or a keyword DSN), but readiness connects to a URL's port.
    "DATABASE_URL": {"bad_port": "postgresql://app:pw@db:port/orders", "absurd": "postgresql://db:99999/orders"},
}
FREE_FORM = {"WORKER_HEALTH_FILE": "any path; empty means the default"}
# Pairs that are fine alone and not together.
INCONSISTENT = {
    "WORKER_JOB_TIMEOUT_MS": {"WORKER_JOB_TIMEOUT_MS": "60000", "WORKER_SHUTDOWN_TIMEOUT_MS": "1000"},
    "WORKER_RETRY_MAX_SECONDS": {"WORKER_RETRY_BASE_SECONDS": "10", "WORKER_RETRY_MAX_SECONDS": "5"},
    "DB_POOL_SIZE": {"WORKER_CONCURRENCY": "8", "DB_POOL_SIZE": "7"},
    "WORKER_STALLED_AFTER_SECONDS": {"WORKER_STALLED_AFTER_SECONDS": "5"},
}
QUEUE_URL_VAR = "WORKER_QUEUE_ORDERS_URL"
PER_QUEUE_URLS = ["ftp://x", "httpx://sqs", "http://", "https://h:port/q"]


def every_bad_value() -> list[tuple[str, str, str]]:
    return [(var, kind, value) for var, values in BAD.items() for kind, value in values.items()]


def test_every_setting_is_covered() -> None:
    assert set(BAD) | set(FREE_FORM) == set(ALIASES), "a new setting needs its bad values listed here"


@pytest.mark.parametrize(("var", "kind", "value"), every_bad_value(), ids=lambda v: str(v)[:20])
def test_bad_value_is_refused_naming_the_variable(var: str, kind: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"WORKER_QUEUES": "orders", var: value})
    assert [name for name, _ in info.value.problems] == [var], info.value.problems


@pytest.mark.parametrize("value", PER_QUEUE_URLS)
def test_bad_per_queue_url_is_refused(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"WORKER_QUEUES": "orders", QUEUE_URL_VAR: value})
    assert [name for name, _ in info.value.problems] == [QUEUE_URL_VAR]


def cli(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    keep = {k: v for k, v in os.environ.items() if k not in ALIASES and not k.startswith("WORKER_")}
    return subprocess.run(
        [sys.executable, "-m", PACKAGE, command],
        env={**keep, **env},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def config_groups() -> list[tuple[str, dict[str, str], set[str]]]:
    """Every bad value, each variable's n-th in group n (so all of them in a few processes),
    then the inconsistent pairs at once, then a per-queue one."""
    groups = []
    for n in range(max(len(values) for values in BAD.values())):
        # AWS_DEFAULT_REGION is only read when AWS_REGION is absent: checked alone above.
        env = {
            var: list(values.values())[n]
            for var, values in BAD.items()
            if n < len(values) and var != "AWS_DEFAULT_REGION"
        }
        groups.append((f"bad values #{n + 1}", env, set(env)))
    inconsistent: dict[str, str] = {}
    for pair in INCONSISTENT.values():
        inconsistent.update(pair)
    groups.append(("inconsistent", inconsistent, set(INCONSISTENT)))
    groups.append(("per-queue", {"WORKER_QUEUES": "orders", QUEUE_URL_VAR: "httpx://sqs"}, {QUEUE_URL_VAR}))
    return groups


def test_bad_configuration_refuses_to_boot_without_a_traceback() -> None:
    """`run` and `config` as a platform starts them: exit 2, one line per bad variable."""
    # Both commands validate the same way before doing anything: alternate them.
    runs = [(kind, ("run", "config")[i % 2], env, names) for i, (kind, env, names) in enumerate(config_groups())]

    def boot(run: tuple[str, str, dict[str, str], set[str]]) -> subprocess.CompletedProcess[str]:
        return cli(run[1], {"AWS_REGION": REGION, **run[2]})

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(boot, runs))
    for (kind, command, _env, names), result in zip(runs, results, strict=True):
        where = f"{command} with {kind} values"
        assert result.returncode == 2, f"{where}: exit {result.returncode}\n{result.stderr[-3000:]}"
        assert "Traceback" not in result.stderr + result.stdout, where
        named = {line.split(":")[0].strip() for line in result.stderr.splitlines()[1:] if line.startswith("  ")}
        assert named == names, f"{where}: named {sorted(named)}, expected {sorted(names)}"
    report.add(
        "hostile_config", malformed_inputs_tried=len(every_bad_value()) + len(INCONSISTENT) + len(PER_QUEUE_URLS)
    )


# Kubernetes' service links for Services named worker-queue and worker-queue-metrics, as
# kubelet writes them into every pod of the namespace (the unit tests have every shape).
SERVICE_LINKS = {
    "WORKER_QUEUE_SERVICE_HOST": "10.96.0.12",
    "WORKER_QUEUE_SERVICE_PORT": "9102",
    "WORKER_QUEUE_SERVICE_PORT_METRICS": "9102",
    "WORKER_QUEUE_PORT": "tcp://10.96.0.12:9102",
    "WORKER_QUEUE_PORT_9102_TCP": "tcp://10.96.0.12:9102",
    "WORKER_QUEUE_PORT_9102_TCP_PROTO": "tcp",
    "WORKER_QUEUE_PORT_9102_TCP_PORT": "9102",
    "WORKER_QUEUE_PORT_9102_TCP_ADDR": "10.96.0.12",
    "WORKER_QUEUE_METRICS_SERVICE_HOST": "10.96.0.13",
    "WORKER_QUEUE_METRICS_SERVICE_PORT": "9102",
    "WORKER_QUEUE_METRICS_PORT": "tcp://10.96.0.13:9102",
}


def test_service_links_boot_and_what_only_looks_like_one_is_refused_through_the_cli() -> None:
    """`config` as a platform starts it: service links exit 0; a misspelt per-queue setting
    among them, two queues on one per-queue key, a whole number not in digits and a rate
    slower than one a day exit 2, naming the variable, without a traceback."""
    base = {
        "AWS_REGION": REGION,
        "WORKER_QUEUES": "orders",
        "TEST_QUEUE": "orders",
        "WORKER_HANDLERS": "tests.integration.app:router",
        **SERVICE_LINKS,
    }
    cases = {
        "links": ({}, 0, None, ""),
        "typo": ({"WORKER_QUEUE_ORDERS_CONCURENCY": "4"}, 2, "WORKER_QUEUE_ORDERS_CONCURENCY", "did you mean"),
        "one key": ({"WORKER_QUEUES": "a-v2,a_v2"}, 2, "WORKER_QUEUES", "same per-queue key A_V2"),
        "digits": ({"WORKER_QUEUE_ORDERS_CONCURRENCY": "\uff15"}, 2, "WORKER_QUEUE_ORDERS_CONCURRENCY", "whole"),
        "rate": ({"WORKER_RATE_LIMIT": "0." + "0" * 37 + "28/s"}, 2, "WORKER_RATE_LIMIT", "one start a day"),
    }
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(cases, pool.map(lambda c: cli("config", {**base, **c[0]}), cases.values()), strict=True))
    for name, (_, code, variable, fragment) in cases.items():
        result = results[name]
        output = result.stdout + result.stderr
        assert result.returncode == code, f"{name}: exit {result.returncode}\n{output[-3000:]}"
        assert "Traceback" not in output, name
        if variable is not None:
            named = {line.split(":")[0].strip() for line in result.stderr.splitlines()[1:] if line.startswith("  ")}
            assert named == {variable}, f"{name}: {result.stderr}"
            assert fragment in result.stderr, f"{name}: {result.stderr}"


# kubelet's links for a Service named `worker-metrics` (ClusterIP 10.0.0.11, port 9102
# named `metrics`): one of them has a setting's name.
WORKER_METRICS_LINKS = {
    "WORKER_METRICS_SERVICE_HOST": "10.0.0.11",
    "WORKER_METRICS_SERVICE_PORT": "9102",
    "WORKER_METRICS_SERVICE_PORT_METRICS": "9102",
    "WORKER_METRICS_PORT": "tcp://10.0.0.11:9102",
    "WORKER_METRICS_PORT_9102_TCP": "tcp://10.0.0.11:9102",
    "WORKER_METRICS_PORT_9102_TCP_PROTO": "tcp",
    "WORKER_METRICS_PORT_9102_TCP_PORT": "9102",
    "WORKER_METRICS_PORT_9102_TCP_ADDR": "10.0.0.11",
}


def test_a_service_link_under_a_settings_name_is_ignored_through_the_cli() -> None:
    """WORKER_METRICS_PORT=tcp://10.0.0.11:9102 is a link, not the port: `config` exited 2 on
    it ("not a whole number"). It boots with the default port, as without the links."""
    result = cli("config", {"AWS_REGION": REGION, **WORKER_METRICS_LINKS})
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["metrics_port"] == 9102 and not result.stderr, result.stderr[-3000:]


def test_metrics_server_that_cannot_listen_is_a_startup_error(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    queue = sqs.create()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = {
            "in use": {"WORKER_METRICS_HOST": "127.0.0.1", "WORKER_METRICS_PORT": str(port)},
            "unknown host": {"WORKER_METRICS_HOST": "no-such-host.invalid", "WORKER_METRICS_PORT": "9"},
        }
        env = env_for(
            localstack_endpoint,
            queue.name,
            str(tmp_path / "p"),
            WORKER_HANDLERS="tests.integration.app:router",
            TEST_QUEUE=queue.name,
        )
        with ThreadPoolExecutor(2) as pool:
            results = dict(zip(cases, pool.map(lambda c: cli("run", {**env, **c}), cases.values()), strict=True))
    for name, result in results.items():
        output = result.stdout + result.stderr
        assert result.returncode == 3, f"{name}: exit {result.returncode}\n{output[-3000:]}"
        assert "Traceback" not in output, name
        assert "WORKER_METRICS_HOST" in output and "WORKER_METRICS_PORT" in output, output[-2000:]
