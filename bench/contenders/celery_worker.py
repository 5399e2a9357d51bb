"""Celery with its SQS broker (kombu's SQS transport), run as

    python -m celery -A celery_worker worker -P threads -c N -Q QUEUE \
        --without-gossip --without-mingle --without-heartbeat

The threads pool is Celery's pool for I/O-bound tasks (prefork would fork N processes).
Everything else is Celery's default (prefetch multiplier 4, 10 s long polls, one
DeleteMessage per acknowledged message) except:

- `task_acks_late`: delete after the handler returns, as every other contender does
  (Celery's default deletes before running the task, so a crash loses the message);
- the queue is predefined (no ListQueues/CreateQueue at start), remote control is off
  (it needs a fanout exchange SQS does not have), no result backend;
- the visibility timeout is the benchmark's (Celery's default is 30 minutes).

Celery consumes its own message format, not a raw body: `envelope()` builds the message
Celery's own code would send for `bench.handle(body)`, so the harness can enqueue the same
payloads in batches.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import uuid
from typing import Any
from urllib.parse import urlsplit

from celery import Celery
from common import env_int, handle

QUEUE = os.environ.get("BENCH_QUEUE", "bench")
TASK = "bench.handle"
_endpoint = urlsplit(os.environ.get("AWS_ENDPOINT_URL", "http://127.0.0.1:4566"))
_transport: dict[str, Any] = {
    "region": os.environ.get("AWS_REGION", "us-east-1"),
    "is_secure": _endpoint.scheme == "https",
    "visibility_timeout": env_int("BENCH_VISIBILITY", 30),
    "predefined_queues": {
        QUEUE: {
            "url": os.environ.get("BENCH_QUEUE_URL", ""),
            "access_key_id": os.environ.get("AWS_ACCESS_KEY_ID", "test"),
            "secret_access_key": os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
        }
    },
}
if "BENCH_WAIT_SECONDS" in os.environ:  # smoke runs only: Celery's default wait is 10 s
    _transport["wait_time_seconds"] = env_int("BENCH_WAIT_SECONDS", 10)

app = Celery("bench")
app.conf.update(
    broker_url=f"sqs://{_endpoint.hostname}:{_endpoint.port}",
    broker_transport_options=_transport,
    broker_connection_retry_on_startup=True,
    task_acks_late=True,
    task_default_queue=QUEUE,
    task_ignore_result=True,
    worker_enable_remote_control=False,
    worker_send_task_events=False,
)


@app.task(name=TASK)
def handle_task(body: str) -> None:
    handle(body)


_PLACEHOLDER = "__BENCH_BODY__"


def envelope_template() -> dict[str, Any]:
    """The message Celery sends for `bench.handle(<placeholder>)`, as its SQS transport would
    serialise it before base64 (taken from Celery's in-memory transport)."""
    maker = Celery("bench-envelope", broker="memory://")
    with maker.connection_for_write() as conn:
        maker.send_task(TASK, args=[_PLACEHOLDER], queue="bench-envelope", connection=conn)
        message: dict[str, Any] = conn.default_channel._get("bench-envelope")
    message["body"] = base64.b64decode(message["body"]).decode()  # kept decoded: filled per message
    return message


def envelope(template: dict[str, Any], body: str, queue: str) -> str:
    """The SQS message body Celery would send for `bench.handle(body)` to `queue`."""
    message = copy.deepcopy(template)
    message["properties"]["delivery_info"]["routing_key"] = queue  # the transport acks by it
    inner = message["body"].replace(json.dumps(_PLACEHOLDER), json.dumps(body))
    message["body"] = base64.b64encode(inner.encode()).decode()
    task_id = str(uuid.uuid4())
    message["headers"].update(id=task_id, root_id=task_id, argsrepr="(body,)")
    message["properties"].update(correlation_id=task_id, delivery_tag=str(uuid.uuid4()))
    return base64.b64encode(json.dumps(message).encode()).decode()
