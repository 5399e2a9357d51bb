"""A stand-in for an HTTP API a handler calls (a partner's, a service of yours), for tests
that run the whole service (`check_service`) or a handler with its real client (standard
library only).

    from sqs_worker_engine.testing import check_service, stand_in_http

    def test_end_to_end(localstack_endpoint, tmp_path):
        with stand_in_http({"POST /v1/orders": (201, {"id": "o-1"})}) as partner:
            check_service(SERVICE, localstack_endpoint, tmp_path, env={"PARTNER_API_URL": partner.url})
        assert [r.path for r in partner.requests] == ["/v1/orders", "/v1/orders"]

It serves on 127.0.0.1, on a port the system picks, in a thread of its own, for as long as
the `with` block: the worker processes `check_service` starts reach it through the URL
given in their environment. Each request is answered from `routes` ("METHOD /path": a
status and a JSON body, or a status alone), else 200 with `{}`, and recorded in `requests`
(method, path with its query, headers, body), in the order they came.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = int | tuple[int, Any]  # a status, or a status and what its JSON body holds


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class StandIn:
    """The running stand-in: its `url` (no trailing slash) and the `requests` it answered."""

    url: str
    requests: list[Request] = field(default_factory=list)


def answer(routes: Mapping[str, Answer], method: str, path: str) -> tuple[int, bytes]:
    """The status and body for a request: its route ("METHOD /path", the query left out), or
    200 with `{}`."""
    found = routes.get(f"{method} {path.split('?', 1)[0]}", (200, {}))
    status, body = (found, None) if isinstance(found, int) else found
    return status, b"" if body is None else json.dumps(body).encode()


@contextlib.contextmanager
def stand_in_http(routes: Mapping[str, Answer] | None = None) -> Iterator[StandIn]:
    """Serve `routes` on 127.0.0.1 for the `with` block (see the module docstring)."""
    table = dict(routes or {})
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with lock:
                stand_in.requests.append(Request(self.command, self.path, dict(self.headers), body))
            status, reply = answer(table, self.command, self.path)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815 - http.server's names

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test's output is the worker's, not this server's."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stand_in = StandIn(f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, name="stand-in-http", daemon=True)
    thread.start()
    try:
        yield stand_in
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
