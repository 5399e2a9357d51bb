"""The command line against LocalStack: bootstrap (idempotent), send, config, healthcheck."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from sqs_worker_engine import Job, Router

from ..support import REGION, Sqs, cli, env_for, running_worker, wait_for


def test_bootstrap_is_idempotent_and_wires_the_dlq(sqs: Sqs, localstack_endpoint: str) -> None:
    name = f"boot-{uuid.uuid4().hex[:8]}"
    env = {
        "AWS_ENDPOINT_URL": localstack_endpoint,
        "WORKER_QUEUES": f"{name},{name}-b.fifo",
        "WORKER_MAX_RECEIVE_COUNT": "4",
    }
    first, second = cli("bootstrap", **env), cli("bootstrap", **env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    for queue, dlq in ((name, f"{name}-dlq"), (f"{name}-b.fifo", f"{name}-b-dlq.fifo")):
        url = sqs.client.get_queue_url(QueueName=queue)["QueueUrl"]
        sqs.track(url)
        attrs = sqs.attributes(url)
        policy = json.loads(attrs["RedrivePolicy"])
        assert policy["deadLetterTargetArn"].endswith(f":{dlq}") and int(policy["maxReceiveCount"]) == 4
        dlq_url = sqs.client.get_queue_url(QueueName=dlq)["QueueUrl"]
        sqs.track(dlq_url)
        allow = json.loads(sqs.attributes(dlq_url)["RedriveAllowPolicy"])
        assert allow["redrivePermission"] == "byQueue" and allow["sourceQueueArns"] == [attrs["QueueArn"]]
    assert attrs["FifoQueue"] == "true"


def test_send_without_a_body_sends_the_payload_models_own_examples(sqs: Sqs, localstack_endpoint: str) -> None:
    """What an owner's handler processes, not a demo shape it would dead-letter: the examples
    its payload model declares (those the end-to-end check sends), each once, or `--count`
    messages taking them in turn; wrapped as the handler's envelope receives them."""
    orders, shipped, notes = sqs.create(), sqs.create(fifo=True), sqs.create()
    env = {
        "AWS_ENDPOINT_URL": localstack_endpoint,
        "WORKER_HANDLERS": "tests.integration.examples_app:router",
        "WORKER_QUEUES": f"{orders.name},{shipped.name},{notes.name}",
        "EXAMPLES_ORDERS": orders.name,
        "EXAMPLES_SHIPPED": shipped.name,
        "EXAMPLES_NOTES": notes.name,
    }
    once = cli("send", **env)
    assert once.returncode == 0 and f"sent 2 message(s) to {orders.name}" in once.stdout, once.stderr
    five = cli("send", "--count", "5", **env)
    assert five.returncode == 0, five.stderr
    bodies = sorted(json.loads(m["Body"])["order_id"] for m in sqs.receive_all(orders.url))
    assert bodies == ["o-1"] * 4 + ["o-2"] * 3, bodies
    wrapped = cli("send", "--queue", shipped.name, "--group", "g", **env)
    assert wrapped.returncode == 0, wrapped.stderr
    (event,) = sqs.receive_all(shipped.url)
    assert json.loads(event["Body"])["detail"] == {"parcel": "p-9"}, "inside the EventBridge event its handler reads"
    none = cli("send", "--queue", notes.name, **env)
    assert none.returncode == 2 and "--body" in none.stderr and "declares no examples" in none.stderr, none.stderr
    assert "Traceback" not in none.stderr and sqs.counts(notes.url) == (0, 0)


