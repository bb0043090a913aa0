"""Render: an OpenAI request → the `GenerateRequest` a tokens-only engine takes.

Pure functions over a `ModelBundle` and a `ServeConfig`; no HTTP. The output shape is
vLLM 0.33's `GenerateRequest` with every key present, nulls included (wire brief §1.3,
§1.4, pipeline §2.1, lengths §2.6, ids §2.7).
"""

from __future__ import annotations

import secrets
from typing import Any

from parsers import api as parsers_api

from .chat import history_tool_call_count, prepare_messages
from .config import ServeConfig
from .errors import bad_request, check_token_ids
from .model import ModelBundle
from .protocol import ChatCompletionRequest, CompletionRequest
from .sampling import build_sampling_params
from .templates import TemplateRenderError, compile_template

# Prompt tail handed to the reasoning parser to decide its starting state: enough for
# "<|im_start|>assistant\n<think>\n\n</think>\n\n" and its kin, bounded so it stays cheap.
_PROMPT_TAIL_CHARS = 256


def new_request_id() -> str:
    """16 random hex characters (vLLM's default request id)."""
    return secrets.token_hex(8)


def tool_parser_active(config: ServeConfig) -> bool:
    """A tool parser runs only with both ``--enable-auto-tool-choice`` and ``--tool-call-parser``."""
    return bool(config.enable_auto_tool_choice and config.tool_call_parser)


def render_chat(bundle: ModelBundle, config: ServeConfig, req: ChatCompletionRequest, request_id: str) -> dict[str, Any]:
    """Render a chat request.

    Returns:
        The `GenerateRequest` dict (``request_id`` = ``chatcmpl-<request_id>``).

    Raises:
        OpenAIError: 400 for requests the model or template cannot take (tool choice without
        a parser, template exceptions, prompts longer than the context, …).
    """
    if req.use_beam_search:
        raise bad_request("use_beam_search is not supported.", "use_beam_search")
    tool_choice = req.effective_tool_choice
    _check_tool_choice(config, tool_choice)
    _check_logprobs(config, {"top_logprobs": req.top_logprobs, "prompt_logprobs": req.prompt_logprobs})

    template, kwargs = _template_and_kwargs(bundle, config, req)
    reused = _reused_prompt_ids(bundle, req)
    if reused is not None:
        # Decode leg of the coupled P/D path (wire brief §6.2): prefill already rendered.
        token_ids = reused
        text = bundle.tokenizer.decode(reused[-64:], skip_special_tokens=False)
    else:
        text, token_ids = _render_and_encode(bundle, config, req, template, kwargs, tool_choice)
    token_ids = _truncate(token_ids, req.truncate_prompt_tokens, bundle.max_model_len)
    requested = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    param = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    max_tokens = resolve_max_tokens(bundle, len(token_ids), requested, param)

    reasoning_active = bool(config.reasoning_parser)
    parser_active = reasoning_active or (tool_parser_active(config) and tool_choice != "none")
    sampling_params = _sampling_params(
        req, bundle, max_tokens, _skip_special_tokens(req, bundle, parser_active),
        (req.top_logprobs or 0) if req.logprobs else None, req.prompt_logprobs,
    )

    effective_kwargs = {
        **kwargs,
        "add_generation_prompt": req.add_generation_prompt,
        "continue_final_message": req.continue_final_message,
    }
    reasoning_ended = None
    if not req.include_reasoning:
        reasoning_ended = True
    elif reasoning_active:
        reasoning_ended = parsers_api.prompt_ends_reasoning(
            config.reasoning_parser, text[-_PROMPT_TAIL_CHARS:], effective_kwargs
        )

    parse_context = {
        "tools": req.tools,
        "tool_choice": tool_choice,
        "parallel_tool_calls": req.parallel_tool_calls,
        "include_reasoning": req.include_reasoning,
        "chat_template_kwargs": effective_kwargs,
        "history_tool_call_cnt": history_tool_call_count(req.messages),
    }
    return _generate_request(
        req,
        request_id=f"chatcmpl-{request_id}",
        token_ids=token_ids,
        sampling_params=sampling_params,
        reasoning_ended=reasoning_ended,
        reasoning_parser_kwargs={"chat_template_kwargs": effective_kwargs} if reasoning_active else None,
        parse_context=parse_context,
    )


