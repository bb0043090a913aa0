"""Unit tests of the parsers' mechanisms: marker scanner, JSON scanner, schema typing,
Python calls, registry and plugins, prompt inspection, spec/state validation."""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint

import pytest

from parsers import registry
from parsers.api import (OutputParser, ParserSpec, create_parser, parse_complete, prompt_starts_in_reasoning,
                         reasoning_parser_names, tool_parser_names)
from parsers.events import Content, Reasoning, ToolCallArguments, ToolCallEnd, ToolCallStart
from parsers.jsonstream import JsonValue
from parsers.pythonic import call_to_json
from parsers.scanner import find_marker, held_suffix_len
from parsers.schema import coerce, param_types


# -- marker scanner ----------------------------------------------------------------------

@pytest.mark.parametrize("buf,final,want", [
    ("abc</th", False, (3, None)),          # hold exactly the tag prefix
    ("abc</th", True, (7, None)),           # ... and release it at the end
    ("abc</think>x", False, (3, "</think>")),
    ("a<", False, (1, None)),               # '<' may start a tag
    ("a</", False, (1, None)),
    ("a<b", False, (3, None)),              # '<b' cannot
    ("x<think></think>", False, (1, "<think>")),
    ("", False, (0, None)),
])
def test_find_marker(buf, final, want):
    assert find_marker(buf, ("<think>", "</think>"), final) == want


def test_find_marker_prefers_longer_marker_sharing_a_prefix():
    markers = ("<|python_start|>", "<|python_start|><|python_end|>")
    assert find_marker("<|python_start|><|py", markers, False) == (0, None)  # could still be the long one
    assert find_marker("<|python_start|>[", markers, False) == (0, "<|python_start|>")
    assert find_marker("<|python_start|><|python_end|>{", markers, False) == (0, "<|python_start|><|python_end|>")
    assert held_suffix_len("abc<|py", markers) == 4


# -- JSON scanner --------------------------------------------------------------------------

def scan(text: str, step: int = 1) -> tuple[str, JsonValue]:
    value, out = JsonValue(require="{"), ""
    for i in range(0, len(text), step):
        _, rel = value.feed(text[i:i + step])
        out += rel
    return out, value


def test_json_released_text_is_always_closable():
    text = '{"a": [1, -2.5e3, true, {"b": "x\\"}\\u00e9"}], "c": null, "d": "tail"}'
    for k in range(len(text) + 1):
        released, value = scan(text[:k])
        fixed = released + value.end_of_input() + value.repair()
        if released:
            assert isinstance(json.loads(fixed), dict), (k, fixed)
        assert text.startswith(released)  # never anything the model did not write
    assert scan(text)[0] == text and scan(text)[1].done


def test_json_numbers_are_held_until_complete():
    released, value = scan('{"wd": 2')
    assert released == "{"
    released2, _ = scan('{"wd": 23,')
    assert released2 == '{"wd": 23'


@pytest.mark.parametrize("bad", ['{"a" 1}', '{"a": tru}', '{"a": 01x}', '{,}', '{"a": "\\q"}', '[1]'])
def test_json_errors_are_detected(bad):
    assert scan(bad)[1].error


def test_json_raw_control_characters_are_escaped():
    released, value = scan('{"a": "x\ny"}')
    assert released == '{"a": "x\\ny"}' and value.done


def test_json_state_is_plain_and_round_trips():
    value = JsonValue(require="{")
    value.feed('{"a": [1, {"b": "x')
    clone = JsonValue.load(json.loads(json.dumps(value.export())))
    assert clone.feed('yz"}]}') == value.feed('yz"}]}')


# -- schema typing ---------------------------------------------------------------------------

def test_coerce_by_schema():
    assert coerce("5", ["integer"]) == "5"
    assert coerce(" 5 ", ["string"]) == '" 5 "'
    assert coerce("5.5", ["integer"]) == '"5.5"'
    assert coerce("5.5", ["number"]) == "5.5"
    assert coerce("True", ["boolean"]) == "true"
    assert coerce("null", ["string", "null"]) == "null"
    assert coerce('{"a": 1}', ["object"]) == '{"a": 1}'
    assert coerce("[1,2]", ["array"]) == "[1, 2]"
    assert coerce("nan", ["number"]) == '"nan"'
    assert coerce("东京", ["integer"]) == '"东京"'


