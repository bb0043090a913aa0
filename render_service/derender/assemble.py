"""`Delta` → OpenAI JSON: chat message / chunk delta, completion choice, envelopes.

Key sets follow vLLM 0.33's ``ChatCompletionResponse`` / ``ChatCompletionStreamResponse`` /
``CompletionResponse`` (wire brief §1.6, §1.7): every key present, nulls included.
``message.reasoning`` is vLLM's field; ``reasoning_content`` repeats it for older clients.
"""

from __future__ import annotations

from typing import Any

from ..wire.generate import ENGINE_ID_PREFIX
from .choice import Delta
from .plan import Plan


def response_id(request_id: str, kind: str) -> str:
    """Drop the engine's ``generate-tokens-`` prefix (vLLM returns it doubled, §8 item 5)."""
    rid = request_id[len(ENGINE_ID_PREFIX):] if request_id.startswith(ENGINE_ID_PREFIX) else request_id
    return rid or ("chatcmpl-derender" if kind == "chat" else "cmpl-derender")


def _tool_calls(delta: Delta, streaming: bool) -> list[dict]:
    out = []
    for tc in delta.tool_calls:
        fn: dict[str, Any] = {}
        if tc.name is not None:
            fn["name"] = tc.name
        if tc.arguments or not streaming or tc.name is not None:
            fn["arguments"] = tc.arguments
        item: dict[str, Any] = {"index": tc.index} if streaming else {}
        if tc.id is not None:
            item["id"] = tc.id
            item["type"] = "function"
        item["function"] = fn
        out.append(item)
    return out


def chat_message(delta: Delta, plan: Plan) -> dict:
    """The non-streaming ``message`` (§1.6 key set)."""
    content: str | None = delta.content or None
    if content is None and (plan.named_tool or plan.tool_choice == "required"):
        content = ""
    msg: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None, "annotations": None,
                           "audio": None, "function_call": None}
    calls = _tool_calls(delta, streaming=False)
    if calls:
        msg["tool_calls"] = calls
    msg["reasoning"] = delta.reasoning or None
    msg["reasoning_content"] = delta.reasoning or None
    return msg


def chat_delta(delta: Delta) -> dict:
    """The streaming ``delta``: role on the first chunk, content (null when none),
    reasoning/reasoning_content and tool_calls when present."""
    out: dict[str, Any] = {"role": "assistant"} if delta.first else {}
    out["content"] = delta.content or None
    if delta.reasoning:
        out["reasoning"] = delta.reasoning
        out["reasoning_content"] = delta.reasoning
    calls = _tool_calls(delta, streaming=True)
    if calls:
        out["tool_calls"] = calls
    return out


def chat_choice(index: int, delta: Delta, plan: Plan, token_ids: list[int] | None, passthrough: Any) -> dict:
    keep = plan.keeps_logprobs
    return {"index": index, "message": chat_message(delta, plan), "logprobs": delta.logprobs if keep else None,
            "finish_reason": delta.finish_reason, "stop_reason": delta.stop_reason,
            "token_ids": token_ids if plan.return_token_ids and keep else None,
            "routed_experts": getattr(passthrough, "routed_experts", None),
            "weight_versions": getattr(passthrough, "weight_versions", None)}


def chat_chunk_choice(index: int, delta: Delta, plan: Plan, token_ids: list[int] | None, passthrough: Any) -> dict:
    keep = plan.keeps_logprobs
    return {"index": index, "delta": chat_delta(delta), "logprobs": delta.logprobs if keep else None,
            "finish_reason": delta.finish_reason, "stop_reason": delta.stop_reason,
            "token_ids": token_ids if plan.return_token_ids and keep else None,
            "weight_versions": getattr(passthrough, "weight_versions", None)}


def completion_choice(index: int, delta: Delta, plan: Plan, token_ids: list[int] | None, streaming: bool,
                      passthrough: Any = None) -> dict:
    """A completions choice with vLLM 0.33's keys (stream chunk or whole response)."""
    out = {"index": index, "text": delta.content, "logprobs": delta.logprobs, "finish_reason": delta.finish_reason,
           "stop_reason": delta.stop_reason}
    ids = token_ids if plan.return_token_ids else None
    weight_versions = getattr(passthrough, "weight_versions", None)
    if streaming:
        out.update(prompt_token_ids=None, token_ids=ids, weight_versions=weight_versions)
    else:
        out.update(token_ids=ids, prompt_logprobs=None, prompt_token_ids=None,
                   routed_experts=getattr(passthrough, "routed_experts", None), weight_versions=weight_versions)
    return out


def usage(prompt_tokens: int, completion_tokens: int, prompt_tokens_details: dict | None = None) -> dict:
    """OpenAI usage; ``prompt_tokens_details`` only with ``--enable-prompt-tokens-details`` (vLLM's flag)."""
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens, "prompt_tokens_details": prompt_tokens_details,
            "completion_tokens_details": None}


def chat_chunk(rid: str, created: int, model: str, choices: list[dict], usage_: dict | None, metrics: Any = None) -> dict:
    return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices,
            "usage": usage_, "system_fingerprint": None, "prompt_token_ids": None, "prompt_text": None,
            "metrics": metrics, "kv_transfer_params": None}


def completion_chunk(rid: str, created: int, model: str, choices: list[dict], usage_: dict | None,
                     metrics: Any = None) -> dict:
    return {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": choices,
            "usage": usage_, "system_fingerprint": None, "metrics": metrics, "kv_transfer_params": None}
