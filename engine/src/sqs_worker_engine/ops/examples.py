"""A handler's declared examples, as its queue receives them: what `send` sends when given no
body, and what the end-to-end check (end_to_end.py) requires each handler to process.

Examples are declared where pydantic keeps them, on the payload model:
`model_config = ConfigDict(json_schema_extra={"examples": [...]})` (also what its JSON
schema shows). A queue receives each wrapped as the handler's envelope delivers it.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from pydantic import BaseModel

from ..handlers.router import HandlerSpec


def examples_of(model: type[Any] | None) -> list[Any]:
    """The examples a payload model declares (`json_schema_extra={"examples": [...]}`)."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return []
    extra = model.model_config.get("json_schema_extra")
    # A callable json_schema_extra edits the schema: read what it produced.
    found = extra.get("examples") if isinstance(extra, dict) else model.model_json_schema().get("examples")
    return list(found) if isinstance(found, list) else []


def message_body(spec: HandlerSpec, example: Any, region: str = "us-east-1") -> str:
    """What the queue receives for `example` under the handler's envelope (SNS's raw
    delivery is the payload itself; EventBridge and S3 wrap it as they do)."""
    inner = spec.envelope.removeprefix("sns+").removeprefix("sns")
    if inner == "eventbridge":
        value: Any = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "end-to-end example",
            "source": "sqs_worker_engine.testing",
            "account": "000000000000",
            "time": "2024-01-01T00:00:00Z",
            "region": region,
            "resources": [],
            "detail": example,
        }
    elif inner == "s3":
        value = {"Records": [example]}
    else:
        value = example
    return value if isinstance(value, str) else json.dumps(value)


def example_bodies(spec: HandlerSpec, region: str = "us-east-1") -> list[str]:
    """Every example of the handler's payload model, as its queue receives it."""
    return [message_body(spec, example, region) for example in examples_of(spec.payload)]
