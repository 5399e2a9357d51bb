"""Spans straight to X-Ray's OTLP endpoint (xray.py): which endpoints are X-Ray's, and an
export request signed with SigV4 that a verifier holding the same key accepts."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from sqs_worker_engine.base.telemetry.xray import endpoint_region, signed_session

KEY = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token")


def test_only_xrays_own_hosts_are_signed_for() -> None:
    assert endpoint_region("https://xray.eu-west-2.amazonaws.com/v1/traces") == "eu-west-2"
    assert endpoint_region("https://xray.cn-north-1.amazonaws.com.cn/v1/traces") == "cn-north-1"
    assert endpoint_region("https://xray.us-gov-west-1.amazonaws.com/v1/traces") == "us-gov-west-1"
    assert endpoint_region("http://127.0.0.1:4318/v1/traces") is None  # the collector beside the worker
    assert endpoint_region("https://xray.eu-west-2.amazonaws.com.evil.example/v1/traces") is None
    assert endpoint_region("not a url") is None


def test_an_export_is_signed_for_xray_and_verifies() -> None:
    seen: dict[str, Any] = {}

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.update(path=self.path, headers=dict(self.headers.items()), body=body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/v1/traces"
    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint=url, session=signed_session("eu-west-2", KEY))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.get_tracer("test").start_span("process orders").end()
    provider.shutdown()
    server.shutdown()

    headers = seen["headers"]
    authorization = headers["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"), authorization
    assert "/eu-west-2/xray/aws4_request" in authorization
    assert headers["X-Amz-Security-Token"] == "session-token"
    export = ExportTraceServiceRequest()
    export.ParseFromString(seen["body"])
    assert export.resource_spans[0].scope_spans[0].spans[0].name == "process orders"
    # The verifier's side: the same canonical request, key and time give the same signature.
    request = AWSRequest(
        method="POST",
        url=url,
        data=seen["body"],
        headers={
            "Content-Type": headers["Content-Type"],
            "X-Amz-Date": headers["X-Amz-Date"],
            "X-Amz-Security-Token": headers["X-Amz-Security-Token"],
        },
    )
    request.context["timestamp"] = headers["X-Amz-Date"]
    signer = SigV4Auth(KEY.get_frozen_credentials(), "xray", "eu-west-2")
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    assert authorization.endswith(f"Signature={expected}"), (authorization, expected)


def test_the_worker_signs_only_for_an_xray_endpoint(monkeypatch: Any) -> None:
    """tracing.configure asks for a signed session exactly when spans go to X-Ray itself."""
    from opentelemetry import trace
    from opentelemetry.util._once import Once

    from sqs_worker_engine.base.telemetry import tracing, xray

    asked: list[str] = []
    monkeypatch.setattr(xray, "signed_session", lambda region: asked.append(region))
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    for endpoint, expected in (
        ("http://127.0.0.1:4318/v1/traces", []),
        ("https://xray.eu-west-2.amazonaws.com/v1/traces", ["eu-west-2"]),
    ):
        asked.clear()
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = None
        provider = tracing.configure("svc")
        try:
            assert provider is not None and asked == expected, endpoint
        finally:
            if provider is not None:
                provider.shutdown()
            trace._TRACER_PROVIDER_SET_ONCE = Once()
            trace._TRACER_PROVIDER = None
