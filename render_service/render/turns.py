"""Agent loops on the render side: the continuity figure and token-exact history for a chat turn.

Two request extensions (docs/guide.md, "Agent loops"), both about the previous turn of the same
conversation:

- ``previous_turn: {"prompt_token_ids": [...], "output_token_ids": [...]}`` — what the
  engine holds after turn N (the driver sends it for a known ``conversation_id``; any
  client may). Render then reports on the `GenerateRequest` a ``continuity`` object
  (`render_service.continuity.Continuity.as_dict`): the longest common prefix of the new
  prompt with that sequence and why it ends early. Observed in the Prometheus histogram
  ``render_service_continuity_common_prefix_ratio{reason}``.
- ``token_exact_history: true`` (or ``serve --token-exact-history``) — the prompt is the
  held ids + the template's text for the new messages (`render_service.render.exact_history`),
  so it extends the previous turn token for token; it needs ``previous_turn``.
  ``token_offsets`` is null then (the held part has no template text, as for pre-tokenized
  prompts in vLLM).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import Histogram

from .. import continuity, policy
from . import exact_history
from ..config.serve import ServeConfig
from ..errors import bad_request, check_token_ids
from ..model import ModelBundle
from ..model.templates import ChatTemplate
from .messages import prepare_messages

CONTINUITY_RATIO = Histogram(
    "render_service_continuity_common_prefix_ratio",
    "Common prefix of a chat prompt with the previous turn's prompt + output, over the latter's length; "
    "reason: why it ends early ('extends' when it does not)",
    ["reason"],
    buckets=(0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0),
)


@dataclass(frozen=True)
class Turn:
    """The prompt of a turn with a known previous turn: ``token_ids`` and its continuity."""

    token_ids: list[int]
    continuity: continuity.Continuity
    exact: bool


def render_turn(bundle: ModelBundle, config: ServeConfig, req: Any, template: ChatTemplate, kwargs: dict,
                token_ids: list[int], media: bool = False) -> Turn | None:
    """Apply ``previous_turn`` / token-exact history to a rendered chat prompt.

    Returns None when the request has no ``previous_turn`` (the prompt stays as rendered).

    Raises:
        OpenAIError: 400 for ids outside the vocabulary, token-exact history without
        ``previous_turn`` or with media, or a conversation it cannot extend.
    """
    exact = bool(req.token_exact_history if req.token_exact_history is not None
                 else getattr(config, "token_exact_history", False))
    prev = req.previous_turn
    if prev is None:
        if exact and req.token_exact_history:
            raise bad_request("token_exact_history needs `previous_turn` (the previous turn's prompt and output ids).",
                              "previous_turn")
        return None
    vocab = bundle.tokenizer.vocab_size
    check_token_ids(prev.prompt_token_ids, vocab, "previous_turn.prompt_token_ids")
    check_token_ids(prev.output_token_ids, vocab, "previous_turn.output_token_ids")
    held = continuity.HeldSequence(prev.prompt_token_ids, prev.output_token_ids)

    def decode(ids) -> str:
        return bundle.tokenizer.decode(list(ids), skip_special_tokens=False)

    # The same inputs as the prompt's own render (chat._render_and_encode): tools left out
    # under --exclude-tools-when-tool-choice-none, user data marked under
    # --content-special-tokens text so that its control-token text stays text.
    tools = policy.template_tools(config, req.tools, req.effective_tool_choice)
    plain = (prepare_messages(req.messages, template, media=media), tools, req.documents, kwargs)
    sanitizer = bundle.sanitizer(template) if config.content_special_tokens == "text" else None
    marked = tuple(sanitizer.mark(x) for x in plain) if sanitizer is not None else plain
    messages = marked[0]

    def render_from(data: tuple, messages: list[dict], add_generation_prompt: bool) -> str:
        _, tools, documents, template_kwargs = data
        try:
            return template.render(messages, tools=tools, documents=documents,
                                   add_generation_prompt=add_generation_prompt,
                                   **{**bundle.special_tokens, **template_kwargs})
        except ValueError as exc:  # the template refused (TemplateRenderError and kin)
            raise bad_request(f"Chat template error: {exc}", "messages") from None

    def render(messages: list[dict], add_generation_prompt: bool) -> str:
        return render_from(marked, messages, add_generation_prompt)

    def encode(text: str) -> list[int]:
        if sanitizer is None:
            return bundle.tokenizer.encode(text, add_special_tokens=False)
        try:
            return sanitizer.encode(text)
        except ValueError as exc:
            raise bad_request(str(exc), "messages") from None

    if exact:
        if media:
            raise bad_request("token_exact_history does not take image or video parts.", "messages")
        if req.continue_final_message:
            raise bad_request("token_exact_history cannot continue a final message.", "continue_final_message")
        try:
            token_ids, _ = exact_history.exact_prompt(held, messages, render, encode, decode,
                                                      req.add_generation_prompt)
        except exact_history.HistoryError as exc:
            raise bad_request(str(exc), "messages") from None
    system_end = None
    if messages[0].get("role") in ("system", "developer"):
        system_end = continuity.system_end(lambda: render_from(plain, plain[0][:1], False), decode(token_ids))
    figure = continuity.check(held, token_ids, decode, system_end_char=system_end)
    CONTINUITY_RATIO.labels(figure.reason or "extends").observe(figure.fraction)
    return Turn(list(token_ids), figure, exact)


AGENT_LOOP_FIELDS = ("previous_turn", "token_exact_history")


def carry_agent_loop_fields(req: Any, body: dict) -> dict:
    """The chat ``body`` a front door (Responses, Anthropic Messages) converted ``req`` into,
    with the request's agent-loop extensions (kept there as extra fields) carried over."""
    extra = getattr(req, "model_extra", None) or {}
    return {**body, **{k: extra[k] for k in AGENT_LOOP_FIELDS if extra.get(k) is not None}}