def test_param_types_reads_type_lists_anyof_and_enums():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": ["integer", "null"]}, "b": {"anyOf": [{"type": "number"}, {"type": "string"}]},
        "c": {"enum": [1, 2]}, "d": {"description": "no type"}}}}}]
    assert param_types(tools, "f") == {"a": ["integer", "null"], "b": ["number", "string"], "c": ["integer"], "d": []}
    assert param_types(tools, "g") == {}


# -- Python calls ---------------------------------------------------------------------------

@pytest.mark.parametrize("src,want", [
    ('f(a=1, b="x]")', ("f", '{"a": 1, "b": "x]"}')),
    ("ns.tool.run(x=-1.5, y=None, z=True, t=(1, 2))", ("ns.tool.run", '{"x": -1.5, "y": null, "z": true, "t": [1, 2]}')),
    ("g()", ("g", "{}")),
    ("f(1)", None), ("f(**k)", None), ("f(a=b)", None), ("f(a={1, 2})", None), ("x + 1", None), ("f(a=", None),
])
def test_call_to_json(src, want):
    assert call_to_json(src) == want


# -- registry, plugins ------------------------------------------------------------------------

def test_registry_names_match_vllm_spelling_and_aliases():
    tools = set(tool_parser_names())
    for name in ("hermes", "qwen3_coder", "qwen3_xml", "qwen3_json", "glm45", "glm47", "llama3_json", "llama4_json",
                 "llama4_pythonic", "pythonic", "mistral", "deepseek_v3", "deepseek_v31", "kimi_k2", "minimax_m2",
                 "openai", "granite", "xlam", "phi4_mini_json", "jamba", "seed_oss"):
        assert name in tools, name
    reasons = set(reasoning_parser_names())
    for name in ("qwen3", "deepseek_r1", "deepseek_v3", "glm45", "glm47", "kimi_k2", "minimax_m2",
                 "minimax_m2_append_think", "mistral", "granite", "openai_gptoss", "step5", "holo2"):
        assert name in reasons, name
    assert registry.tool_format("qwen3_xml") is registry.tool_format("qwen3_coder")
    assert registry.tool_format("qwen3_json") is registry.tool_format("hermes")
    assert registry.tool_format("llama4_json") is registry.tool_format("llama3_json")
    assert registry.reasoning_format("glm47") is registry.reasoning_format("glm45")


def test_unknown_names_and_bad_tool_choice_raise_value_error():
    with pytest.raises(ValueError, match="unknown tool call parser 'nope'"):
        create_parser(ParserSpec(tool="nope"))
    with pytest.raises(ValueError, match="unknown reasoning parser"):
        create_parser(ParserSpec(reasoning="nope"))
    with pytest.raises(ValueError, match="tool_choice"):
        create_parser(ParserSpec(tool="hermes", tool_choice="sometimes"))
    with pytest.raises(ValueError, match="function.name"):
        create_parser(ParserSpec(tool="hermes", tool_choice={"type": "function", "function": {}}))


def test_entry_point_plugins(monkeypatch):
    eps = {registry.TOOL_GROUP: [EntryPoint("acme", "parsers_fixtures.plugin:TOOL_ROW", registry.TOOL_GROUP)],
           registry.REASONING_GROUP: [EntryPoint("acme_think", "parsers_fixtures.plugin:reasoning_row",
                                                 registry.REASONING_GROUP),
                                      EntryPoint("broken", "parsers_fixtures.no_such_module:X",
                                                 registry.REASONING_GROUP)]}
    monkeypatch.setattr(registry, "entry_points", lambda group: eps.get(group, []))
    assert "acme" in tool_parser_names() and "acme_think" in reasoning_parser_names()
    assert "broken" not in reasoning_parser_names()
    msg = parse_complete(ParserSpec(reasoning="acme_think", tool="acme"),
                         '<<think>>hm<</think>>ok <<call>>{"name": "f", "arguments": {"a": 1}}<</call>>')
    assert (msg.reasoning, msg.content) == ("hm", "ok ")
    assert [(c.name, c.arguments) for c in msg.tool_calls] == [("f", '{"a": 1}')]


# -- prompt inspection ----------------------------------------------------------------------------

