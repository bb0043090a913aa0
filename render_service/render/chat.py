"""Front door: an OpenAI chat request → the `GenerateRequest` a tokens-only engine takes.

Pure functions over a `ModelBundle` and a `ServeConfig`; no HTTP. Steps: check the request
against the server (`policy`), prepare the messages for the template (`messages`), render
and tokenize, then size and sample (`request`, `sampling`). Wire brief §1.3, pipeline §2.1.
"""

from __future__ import annotations

from typing import Any

from parsers import api as parsers_api

from .. import policy
from ..telemetry import tracing
from ..config.serve import ServeConfig
from ..errors import bad_request
from ..model import ModelBundle
from ..model.template_sandbox import request_template
from ..model.templates import TemplateError, TemplateRenderError
from ..wire.openai import ChatCompletionRequest
from .media import MediaInput
from .messages import history_tool_call_count, prepare_messages
from .request import (
    check_logprobs, check_min_tokens, check_prompt_chars, generate_request, refuse_beam_search, resolve_max_tokens,
    sampling_params, token_offsets, truncate,
)
from .tool_constraints import ToolConstraint, tool_constraint
from .turns import assistant_tokens_mask, fields as turn_fields, render_turn

# Prompt tail handed to the reasoning parser to decide its starting state: enough for
# "<|im_start|>assistant\n<think>\n\n</think>\n\n" and its kin, bounded so it stays cheap.
_PROMPT_TAIL_CHARS = 256


def render_chat(bundle: ModelBundle, config: ServeConfig, req: ChatCompletionRequest, request_id: str,
                media: MediaInput | None = None) -> dict[str, Any]:
    """Render a chat request.

    ``media`` holds the request's processed image/video parts (`render.media.load_media_input`);
    each placeholder the template writes for one is expanded and ``features`` filled as vLLM does.

    Returns:
        The `GenerateRequest` dict (``request_id`` = ``chatcmpl-<request_id>``).

    Raises:
        OpenAIError: 400 for requests the model or template cannot take (tool choice without
        a parser, template exceptions, prompts longer than the context, …).
    """
    refuse_beam_search(req)
    tool_choice = req.effective_tool_choice
    policy.require_tool_parser(config, tool_choice)
    check_logprobs(config, {"top_logprobs": req.top_logprobs, "prompt_logprobs": req.prompt_logprobs})

    template, kwargs = _template_and_kwargs(bundle, config, req)
    reused = _reused_prompt_ids(bundle, req)
    features = None
    if reused is not None:
        # Decode leg of the coupled P/D path (wire brief §6.2): prefill already rendered.
        token_ids = reused
        text = bundle.tokenizer.decode(reused[-64:], skip_special_tokens=False)
    else:
        media_arg = (media.text_placeholders or True) if media is not None else False
        if isinstance(media_arg, dict) and config.content_special_tokens == "text":
            raise bad_request("Images for this model (its placeholder is replaced in the prompt text, as vLLM does) "
                              "cannot be rendered under --content-special-tokens text.", "messages")
        text, token_ids = _render_and_encode(bundle, config, req, template, kwargs, tool_choice, media_arg)
        if media is not None:
            token_ids, features = media.expand(token_ids, text)
    turn = render_turn(bundle, config, req, template, kwargs, token_ids, media is not None) if reused is None else None
    if turn is not None:
        token_ids = turn.token_ids
    mask = None
    if req.return_assistant_tokens_mask and reused is None:
        mask = assistant_tokens_mask(bundle, req, template, kwargs, token_ids, turn, media is not None)
    offsets = None
    if req.return_token_offsets and reused is None and media is None:
        offsets = token_offsets(bundle, text, req.add_special_tokens, len(token_ids))
    token_ids = truncate(token_ids, req.truncate_prompt_tokens, bundle.max_model_len, req.truncation_side)
    if offsets is not None:
        offsets = truncate(offsets, req.truncate_prompt_tokens, bundle.max_model_len, req.truncation_side)
    requested = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    param = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    max_tokens = resolve_max_tokens(bundle, len(token_ids), requested, param)
    check_min_tokens(req.min_tokens, max_tokens)

    reasoning_active = bool(config.reasoning_parser)
    skip = policy.skip_special_tokens(req.skip_special_tokens, policy.parser_active(config, tool_choice),
                                      default=policy.model_skips_special_tokens(bundle))
    constraint = chat_tool_constraint(config, req, tool_choice)
    prompt_logprobs = req.prompt_logprobs
    if prompt_logprobs is None and req.echo:
        prompt_logprobs = req.top_logprobs or 0
    params = sampling_params(req, bundle, max_tokens, skip, (req.top_logprobs or 0) if req.logprobs else None,
                             prompt_logprobs,
                             structured_outputs=constraint.structured_outputs if constraint.replaces_request else True)

    effective_kwargs = {
        **kwargs,
        "add_generation_prompt": req.add_generation_prompt,
        "continue_final_message": req.continue_final_message,
    }
    if req.documents is not None:
        effective_kwargs["documents"] = req.documents
    reasoning_ended = starts_in_reasoning = None
    if reasoning_active:
        tail = text[-_PROMPT_TAIL_CHARS:]
        reasoning_ended, starts_in_reasoning = parsers_api.prompt_reasoning_state(
            config.reasoning_parser, tail, effective_kwargs, bundle.response_template)
    if not req.include_reasoning:
        reasoning_ended = True

    parse_context = {
        "tools": req.tools,
        "tool_choice": tool_choice,
        "parallel_tool_calls": req.parallel_tool_calls,
        "include_reasoning": req.include_reasoning,
        "chat_template_kwargs": effective_kwargs,
        "history_tool_call_cnt": history_tool_call_count(req.messages),
    }
    if starts_in_reasoning is not None:  # an extension derender reads instead of decoding the prompt
        parse_context["starts_in_reasoning"] = starts_in_reasoning
    out = generate_request(
        req,
        request_id=f"chatcmpl-{request_id}",
        token_ids=token_ids,
        sampling_params=params,
        reasoning_ended=reasoning_ended,
        reasoning_parser_kwargs={"chat_template_kwargs": effective_kwargs} if reasoning_active else None,
        parse_context=parse_context,
        features=features,
    ) | turn_fields(turn, req.return_assistant_tokens_mask, mask, token_ids)
    out["token_offsets"] = offsets
    return out


