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

from sqs_worker_engine.envelopes import open_envelope
from sqs_worker_engine.errors import PayloadError
from sqs_worker_engine.signatures import Signed, SnsSignatures, certificate_source, signed_of

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
    async def scenario(server: CertServer, signatures: SnsSignatures) -> None:
        server.status = 404
        with pytest.raises(PayloadError, match="no SNS signing certificate"):
            await check(signatures, notification())
        server.status = 503
        with pytest.raises(aiohttp.ClientResponseError, match="Service Unavailable"):  # may pass: retried
            await check(signatures, notification())
        server.status = 200
        await check(signatures, notification())

    run_with_server(scenario)


def test_a_notification_without_string_signing_fields_has_no_signature() -> None:
    assert signed_of({**notification(), "Message": {"nested": 1}}) is None
    assert isinstance(signed_of(notification()), Signed)


def test_one_fetch_serves_many_jobs_checking_at_once() -> None:
    async def scenario(server: CertServer, signatures: SnsSignatures) -> None:
        await asyncio.gather(*(check(signatures, notification()) for _ in range(20)))

    assert len(run_with_server(scenario).requests) == 1