def render_completion(
    bundle: ModelBundle, config: ServeConfig, req: CompletionRequest, request_id: str
) -> list[dict[str, Any]]:
    """Render a completions request: one `GenerateRequest` per prompt.

    Ids are ``cmpl-<request_id>`` for one prompt, ``cmpl-<request_id>-<i>`` for several.

    Raises:
        OpenAIError: 400 for out-of-vocabulary ids, over-long prompts, echo, …
    """
    if req.use_beam_search:
        raise bad_request("use_beam_search is not supported.", "use_beam_search")
    if req.echo:
        raise bad_request("echo is not supported by the render tier (the engine never sees prompt text).", "echo")
    _check_logprobs(config, {"logprobs": req.logprobs})
    prompts = req.prompts()
    out = []
    vocab = bundle.tokenizer.vocab_size
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, str):
            token_ids = bundle.tokenizer.encode(prompt, add_special_tokens=req.add_special_tokens)
        else:
            check_token_ids(prompt, vocab, "prompt")
            token_ids = list(prompt)
        if not token_ids:
            raise bad_request("The prompt is empty after tokenization.", "prompt")
        token_ids = _truncate(token_ids, req.truncate_prompt_tokens, bundle.max_model_len)
        max_tokens = resolve_max_tokens(bundle, len(token_ids), req.max_tokens, "max_tokens")
        sampling_params = _sampling_params(
            req, bundle, max_tokens, _skip_special_tokens(req, bundle, parser_active=False), req.logprobs
        )
        rid = f"cmpl-{request_id}" if len(prompts) == 1 else f"cmpl-{request_id}-{i}"
        out.append(
            _generate_request(
                req, request_id=rid, token_ids=token_ids, sampling_params=sampling_params,
                reasoning_ended=None, reasoning_parser_kwargs=None, parse_context=None,
            )
        )
    return out


def resolve_max_tokens(bundle: ModelBundle, prompt_len: int, requested: int | None, param: str) -> int:
    """``max_tokens`` per wire brief §2.6, with errors that name both lengths.

    Raises:
        OpenAIError: 400 when the request asks for more than the context, or the prompt
        leaves no room to generate.
    """
    limit = bundle.max_model_len
    if requested is not None and requested > limit:
        raise bad_request(
            f"{param}={requested} is larger than this model's maximum context length of {limit} tokens.", param
        )
    if prompt_len >= limit:
        raise bad_request(
            f"This model's maximum context length is {limit} tokens, and your prompt contains {prompt_len} "
            f"input tokens, which leaves no room for output. Shorten the prompt or set truncate_prompt_tokens.",
            "input_tokens",
        )
    room = limit - prompt_len
    default = bundle.generation_config.get("max_new_tokens")
    want = requested if requested is not None else (default or room)
    return min(room, want)


def _render_and_encode(
    bundle: ModelBundle, config: ServeConfig, req: ChatCompletionRequest, template, kwargs: dict, tool_choice
) -> tuple[str, list[int]]:
    """Apply the chat template and tokenize: ``(prompt_text, token_ids)``."""
    messages = prepare_messages(req.messages, template)
    tools, documents = req.tools, req.documents
    if tools is not None and tool_choice == "none" and config.exclude_tools_when_tool_choice_none:
        tools = None
    sanitizer = bundle.sanitizer(template) if config.content_special_tokens == "text" else None
    if sanitizer is not None:
        messages, tools, documents, kwargs = (sanitizer.mark(x) for x in (messages, tools, documents, kwargs))
    try:
        text = template.render(
            messages,
            tools=tools,
            documents=documents,
            add_generation_prompt=req.add_generation_prompt,
            continue_final_message=req.continue_final_message,
            **{**bundle.special_tokens, **kwargs},
        )
    except TemplateRenderError as exc:
        raise bad_request(f"Chat template error: {exc}", "messages") from None

    if sanitizer is None:
        token_ids = bundle.tokenizer.encode(text, add_special_tokens=req.add_special_tokens)
        if req.add_special_tokens:
            token_ids = _drop_doubled_bos(token_ids, bundle)
    else:
        try:
            token_ids = sanitizer.encode(text)
        except ValueError as exc:
            raise bad_request(str(exc), "messages") from None
    return text, token_ids


def _reused_prompt_ids(bundle: ModelBundle, req: ChatCompletionRequest) -> list[int] | None:
    """``kv_transfer_params.prompt_token_ids`` when present, validated (wire brief §6.2)."""
    ids = (req.kv_transfer_params or {}).get("prompt_token_ids")
    if ids is None:
        return None
    vocab = bundle.tokenizer.vocab_size
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and 0 <= i < vocab for i in ids):
        raise bad_request(
            f"kv_transfer_params.prompt_token_ids must be a non-empty list of token ids in [0, {vocab}).",
            "kv_transfer_params.prompt_token_ids",
        )
    return list(ids)


def _check_logprobs(config: ServeConfig, requested: dict[str, int | None]) -> None:
    """Logprob counts above ``--max-logprobs`` are refused up front (vLLM checks them at derender)."""
    if config.max_logprobs < 0:
        return
    for param, value in requested.items():
        if value is not None and value > config.max_logprobs:
            raise bad_request(f"{param}={value} exceeds the server limit --max-logprobs={config.max_logprobs}.", param)


