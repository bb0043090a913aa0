"""A client body → its typed request model, or one 400 naming the first bad field."""

from __future__ import annotations

from typing import Any, TypeVar

import pydantic

from ..errors import bad_request

M = TypeVar("M", bound=pydantic.BaseModel)


def validate(model: type[M], data: Any) -> M:
    """Validate ``data`` into ``model``.

    Raises:
        OpenAIError: 400 for a body that is not a JSON object, or that ``model`` refuses
        (``param`` = the dotted path of the first error, the message lists up to five).
    """
    if not isinstance(data, dict):
        raise bad_request("Request body must be a JSON object.")
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        summary = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in errors[:5])
        raise bad_request(f"{len(errors)} validation error(s): {summary}", param=param) from None