@pytest.mark.parametrize("reasoning,prompt,kwargs,want", [
    ("qwen3", "<|im_start|>assistant\n<think>\n", {}, True),                      # case 23
    ("qwen3", "<|im_start|>assistant\n<think>\n\n</think>\n\n", {}, False),       # case 25
    ("qwen3", "<|im_start|>assistant\n", {"enable_thinking": True}, False),       # model writes <think>
    ("qwen3", "<think>old</think><|im_start|>user\nhi<|im_end|><|im_start|>assistant\n", {}, False),
    ("qwen3", "<|im_start|>user\nsay <think><|im_end|><|im_start|>assistant\n", {}, False),  # user text
    ("deepseek_r1", "<｜User｜>hi<｜Assistant｜>", {}, True),                      # R1 may omit <think>
    ("deepseek_r1", "<｜User｜>hi<｜Assistant｜><think>\n", {}, True),
    ("deepseek_v3", "<｜User｜>hi<｜Assistant｜></think>", {"thinking": False}, False),
    ("deepseek_v3", "<｜User｜>hi<｜Assistant｜><think>", {"thinking": True}, True),
    ("deepseek_v3", "<｜User｜>hi<｜Assistant｜>", {}, False),
    ("holo2", "<｜User｜>hi<｜Assistant｜>", {}, True),
    ("minimax_m2", "]~b]ai\n<think>\n", {}, True),
    ("glm45", "<|assistant|>\n<think></think>", {"enable_thinking": False}, False),
    ("mistral", "[INST]hi[/INST]", {}, False),
    ("granite", "<|start_of_role|>assistant<|end_of_role|>", {"thinking": True}, False),
    ("openai_gptoss", "<|start|>assistant", {}, False),
    (None, "<think>", {}, False),
])
def test_prompt_starts_in_reasoning(reasoning, prompt, kwargs, want):
    assert prompt_starts_in_reasoning(reasoning, prompt, kwargs) is want


def test_deepseek_v3_is_identity_without_thinking():
    off = parse_complete(ParserSpec(reasoning="deepseek_v3"), "<think>a</think>b")
    assert (off.reasoning, off.content) == (None, "<think>a</think>b")
    on = parse_complete(ParserSpec(reasoning="deepseek_v3", chat_template_kwargs={"thinking": True},
                                   starts_in_reasoning=True), "a</think>b")
    assert (on.reasoning, on.content) == ("a", "b")


# -- spec and state ---------------------------------------------------------------------------------

def test_spec_round_trips_through_json():
    spec = ParserSpec(reasoning="qwen3", tool="hermes", tools=[{"type": "function", "function": {"name": "f"}}],
                      tool_choice={"type": "function", "function": {"name": "f"}}, starts_in_reasoning=True,
                      chat_template_kwargs={"enable_thinking": True})
    assert ParserSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_restore_rejects_damaged_or_foreign_state():
    spec = ParserSpec(reasoning="qwen3", tool="hermes")
    parser = create_parser(spec)
    parser.feed("<think>abc</th")
    state = parser.export_state()
    with pytest.raises(ValueError):
        OutputParser.restore(spec, {**state, "v": 99})
    with pytest.raises(ValueError):
        OutputParser.restore(ParserSpec(tool="hermes"), state)
    with pytest.raises(ValueError):
        OutputParser.restore(spec, {"v": 1})
    with pytest.raises(ValueError):
        OutputParser.restore(spec, {**state, "stage": {"st": "text"}})
    again = OutputParser.restore(spec, json.loads(json.dumps(state)))
    assert again.feed("ink>x") + again.finish() == [Content("x")]
    cut = OutputParser.restore(spec, state)
    assert cut.finish() == [Reasoning("</th")]  # held text is released at the end, not lost


def test_finish_is_idempotent_and_feed_after_finish_is_an_error():
    parser = create_parser(ParserSpec(tool="hermes"))
    parser.feed('<tool_call>{"name": "f", "arguments": {"a": "b')
    # issue 40: the call streamed as written ends not complete (no invented '"}')
    assert parser.finish() == [ToolCallEnd(0, complete=False)]
    assert parser.finish() == []
    with pytest.raises(ValueError):
        parser.feed("x")


def test_events_of_a_streamed_call():
    parser = create_parser(ParserSpec(tool="hermes"))
    events = []
    for piece in ['Hi <tool_call>{"na', 'me": "f", "argu', 'ments": {"a": "x', 'y"}}</tool_call>']:
        events += parser.feed(piece)
    events += parser.finish()
    # the call streams as written (issue 40): its start once the arguments begin, then pieces
    assert events == [Content("Hi "), ToolCallStart(0, "f"), ToolCallArguments(0, '{"a": "x'),
                      ToolCallArguments(0, 'y"}'), ToolCallEnd(0)]


