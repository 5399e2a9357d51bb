"""SNS notification signatures: a notification is believed only if SNS signed it.

Whoever may send to a queue can send a body shaped like an SNS notification naming any
topic, and `job.envelope.sns.topic_arn` is the field a service routes or authorises on. SNS
signs every notification it delivers (not raw deliveries): `SignatureVersion` 1 is RSA with
SHA1, 2 RSA with SHA256, over the canonical string of the notification's fields, with the key
of the certificate at `SigningCertURL`. The worker checks that signature before the handler
sees the job (`SnsSignatures.check`), as AWS's own SDKs' validators do:

- the certificate comes only from the topic's regional SNS host over https
  (`https://sns.<region>.amazonaws.com/....pem`, the region read from the TopicArn); any
  other URL is refused without a request. Under an emulator (AWS_ENDPOINT_URL set) it comes
  from the configured endpoint's host instead, the URL's own host never contacted
  (LocalStack names `localhost.localstack.cloud` and serves the certificate itself);
- certificates are cached by URL (SNS rotates them rarely), at most CACHE_SIZE of them;
- a forged or unsigned notification, a certificate URL on another host, or one that is not
  there is a PayloadError (dead-lettered with the reason); a certificate that cannot be
  fetched right now (network, 5xx) is an ordinary error, retried.

The notification names the URL, so what fetching costs is bounded whatever it names: each
URL is fetched once however many checks wait for it (one fetch per URL, never one lock
for all: a slow or hanging URL delays only the checks naming it), at most MAX_FETCHES at
once and MAX_PENDING waiting (past that a check is turned away at once, retried later); a
failure is remembered for the URL (PERMANENT_FAILURE_SECONDS for a certificate that is
not there or not one, TRANSIENT_FAILURE_SECONDS for one that could not be fetched right
now), at most FAILURES_KEPT of them, so that a bad URL is not fetched for every message
naming it. A check cancelled while it waits (its job's timeout) leaves the fetch to finish
for the others.

WORKER_SNS_VERIFY_SIGNATURES=false turns the check off, for queues whose queue policy
already admits only the topics' `aws:SourceArn`. Subscription confirmations are dropped
before this (their URLs are never fetched).

`Signer` signs as SNS does, with a key and a certificate made by `stand_in_certificate`:
a stand-in for SNS where no SNS signs (the examples `send` and the end-to-end check send
on an emulator, ops/examples.py). Only an emulator's worker can believe it: the certificate
must be where that worker fetches SNS's, on the emulator's own host.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from ..base.errors import PayloadError

# The fields SNS signs in a notification, in this order, each as "name\nvalue\n"; Subject
# only when the notification has one (SNS's "Verifying the signatures" documentation).
SIGNED_FIELDS = ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type")
HASHES: dict[str, type[hashes.HashAlgorithm]] = {"1": hashes.SHA1, "2": hashes.SHA256}
# A certificate path, rebuilt into the URL fetched: nothing but plain path characters.
CERT_PATH = re.compile(r"(/[A-Za-z0-9_-][A-Za-z0-9._-]*)+\.pem")
TOPIC_ARN = re.compile(r"arn:(aws[a-z-]*):sns:([a-z]{2}(-[a-z]+)+-\d+):\d{12}:[A-Za-z0-9_.-]{1,256}")
CACHE_SIZE = 32  # certificates kept (SNS uses one per region at a time)
MAX_CERT_BYTES = 16_384
FETCH_TIMEOUT = 10.0
MAX_FETCHES = 4  # certificates fetched at once
MAX_PENDING = 64  # certificates being fetched or waiting to be: past that a check is turned away
FAILURES_KEPT = 256  # URLs whose fetch failed, remembered
PERMANENT_FAILURE_SECONDS = 300.0  # no certificate there (4xx, not one, too big): forged
TRANSIENT_FAILURE_SECONDS = 10.0  # could not be fetched right now (network, 5xx, timeout)


@dataclass(frozen=True)
class Signed:
    """What SNS signed in one notification, and how (see `signed_of`)."""

    version: str
    signature: str  # base64
    cert_url: str
    canonical: bytes  # the canonical string the signature is over


def signed_of(doc: Mapping[str, Any]) -> Signed | None:
    """The signature of an SNS notification document, None if it carries none (or one
    whose parts are not strings: nothing SNS sent)."""
    parts = [doc.get(name) for name in ("SignatureVersion", "Signature", "SigningCertURL")]
    fields = [(name, doc.get(name)) for name in SIGNED_FIELDS if not (name == "Subject" and doc.get(name) is None)]
    if not all(isinstance(part, str) for part in parts) or not all(isinstance(value, str) for _, value in fields):
        return None
    canonical = "".join(f"{name}\n{value}\n" for name, value in fields).encode()
    return Signed(str(parts[0]), str(parts[1]), str(parts[2]), canonical)


def certificate_source(cert_url: str, topic_arn: str, endpoint_url: str | None) -> str:
    """The URL the certificate may be fetched from; a PayloadError if `cert_url` is not one
    SNS would sign with (see the module docstring)."""
    try:
        url = urlsplit(cert_url)
        port = url.port
    except ValueError:
        raise PayloadError("the SNS notification's SigningCertURL is not a URL") from None
    if not CERT_PATH.fullmatch(url.path) or url.query or url.fragment or url.username or url.password:
        raise PayloadError(f"the SNS notification's SigningCertURL path {url.path[:100]!r} is not a certificate's")
    if endpoint_url:  # an emulator: only its own host is ever asked
        endpoint = urlsplit(endpoint_url)
        return f"{endpoint.scheme}://{endpoint.netloc}{url.path}"
    arn = TOPIC_ARN.fullmatch(topic_arn)
    if arn is None:
        raise PayloadError("the SNS notification's TopicArn is not an SNS topic's ARN")
    partition, region = arn.group(1), arn.group(2)
    host = f"sns.{region}.amazonaws.com" + (".cn" if partition == "aws-cn" else "")
    if url.scheme != "https" or url.hostname != host or port not in (None, 443):
        raise PayloadError(
            f"the SNS notification's certificate is not on {host} over https "
            f"(SigningCertURL names {url.scheme}://{(url.hostname or '')[:100]}): not sent by SNS"
        )
    return f"https://{host}{url.path}"


def verify(signed: Signed, certificate_pem: bytes) -> None:
    """Check `signed` against the certificate's key; a PayloadError if it does not hold."""
    verify_with(signed, public_key(certificate_pem))


