"""What the Responses and Messages doors share on the wire: the lenient base model, the
derender bodies' common fields, and each API's error shape.

Field names, types and defaults follow vLLM 0.33 (``../shared/design/vllm-0.33-schemas/``);
each door's own request models are in ``doors/<door>/wire.py``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..errors import OpenAIError
from ..wire.generate import GenerateResponse
from ..wire.limits import fail_fast_list


class Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


# -- derender bodies (our routes; modelled on the chat derender, wire brief §1.6) ----------

LOOSE = ConfigDict(extra="ignore")


class DerenderCommon(BaseModel):
    model_config = LOOSE
    model: str | None = None
    prompt_token_ids: fail_fast_list(int) | None = None
    prompt_tokens: int | None = Field(None, ge=0)


def derender_bodies(api: str, field: str, request: type[BaseModel]) -> tuple[type, type, type]:
    """A door's three derender bodies, each carrying the client request under ``field``:
    ``Derender<api>Request`` (``generate_response``), ``Derender<api>StreamRequest``
    (``stream: true``, ``generate_chunk`` + ``stream_state``) and the pipe's header line."""
    whole = create_model(f"Derender{api}Request", __base__=DerenderCommon, stream=(Literal[False], False),
                         generate_response=(GenerateResponse, ...), **{field: (request, ...)})
    stream = create_model(f"Derender{api}StreamRequest", __base__=DerenderCommon, stream=(Literal[True], ...),
                          generate_chunk=(GenerateResponse, ...), stream_state=(dict | None, None),
                          **{field: (request, ...)})
    header = create_model(f"{api}PipeHeader", __base__=DerenderCommon, **{field: (request | None, None)})
    return whole, stream, header


# -- errors in each API's shape -------------------------------------------------------

# vLLM 0.33's table (entrypoints/anthropic/protocol.py), 503 → overloaded_error included (Anthropic itself
# documents that type for 529); kept for parity with vLLM's /v1/messages.
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                    503: "overloaded_error", 529: "overloaded_error"}


def anthropic_error_type(status: int) -> str:
    """Anthropic's ``error.type`` for an HTTP status (other 4xx: ``invalid_request_error``,
    5xx: ``api_error``)."""
    return _ANTHROPIC_TYPES.get(status, "invalid_request_error" if 400 <= status < 500 else "api_error")


def anthropic_error_body(err: OpenAIError) -> dict:
    """``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": anthropic_error_type(err.status), "message": err.message}}


def anthropic_stream_error(err: OpenAIError, sequence_number: int = 0) -> dict:
    """The last event of a failed Messages stream: Anthropic's ``error`` event (no sequence number)."""
    return anthropic_error_body(err)


def openai_stream_error(err: OpenAIError, sequence_number: int = 0) -> dict:
    """The last event of a failed Responses stream: OpenAI's ``error`` event."""
    return {"type": "error", "code": err.type, "message": err.message, "param": err.param,
            "sequence_number": sequence_number}
