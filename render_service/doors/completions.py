"""The OpenAI completions door: legacy completions → one `GenerateRequest` per prompt (wire brief §1.4)."""

from __future__ import annotations

from typing import Any

from ..telemetry import tracing
from ..config.serve import ServeConfig
from ..errors import OpenAIError, bad_request, check_token_ids
from ..model import ModelBundle
from ..policy import skip_special_tokens
from ..wire.limits import check_batch
from ..wire.openai import CompletionRequest
from ..render.request import (
    check_logprobs, check_min_tokens, check_prompt_chars, generate_request, refuse_beam_search, resolve_max_tokens,
    sampling_params, truncate,
)
from ..wire.derender import DerenderCompletionRequest, DerenderCompletionStreamRequest, PipeHeader
from .answers import CompletionAnswer
from .door import Door


def render_completion(
    bundle: ModelBundle, config: ServeConfig, req: CompletionRequest, request_id: str
) -> list[dict[str, Any]]:
    """Render a completions request: one `GenerateRequest` per prompt.

    Ids are ``cmpl-<request_id>`` for one prompt, ``cmpl-<request_id>-<i>`` for several.

    Raises:
        OpenAIError: 400 for out-of-vocabulary ids, over-long prompts, a batch past
        ``config.max_batch_prompts`` / ``max_batch_prompt_length``, echo, …
    """
    refuse_beam_search(req)
    if req.echo:
        raise bad_request("echo is not supported by the render tier (the engine never sees prompt text).", "echo")
    check_logprobs(config, {"logprobs": req.logprobs, "prompt_logprobs": req.prompt_logprobs})
    if req.prompt == "":  # vLLM 0.33 refuses it even where the tokenizer would add a BOS (an empty batch item passes)
        raise bad_request("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
    prompts = req.prompts()
    try:
        check_batch(prompts, config.max_batch_prompts, config.max_batch_prompt_length)
    except ValueError as exc:
        raise bad_request(str(exc), "prompt") from None
    out = []
    vocab = bundle.tokenizer.vocab_size
    skip = skip_special_tokens(req.skip_special_tokens, parser_active=False,
                               default=bool(bundle.generation_config.get("skip_special_tokens", True)))
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, str):
            prompt = check_prompt_chars(bundle, prompt, req.truncate_prompt_tokens, req.truncation_side)
            with tracing.span("tokenize"):
                token_ids = encode_truncated(bundle, prompt, req)
        else:
            check_token_ids(prompt, vocab, "prompt")
            token_ids = truncate(list(prompt), req.truncate_prompt_tokens, bundle.max_model_len, req.truncation_side)
        if not token_ids:
            raise bad_request("The prompt is empty after tokenization.", "prompt")
        max_tokens = resolve_max_tokens(bundle, len(token_ids), req.max_tokens, "max_tokens")
        check_min_tokens(req.min_tokens, max_tokens)
        params = sampling_params(req, bundle, max_tokens, skip, req.logprobs, req.prompt_logprobs)
        rid = f"cmpl-{request_id}" if len(prompts) == 1 else f"cmpl-{request_id}-{i}"
        out.append(
            generate_request(
                req, request_id=rid, token_ids=token_ids, sampling_params=params,
                reasoning_ended=None, reasoning_parser_kwargs=None, parse_context=None,
            )
        )
    return out


def encode_truncated(bundle: ModelBundle, prompt: str, req: CompletionRequest) -> list[int]:
    """A text prompt's ids, cut to ``truncate_prompt_tokens`` as the tokenizer's own truncation
    does (vLLM 0.33 encodes with ``truncation=True, max_length=N``): the special tokens the
    tokenizer adds (Llama's ``<|begin_of_text|>``) are kept and count towards N; only the
    text's ids are cut, on ``truncation_side``."""
    ids = bundle.tokenizer.encode(prompt, add_special_tokens=req.add_special_tokens)
    if req.truncate_prompt_tokens is None:
        return ids
    text_ids = bundle.tokenizer.encode(prompt, add_special_tokens=False) if req.add_special_tokens else ids
    start = next((i for i in range(len(ids) - len(text_ids) + 1) if ids[i:i + len(text_ids)] == text_ids), None)
    if start is None or not text_ids:
        return truncate(ids, req.truncate_prompt_tokens, bundle.max_model_len, req.truncation_side)
    head, tail = ids[:start], ids[start + len(text_ids):]
    keep = bundle.max_model_len - 1 if req.truncate_prompt_tokens == -1 else req.truncate_prompt_tokens
    if keep > bundle.max_model_len:
        return truncate(ids, keep, bundle.max_model_len)  # raises the 400
    kept = truncate(text_ids, max(keep - len(head) - len(tail), 0), bundle.max_model_len, req.truncation_side)
    return head + kept + tail


DOOR = Door(
    name="completion",  # the driver's metrics label for this door
    path="/v1/completions",
    render_path="/v1/completions/render",
    derender_path="/v1/completions/derender",
    request=CompletionRequest,
    render=lambda bundle, config, req, request_id, media=None: render_completion(bundle, config, req, request_id),
    error_body=OpenAIError.body,
    derender_request=DerenderCompletionRequest,
    derender_stream_request=DerenderCompletionStreamRequest,
    pipe_header=PipeHeader,
    request_field="completion_request",
    answer=CompletionAnswer,
    takes_media=False,
    conversation=False,
)
