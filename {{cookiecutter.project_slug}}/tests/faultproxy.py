"""A small HTTP proxy in front of LocalStack that counts SQS requests and injects faults.

It runs in a thread of its own, so workers in this process and in subprocesses can both be
pointed at it (AWS_ENDPOINT_URL=proxy.url). Faults, by SQS operation (X-Amz-Target):

- down(): stop listening (connection refused), up(): listen again on the same port
- fail(op, status, code, times): answer with an AWS-style error instead of forwarding
- slow(op, seconds): forward after a delay
- fail_entries(op, every): drop every n-th entry of a batch call before forwarding and
  report it as failed (InternalError), so the worker has to retry exactly those
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import ClientSession, web


@dataclass
class Fault:
    status: int = 500
    code: str = "InternalFailure"
    times: int | None = None  # None: until cleared
    delay: float = 0.0
    every: int = 0  # fail_entries: every n-th entry


@dataclass
class FaultProxy:
    upstream: str
    counts: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    faults: dict[str, Fault] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="fault-proxy")
        self._lock = threading.Lock()
        self._site: web.TCPSite | None = None
        self._runner: web.AppRunner | None = None
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    # -- control (any thread) ----------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._start())
        return self

    def stop(self) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def down(self) -> None:
        self.injected["connection_refused"] += 1
        self._call(self._close_site())

    def up(self) -> None:
        self._call(self._open_site())

    def fail(self, operation: str, status: int = 500, code: str = "InternalFailure", times: int | None = None) -> None:
        with self._lock:
            self.faults[operation] = Fault(status=status, code=code, times=times)

    def slow(self, operation: str, seconds: float) -> None:
        with self._lock:
            self.faults[operation] = Fault(delay=seconds)

    def fail_entries(self, operation: str, every: int = 2, times: int | None = None) -> None:
        with self._lock:
            self.faults[operation] = Fault(every=every, times=times)

    def clear(self, operation: str | None = None) -> None:
        with self._lock:
            if operation is None:
                self.faults.clear()
            else:
                self.faults.pop(operation, None)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    # -- the proxy (its own loop) ------------------------------------------------------

    async def _start(self) -> None:
        self._session = ClientSession()
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await self._open_site()

    async def _open_site(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()

    async def _close_site(self) -> None:
        if self._site is not None:
            await self._site.stop()
            self._site = None
        assert self._runner is not None
        # Drop open keep-alive connections too, so clients see the outage at once.
        for server in [self._runner.server] if self._runner.server else []:
            for conn in list(server.connections):
                conn.force_close()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        await self._session.close()

    def _take_fault(self, operation: str) -> Fault | None:
        with self._lock:
            fault = self.faults.get(operation) or self.faults.get("*")
            if fault is None:
                return None
            if fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    self.faults = {k: v for k, v in self.faults.items() if v is not fault}
            return fault

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        target = request.headers.get("X-Amz-Target", "")
        operation = target.rsplit(".", 1)[-1] if target else request.path
        body = await request.read()
        with self._lock:
            self.counts[operation] += 1
        fault = self._take_fault(operation)
        dropped: list[dict[str, Any]] = []
        if fault is not None:
            if fault.delay:
                self.injected["slow"] += 1
                await asyncio.sleep(fault.delay)
            elif fault.every:
                body, dropped = _drop_entries(body, fault.every)
                self.injected["failed_entries"] += len(dropped)
            else:
                self.injected[f"{fault.status}:{fault.code}"] += 1
                payload = {"__type": f"com.amazonaws.sqs#{fault.code}", "message": "injected fault"}
                return web.Response(
                    status=fault.status,
                    body=json.dumps(payload).encode(),
                    headers={
                        "Content-Type": "application/x-amz-json-1.0",
                        "x-amzn-query-error": f"{fault.code};Receiver",
                    },
                )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=body, headers=headers
        ) as up:
            data = await up.read()
            if dropped:
                data = _report_dropped(data, dropped)
            out = {k: v for k, v in up.headers.items() if k.lower() in ("content-type", "x-amzn-requestid")}
            return web.Response(status=up.status, body=data, headers=out)


def _drop_entries(body: bytes, every: int) -> tuple[bytes, list[dict[str, Any]]]:
    request = json.loads(body)
    entries = request.get("Entries", [])
    kept = [e for i, e in enumerate(entries) if (i + 1) % every]
    dropped = [e for i, e in enumerate(entries) if not (i + 1) % every]
    request["Entries"] = kept
    if not kept:  # SQS refuses an empty batch; keep one entry so the call is valid
        kept.append(dropped.pop())
    return json.dumps(request).encode(), dropped


def _report_dropped(data: bytes, dropped: list[dict[str, Any]]) -> bytes:
    response = json.loads(data or b"{}")
    response.setdefault("Failed", [])
    response["Failed"] += [
        {"Id": e["Id"], "SenderFault": False, "Code": "InternalError", "Message": "injected entry failure"}
        for e in dropped
    ]
    return json.dumps(response).encode()
