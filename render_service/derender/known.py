"""Request fields validated once per stream, not once per chunk.

A stateless stream sends its whole ``chat_request`` (tools with their JSON schemas, stop
strings, template kwargs …) with every chunk, as vLLM's wire has it, and validating it was
the largest part of validating a chunk's body. `KnownFields` keeps the validated object of
recent requests by the exact JSON of the keys its model reads (model field order, so two
bodies whose keys come in another order are two entries, never a wrong hit); a body whose
field is one of them validates only the rest of the body and gets the kept object.

Exact: validation is a pure function of those keys (the models ignore any other key), so an
equal key means an equal validated value, and a known value was valid, so the body's errors
are those of the rest, in the same order. Kept values are shared by the requests that send
them and are read-only (nothing in derender writes to a request model). Bounded: at most
``capacity`` entries of at most `MAX_KEY_BYTES` of JSON each, least recently used dropped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel

from ..wire.validate import validate

M = TypeVar("M", bound=BaseModel)
MAX_KEY_BYTES = 64 * 1024
"""Fields whose read keys are longer JSON than this are validated every time (not kept)."""


class KnownFields:
    """Validated values of one field (e.g. ``chat_request``) of the request models it serves.

    Args:
        field: the body key.
        model: the field's model (its declared fields are the keys read).
        capacity: most values kept.
    """

    def __init__(self, field: str, model: type[BaseModel], capacity: int = 256) -> None:
        self.field, self.capacity = field, capacity
        self.keys = tuple(model.model_fields)
        self._values: OrderedDict[bytes, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    def validate(self, model: type[M], body: Any) -> M:
        """``validate(model, body)`` (same result, same errors), with the field's value taken
        from the kept ones when its read keys are known.

        Raises:
            OpenAIError: 400, as `render_service.wire.validate.validate`.
        """
        raw = body.get(self.field) if type(body) is dict else None
        if type(raw) is not dict:
            return validate(model, body)
        try:
            key = orjson.dumps({k: raw[k] for k in self.keys if k in raw})
        except orjson.JSONEncodeError:  # nested past the JSON writer's limit: validation refuses it
            return validate(model, body)
        with self._lock:
            known = self._values.get(key)
            if known is not None:
                self._values.move_to_end(key)
                self.hits += 1
        if known is None:
            req = validate(model, body)
            value = getattr(req, self.field)
            if value is not None and len(key) <= MAX_KEY_BYTES and self.capacity:
                with self._lock:
                    self._values[key] = value
                    while len(self._values) > self.capacity:
                        self._values.popitem(last=False)
            return req
        req = validate(model, {**body, self.field: None})
        req.__dict__[self.field] = known  # what setattr does (the field is set already), without pydantic's __setattr__
        return req


__all__ = ["KnownFields", "MAX_KEY_BYTES"]
