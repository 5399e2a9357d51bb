"""A service whose handlers declare examples, for the end-to-end check (`WORKER_HANDLERS`).

EXAMPLES_APP_BROKEN=1 makes the orders handler fail every message, as an owner's bug would."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

from pydantic import BaseModel, ConfigDict, Field

from sqs_worker_engine import Job, Router

router = Router()


class Order(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"order_id": "o-1", "amount": 3}, {"order_id": "o-2", "amount": 0}]}
    )

    order_id: str = Field(pattern=r"^o-")
    amount: int = Field(ge=0)


class Shipped(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"parcel": "p-9"}]})

    parcel: str


@router.lifespan
async def shared() -> AsyncIterator[dict[str, str]]:
    yield {"ledger": "open"}


@router.handler(os.environ.get("EXAMPLES_ORDERS", "orders"), payload=Order)
async def on_order(job: Job[Order]) -> None:
    if os.environ.get("EXAMPLES_APP_BROKEN") == "1":
        raise RuntimeError(f"cannot book {job.payload.order_id}: the ledger is read-only")
    assert job.resources == {"ledger": "open"}


@router.handler(os.environ.get("EXAMPLES_SHIPPED", "shipped.fifo"), payload=Shipped, envelope="eventbridge")
async def on_shipped(job: Job[Shipped]) -> None:
    assert job.envelope is not None and job.envelope.event is not None


@router.handler(os.environ.get("EXAMPLES_NOTES", "notes"), payload=str)
def on_note(job: Job[str]) -> None:  # declares no examples: the check probes it
    pass
