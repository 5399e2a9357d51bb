"""Spans straight to X-Ray's OTLP endpoint: each export request signed with SigV4.

X-Ray takes OTLP/HTTP at `https://xray.<region>.amazonaws.com/v1/traces` (AWS put its
X-Ray SDKs and daemon into maintenance in 2026 and points to OpenTelemetry), but only
from a signed request: the OTLP exporter's requests session gets an auth hook that signs
each one with botocore's SigV4 and the credentials botocore finds (the task's or the pod's
role, refreshed as they rotate). The role needs `xray:PutSpans`.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

# X-Ray's own hosts (the .cn partition's too); any other endpoint is a collector.
XRAY_HOST = re.compile(r"^xray\.([a-z]{2}(?:-[a-z]+)+-\d+)\.amazonaws\.com(?:\.cn)?$")
SIGNED_HEADERS = ("Content-Type", "Content-Encoding")


def endpoint_region(endpoint: str) -> str | None:
    """The region of an X-Ray OTLP endpoint, None for any other endpoint."""
    match = XRAY_HOST.match(urlsplit(endpoint).hostname or "")
    return match.group(1) if match else None


def signed_session(region: str, credentials: Any = None) -> Any:
    """A requests session whose every request is signed for X-Ray in `region`, with
    `credentials` (botocore's) or those botocore's default chain finds at each request."""
    import botocore.session
    import requests
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    session = botocore.session.get_session()

    class Sign(requests.auth.AuthBase):
        def __call__(self, request: Any) -> Any:
            found = credentials or session.get_credentials()
            if found is None:
                return request  # no credentials: X-Ray refuses it, and the exporter logs why
            headers = {name: request.headers[name] for name in SIGNED_HEADERS if name in request.headers}
            signed = AWSRequest(method=request.method, url=request.url, data=request.body, headers=headers)
            SigV4Auth(found.get_frozen_credentials(), "xray", region).add_auth(signed)
            request.headers.update(dict(signed.headers.items()))
            return request

    http = requests.Session()
    http.auth = Sign()
    return http
