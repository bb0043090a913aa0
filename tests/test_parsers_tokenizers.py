"""Real tokenizers (../shared/models): outputs delivered one token at a time, as a
streaming detokenizer does, give the same events as the whole text — with markers that are
single special tokens (Qwen ``<tool_call>``, DeepSeek ``<｜tool▁sep｜>``, Harmony
``<|channel|>``) and with markers split over several ordinary tokens."""

from __future__ import annotations

import pytest
from conftest import MODELS, needs_shared

from parsers.api import message_from_events
from parsers_fixtures.helpers import coalesce, run, run_restoring, token_pieces
from parsers_fixtures.samples import EXPECTED, SAMPLES

pytestmark = needs_shared

BY_ID = {sid: (spec, text) for sid, spec, text in SAMPLES}

# model directory -> samples written in that model's own format
MODEL_SAMPLES = {
    "qwen3": ["hermes-basic", "hermes-parallel", "hermes-end-tag-in-string", "qwen3-thinking-hermes",
              "qwen3-tool-ends-reasoning", "qwen3-prose-think", "qwen3-split-tag", "qwen3coder-basic",
              "qwen3coder-two", "qwen3coder-brace", "qwen3coder-reasoning", "hermes-cut-in-string"],
    "qwen2.5-instruct": ["hermes-basic", "hermes-args-first", "hermes-nested", "hermes-control-char",
                         "hermes-blank-between", "hermes-unknown-name"],
    "llama-3.1-instruct": ["llama3-tag-semicolon", "llama3-bare-space-sep", "llama3-prose-object",
                           "llama3-python-code"],
    "llama-3.2-instruct": ["pythonic-basic", "pythonic-strings", "pythonic-triple", "pythonic-prose",
                           "llama3-semicolon-in-string"],
    "llama-4-scout-instruct": ["llama4-pythonic", "llama4-json-template", "pythonic-cut"],
    "deepseek-r1": ["deepseek-v3", "r1-pre-opened", "r1-with-tag"],
    "deepseek-v3.1": ["deepseek-v31", "deepseek-v31-thinking-off", "deepseek-cut", "deepseek-unknown"],
    "gpt-oss": ["harmony-normal", "harmony-analysis-call", "harmony-final", "harmony-two-analysis",
                "harmony-template-order", "harmony-cut"],
}

CASES = [(model, sid) for model, sids in MODEL_SAMPLES.items() for sid in sids]


@pytest.mark.parametrize("model,sid", CASES, ids=[f"{m}:{s}" for m, s in CASES])
def test_token_by_token(model, sid):
    path = MODELS / model / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} not present")
    spec, text = BY_ID[sid]
    pieces = token_pieces(path, text)
    assert "".join(pieces) == text, "the tokenizer does not round-trip this text"
    assert len(pieces) > 3
    whole = coalesce(run(spec, [text]))
    assert coalesce(run(spec, pieces)) == whole
    assert coalesce(run_restoring(spec, pieces)) == whole
    msg = message_from_events(whole)
    calls = [(c.name, c.arguments) + ((c.id,) if c.id else ()) for c in msg.tool_calls]
    assert (msg.reasoning, msg.content, calls) == EXPECTED[sid]


@pytest.mark.parametrize("model,markers", [
    ("qwen3", ["<think>", "</think>", "<tool_call>", "</tool_call>"]),
    ("deepseek-r1", ["<think>", "</think>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>"]),
    ("gpt-oss", ["<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|call|>", "<|return|>"]),
    ("llama-3.1-instruct", ["<|python_tag|>"]),
    ("llama-4-scout-instruct", ["<|python_start|>", "<|python_end|>"]),
])
def test_markers_are_single_tokens_there(model, markers):
    """The per-token runs above really deliver these markers whole, in one piece each."""
    path = MODELS / model / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} not present")
    for marker in markers:
        assert token_pieces(path, "a" + marker + "b") == ["a", marker, "b"], marker
