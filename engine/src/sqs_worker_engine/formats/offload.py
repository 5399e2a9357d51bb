"""Large payloads in S3, in the SQS extended client's format (Java and Python alike).

A producer over the size threshold puts the body in S3 and sends a pointer instead:

    body: ["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": b, "s3Key": k}]
    message attribute ExtendedPayloadSize (Number): the payload's size in bytes

(older clients: `com.amazon.sqs.javamessaging.MessageS3Pointer` and `SQSLargePayloadSize`).
The worker resolves the pointer inside the job, its lease held, before the payload is
validated. The message itself keeps the pointer: a retry reads the object again, the DLQ
copy carries the pointer and the attribute, so a redriven message still resolves.

The S3 object is deleted (with WORKER_LARGE_PAYLOAD_DELETE=true; the Python client's
default is to keep it, so is ours) only after SQS confirmed the message's delete: never on
a retry, a release, a lost lease or dead-lettering, which all leave a message pointing at it.

A pointer is message content, and whoever may send to the queue writes it. So a pointer is
followed only into the payload bucket (WORKER_LARGE_PAYLOAD_BUCKET) or a bucket the owner
listed (WORKER_LARGE_PAYLOAD_READ_BUCKETS), checked before any S3 call; objects are deleted
only in the payload bucket; and the object's size must be the size the pointer declared and
within WORKER_LARGE_PAYLOAD_MAX_BYTES, checked before the body is read and again while it
streams in. Each refusal is a PayloadError: the message is dead-lettered with the reason.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Collection, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import ClientError

from ..base.errors import PayloadError
from ..base.limits import LARGE_PAYLOAD_MAX_BYTES
from ..base.sqs import error_code

log = logging.getLogger("sqs_worker_engine.offload")
SIZE_ATTRIBUTE = "ExtendedPayloadSize"
LEGACY_SIZE_ATTRIBUTE = "SQSLargePayloadSize"
SIZE_ATTRIBUTES = (SIZE_ATTRIBUTE, LEGACY_SIZE_ATTRIBUTE)
POINTER_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"
LEGACY_POINTER_CLASS = "com.amazon.sqs.javamessaging.MessageS3Pointer"
DEFAULT_THRESHOLD = 262_144  # bytes of body and attributes: the extended clients' default
MISSING_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "404"})
# The size attribute is a Number: ASCII digits only ("²".isdigit() is true, int("²") fails).
_SIZE = re.compile(r"[0-9]{1,19}")
READ_CHUNK = 65_536


@dataclass(frozen=True)
class S3Pointer:
    bucket: str
    key: str
    size: int | None = None  # what the size attribute said

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def pointer_of(message: Mapping[str, Any]) -> S3Pointer | None:
    """The S3 pointer a received message carries, None for an ordinary message. A message
    that has the size attribute but no readable pointer or size is a PayloadError."""
    attributes = message.get("MessageAttributes")
    if not attributes:
        return None
    for name in SIZE_ATTRIBUTES:  # a loop, not next() over a generator: this runs for every message
        if name in attributes:
            break
    else:
        return None
    try:
        doc = json.loads(message.get("Body", ""))
    except (ValueError, RecursionError):
        doc = None
    if not (
        isinstance(doc, list)
        and len(doc) == 2
        and doc[0] in (POINTER_CLASS, LEGACY_POINTER_CLASS)
        and isinstance(doc[1], dict)
        and isinstance(doc[1].get("s3BucketName"), str)
        and isinstance(doc[1].get("s3Key"), str)
    ):
        raise PayloadError(f"the message has the {name} attribute but its body is not an S3 pointer")
    value = attributes[name]
    raw_size = value.get("StringValue") if isinstance(value, Mapping) else None
    if not isinstance(raw_size, str) or not _SIZE.fullmatch(raw_size.strip()):
        raise PayloadError(f"the {name} attribute is not a size in bytes")
    return S3Pointer(doc[1]["s3BucketName"], doc[1]["s3Key"], int(raw_size))


def pointer_problem(pointer: S3Pointer, buckets: Collection[str]) -> str | None:
    """Why the worker must not follow `pointer`, or None. `buckets`: where pointers may
    point (the payload bucket and the listed ones); none configured, none is followed."""
    if not buckets:
        return (
            f"the message points at {pointer.uri}, and this worker follows no pointer: "
            "set WORKER_LARGE_PAYLOAD_BUCKET to the bucket its producers offload to"
        )
    if pointer.bucket not in buckets:
        return (
            f"the message points into bucket {pointer.bucket!r}, which is not a payload bucket of this worker "
            "(WORKER_LARGE_PAYLOAD_BUCKET, WORKER_LARGE_PAYLOAD_READ_BUCKETS)"
        )
    return None


def size_problem(pointer: S3Pointer, size: int, max_bytes: int) -> str | None:
    """Why an object of `size` bytes is not the payload `pointer` declared, or None."""
    if pointer.size is not None and size != pointer.size:
        return f"the large payload {pointer.uri} is {size} bytes, but the message declares {pointer.size}"
    if size > max_bytes:
        return f"the large payload {pointer.uri} is {size} bytes, over WORKER_LARGE_PAYLOAD_MAX_BYTES ({max_bytes})"
    return None


def pointer_body(pointer: S3Pointer) -> str:
    """The message body that stands for an offloaded payload."""
    return json.dumps([POINTER_CLASS, {"s3BucketName": pointer.bucket, "s3Key": pointer.key}])


class PayloadStore:
    """Reads, writes and deletes offloaded payloads. Its S3 client is made on first use:
    a worker whose messages never carry a pointer never opens one.

    `bucket` is the payload bucket (the one objects are deleted in); `read_buckets` other
    buckets pointers may name; `max_bytes` the largest object read."""

    def __init__(
        self,
        region: str,
        endpoint_url: str | None,
        client: Any = None,
        *,
        bucket: str | None = None,
        read_buckets: Collection[str] = (),
        max_bytes: int = LARGE_PAYLOAD_MAX_BYTES,
    ) -> None:
        self.region = region
        self.endpoint_url = endpoint_url
        self.bucket = bucket
        self.buckets = frozenset({*read_buckets, *([bucket] if bucket else [])})
        self.max_bytes = max_bytes
        self._client = client
        self._stack = AsyncExitStack()
        self._lock = asyncio.Lock()

    async def client(self) -> Any:
        """The S3 client (made on first use)."""
        async with self._lock:
            if self._client is None:
                config = AioConfig(
                    connect_timeout=5,
                    read_timeout=60,
                    retries={"mode": "standard", "total_max_attempts": 3},
                    # An emulator's endpoint is one host: name the bucket in the path.
                    s3={"addressing_style": "path"} if self.endpoint_url else None,
                )
                self._client = await self._stack.enter_async_context(
                    get_session().create_client(
                        "s3", region_name=self.region, endpoint_url=self.endpoint_url, config=config
                    )
                )
        return self._client

    async def fetch(self, pointer: S3Pointer) -> str:
        """The payload, as text. A pointer outside the payload buckets, an object of another
        size than declared or over the cap, or a missing object or bucket cannot get better
        by retrying: a PayloadError (dead-lettered, the pointer kept). Anything else is
        retried."""
        problem = pointer_problem(pointer, self.buckets)
        if problem is not None:
            raise PayloadError(problem)  # before any S3 call
        s3 = await self.client()
        try:
            head = await s3.head_object(Bucket=pointer.bucket, Key=pointer.key)
            problem = size_problem(pointer, int(head["ContentLength"]), self.max_bytes)
            if problem is not None:
                raise PayloadError(problem)
            if pointer.size == 0:
                return ""  # S3 refuses a range of an empty object
            # The object read is the one measured (IfMatch), and no more of it than the cap:
            # a producer may overwrite the key between the two calls.
            response = await s3.get_object(
                Bucket=pointer.bucket, Key=pointer.key, IfMatch=head["ETag"], Range=f"bytes=0-{self.max_bytes}"
            )
            data = bytearray()
            async with response["Body"] as stream:
                while chunk := await stream.read(READ_CHUNK):
                    data += chunk
                    if len(data) > self.max_bytes:
                        raise PayloadError(size_problem(pointer, len(data), self.max_bytes) or "too large")
        except ClientError as exc:
            if error_code(exc) in MISSING_CODES:
                raise PayloadError(f"the large payload {pointer.uri} does not exist ({error_code(exc)})") from None
            raise
        problem = size_problem(pointer, len(data), self.max_bytes)
        if problem is not None:
            raise PayloadError(problem)
        try:
            return data.decode()
        except UnicodeDecodeError:
            raise PayloadError(f"the large payload {pointer.uri} is not UTF-8 text") from None

    async def put(self, bucket: str, body: str) -> S3Pointer:
        data = body.encode()
        key = str(uuid.uuid4())
        s3 = await self.client()
        await s3.put_object(Bucket=bucket, Key=key, Body=data)
        return S3Pointer(bucket, key, len(data))

    async def delete(self, pointer: S3Pointer) -> bool:
        """Delete the object of a message SQS confirmed deleted. A failure is logged, not
        raised: the message is settled, and the bucket's lifecycle rule collects leftovers.
        Only ever in the payload bucket: a pointer elsewhere names someone else's object."""
        if pointer.bucket != self.bucket:
            log.warning("not deleting %s: only objects in the payload bucket are deleted", pointer.uri)
            return False
        s3 = await self.client()
        try:
            await s3.delete_object(Bucket=pointer.bucket, Key=pointer.key)
        except Exception as exc:
            log.warning("could not delete the large payload %s: %s", pointer.uri, error_code(exc))
            return False
        return True

    async def close(self) -> None:
        await self._stack.aclose()