def chat_tool_constraint(config: ServeConfig, req: ChatCompletionRequest, tool_choice: str | dict) -> ToolConstraint:
    """The ``structured_outputs`` the request's ``tool_choice`` calls for under this server's
    tool parser (`render.tool_constraints`); its ``note`` says when a forced call is unenforced."""
    parser = config.tool_call_parser if policy.tool_parser_active(config) else None
    return tool_constraint(parser, req, tool_choice, config.tool_strict_level)


def _render_and_encode(
    bundle: ModelBundle, config: ServeConfig, req: ChatCompletionRequest, template, kwargs: dict, tool_choice,
    media: bool | dict[str, str] = False,
) -> tuple[str, list[int]]:
    """Apply the chat template and tokenize: ``(prompt_text, token_ids)``."""
    messages = prepare_messages(req.messages, template, media=media)
    tools, documents = policy.template_tools(config, req.tools, tool_choice), req.documents
    sanitizer = bundle.sanitizer(template) if config.content_special_tokens == "text" else None
    if sanitizer is not None:
        messages, tools, documents, kwargs = (sanitizer.mark(x) for x in (messages, tools, documents, kwargs))
    try:
        with tracing.span("template"):
            text = template.render(
                messages,
                tools=tools,
                documents=documents,
                add_generation_prompt=req.add_generation_prompt,
                continue_final_message=req.continue_final_message,
                **{**bundle.special_tokens, **kwargs},
            )
    except TemplateRenderError as exc:
        raise bad_request(f"Chat template error: {exc}", exc.param) from None
    except TemplateError as exc:
        raise bad_request(str(exc), exc.param) from None

    text = check_prompt_chars(bundle, text, req.truncate_prompt_tokens, req.truncation_side)
    with tracing.span("tokenize"):
        return text, _encode(bundle, req, text, sanitizer)


def _encode(bundle: ModelBundle, req: ChatCompletionRequest, text: str, sanitizer) -> list[int]:
    if sanitizer is None:
        token_ids = bundle.tokenizer.encode(text, add_special_tokens=req.add_special_tokens)
        if req.add_special_tokens:
            token_ids = _drop_doubled_bos(token_ids, bundle)
    else:
        try:
            token_ids = sanitizer.encode(text)
        except ValueError as exc:
            raise bad_request(str(exc), "messages") from None
    return token_ids


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


def _template_and_kwargs(bundle: ModelBundle, config: ServeConfig, req: ChatCompletionRequest):
    request_kwargs = dict(req.chat_template_kwargs or {})
    inline = req.chat_template or request_kwargs.pop("chat_template", None)
    if inline is not None:
        if not config.trust_request_chat_template:
            raise bad_request(
                "Chat template is passed with request, but --trust-request-chat-template is not set.", "chat_template"
            )
        # Untrusted code: compiled and rendered only in a killable worker process, under limits.
        template = request_template(inline)
    elif bundle.chat_template is None:
        raise bad_request(
            "This model has no chat template; start the server with --chat-template or use /v1/completions.",
            "messages",
        )
    else:
        template = bundle.chat_template
    return template, policy.template_kwargs(config, request_kwargs, req.reasoning_effort)


def _drop_doubled_bos(token_ids: list[int], bundle: ModelBundle) -> list[int]:
    """The template already wrote BOS; ``add_special_tokens`` must not add a second (case 05)."""
    bos = bundle.special_tokens.get("bos_token")
    bos_id = bundle.tokenizer.token_to_id(bos) if bos else None
    if bos_id is not None and token_ids[:2] == [bos_id, bos_id]:
        return token_ids[1:]
    return token_ids
