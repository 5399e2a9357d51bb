"""SNS notification signatures (signatures.py), with a certificate and key made here and
served by a local HTTP server standing in for the emulator's endpoint: a notification SNS
signed (SignatureVersion 1 and 2) is believed, a forged one is a PayloadError, and the
certificate is fetched only from the topic's SNS host (or the emulator's), once."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from sqs_worker_engine.base.errors import PayloadError
from sqs_worker_engine.formats.envelopes import open_envelope
from sqs_worker_engine.formats.signatures import (
    CACHE_SIZE,
    FAILURES_KEPT,
    MAX_FETCHES,
    MAX_PENDING,
    PERMANENT_FAILURE_SECONDS,
    TRANSIENT_FAILURE_SECONDS,
    CertificateUnavailable,
    Signed,
    SnsSignatures,
    certificate_source,
    signed_of,
)

TOPIC = "arn:aws:sns:us-east-1:123456789012:payments-approved"
CERT_PATH = "/SimpleNotificationService-test.pem"


def key_and_certificate() -> tuple[rsa.RSAPrivateKey, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.us-east-1.amazonaws.com")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return key, cert.public_bytes(serialization.Encoding.PEM)


KEY, CERT = key_and_certificate()
OTHER_KEY, _ = key_and_certificate()


def notification(key: rsa.RSAPrivateKey = KEY, version: str = "1", cert_url: str = "", **fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "Type": "Notification",
        "MessageId": "5b1b6d1e-6a38-4c1c-9a55-0e5d6d4a1f00",
        "TopicArn": TOPIC,
        "Subject": "approved",
        "Message": '{"payment_id": "p-1", "amount": 100}',
        "Timestamp": "2026-12-02T07:00:00.000Z",
        "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
        **fields,
    }
    doc["SignatureVersion"] = version
    doc["SigningCertURL"] = cert_url or f"https://sns.us-east-1.amazonaws.com{CERT_PATH}"
    signed = signed_of({**doc, "Signature": ""})
    assert signed is not None
    algorithm = hashes.SHA1() if version == "1" else hashes.SHA256()
    doc["Signature"] = base64.b64encode(key.sign(signed.canonical, padding.PKCS1v15(), algorithm)).decode()
    return doc


class CertServer:
    """Serves CERT at any path ending .pem and counts what it is asked."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.status = 200
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        if self.status != 200:
            return web.Response(status=self.status)
        return web.Response(body=CERT, content_type="application/x-pem-file")


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[CertServer]:
    cert_server = CertServer()
    app = web.Application()
    app.router.add_get("/{tail:.*}", cert_server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    cert_server.url = f"http://127.0.0.1:{port}"
    try:
        yield cert_server
    finally:
        await runner.cleanup()


def run_with_server(
    scenario: Callable[[CertServer, SnsSignatures], Awaitable[None]], emulator: bool = True
) -> CertServer:
    """`scenario` with a certificate server and a checker (the server as the emulator's endpoint)."""

    async def main() -> CertServer:
        async with serving() as server:
            signatures = SnsSignatures(server.url if emulator else None)
            try:
                await scenario(server, signatures)
            finally:
                await signatures.close()
            return server

    return asyncio.run(main())


async def check(signatures: SnsSignatures, doc: dict[str, Any]) -> None:
    opened = open_envelope("sns", json.dumps(doc))
    assert opened.envelope is not None and opened.envelope.sns is not None
    await signatures.check(opened.envelope.sns.signed, opened.envelope.sns.topic_arn)


@pytest.mark.parametrize("version", ["1", "2"])
def test_a_notification_sns_signed_is_believed_and_the_certificate_fetched_once(version: str) -> None:
    async def scenario(server: CertServer, signatures: SnsSignatures) -> None:
        for _ in range(3):
            await check(signatures, notification(version=version))
        await check(signatures, notification(version=version, Subject=None))  # no Subject: not signed

    server = run_with_server(scenario)
    assert server.requests == [CERT_PATH], "fetched from the emulator's host, once"


def test_a_forged_notification_is_a_payload_error() -> None:
    """The attack: a notification naming the trusted topic, signed with another key."""

    async def scenario(server: CertServer, signatures: SnsSignatures) -> None:
        forged = notification(key=OTHER_KEY)
        tampered = {**notification(), "TopicArn": "arn:aws:sns:us-east-1:123456789012:other"}
        for doc in (forged, tampered):
            with pytest.raises(PayloadError, match="signature does not verify: not sent by SNS"):
                await check(signatures, doc)
        with pytest.raises(PayloadError, match="Signature is not base64"):
            await check(signatures, {**notification(), "Signature": "bogus!"})
        unsigned = {k: v for k, v in notification().items() if k != "Signature"}
        with pytest.raises(PayloadError, match="carries no signature"):
            await check(signatures, unsigned)
        with pytest.raises(PayloadError, match="SignatureVersion '3'"):
            await check(signatures, notification(version="2") | {"SignatureVersion": "3"})

    run_with_server(scenario)


def test_without_an_emulator_the_certificate_comes_only_from_the_topics_sns_host() -> None:
    """The attack's certificate URL is on the attacker's host: refused without a request."""

    async def scenario(server: CertServer, signatures: SnsSignatures) -> None:
        with pytest.raises(PayloadError, match=r"not on sns\.us-east-1\.amazonaws\.com over https"):
            await check(signatures, notification(cert_url=f"{server.url}/attacker.pem"))
        assert signatures.fetches == 0

    server = run_with_server(scenario, emulator=False)
    assert server.requests == []


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://sns.us-east-1.amazonaws.com/c.pem", "over https"),
        ("https://sns.us-east-1.amazonaws.com.evil.example/c.pem", "over https"),
        ("https://evil.example/sns.us-east-1.amazonaws.com/c.pem", "over https"),
        ("https://sns.eu-west-1.amazonaws.com/c.pem", "not on sns.us-east-1"),  # not the topic's region
        ("https://sns.us-east-1.amazonaws.com:8443/c.pem", "over https"),
        ("https://user@sns.us-east-1.amazonaws.com/c.pem", "not a certificate's"),
        ("https://sns.us-east-1.amazonaws.com/c.txt", "not a certificate's"),
        ("https://sns.us-east-1.amazonaws.com/../c.pem", "not a certificate's"),
        ("https://sns.us-east-1.amazonaws.com/c.pem?x=1", "not a certificate's"),
        ("https://[::1/c.pem", "not a URL"),
    ],
)
def test_certificate_urls_sns_would_not_sign_with_are_refused(url: str, problem: str) -> None:
    with pytest.raises(PayloadError, match=problem.replace(".", r"\.")):
        certificate_source(url, TOPIC, None)