def test_send_without_a_body_sends_an_sns_handlers_examples_as_signed_notifications_it_processes(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    """An `envelope="sns"` handler with two examples: `send` wraps each in an SNS notification,
    signed with a certificate it puts on the emulator, so a worker checking signatures (the
    default) runs both, none dead-lettered. Bare bodies were dead-lettered as "not an SNS
    notification"."""
    from .sns_examples_app import Notice

    queue = sqs.create()
    env = {
        "AWS_ENDPOINT_URL": localstack_endpoint,
        "WORKER_HANDLERS": "tests.integration.sns_examples_app:router",
        "WORKER_QUEUES": queue.name,
        "SNS_EXAMPLES_NOTICES": queue.name,
    }
    sent = cli("send", **env)
    assert sent.returncode == 0 and f"sent 2 message(s) to {queue.name}" in sent.stdout, sent.stderr
    seen: list[Job[Notice]] = []
    router = Router()

    @router.handler(queue.name, payload=Notice, envelope="sns")
    async def handle(job: Job[Notice]) -> None:
        seen.append(job)

    assert queue.dlq_url is not None
    dlq = queue.dlq_url

    async def serve() -> None:
        async with running_worker(env_for(localstack_endpoint, queue.name, health_file), router):
            await wait_for(
                lambda: (len(seen) == 2 and sqs.counts(queue.url) == (0, 0)) or sqs.counts(dlq) != (0, 0),
                timeout=120,
                what="both examples handled, or one dead-lettered",
            )

    asyncio.run(serve())
    dead = [m.get("MessageAttributes", {}).get("x-error-message", {}).get("StringValue") for m in sqs.receive_all(dlq)]
    assert dead == [], f"dead-lettered: {dead}"
    assert sorted(job.payload.notice_id for job in seen) == ["n-1", "n-2"], [job.payload for job in seen]
    for job in seen:
        assert job.envelope is not None and job.envelope.sns is not None, "opened as an SNS notification"
        assert job.envelope.sns.signed is not None, "signed, and the signature checked"


def test_send_refuses_an_sns_handlers_examples_it_cannot_sign() -> None:
    """Outside an emulator only SNS can sign a notification, and a worker that checks
    signatures would dead-letter an unsigned one: `send` says so and sends nothing."""
    env: dict[str, Any] = {
        "AWS_ENDPOINT_URL": "",
        "WORKER_HANDLERS": "tests.integration.sns_examples_app:router",
        "WORKER_QUEUES": "notices",
    }
    refused = cli("send", **env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "WORKER_SNS_VERIFY_SIGNATURES" in refused.stderr and "only SNS" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr


def test_bootstrap_makes_the_bucket_and_send_offloads_a_large_body_to_it(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=localstack_endpoint, region_name=REGION)
    bucket = f"cli-{uuid.uuid4().hex[:12]}"
    queue = sqs.create()
    body = tmp_path / "big.json"
    body.write_text(json.dumps({"task_id": "big", "pad": "p" * 400_000}))
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name}
    created = cli("bootstrap", WORKER_LARGE_PAYLOAD_BUCKET=bucket, **env)
    again = cli("bootstrap", WORKER_LARGE_PAYLOAD_BUCKET=bucket, **env)
    assert created.returncode == 0 and again.returncode == 0, created.stderr + again.stderr
    assert f"bucket {bucket}: created" in created.stdout and f"bucket {bucket}: exists" in again.stdout
    sent = cli(
        "send", "--count", "1", "--body-file", str(body), "--attribute", "tenant=acme",
        WORKER_LARGE_PAYLOAD_BUCKET=bucket, **env,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    [message] = sqs.receive_all(queue.url)
    attributes = message["MessageAttributes"]
    assert attributes["tenant"]["StringValue"] == "acme"
    assert int(attributes["ExtendedPayloadSize"]["StringValue"]) == body.stat().st_size
    _, pointer = json.loads(message["Body"])
    stored = s3.get_object(Bucket=pointer["s3BucketName"], Key=pointer["s3Key"])["Body"].read().decode()
    assert stored == body.read_text()
    body.write_text(json.dumps({"task_id": "huge", "pad": "p" * 1_100_000}))
    refused = cli("send", "--count", "1", "--body-file", str(body), **env)
    assert refused.returncode == 2
    assert (
        "over the queue's limit of 1048576 bytes" in refused.stderr and "WORKER_LARGE_PAYLOAD_BUCKET" in refused.stderr
    )
    bad = cli("send", "--attribute", "no-equals-sign", **env)
    assert bad.returncode == 2 and "NAME=VALUE" in bad.stderr and "Traceback" not in bad.stderr
    assert sqs.counts(queue.url) == (0, 1)  # nothing more was sent


def test_config_prints_the_effective_configuration(tmp_path: Path) -> None:
    # A password no key of the output spells (`config` has a "secrets" key of its own).
    result = cli("config", WORKER_CONCURRENCY="3", DATABASE_URL="postgresql://u:pw-s3cr3t@db/x")
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    assert config["concurrency"] == 3 and config["queues"][0]["concurrency"] == 3
    assert "s3cr3t" not in result.stdout


def test_config_errors_exit_2_naming_the_variable() -> None:
    result = cli("config", WORKER_CONCURRENCY="many")
    assert result.returncode == 2
    assert "WORKER_CONCURRENCY" in result.stderr and "Traceback" not in result.stderr


def test_healthcheck_exit_codes(tmp_path: Path) -> None:
    base = tmp_path / "progress"
    progress = tmp_path / f"progress.{os.getpid()}"  # a running worker's (this test's process stands in)
    assert cli("healthcheck", WORKER_HEALTH_FILE=str(base)).returncode == 1
    progress.write_text("0\n")  # last progress in 1970
    stale = cli("healthcheck", "--stalled-after=300", WORKER_HEALTH_FILE=str(base))
    assert stale.returncode == 1 and "stalled" in stale.stderr
    progress.write_text(f"{time.time()}\n")
    assert cli("healthcheck", "--stalled-after=300", WORKER_HEALTH_FILE=str(base)).returncode == 0


def test_config_refuses_a_queue_without_a_handler_as_run_does() -> None:
    """`config` is how an operator checks a change before it ships: it must not pass what `run` refuses."""
    for command in ("config", "run"):
        result = cli(command, WORKER_QUEUES="test-queue,no-handler-here", WORKER_METRICS_PORT="0")
        assert result.returncode == 2, f"{command}: exit {result.returncode}\n{result.stdout}{result.stderr}"
        assert "WORKER_QUEUES" in result.stderr and "no-handler-here" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_a_misspelt_variable_refuses_to_boot() -> None:
    result = cli("config", WORKER_CONCURENCY="4")
    assert result.returncode == 2
    assert "WORKER_CONCURENCY: unknown setting; did you mean WORKER_CONCURRENCY?" in result.stderr, result.stderr


def test_send_with_a_body_sends_it_once_unless_a_count_is_given(sqs: Sqs, localstack_endpoint: str) -> None:
    queue = sqs.create()
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name}
    once = cli("send", "--body", '{"id": "one"}', **env)
    assert once.returncode == 0, once.stderr
    assert "sent 1 message(s)" in once.stdout, once.stdout
    thrice = cli("send", "--body", '{"id": "three"}', "--count", "3", **env)
    assert thrice.returncode == 0, thrice.stderr
    bodies = sorted(m["Body"] for m in sqs.receive_all(queue.url))
    assert bodies == ['{"id": "one"}'] + ['{"id": "three"}'] * 3


def test_send_to_a_fifo_queue_needs_a_group(sqs: Sqs, localstack_endpoint: str) -> None:
    queue = sqs.create(fifo=True)
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name}
    refused = cli("send", "--body", '{"id": "x"}', **env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "--group" in refused.stderr and "FIFO" in refused.stderr and "Traceback" not in refused.stderr
    sent = cli("send", "--body", '{"id": "x"}', "--group", "customer-7", **env)
    assert sent.returncode == 0, sent.stderr
    [message] = sqs.receive_all(queue.url)
    assert message["Attributes"]["MessageGroupId"] == "customer-7"


def test_help_is_written_for_operators_and_shows_the_defaults() -> None:
    main = cli("--help")
    send = cli("send", "--help")
    assert main.returncode == 0 and send.returncode == 0
    for text in (main.stdout, send.stdout):
        assert "sys.exit" not in text and "cli.main" not in text and "ServiceDefaults" not in text, text
    assert "test-service" in main.stdout and "Exit codes" in main.stdout, main.stdout
    flat = " ".join(send.stdout.split())
    assert "(default: 1 with --body or --body-file, else each example once)" in flat, flat
    assert "(default: 0)" in flat and "--work-ms" not in flat, flat
    assert "required on a FIFO queue" in flat, flat


def test_only_run_exports_traces_every_other_command_is_quiet(sqs: Sqs, localstack_endpoint: str) -> None:
    """With the OpenTelemetry SDK installed (a `tracing=yes` service) and no collector beside a
    laptop's commands, `send` used to export its span: four OTLP connection errors on stderr
    and seconds of retries. Only `run` exports: no other command opens a connection to the
    collector's endpoint (a listener here that counts them)."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    connections: list[object] = []

    def count() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connections.append(connection)
            connection.close()  # a collector that answers nothing: the exporter would retry

    threading.Thread(target=count, daemon=True).start()
    queue = sqs.create()
    env = {
        "AWS_ENDPOINT_URL": localstack_endpoint,
        "WORKER_QUEUES": queue.name,
        "TEST_QUEUE": queue.name,  # the test app's handler serves it
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{listener.getsockname()[1]}",
    }
    try:
        for command in (["send", "--body", '{"id": "traced?"}'], ["config"], ["bootstrap"], ["dlq", "peek"]):
            done = cli(*command, **env)
            assert done.returncode == 0, f"{command}: {done.stderr}"
            assert "export" not in done.stderr.lower() and "4318" not in done.stderr, f"{command}: {done.stderr}"
        assert connections == [], f"{len(connections)} connection(s) to the collector from commands other than run"
    finally:
        listener.close()
    assert [m["Body"] for m in sqs.receive_all(queue.url)] == ['{"id": "traced?"}']
