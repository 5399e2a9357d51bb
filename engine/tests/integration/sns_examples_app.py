"""A service of handlers fed through SNS topics, with declared examples (`WORKER_HANDLERS`),
for `send` without a body and the end-to-end check: their examples reach the queue as
SNS notifications, signed, and the worker checks the signatures (its default).

SNS_EXAMPLES_NOTICES / SNS_EXAMPLES_PARCELS name the queues (defaults: notices, parcels).
A handler run in this process records each job in SEEN."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict

from sqs_worker_engine import Job, Router

router = Router()
SEEN: list[Job[Any]] = []


class Notice(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"notice_id": "n-1", "text": "hello"}, {"notice_id": "n-2", "text": ""}]}
    )

    notice_id: str
    text: str


class Parcel(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"parcel": "p-9"}]})

    parcel: str


@router.handler(os.environ.get("SNS_EXAMPLES_NOTICES", "notices"), payload=Notice, envelope="sns")
async def on_notice(job: Job[Notice]) -> None:
    assert job.envelope is not None and job.envelope.sns is not None, "an SNS notification"
    SEEN.append(job)


@router.handler(os.environ.get("SNS_EXAMPLES_PARCELS", "parcels"), payload=Parcel, envelope="sns+eventbridge")
async def on_parcel(job: Job[Parcel]) -> None:
    assert job.envelope is not None and job.envelope.sns is not None and job.envelope.event is not None
    SEEN.append(job)