def assistant_tokens_mask(bundle: ModelBundle, req: Any, template: ChatTemplate, kwargs: dict,
                          token_ids: list[int], turn: Turn | None,
                          media: bool = False) -> tuple[list[int], list[int]] | None:
    """vLLM main's ``assistant_tokens_mask`` for a rendered chat prompt: 1 for each token
    inside a ``{% generation %}`` block of the template (transformers'
    ``return_assistant_tokens_mask``), 0 elsewhere, as ``(token_ids, mask)`` (`fields` cuts it
    like the prompt when it is truncated). None where vLLM gives null: a template
    without such blocks, a per-request template (it renders in a sandbox worker), media
    parts, prompts that are not the template's text (token-exact history,
    ``continue_final_message``), or ids that do not line up with it.

    Raises:
        OpenAIError: 400 when the template refuses the conversation.
    """
    spans_of = getattr(template, "generation_spans", None)  # a request template renders in a worker: no spans
    if (media or (turn is not None and turn.exact) or req.continue_final_message or spans_of is None
            or not template.has_generation_tags):
        return None
    hf = getattr(bundle.tokenizer, "hf", None)
    if hf is None:
        return None
    messages = prepare_messages(req.messages, template)
    try:
        rendered = spans_of(messages, tools=req.tools, documents=req.documents,
                                             add_generation_prompt=req.add_generation_prompt,
                                             **{**bundle.special_tokens, **kwargs})
    except ValueError as exc:
        raise bad_request(f"Chat template error: {exc}", "messages") from None
    text, spans = rendered
    encoding = hf.encode(text, add_special_tokens=req.add_special_tokens)
    if list(encoding.ids) != list(token_ids):
        return None
    return list(token_ids), [int(any(s < end and e > start for start, end in spans)) for s, e in encoding.offsets]


def fields(turn: Turn | None, mask_requested: bool = False, mask: tuple[list[int], list[int]] | None = None,
           token_ids: list[int] | None = None) -> dict[str, Any]:
    """Keys the turn adds to the `GenerateRequest` dict: ``continuity`` (with a previous
    turn), ``token_offsets`` null (token-exact history), ``assistant_tokens_mask`` (when
    asked; cut like the prompt when ``truncate_prompt_tokens`` shortened it)."""
    out: dict[str, Any] = {}
    if turn is not None:
        out["continuity"] = turn.continuity.as_dict()
        if turn.exact:
            out["token_offsets"] = None
    if mask_requested:
        out["assistant_tokens_mask"] = _truncated_like(mask, turn, token_ids)
    return out


def _truncated_like(mask: tuple[list[int], list[int]] | None, turn: Turn | None,
                    token_ids: list[int] | None) -> list[int] | None:
    """The mask for the final prompt: cut on the side ``truncate_prompt_tokens`` cut the ids."""
    if mask is None or token_ids is None:
        return None
    ids, flags = mask
    n = len(token_ids)
    if ids == token_ids:
        return flags
    if n < len(ids) and ids[len(ids) - n:] == token_ids:
        return flags[len(ids) - n:]
    if n < len(ids) and ids[:n] == token_ids:
        return flags[:n]
    return None
