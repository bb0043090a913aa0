"""Template round trip: what a model's own chat template writes for an assistant turn with
tool calls is exactly what that model generates, so the parser chosen for the family must
read the calls back. Also checks ``detect_parsers`` on every template in ../shared/templates."""

from __future__ import annotations

import json

import jinja2
import pytest
from conftest import TEMPLATES, needs_shared

from parsers.api import ParserSpec, detect_parsers, message_from_events, prompt_starts_in_reasoning
from parsers_fixtures.helpers import assert_chunking_invariant, coalesce, run, run_restoring
from parsers_fixtures.samples import tool
from render_service.model.templates import ChatTemplate

pytestmark = needs_shared

TOOLS = [tool("get_weather", city="string", days="integer"), tool("search", query="string", limit="integer")]
CALLS = [("get_weather", {"city": "Zürich", "days": 3}),
         ("search", {"query": 'say "hi" {ok} </tool_call> ]', "limit": 2})]

# template -> (tool parser, reasoning parser, single call only, content, id)
ROUND_TRIP = {
    "hermes-2-pro-tool-use": ("hermes", None, False, "", "call_1"),
    "hermes-3-tool-use": ("hermes", None, False, "", "call_1"),
    "qwen2.5-instruct": ("hermes", None, False, "", "call_1"),
    "qwen3": ("hermes", "qwen3", False, "", "call_1"),
    "qwq": ("hermes", "qwen3", False, "", "call_1"),
    "qwen3-coder": ("qwen3_coder", None, False, "", "call_1"),
    "llama-3.1-instruct": ("llama3_json", None, True, None, "call_1"),
    "llama-3.2-instruct": ("llama3_json", None, True, None, "call_1"),
    "llama-3.3-instruct": ("llama3_json", None, True, None, "call_1"),
    "llama-4": ("llama4_json", None, False, "", "call_1"),
    "deepseek-r1": ("deepseek_v3", "deepseek_r1", False, None, "call_1"),
    "deepseek-r1-distill": ("deepseek_v3", "deepseek_r1", False, None, "call_1"),
    "deepseek-v3": ("deepseek_v3", None, False, None, "call_1"),
    "deepseek-v3.1": ("deepseek_v31", "deepseek_v3", False, None, "call_1"),
    "glm-4.6": ("glm45", "glm45", False, "", "call_1"),
    "gpt-oss": ("openai", "openai_gptoss", True, "", "call_1"),  # one call per message
    "kimi-k2": ("kimi_k2", None, False, "", "functions.get_weather:0"),
    "kimi-k2-instruct-0905": ("kimi_k2", None, False, "", "functions.get_weather:0"),
    "minimax-m2": ("minimax_m2", "minimax_m2", False, "", "call_1"),
    "mistral-nemo": ("mistral", None, False, None, "abcDEF123"),
    "mistral-small-3.2": ("mistral", None, False, None, "abcDEF123"),
}

# templates that have tools but do not write assistant tool calls back (nothing to round-trip)
NOT_RENDERED = {"granite-3.3", "phi-4-mini", "smollm3"}

END_OF_TURN = ("<|im_end|>\n", "<|im_end|>", "<|eot_id|>", "<|eot|>", "<｜end▁of▁sentence｜>", "</s>",
               "[e~[\n", "<|end_of_text|>\n")


def generated_part(name: str, assistant: dict, **kwargs) -> tuple[str, str]:
    """(generation prompt, the assistant turn's text as the model would have generated it).

    Rendered by :class:`ChatTemplate`'s compiled template (the service's HF environment:
    ``{% generation %}``, loopcontrols, tojson, raise_exception) with the messages as given:
    ``ChatTemplate.render`` drops None-valued keys (transformers 5), but the DeepSeek-V3 and
    R1-distill templates write tool calls only for ``content: null``, the form the models
    were trained on."""
    chat = ChatTemplate((TEMPLATES / f"{name}.jinja").read_text())
    if chat.arguments_form == "string":  # the template concatenates arguments as text (DeepSeek)
        assistant = {**assistant, "tool_calls": [
            {**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False)}}
            for c in assistant["tool_calls"]]}
    template = chat._template
    user = [{"role": "user", "content": "What's the weather in Zürich, and search for hi?"}]
    common = dict(tools=TOOLS, bos_token="<s>", eos_token="</s>", **kwargs)
    try:
        prompt = template.render(messages=user, add_generation_prompt=True, **common)
        full = template.render(messages=user + [assistant], add_generation_prompt=False, **common)
    except jinja2.exceptions.SecurityError as exc:
        pytest.skip(f"{name}: template needs more than the HF sandbox allows ({exc})")
    base = prompt
    for opened in ("<think>\n", "<think>"):  # generation prompts that pre-open reasoning
        if not full.startswith(base) and base.endswith(opened):
            base = base[: -len(opened)]
    assert full.startswith(base), f"{name}: history turn does not extend the generation prompt"
    text = full[len(base):]
    for eot in END_OF_TURN:
        if text.endswith(eot):
            text = text[: -len(eot)]
            break
    return prompt, text