def public_key(certificate_pem: bytes) -> rsa.RSAPublicKey:
    """The RSA key of a PEM certificate; a PayloadError if it is not one."""
    try:
        key = x509.load_pem_x509_certificate(certificate_pem).public_key()
    except ValueError:
        raise PayloadError("the SNS signing certificate is not a PEM certificate") from None
    if not isinstance(key, rsa.RSAPublicKey):
        raise PayloadError("the SNS signing certificate's key is not RSA")
    return key


def verify_with(signed: Signed, key: rsa.RSAPublicKey) -> None:
    """Check `signed` against `key`; a PayloadError if it does not hold."""
    algorithm = HASHES.get(signed.version)
    if algorithm is None:
        raise PayloadError(f"the SNS notification's SignatureVersion {signed.version[:20]!r} is not 1 or 2")
    try:
        signature = base64.b64decode(signed.signature, validate=True)
    except (binascii.Error, ValueError):
        raise PayloadError("the SNS notification's Signature is not base64") from None
    try:
        key.verify(signature, signed.canonical, padding.PKCS1v15(), algorithm())
    except InvalidSignature:
        raise PayloadError("the SNS notification's signature does not verify: not sent by SNS") from None


@dataclass(frozen=True)
class Signer:
    """Signs SNS notifications as SNS does: with `key`, naming the certificate at `cert_url`."""

    key: rsa.RSAPrivateKey = field(repr=False)
    cert_url: str
    version: str = "2"  # SHA256, as a topic with SignatureVersion 2

    def sign(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """`doc`, a notification, with the SignatureVersion, SigningCertURL and Signature SNS gives it."""
        signed = {**doc, "SignatureVersion": self.version, "SigningCertURL": self.cert_url, "Signature": ""}
        what = signed_of(signed)  # the canonical string, as the check rebuilds it
        if what is None:
            raise ValueError("not an SNS notification: its signed fields must be strings")
        signature = self.key.sign(what.canonical, padding.PKCS1v15(), HASHES[self.version]())
        signed["Signature"] = base64.b64encode(signature).decode()
        return signed


def stand_in_certificate(days: int = 7) -> tuple[rsa.RSAPrivateKey, bytes]:
    """A new RSA key and a self-signed PEM certificate of it, valid for `days`: what a
    stand-in for SNS signs with (`Signer`)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns stand-in (not SNS)")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .sign(key, hashes.SHA256())
    )
    return key, certificate.public_bytes(serialization.Encoding.PEM)


class CertificateUnavailable(Exception):  # noqa: N818 - reads as a state, like DownstreamUnavailable
    """The signing certificate cannot be had right now (fetched too recently without
    success, or too many being fetched): the message is retried, not dead-lettered."""


@dataclass(frozen=True)
class _Failure:
    """A URL's failed fetch, remembered until `until` (the checker's clock)."""

    until: float
    permanent: bool  # a PayloadError: no certificate there
    reason: str

    def error(self) -> Exception:
        if self.permanent:
            return PayloadError(self.reason)
        return CertificateUnavailable(f"{self.reason} (a recent fetch failed; asked again shortly)")


Fetch = Callable[[str], Awaitable[bytes]]


class SnsSignatures:
    """Checks SNS notifications' signatures, with the certificates' keys cached. `fetch`
    replaces the HTTP GET, `clock` the monotonic clock failures are remembered by (tests)."""

    def __init__(
        self, endpoint_url: str | None, fetch: Fetch | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.endpoint_url = endpoint_url
        self._fetch = fetch or self._get
        self._clock = clock
        self._keys: OrderedDict[str, rsa.RSAPublicKey] = OrderedDict()  # by URL, least recent first
        self._failures: OrderedDict[str, _Failure] = OrderedDict()
        self._pending: dict[str, asyncio.Future[rsa.RSAPublicKey]] = {}  # one fetch per URL
        self._fetching = asyncio.Semaphore(MAX_FETCHES)
        self._session: aiohttp.ClientSession | None = None
        self.fetches = 0  # certificate requests made (tests, and a cache that works)

    async def check(self, notification_signed: Signed | None, topic_arn: str) -> None:
        """Raise PayloadError unless SNS signed this notification."""
        if notification_signed is None:
            raise PayloadError("the SNS notification carries no signature: not sent by SNS")
        source = certificate_source(notification_signed.cert_url, topic_arn, self.endpoint_url)
        verify_with(notification_signed, await self._key(source))

    def remembered(self) -> tuple[int, int]:
        """(certificates cached, failed URLs remembered): both bounded."""
        return len(self._keys), len(self._failures)

    async def _key(self, source: str) -> rsa.RSAPublicKey:
        key = self._keys.get(source)
        if key is not None:
            self._keys.move_to_end(source)
            return key
        failure = self._failures.get(source)
        if failure is not None:
            if self._clock() < failure.until:
                raise failure.error()
            del self._failures[source]
        pending = self._pending.get(source)
        if pending is None:
            if len(self._pending) >= MAX_PENDING:
                raise CertificateUnavailable(f"{MAX_PENDING} SNS signing certificates are being fetched already")
            pending = self._pending[source] = asyncio.ensure_future(self._fetch_key(source))
            pending.add_done_callback(lambda done: self._settle(source, done))
        # Shielded: a check cancelled while it waits (its job's timeout, a lost lease) leaves
        # the fetch running for the others and for the cache.
        return await asyncio.shield(pending)

    async def _fetch_key(self, source: str) -> rsa.RSAPublicKey:
        async with self._fetching:
            self.fetches += 1
            pem = await asyncio.wait_for(self._fetch(source), FETCH_TIMEOUT)
        return public_key(pem)

    def _settle(self, source: str, done: asyncio.Future[rsa.RSAPublicKey]) -> None:
        """Where a fetch's answer goes, whoever still waits for it: the cache, or the failures."""
        del self._pending[source]
        if done.cancelled():
            return
        error = done.exception()  # retrieved here, so never reported as lost when no one waits
        if error is None:
            self._keys[source] = done.result()
            while len(self._keys) > CACHE_SIZE:
                self._keys.popitem(last=False)
            return
        permanent = isinstance(error, PayloadError)
        seconds = PERMANENT_FAILURE_SECONDS if permanent else TRANSIENT_FAILURE_SECONDS
        reason = str(error) or f"fetching {source} failed: {type(error).__name__}"
        self._failures[source] = _Failure(self._clock() + seconds, permanent, reason)
        self._failures.move_to_end(source)
        while len(self._failures) > FAILURES_KEPT:
            self._failures.popitem(last=False)

    async def _get(self, url: str) -> bytes:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT))
        async with self._session.get(url, allow_redirects=False) as response:
            if 300 <= response.status < 500 and response.status != 429:  # no certificate there: never will be
                raise PayloadError(f"no SNS signing certificate at {url} ({response.status})")
            response.raise_for_status()  # a 5xx or 429 may pass: retried
            pem = await response.content.read(MAX_CERT_BYTES + 1)
        if len(pem) > MAX_CERT_BYTES:
            raise PayloadError(f"the SNS signing certificate at {url} is over {MAX_CERT_BYTES} bytes")
        return pem

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
