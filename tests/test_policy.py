"""The rules render and derender share (render_service.policy), and the one place each lives.

Render judges from the prompt text whether generation starts inside reasoning and says so
in ``parse_context``; derender takes that answer instead of decoding prompt ids.
"""

from __future__ import annotations

import httpx
import pytest

from conftest import MODELS, needs_shared
from render_service import policy
from render_service.config.serve import ServeConfig
from test_derender_helpers import QWEN_CFG, bundle, derender_server, gen_choice

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize("tool_choice, tools, requires, error", [
    (None, None, True, None),
    ("none", None, True, None),
    ("auto", TOOLS, True, None),
    ("auto", None, True, "requires tools"),
    ("auto", None, False, None),
    ({"type": "function", "function": {"name": "f"}}, TOOLS, True, None),
    ({"type": "function", "function": {"name": "g"}}, TOOLS, False, "not in tools"),
    ({"type": "function", "function": "f"}, TOOLS, True, "not in tools"),
    ("sometimes", TOOLS, False, "must be none, auto, required"),
])
def test_check_tool_choice(tool_choice, tools, requires, error):
    if error is None:
        policy.check_tool_choice(tool_choice, tools, requires_tools=requires)
    else:
        with pytest.raises(ValueError, match=error):
            policy.check_tool_choice(tool_choice, tools, requires_tools=requires)


def test_tool_parser_for_and_skip_special_tokens():
    auto = ServeConfig(tool_call_parser="hermes", enable_auto_tool_choice=True)
    manual = ServeConfig(tool_call_parser="hermes")
    assert policy.tool_parser_for(auto, "auto", TOOLS) == "hermes"
    assert policy.tool_parser_for(manual, "auto", TOOLS) is None
    assert policy.tool_parser_for(manual, "required", TOOLS) == "hermes"
    assert policy.tool_parser_for(auto, "none", TOOLS) is None
    assert policy.tool_parser_for(auto, "auto", None) is None
    assert policy.skip_special_tokens(True, parser_active=True) is False
    assert policy.skip_special_tokens(None, parser_active=False, default=False) is False
    assert policy.skip_special_tokens(False, parser_active=False) is False
    assert policy.skip_special_tokens(None, parser_active=False) is True


def test_template_kwargs_defaults_request_and_effort():
    config = ServeConfig(default_chat_template_kwargs={"enable_thinking": True, "x": 1})
    kwargs = policy.template_kwargs(config, {"x": None, "y": "auto", "z": 2, "tools": []}, "none")
    assert kwargs == {"enable_thinking": True, "x": 1, "z": 2, "reasoning_effort": "none"}
    assert policy.template_kwargs(ServeConfig(), {}, "low") == {"reasoning_effort": "low", "enable_thinking": True}


@needs_shared
@pytest.mark.parametrize("thinking, starts", [(True, False), (False, False)])
def test_render_sends_starts_in_reasoning(thinking, starts):
    from render_service.render import render_chat
    from render_service.wire.openai import ChatCompletionRequest

    config = ServeConfig(model=str(MODELS / "qwen3"), **QWEN_CFG)
    req = ChatCompletionRequest(messages=[{"role": "user", "content": "Hi"}],
                                chat_template_kwargs={"enable_thinking": thinking})
    gen = render_chat(bundle("qwen3"), config, req, "x")
    assert gen["parse_context"]["starts_in_reasoning"] is starts
    assert gen["reasoning_ended"] is (not thinking)
    plain = render_chat(bundle("qwen3"), ServeConfig(model=str(MODELS / "qwen3")), req, "x")
    assert "starts_in_reasoning" not in plain["parse_context"]


@needs_shared
def test_derender_takes_starts_in_reasoning_from_parse_context():
    """The same ids and prompt: parse_context's answer decides whether the text before any
    tag is reasoning; without it derender judges from the prompt ids (no open tag: content)."""
    tok = bundle("qwen3").tokenizer
    ids = tok.encode("I think so.</think>\n\nYes.")
    prompt = tok.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    ctx = {"tools": None, "tool_choice": "none", "chat_template_kwargs": {}}
    with derender_server("qwen3", **QWEN_CFG) as url:
        def message(parse_context: dict) -> dict:
            r = httpx.post(url + "/v1/chat/completions/derender", json={
                "generate_response": {"request_id": "r", "choices": [gen_choice(ids, "stop")]},
                "prompt_token_ids": prompt, "parse_context": parse_context}, timeout=30)
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["message"]

        told = message({**ctx, "starts_in_reasoning": True})
        assert told["reasoning"] == "I think so." and told["content"].strip() == "Yes."
        judged = message(ctx)
        assert judged["reasoning"] is None and "I think so." in judged["content"]


def test_template_tools_leave_tools_out_only_under_none_with_the_flag():
    """One place decides the template's tools (render's prompt and the agent-turn check both ask it)."""
    from types import SimpleNamespace

    from render_service import policy

    tools = [{"type": "function", "function": {"name": "f"}}]
    on, off = (SimpleNamespace(exclude_tools_when_tool_choice_none=flag) for flag in (True, False))
    assert policy.template_tools(on, tools, "none") is None
    assert policy.template_tools(on, tools, "auto") is tools
    assert policy.template_tools(on, tools, {"type": "function", "function": {"name": "f"}}) is tools
    assert policy.template_tools(off, tools, "none") is tools
    assert policy.template_tools(on, None, "none") is None
