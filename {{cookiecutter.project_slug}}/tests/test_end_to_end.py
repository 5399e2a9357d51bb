"""The service end to end against the SQS emulator, run as an operator runs it: `bootstrap`
creates its queues (private copies, so runs can share one emulator), `run` serves them, the
examples each handler's payload model declares are processed, a body the model refuses
reaches the DLQ with its reason, and SIGTERM drains with nothing left in flight.

The check is the engine's (`sqs_worker_engine.testing.check_service`), so its fixes come
with an upgrade; it is driven by your handlers' declared examples (see handlers.py), so
this file needs no change when you replace them, unless your handlers need something the
emulator does not give: a setting of your own (`env=` gives the service's processes its
value) or an HTTP API (`stand_in_http` serves one on 127.0.0.1 while the check runs):

    from sqs_worker_engine.testing import check_service, stand_in_http

    with stand_in_http({"POST /v1/orders": (201, {"id": "o-1"})}) as partner:
        check_service(SERVICE, localstack_endpoint, tmp_path, env={"PARTNER_API_URL": partner.url})
    assert partner.requests, "the handler called the API"
"""

from __future__ import annotations

{% if cookiecutter.large_payloads == "yes" -%}
import uuid
{% endif -%}
from pathlib import Path

import pytest
from sqs_worker_engine.testing import check_service

from {{ cookiecutter.package_name }}.service import SERVICE

pytestmark = pytest.mark.integration


def test_the_service_processes_its_examples_dead_letters_what_it_refuses_and_drains(
    localstack_endpoint: str, tmp_path: Path
) -> None:
{%- if cookiecutter.large_payloads == "yes" %}
    # One example per queue goes through S3 in the SQS extended client's format.
    bucket = f"e2e-{uuid.uuid4().hex[:12]}"
    check_service(SERVICE, localstack_endpoint, tmp_path, bucket=bucket)
{%- else %}
    check_service(SERVICE, localstack_endpoint, tmp_path)
{%- endif %}
