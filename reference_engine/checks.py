"""What this engine accepts of a `GenerateRequest` (the models are in `render_service.wire.generate`).

`sampling_spec` applies vLLM's ``SamplingParams`` range checks plus the tokens-only handler
checks (no ``stop`` strings) and this engine's limits (``n`` = 1, no logprobs);
`check_request` the request-level checks (token ids, output mode, no multimodal input);
`check_enforceable` refuses structured outputs, which this engine cannot enforce.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Annotated, Any

import msgspec

from render_service.errors import bad_request
from render_service.wire.generate import GenerateRequest, SamplingParams

from .backend import SamplingSpec
from .fastschema import SurelyValid


def _check(ok: bool, message: str, field: str) -> None:
    if not ok:
        raise bad_request(message, param=f"sampling_params.{field}")


def sampling_spec(sp: SamplingParams) -> SamplingSpec:
    """Validate and convert. Raises `OpenAIError` 400 naming ``sampling_params.<field>``."""
    _check(sp.n == 1, f"n={sp.n} is not supported: this reference engine returns exactly one choice (n=1)", "n")
    _check(0.0 <= sp.temperature <= 2.0, f"temperature must be in [0, 2], got {sp.temperature}", "temperature")
    _check(0.0 < sp.top_p <= 1.0, f"top_p must be in (0, 1], got {sp.top_p}", "top_p")
    _check(sp.top_k >= -1, f"top_k must be -1 or 0 (disable) or at least 1, got {sp.top_k}", "top_k")
    _check(0.0 <= sp.min_p <= 1.0, f"min_p must be in [0, 1], got {sp.min_p}", "min_p")
    _check(-2.0 <= sp.presence_penalty <= 2.0, "presence_penalty must be in [-2, 2]", "presence_penalty")
    _check(-2.0 <= sp.frequency_penalty <= 2.0, "frequency_penalty must be in [-2, 2]", "frequency_penalty")
    _check(0.0 < sp.repetition_penalty <= 2.0, "repetition_penalty must be in (0, 2]", "repetition_penalty")
    _check(sp.max_tokens is None or sp.max_tokens >= 1, f"max_tokens must be at least 1, got {sp.max_tokens}", "max_tokens")
    _check(sp.min_tokens >= 0, f"min_tokens must be non-negative, got {sp.min_tokens}", "min_tokens")
    _check(
        sp.max_tokens is None or sp.min_tokens <= sp.max_tokens,
        f"min_tokens ({sp.min_tokens}) must be less than or equal to max_tokens ({sp.max_tokens})",
        "min_tokens",
    )
    _check(not sp.stop, "stop strings are not supported on a tokens-only server; use stop_token_ids", "stop")
    _check(all(t >= 0 for t in sp.stop_token_ids), "stop_token_ids must be non-negative", "stop_token_ids")
    _check(sp.logprobs is None, "logprobs are not supported by this reference engine", "logprobs")
    _check(sp.prompt_logprobs is None, "prompt_logprobs are not supported by this reference engine", "prompt_logprobs")
    same = {name: getattr(sp, name) for name in SamplingSpec.__dataclass_fields__}
    return SamplingSpec(**{**same, "top_k": max(sp.top_k, 0), "stop_token_ids": tuple(sp.stop_token_ids)})


# vLLM 0.33.0's own `GenerateRequest` as JSON Schema (copied from ../shared/design/vllm-0.33-schemas,
# generated there from vLLM's pydantic model): what a real vLLM generate server refuses, we refuse.
GENERATE_REQUEST_SCHEMA = Path(__file__).with_name("schemas") / "GenerateRequest.json"


@functools.cache
def _generate_request_validator():
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(GENERATE_REQUEST_SCHEMA.read_text()))


@functools.cache
def _surely_valid() -> SurelyValid:
    return SurelyValid(json.loads(GENERATE_REQUEST_SCHEMA.read_text()))


def check_vllm_schema(body) -> None:
    """400 unless ``body`` is valid for vLLM 0.33's `GenerateRequest` schema (e.g. ``structured_outputs``
    with a null ``disable_any_whitespace``, which our own model would let through).

    The usual body is vouched for by `fastschema.SurelyValid` (microseconds at any prompt
    length); anything it cannot vouch for goes to jsonschema, which decides and words the error.

    Raises:
        OpenAIError: 400 naming the first offending field.
    """
    fast, misses = _surely_valid(), []
    if fast(body, misses):
        return
    import jsonschema

    error = jsonschema.exceptions.best_match(_generate_request_validator().iter_errors(body))
    if error is None:
        fast.remember(misses)
        return
    path = ".".join(str(p) for p in error.absolute_path) or None
    raise bad_request(f"Not a valid vLLM 0.33 GenerateRequest: {path or 'body'}: {error.message[:300]}", param=path)


# vLLM 0.33 `StructuredOutputsParams` fields that constrain output (the rest are options of these).
STRUCTURED_OUTPUT_KINDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


def check_enforceable(body: dict) -> None:
    """400 for ``sampling_params.structured_outputs`` that constrain output: render puts a chat
    ``response_format``, a Responses ``text.format`` and a ``required`` or named ``tool_choice``
    there, and this engine samples freely, so it would answer as if unconstrained.

    Raises:
        OpenAIError: 400 naming ``sampling_params.structured_outputs``.
    """
    so = (body.get("sampling_params") or {}).get("structured_outputs")
    kinds = [k for k in STRUCTURED_OUTPUT_KINDS if isinstance(so, dict) and so.get(k) not in (None, False)]
    if kinds:
        raise bad_request(f"structured outputs ({', '.join(kinds)}) are not enforced by this reference engine: "
                          "it cannot honour response_format or a required/named tool_choice",
                          param="sampling_params.structured_outputs")


_PROMPT = list[Annotated[int, msgspec.Meta(ge=0)]]


def split_prompt(body: Any) -> tuple[Any, list[int] | None]:
    """``(shape, prompt)``: when ``body["token_ids"]`` is a non-empty list of non-negative
    ``int``s (what every engine client sends), ``shape`` is ``body`` with ``token_ids: [0]``
    and ``prompt`` the list; else ``(body, None)``.

    Such a prompt is valid for our `GenerateRequest` model, vLLM's schema and `check_request`
    alike, so validating ``shape`` instead of ``body`` gives the same verdict and the same
    error while the checks stay O(1) in the prompt length (one C-level pass here, msgspec's,
    instead of three Python ones: a 9,000-token prompt cost 90 ms in jsonschema alone).
    """
    ids = body.get("token_ids") if type(body) is dict else None
    if type(ids) is not list or not ids:
        return body, None
    try:  # strict: no bool, float or string passes for an int
        prompt = msgspec.convert(ids, _PROMPT, strict=True)
    except msgspec.ValidationError:
        return body, None
    return {**body, "token_ids": [0]}, prompt


def check_request(req: GenerateRequest) -> None:
    """Request-level checks of the tokens-only handler. Raises `OpenAIError` 400."""
    if min(req.token_ids, default=0) < 0:
        raise bad_request("token_ids must be non-negative", param="token_ids")
    if req.output_mode != "tokens":
        raise bad_request(
            f"output_mode {req.output_mode!r} needs a tokenizer; this tokens-only engine only supports 'tokens'",
            param="output_mode",
        )
    if req.features is not None or req.content_parts is not None:
        raise bad_request("multimodal inputs are not supported by this reference engine", param="features")