@pytest.mark.parametrize("name", sorted(ROUND_TRIP))
def test_template_round_trip(name):
    family, reasoning, single, content, call_id = ROUND_TRIP[name]
    calls = CALLS[:1] if single else CALLS
    assistant = {"role": "assistant", "content": content, "tool_calls": [
        {"id": call_id if i == 0 else call_id.replace("0", "1").replace("call_1", "call_2"), "type": "function",
         "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(calls)]}
    prompt, text = generated_part(name, assistant)
    assert any(n in text for n, _ in calls), f"template did not write the calls: {text!r}"
    starts = prompt_starts_in_reasoning(reasoning, prompt, {}) if reasoning else False
    thought = ""
    if starts and "</think>" not in text:
        # history turns drop the reasoning; a live generation in reasoning closes it first
        thought = "I will call the tools."
        text = thought + "\n</think>\n\n" + text
    spec = ParserSpec(reasoning=reasoning, tool=family, tools=TOOLS, starts_in_reasoning=starts)
    events = assert_chunking_invariant(spec, text)
    msg = message_from_events(events)
    assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == calls, text
    assert not (msg.content or "").strip(), msg.content
    assert (msg.reasoning or "").strip() == thought, msg.reasoning
    if family == "kimi_k2":
        assert [c.id for c in msg.tool_calls] == ["functions.get_weather:0", "functions.search:1"]
    if family == "openai":  # the stop token <|call|> is dropped by derender; the parser copes either way
        cut = text.removesuffix("<|call|>")
        assert coalesce(run_restoring(spec, list(cut))) == coalesce(run(spec, [cut]))
        assert message_from_events(run(spec, [cut])).tool_calls == msg.tool_calls


@pytest.mark.parametrize("name", sorted(NOT_RENDERED))
def test_templates_without_rendered_calls(name):
    assistant = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}]}
    _, text = generated_part(name, assistant)
    assert "get_weather" not in text


EXPECTED_DETECTION = {
    "command-r": (None, None), "command-r-plus-tool-use": (None, None), "command-r7b-tool-use": (None, None),
    "deepseek-r1": ("deepseek_r1", "deepseek_v3"), "deepseek-r1-distill": ("deepseek_r1", "deepseek_v3"),
    "deepseek-v3": (None, "deepseek_v3"), "deepseek-v3.1": ("deepseek_v3", "deepseek_v31"),
    "gemma-2": (None, None), "gemma-3": (None, None), "glm-4.6": ("glm45", "glm45"),
    "gpt-oss": ("openai_gptoss", "openai"), "granite-3.3": ("granite", "granite"),
    "hermes-2-pro-tool-use": (None, "hermes"), "hermes-3-tool-use": (None, "hermes"),
    "kimi-k2": (None, "kimi_k2"), "kimi-k2-instruct-0905": (None, "kimi_k2"),
    "llama-3.1-instruct": (None, "llama3_json"), "llama-3.2-instruct": (None, "llama3_json"),
    "llama-3.3-instruct": (None, "llama3_json"), "llama-4": (None, "llama4_pythonic"),
    "minimax-m2": ("minimax_m2", "minimax_m2"), "mistral-nemo": (None, "mistral"),
    "mistral-small-3": (None, None), "mistral-small-3.2": (None, "mistral"), "phi-3.5-mini": (None, None),
    "phi-4-mini": (None, "phi4_mini_json"), "qwen2.5-instruct": (None, "hermes"),
    "qwen2.5-vl": (None, None), "qwen3": ("qwen3", "hermes"),
    "qwen3-coder": (None, "qwen3_coder"), "qwq": ("qwen3", "hermes"), "smollm3": ("qwen3", "hermes"),
}


def test_detect_parsers_every_template():
    names = sorted(p.stem for p in TEMPLATES.glob("*.jinja"))
    assert names == sorted(EXPECTED_DETECTION)
    got = {n: detect_parsers((TEMPLATES / f"{n}.jinja").read_text()) for n in names}
    assert got == EXPECTED_DETECTION
    assert detect_parsers(None) == (None, None) and detect_parsers("") == (None, None)
