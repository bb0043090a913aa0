"""Pick parsers from a chat template (``--tool-call-parser auto`` / ``--reasoning-parser auto``).

A template that *renders* a format's tool calls also shows what the model writes, so the
markers it contains identify the family. The evidence lives in the format rows
(``ToolFormat.detect`` / ``ReasoningFormat.detect``: needle sets, all of one set must be
in the template); the rules here are derived from them: more needles first (the more
specific evidence: ``<tool_call>`` + ``<arg_key>`` is GLM before ``<tool_call>`` alone is
Hermes), then the rows' table order. Harmony (gpt-oss) has no row and leads. Checked
against every template in ``../shared/templates`` (tests/test_parsers_templates.py).
"""

from __future__ import annotations

from functools import lru_cache

from . import formats, reasoning

Rules = tuple[tuple[tuple[str, ...], str], ...]

_HARMONY = ("<|channel|>", "<|message|>")


def _rules(rows: dict, harmony_name: str) -> Rules:
    found = [(needles, name, order) for order, (name, row) in enumerate(rows.items())
             for needles in row.detect]
    found.sort(key=lambda r: (-len(r[0]), r[2]))
    return ((_HARMONY, harmony_name),) + tuple((needles, name) for needles, name, _ in found)


@lru_cache(maxsize=1)
def tool_rules() -> Rules:
    """``((needles, tool parser name), …)`` in the order they are tried."""
    return _rules(formats.FORMATS, formats.HARMONY_TOOL_NAMES[0])


@lru_cache(maxsize=1)
def reasoning_rules() -> Rules:
    """``((needles, reasoning parser name), …)`` in the order they are tried."""
    return _rules(reasoning.FORMATS, reasoning.HARMONY_REASONING_NAMES[0])


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

    return first(reasoning_rules()), first(tool_rules())


__all__ = ["detect_parsers", "tool_rules", "reasoning_rules"]