def test_the_certificate_source_is_the_sns_host_or_the_emulators() -> None:
    good = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-1.pem"
    assert certificate_source(good, TOPIC, None) == good
    china = "arn:aws-cn:sns:cn-north-1:123456789012:t"
    assert certificate_source("https://sns.cn-north-1.amazonaws.com.cn/c.pem", china, None).endswith(".com.cn/c.pem")
    localstack = "http://localhost.localstack.cloud:4566/_aws/sns/SimpleNotificationService-x.pem"
    assert certificate_source(localstack, TOPIC, "http://127.0.0.1:4566") == (
        "http://127.0.0.1:4566/_aws/sns/SimpleNotificationService-x.pem"
    )


def test_a_missing_certificate_is_a_payload_error_and_an_unavailable_one_is_retried() -> None:
    now = [0.0]

    async def scenario(server: CertServer, signatures: SnsSignatures) -> None:
        signatures._clock = lambda: now[0]
        server.status = 404
        for _ in range(2):
            with pytest.raises(PayloadError, match="no SNS signing certificate"):
                await check(signatures, notification())
        now[0] += PERMANENT_FAILURE_SECONDS
        server.status = 503
        with pytest.raises(aiohttp.ClientResponseError, match="Service Unavailable"):  # may pass: retried
            await check(signatures, notification())
        with pytest.raises(CertificateUnavailable, match="Service Unavailable"):  # remembered: retried too
            await check(signatures, notification())
        now[0] += TRANSIENT_FAILURE_SECONDS
        server.status = 200
        await check(signatures, notification())

    assert len(run_with_server(scenario).requests) == 3, "each failure asked once while remembered"