def _check_tool_choice(config: ServeConfig, tool_choice: str | dict) -> None:
    if tool_choice == "none" or tool_parser_active(config):
        return
    if tool_choice == "auto":
        raise bad_request(
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set.', "tool_choice"
        )
    raise bad_request(
        f"tool_choice {tool_choice!r} requires a tool parser (--enable-auto-tool-choice --tool-call-parser NAME).",
        "tool_choice",
    )


def _template_and_kwargs(bundle: ModelBundle, config: ServeConfig, req: ChatCompletionRequest):
    request_kwargs = dict(req.chat_template_kwargs or {})
    inline = req.chat_template or request_kwargs.pop("chat_template", None)
    if inline is not None:
        if not config.trust_request_chat_template:
            raise bad_request(
                "Chat template is passed with request, but --trust-request-chat-template is not set.", "chat_template"
            )
        try:
            template = compile_template(inline)
        except ValueError as exc:
            raise bad_request(str(exc), "chat_template") from None
    elif bundle.chat_template is None:
        raise bad_request(
            "This model has no chat template; start the server with --chat-template or use /v1/completions.",
            "messages",
        )
    else:
        template = bundle.chat_template
    kwargs = {**config.default_chat_template_kwargs}
    kwargs.update({k: v for k, v in request_kwargs.items() if v is not None and v != "auto"})
    if req.reasoning_effort is not None:
        kwargs["reasoning_effort"] = req.reasoning_effort
        kwargs.setdefault("enable_thinking", req.reasoning_effort != "none")
    for reserved in ("messages", "tools", "documents", "add_generation_prompt", "continue_final_message"):
        kwargs.pop(reserved, None)
    return template, kwargs


def _sampling_params(req, bundle: ModelBundle, max_tokens: int, skip_special: bool, logprobs, prompt_logprobs=None):
    return build_sampling_params(
        req,
        max_tokens=max_tokens,
        generation_config=bundle.generation_config,
        eos_token_ids=bundle.eos_token_ids,
        skip_special_tokens=skip_special,
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
    )


def _skip_special_tokens(req, bundle: ModelBundle, parser_active: bool) -> bool:
    if parser_active:
        return False  # markers such as <tool_call> or [TOOL_CALLS] must survive decoding (case 22)
    if req.skip_special_tokens is not None:
        return req.skip_special_tokens
    return bool(bundle.generation_config.get("skip_special_tokens", True))


def _drop_doubled_bos(token_ids: list[int], bundle: ModelBundle) -> list[int]:
    """The template already wrote BOS; ``add_special_tokens`` must not add a second (case 05)."""
    bos = bundle.special_tokens.get("bos_token")
    bos_id = bundle.tokenizer.token_to_id(bos) if bos else None
    if bos_id is not None and token_ids[:2] == [bos_id, bos_id]:
        return token_ids[1:]
    return token_ids


def _truncate(token_ids: list[int], truncate: int | None, max_model_len: int) -> list[int]:
    if truncate is None:
        return token_ids
    keep = max_model_len - 1 if truncate == -1 else truncate
    if keep > max_model_len:
        raise bad_request(
            f"truncate_prompt_tokens={truncate} is larger than the maximum context length {max_model_len}.",
            "truncate_prompt_tokens",
        )
    return token_ids[-keep:] if keep else []


def _generate_request(
    req: Any,
    *,
    request_id: str,
    token_ids: list[int],
    sampling_params: dict,
    reasoning_ended: bool | None,
    reasoning_parser_kwargs: dict | None,
    parse_context: dict | None,
) -> dict[str, Any]:
    extra = dict(sampling_params.get("extra_args") or {})
    kv = req.kv_transfer_params if req.kv_transfer_params is not None else extra.pop("kv_transfer_params", None)
    if kv is not None and "prompt_token_ids" in kv:
        kv = {k: v for k, v in kv.items() if k != "prompt_token_ids"}
    ec = req.ec_transfer_params if req.ec_transfer_params is not None else extra.pop("ec_transfer_params", None)
    return {
        "request_id": request_id,
        "token_ids": token_ids,
        "token_offsets": None,
        "features": None,
        "content_parts": None,
        "sampling_params": sampling_params,
        "model": req.model,
        "reasoning_ended": reasoning_ended,
        "reasoning_parser_kwargs": reasoning_parser_kwargs,
        "return_token_ids": req.return_token_ids,
        "output_mode": "tokens",
        "parse_context": parse_context,
        "stream": req.stream,
        "stream_options": req.stream_options.model_dump(exclude_none=True) if req.stream and req.stream_options else None,
        "cache_salt": req.cache_salt,
        "priority": req.priority,
        "kv_transfer_params": kv,
        "ec_transfer_params": ec,
    }
