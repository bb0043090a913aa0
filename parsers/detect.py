"""Pick parsers from a chat template (``--tool-call-parser auto`` / ``--reasoning-parser auto``).

A template that *renders* a format's tool calls also shows what the model writes, so the
markers it contains identify the family. Rules are checked in order; the first hit wins.
Checked against every template in ``../shared/templates`` (tests/test_parsers_templates.py).
"""

from __future__ import annotations

# (markers that must all be present, tool parser) — most specific first
_TOOL_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("<|channel|>", "<|message|>"), "openai"),
    (("<minimax:tool_call>",), "minimax_m2"),
    (("<|tool_calls_section_begin|>",), "kimi_k2"),
    (("<｜tool▁calls▁begin｜>", "```json"), "deepseek_v3"),
    (("<｜tool▁calls▁begin｜>",), "deepseek_v31"),
    (("<arg_key>",), "glm45"),
    (("<seed:tool_call>",), "seed_oss"),
    (("<function=", "<parameter="), "qwen3_coder"),
    (("[TOOL_CALLS]",), "mistral"),
    (("<|tool_call|>",), "granite"),
    (("<tool_call>",), "hermes"),
    (("<|python_start|>",), "llama4_pythonic"),
    (("<|python_tag|>",), "llama3_json"),
    (("functools",), "phi4_mini_json"),
    (("<|tool|>", "<|/tool|>"), "phi4_mini_json"),
    (("<|start_header_id|>", '"parameters"'), "llama3_json"),
)

_REASONING_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("<|channel|>", "<|message|>"), "openai_gptoss"),
    (("<minimax:tool_call>", "<think>"), "minimax_m2"),
    (("<seed:think>",), "seed_oss"),
    (("[THINK]",), "mistral"),
    (("thought process",), "granite"),
    (("<｜Assistant｜>", "</think>", "thinking"), "deepseek_v3"),
    (("<｜Assistant｜>", "</think>"), "deepseek_r1"),
    (("<arg_key>", "<think>"), "glm45"),
    (("<|im_middle|>", "<think>"), "kimi_k2"),
    (("<|im_start|>", "<think>"), "qwen3"),
)


def detect_parsers(chat_template: str | None,
                   response_template: dict | None = None) -> tuple[str | None, str | None]:
    """``(reasoning parser name | None, tool parser name | None)`` for a chat template.

    Pure string inspection; ``None`` where nothing matches (e.g. Gemma, Phi-3.5). A
    checkpoint that ships ``response_template`` metadata (``tokenizer_config.json``) is
    parsed by it (``hf``, :mod:`parsers.response_template`) for each field it declares
    (``thinking`` → reasoning, ``tool_calls`` → tools), whatever the chat template says.
    """
    if isinstance(response_template, dict) and isinstance(response_template.get("fields"), dict):
        fields = response_template["fields"]
        found = ("hf" if "thinking" in fields else None, "hf" if "tool_calls" in fields else None)
        if found != (None, None):
            return found
    if not chat_template:
        return None, None

    def first(rules):
        for needles, name in rules:
            if all(n in chat_template for n in needles):
                return name
        return None

    return first(_REASONING_RULES), first(_TOOL_RULES)


__all__ = ["detect_parsers"]
