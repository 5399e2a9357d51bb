"""A service whose handler calls an HTTP API through a client its lifespan opens, the API's
URL a required setting of the service's own (PARTNER_API_URL): what an owner's second hour
looks like, for the end-to-end check with a stand-in for the API (`WORKER_HANDLERS`)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator

from pydantic import BaseModel, ConfigDict, Field, HttpUrl
from pydantic_settings import BaseSettings, SettingsConfigDict

from sqs_worker_engine import Job, Router

router = Router()


class Partner(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore")

    api_url: HttpUrl = Field(validation_alias="PARTNER_API_URL")


class Order(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"order_id": "o-1"}, {"order_id": "o-2"}]})

    order_id: str = Field(pattern=r"^o-")


@router.lifespan
async def partner() -> AsyncIterator[str]:
    yield str(Partner().api_url).rstrip("/")  # read from the environment


@router.handler("partner-orders", payload=Order)
def book(job: Job[Order]) -> None:
    request = urllib.request.Request(
        f"{job.resources}/v1/orders",
        data=json.dumps({"order": job.payload.order_id}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 201, answer.status
