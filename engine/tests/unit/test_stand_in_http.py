"""The stand-in for an HTTP API (doubles/http.py): it answers each route as told, 200 with
`{}` otherwise, records every request in order, and is gone after its block."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from sqs_worker_engine.doubles.http import Answer, answer
from sqs_worker_engine.testing import stand_in_http


def test_routes_answer_as_told_and_every_request_is_recorded() -> None:
    with stand_in_http({"POST /v1/orders": (201, {"id": "o-1"}), "GET /v1/down": 503}) as api:
        posted = urllib.request.Request(f"{api.url}/v1/orders?x=1", data=b'{"order": "o-1"}', method="POST")
        with urllib.request.urlopen(posted, timeout=10) as reply:
            assert (reply.status, json.loads(reply.read())) == (201, {"id": "o-1"})
        with pytest.raises(urllib.error.HTTPError) as down:
            urllib.request.urlopen(f"{api.url}/v1/down", timeout=10)
        assert down.value.code == 503
        with urllib.request.urlopen(f"{api.url}/anything", timeout=10) as reply:
            assert (reply.status, json.loads(reply.read())) == (200, {})
    assert [(r.method, r.path) for r in api.requests] == [
        ("POST", "/v1/orders?x=1"),
        ("GET", "/v1/down"),
        ("GET", "/anything"),
    ]
    assert api.requests[0].json() == {"order": "o-1"}
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{api.url}/v1/orders", timeout=5)


def test_a_route_is_its_method_and_path_without_the_query() -> None:
    routes: dict[str, Answer] = {"GET /a": (404, {"error": "no"}), "PUT /b": 204}
    assert answer(routes, "GET", "/a?page=2") == (404, b'{"error": "no"}')
    assert answer(routes, "PUT", "/b") == (204, b"")
    assert answer(routes, "POST", "/a") == (200, b"{}")
