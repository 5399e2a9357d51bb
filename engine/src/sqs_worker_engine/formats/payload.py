"""A message body becomes the handler's payload, or a PayloadError naming what is wrong."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError

from ..base.errors import PayloadError


def validation_problems(exc: ValidationError) -> str:
    """Where and what, for each error; never the input (it is logged, and a body is only
    logged with LOG_PAYLOADS)."""
    problems = "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'body'}: {error['msg']}"
        for error in exc.errors(include_url=False, include_input=False, include_context=False)
    )
    return f"{exc.error_count()} error(s): {problems}"


def parse_payload(model: type[Any] | None, body: str) -> Any:
    """Body -> payload; anything that does not parse is a PayloadError (dead-lettered).

    Nesting too deep for the parser is an error like any other (json raises RecursionError
    for it)."""
    if model is str:
        return body
    try:
        if model is None:
            return json.loads(body)
        assert issubclass(model, BaseModel)
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise PayloadError(
            f"payload does not match {model.__name__ if model else 'JSON'}: {validation_problems(exc)}"
        ) from None
    except (ValueError, TypeError, RecursionError) as exc:
        raise PayloadError(f"body is not valid JSON: {exc}") from None


def validate_value(model: type[Any] | None, value: Any) -> Any:
    """An already decoded JSON value (an envelope's content) -> payload, as parse_payload."""
    if model is None:
        return value
    if model is str:
        return value if isinstance(value, str) else json.dumps(value)
    assert issubclass(model, BaseModel)
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise PayloadError(f"payload does not match {model.__name__}: {validation_problems(exc)}") from None
