"""A small HTTP proxy in front of LocalStack that counts SQS requests and injects faults.

It runs in a thread of its own, so workers in this process and in subprocesses can both be
pointed at it (AWS_ENDPOINT_URL=proxy.url). Faults, by SQS operation (X-Amz-Target):

- down(): stop listening (connection refused), up(): listen again on the same port
- fail(op, status, code, times): answer with an AWS-style error instead of forwarding
- slow(op, seconds): forward after a delay
- fail_entries(op, every): drop every n-th entry of a batch call before forwarding and
  report it as failed (InternalError), so the worker has to retry exactly those
- drop(op, times, before=False): close the connection without a complete answer: by default
  after SQS has acted on the request and half the response is written (the client cannot
  know whether its call took effect), or before forwarding with `before=True`

Random faults, at a rate per request (`"*"` matches every operation), drawn from a seeded
generator so a run can be replayed: `flaky(op, rate, status, code)`, `slow(op, seconds,
rate=...)`, `drop(op, rate=...)`, and `flaky_entries(op, rate, max_streak)`, which fails
single batch entries (dropped before forwarding: truly not done) but never the same receipt
handle more than `max_streak` times in a row, so every entry failure is transient.

It also follows which messages each client holds, from what SQS answered: a client is
named by the `app/<id>` part of its User-Agent (botocore adds it from AWS_SDK_UA_APP_ID);
`held(app)` is every message that client received and has not deleted or released.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import ClientSession, web

APP_RE = re.compile(r"\bapp/(\S+)")


@dataclass
class Fault:
    status: int = 500
    code: str = "InternalFailure"
    times: int | None = None  # None: until cleared
    delay: float = 0.0
    every: int = 0  # fail_entries: every n-th entry
    drop: bool = False  # close the connection instead of answering
    before: bool = False  # drop: before forwarding (SQS never sees the request)
    rate: float = 1.0  # random faults: probability per request (or per entry)
    max_streak: int = 0  # flaky_entries: most consecutive failures of one receipt handle


@dataclass
class FaultProxy:
    upstream: str
    counts: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    faults: dict[str, Fault] = field(default_factory=dict)
    seed: int | None = None

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="fault-proxy")
        self._lock = threading.Lock()
        self._site: web.TCPSite | None = None
        self._runner: web.AppRunner | None = None
        self._random = random.Random(self.seed)
        self._random_faults: list[tuple[str, Fault]] = []
        self._streaks: Counter[str] = Counter()  # receipt handle -> consecutive entry failures
        self._held: dict[str, dict[str, str]] = {}  # app -> receipt handle -> message id
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

    def slow(self, operation: str, seconds: float, rate: float | None = None, times: int | None = None) -> None:
        with self._lock:
            if rate is None:
                self.faults[operation] = Fault(delay=seconds, times=times)
            else:
                self._random_faults.append((operation, Fault(delay=seconds, rate=rate)))

    def fail_entries(self, operation: str, every: int = 2, times: int | None = None) -> None:
        with self._lock:
            self.faults[operation] = Fault(every=every, times=times)

    def drop(self, operation: str, times: int | None = None, rate: float | None = None, before: bool = False) -> None:
        with self._lock:
            if rate is None:
                self.faults[operation] = Fault(drop=True, before=before, times=times)
            else:
                self._random_faults.append((operation, Fault(drop=True, before=before, rate=rate)))

    def flaky(self, operation: str, rate: float, status: int = 500, code: str = "InternalFailure") -> None:
        with self._lock:
            self._random_faults.append((operation, Fault(status=status, code=code, rate=rate)))

    def flaky_entries(self, operation: str, rate: float, max_streak: int = 2) -> None:
        with self._lock:
            self._random_faults.append((operation, Fault(every=-1, rate=rate, max_streak=max_streak)))

    def clear(self, operation: str | None = None) -> None:
        with self._lock:
            if operation is None:
                self.faults.clear()
                self._random_faults.clear()
            else:
                self.faults.pop(operation, None)
                self._random_faults = [(op, f) for op, f in self._random_faults if op != operation]

    def held(self, app: str | None = None) -> set[str]:
        """Message ids a client (or, without `app`, any client) holds according to SQS's answers."""
        with self._lock:
            tables = [self._held.get(app, {})] if app is not None else list(self._held.values())
            return {message_id for table in tables for message_id in table.values()}

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
                return self._roll(operation)
            if fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    self.faults = {k: v for k, v in self.faults.items() if v is not fault}
            return fault

    def _roll(self, operation: str) -> Fault | None:
        """A random fault for this request, if one fires (entry faults apply per entry)."""
        per_entry = None
        for op, fault in self._random_faults:
            if op not in (operation, "*"):
                continue
            if fault.every < 0:
                per_entry = per_entry or fault
            elif self._random.random() < fault.rate:
                return fault
        return per_entry

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        target = request.headers.get("X-Amz-Target", "")
        operation = target.rsplit(".", 1)[-1] if target else request.path
        app_match = APP_RE.search(request.headers.get("User-Agent", ""))
        app = app_match.group(1) if app_match else ""
        body = await request.read()
        with self._lock:
            self.counts[operation] += 1
        fault = self._take_fault(operation)
        dropped: list[dict[str, Any]] = []
        drop_mid = False
        if fault is not None:
            if fault.drop and fault.before:
                self.injected["dropped_before_forwarding"] += 1
                return await _hang_up(request)
            if fault.drop:
                drop_mid = True
            elif fault.delay:
                self.injected["slow"] += 1
                await asyncio.sleep(fault.delay)
            elif fault.every > 0:
                body, dropped = _drop_entries(body, fault.every)
                self.injected["failed_entries"] += len(dropped)
            elif fault.every < 0:
                body, dropped = self._drop_random_entries(body, fault)
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
            status = up.status
            out = {k: v for k, v in up.headers.items() if k.lower() in ("content-type", "x-amzn-requestid")}
        if status == 200:
            self._follow(app, operation, body, data)
        if dropped:
            data = _report_dropped(data, dropped)
        if drop_mid:
            self.injected["dropped_mid_response"] += 1
            return await _hang_up(request, status, out, data)
        return web.Response(status=status, body=data, headers=out)

    def _drop_random_entries(self, body: bytes, fault: Fault) -> tuple[bytes, list[dict[str, Any]]]:
        request = json.loads(body)
        kept: list[dict[str, Any]] = []
        dropped: list[dict[str, Any]] = []
        with self._lock:
            for entry in request.get("Entries", []):
                handle = str(entry.get("ReceiptHandle", entry.get("Id")))
                if self._streaks[handle] < fault.max_streak and self._random.random() < fault.rate:
                    self._streaks[handle] += 1
                    dropped.append(entry)
                else:
                    self._streaks.pop(handle, None)
                    kept.append(entry)
            if not kept and dropped:  # SQS refuses an empty batch; let one entry through
                entry = dropped.pop()
                self._streaks.pop(str(entry.get("ReceiptHandle", entry.get("Id"))), None)
                kept.append(entry)
        request["Entries"] = kept
        return json.dumps(request).encode(), dropped

    def _follow(self, app: str, operation: str, body: bytes, data: bytes) -> None:
        """Track which messages `app` holds, from the requests SQS carried out."""
        if operation not in ("ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibilityBatch"):
            return
        try:
            request, response = json.loads(body or b"{}"), json.loads(data or b"{}")
        except ValueError:
            return
        with self._lock:
            table = self._held.setdefault(app, {})
            if operation == "ReceiveMessage":
                for message in response.get("Messages", []):
                    table[message["ReceiptHandle"]] = message["MessageId"]
                return
            entries = {e["Id"]: e for e in request.get("Entries", [])}
            for ok in response.get("Successful", []):
                entry = entries.get(ok.get("Id"), {})
                # A delete ends the hold; so does a release (visibility 0). A longer
                # visibility is a retry backoff or a heartbeat: the message stays out of sight.
                if operation == "DeleteMessageBatch" or entry.get("VisibilityTimeout") == 0:
                    table.pop(entry.get("ReceiptHandle", ""), None)


async def _hang_up(
    request: web.Request, status: int = 0, headers: dict[str, str] | None = None, data: bytes = b""
) -> web.StreamResponse:
    """Close the client's connection: at once, or after half of the response."""
    if status:
        response = web.StreamResponse(status=status, headers={**(headers or {}), "Content-Length": str(len(data))})
        with contextlib.suppress(ConnectionError):
            await response.prepare(request)
            await response.write(data[: len(data) // 2])
    if request.transport is not None:
        request.transport.abort()
    raise asyncio.CancelledError  # aiohttp drops a cancelled handler's connection without answering


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