def test_a_notification_without_string_signing_fields_has_no_signature() -> None:
    assert signed_of({**notification(), "Message": {"nested": 1}}) is None
    assert isinstance(signed_of(notification()), Signed)


def test_one_fetch_serves_many_jobs_checking_at_once() -> None:
    async def scenario(server: CertServer, signatures: SnsSignatures) -> None:
        await asyncio.gather(*(check(signatures, notification()) for _ in range(20)))

    assert len(run_with_server(scenario).requests) == 1


# -- fetching certificates: per URL, bounded, failures remembered (a fake fetcher) -------


class FakeFetcher:
    """Stands in for the HTTP GET: counts calls and how many run at once; each URL's
    answer waits for its gate (open unless closed) and is CERT, or the error `failing` names."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.running = 0
        self.most_at_once = 0
        self.gates: dict[str, asyncio.Event] = {}
        self.failing: dict[str, BaseException] = {}

    def close(self, url: str) -> asyncio.Event:
        self.gates[url] = asyncio.Event()
        return self.gates[url]

    async def __call__(self, url: str) -> bytes:
        self.calls.append(url)
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            gate = self.gates.get(url)
            if gate is not None:
                await gate.wait()
            if url in self.failing:
                raise self.failing[url]
            return CERT
        finally:
            self.running -= 1


ENDPOINT = "http://127.0.0.1:4566"


def cert_url(name: str) -> str:
    return f"https://sns.us-east-1.amazonaws.com/SimpleNotificationService-{name}.pem"


def source(name: str) -> str:
    return f"{ENDPOINT}/SimpleNotificationService-{name}.pem"


def checker(fetcher: FakeFetcher, clock: list[float] | None = None) -> SnsSignatures:
    now = clock if clock is not None else [0.0]
    return SnsSignatures(ENDPOINT, fetch=fetcher, clock=lambda: now[0])


def test_certificates_of_different_urls_are_fetched_at_once_not_one_after_another() -> None:
    """One lock across every fetch made each notification naming a new certificate URL wait
    for all the fetches before it (each up to 10 s)."""

    async def main() -> None:
        fetcher = FakeFetcher()
        slow, other = fetcher.close(source("slow")), fetcher.close(source("other"))
        signatures = checker(fetcher)
        checks = [
            asyncio.ensure_future(check(signatures, notification(cert_url=cert_url(name))))
            for name in ("slow", "other")
        ]
        for _ in range(50):
            await asyncio.sleep(0)
        assert fetcher.most_at_once == 2, "the second URL's fetch waited for the first's"
        other.set()
        await asyncio.wait_for(checks[1], 5)  # answered while the slow one still hangs
        assert not checks[0].done()
        slow.set()
        await asyncio.wait_for(checks[0], 5)

    asyncio.run(main())


def test_each_url_is_fetched_once_however_many_checks_wait_for_it() -> None:
    async def main() -> None:
        fetcher = FakeFetcher()
        gates = [fetcher.close(source(name)) for name in "abc"]
        signatures = checker(fetcher)
        checks = asyncio.gather(*(check(signatures, notification(cert_url=cert_url(n))) for n in "abc" * 10))
        for _ in range(20):
            await asyncio.sleep(0)
        for gate in gates:
            gate.set()
        await asyncio.wait_for(checks, 5)
        assert sorted(fetcher.calls) == sorted(source(n) for n in "abc")
        await check(signatures, notification(cert_url=cert_url("a")))
        assert len(fetcher.calls) == 3, "cached"

    asyncio.run(main())


def test_a_check_cancelled_while_its_certificate_is_fetched_leaves_the_fetch_to_the_others() -> None:
    async def main() -> None:
        fetcher = FakeFetcher()
        gate = fetcher.close(source("a"))
        signatures = checker(fetcher)
        first = asyncio.ensure_future(check(signatures, notification(cert_url=cert_url("a"))))
        second = asyncio.ensure_future(check(signatures, notification(cert_url=cert_url("a"))))
        for _ in range(20):
            await asyncio.sleep(0)
        first.cancel()  # its job timed out, or lost its lease
        await asyncio.gather(first, return_exceptions=True)
        gate.set()
        await asyncio.wait_for(second, 5)
        assert fetcher.calls == [source("a")], "one fetch, finished for the check still waiting"

    asyncio.run(main())


def test_a_failed_fetch_is_remembered_for_a_while_not_repeated_for_every_message() -> None:
    async def main() -> None:
        fetcher = FakeFetcher()
        fetcher.failing[source("gone")] = PayloadError("no SNS signing certificate at x (404)")
        fetcher.failing[source("down")] = aiohttp.ClientConnectionError("connection refused")
        clock = [1000.0]
        signatures = checker(fetcher, clock)
        for _ in range(5):
            with pytest.raises(PayloadError, match="no SNS signing certificate"):
                await check(signatures, notification(cert_url=cert_url("gone")))
            with pytest.raises(Exception, match="connection refused") as unavailable:
                await check(signatures, notification(cert_url=cert_url("down")))
            assert not isinstance(unavailable.value, PayloadError), "a network failure is retried"
        assert fetcher.calls == [source("gone"), source("down")], "each failure remembered"
        clock[0] += TRANSIENT_FAILURE_SECONDS + 1
        del fetcher.failing[source("down")]
        await check(signatures, notification(cert_url=cert_url("down")))  # up again: fetched again
        with pytest.raises(PayloadError):
            await check(signatures, notification(cert_url=cert_url("gone")))
        assert fetcher.calls.count(source("gone")) == 1, "a missing certificate is remembered longer"
        clock[0] += PERMANENT_FAILURE_SECONDS
        with pytest.raises(PayloadError):
            await check(signatures, notification(cert_url=cert_url("gone")))
        assert fetcher.calls.count(source("gone")) == 2

    asyncio.run(main())


def test_notifications_naming_ever_new_urls_choose_neither_the_memory_nor_the_fetches_at_once() -> None:
    """Untrusted content names the certificate URL: what it costs is bounded."""

    async def main() -> None:
        fetcher = FakeFetcher()
        signatures = checker(fetcher)
        for n in range(3 * CACHE_SIZE):
            await check(signatures, notification(cert_url=cert_url(f"ok{n}")))
        for n in range(3 * FAILURES_KEPT):
            fetcher.failing[source(f"bad{n}")] = PayloadError("no certificate")
            with pytest.raises(PayloadError):
                await check(signatures, notification(cert_url=cert_url(f"bad{n}")))
        assert signatures.remembered() == (CACHE_SIZE, FAILURES_KEPT)
        # Many new URLs at once, each fetch hanging: at most MAX_FETCHES run at once, at most
        # MAX_PENDING wait, and past that a check is turned away (retried later) at once.
        names = [f"hang{n}" for n in range(MAX_PENDING + 10)]
        gates = [fetcher.close(source(name)) for name in names]
        checks = [asyncio.ensure_future(check(signatures, notification(cert_url=cert_url(n)))) for n in names]
        for _ in range(50):
            await asyncio.sleep(0)
        assert fetcher.most_at_once <= MAX_FETCHES
        turned_away = [c for c in checks if c.done()]
        assert len(turned_away) == 10
        for c in turned_away:
            assert not isinstance(c.exception(), PayloadError), "busy is not forged: retried"
        # A cached certificate is checked meanwhile without waiting.
        await asyncio.wait_for(check(signatures, notification(cert_url=cert_url(f"ok{3 * CACHE_SIZE - 1}"))), 5)
        for gate in gates:
            gate.set()
        await asyncio.wait_for(asyncio.gather(*checks, return_exceptions=True), 5)
        assert fetcher.most_at_once <= MAX_FETCHES

    asyncio.run(main())