def test_supported_md_lists_every_parser():
    from pathlib import Path

    import parsers

    text = (Path(parsers.__file__).parent / "SUPPORTED.md").read_text()
    for name in tool_parser_names() + reasoning_parser_names():
        assert f"`{name}`" in text, name


def test_readme_lists_every_parser():
    """The two parser lists (docs/guide.md, "Parsers") name every registered parser and alias (they went stale once)."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text()
    tools = readme.split("Tool-call parsers: ", 1)[1].split("Reasoning parsers: ", 1)[0]
    reasoning = readme.split("Reasoning parsers: ", 1)[1].split("The full table", 1)[0]
    assert [n for n in tool_parser_names() if f"`{n}`" not in tools] == []
    assert [n for n in reasoning_parser_names() if f"`{n}`" not in reasoning] == []


def test_prompt_ends_reasoning_only_when_the_prompt_rules_thinking_out():
    from parsers import prompt_ends_reasoning

    open_tail, closed_tail, bare = "<|im_start|>assistant\n<think>\n", "<|im_start|>assistant\n<think>\n\n</think>\n\n", "<|im_start|>assistant\n"
    assert prompt_ends_reasoning("qwen3", closed_tail, {}) is True          # case 25, whatever kwarg caused it
    assert prompt_ends_reasoning("qwen3", open_tail, {}) is False           # case 23
    assert prompt_ends_reasoning("qwen3", bare, {}) is False                # the model may open <think> itself
    assert prompt_ends_reasoning("qwen3", bare, {"enable_thinking": False}) is True
    assert prompt_ends_reasoning("deepseek_v3", bare, {}) is True           # thinking flag off: no reasoning
    assert prompt_ends_reasoning("openai_gptoss", bare, {}) is True         # vLLM 0.33's gpt-oss rule
    assert prompt_ends_reasoning(None, closed_tail, {}) is False


def test_detect_rules_are_derived_from_the_format_rows():
    """``auto`` knows exactly the needles the rows declare; more needles are tried first
    (more specific evidence), then table order; Harmony (no row) leads."""
    from parsers import formats, reasoning
    from parsers.detect import detect_parsers, reasoning_rules, tool_rules
    for rules, rows in ((tool_rules(), formats.FORMATS), (reasoning_rules(), reasoning.FORMATS)):
        assert rules[0][0] == ("<|channel|>", "<|message|>")
        assert sorted(rules[1:]) == sorted((n, name) for name, row in rows.items() for n in row.detect)
        sizes = [len(needles) for needles, _ in rules[1:]]
        assert sizes == sorted(sizes, reverse=True)
    assert detect_parsers("<tool_call>{...}</tool_call><arg_key>k</arg_key>")[1] == "glm45"
    assert detect_parsers("<tool_call>{...}</tool_call>")[1] == "hermes"


def test_prompt_reasoning_state_is_both_answers_at_once():
    """Render asks both questions of every prompt in one pass; the answers are the two functions'."""
    from parsers import prompt_ends_reasoning
    from parsers.api import prompt_reasoning_state

    tails = ["<|im_start|>assistant\n<think>\n", "<|im_start|>assistant\n<think>\n\n</think>\n\n",
             "<|im_start|>assistant\n", "<think>old</think><|im_start|>user\nhi<|im_end|><|im_start|>assistant\n",
             "<|im_start|>user\nsay <think><|im_end|><|im_start|>assistant\n", "<｜User｜>hi<｜Assistant｜>",
             "<｜User｜>hi<｜Assistant｜></think>", "<｜User｜>hi<｜Assistant｜><think>", "]~b]ai\n<think>\n",
             "<|assistant|>\n<think></think>", "[INST]hi[/INST]", "<|start|>assistant", "<think>", "</think><think>",
             "x<|end_message|>", "", "plain text"]
    kwargs_variants = [{}, {"enable_thinking": False}, {"enable_thinking": True}, {"thinking": True}, {"thinking": False}]
    names = [n for n in reasoning_parser_names() if n not in ("hf", "beam")] + [None]
    for name in names:
        for tail in tails:
            for kwargs in kwargs_variants:
                want = (prompt_ends_reasoning(name, tail, kwargs), prompt_starts_in_reasoning(name, tail, kwargs))
                assert prompt_reasoning_state(name, tail, kwargs) == want, (name, tail, kwargs)
