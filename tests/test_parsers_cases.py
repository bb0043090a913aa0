"""Shared failure cases (../shared/cases, areas tool_parser / reasoning_parser / stream) and
their neighbours in other families.

Inputs and expected values are read from the case files; every case runs under several
chunkings (whole, 1, 2, 3, 5, 8 characters, and the case's own chunks), each also with
export/restore of the parser state between pieces.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import CASES, MODELS, needs_shared

from parsers.api import ParserSpec, message_from_events, parse_complete, prompt_starts_in_reasoning
from parsers_fixtures.helpers import (assert_chunking_invariant, assert_restore_invariant, coalesce,
                                      pieces_of, run, run_restoring, token_pieces)
from parsers_fixtures.samples import tool

pytestmark = needs_shared

SIZES = (None, 1, 2, 3, 5, 8)


def case(number: int) -> dict:
    (path,) = CASES.glob(f"{number:02d}-*.json")
    return json.loads(path.read_text())


def all_runs(spec: ParserSpec, text: str, extra: list[list[str]] = ()) -> list:
    """ParsedMessage of every chunking (with and without state restore); asserts they agree."""
    splits = [pieces_of(text, n) for n in SIZES] + list(extra)
    results = []
    for pieces in splits:
        results.append(coalesce(run(spec, pieces)))
        results.append(coalesce(run_restoring(spec, pieces)))
    for got in results[1:]:
        assert got == results[0]
    return message_from_events(results[0])


def calls_of(msg) -> list[dict]:
    return [{"name": c.name, "arguments": c.arguments} for c in msg.tool_calls]


def expected_calls(calls: list[dict]) -> list[dict]:
    return [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in calls]


def per_token_chunks(model: str, text: str) -> list[str]:
    """``text`` split the way a streaming detokenizer of ``model`` would deliver it."""
    path = MODELS / model / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} not present")
    chunks = token_pieces(path, text)
    assert "".join(chunks) == text
    return chunks


# -- hermes: cases 10, 11, 12, 14 ------------------------------------------------------

@pytest.mark.parametrize("number", [10, 11, 12, 14])
def test_hermes_cases(number):
    c = case(number)
    spec = ParserSpec(tool="hermes", tools=c["input"]["tools"])
    text = c["input"]["raw_output"]
    extra = [per_token_chunks("qwen2.5-instruct", text)] if number in (10, 11, 14) else []
    msg = all_runs(spec, text, extra)
    assert calls_of(msg) == expected_calls(c["expected"]["tool_calls"])
    if "content" in c["expected"]:
        assert msg.content == c["expected"]["content"]
    for call in msg.tool_calls:
        json.loads(call.arguments)


def test_case10_no_argument_byte_twice_per_token():
    """Case 10's invariant on the events themselves: argument pieces concatenate to the
    final arguments (nothing re-sent, nothing invented)."""
    c = case(10)
    spec = ParserSpec(tool="hermes", tools=c["input"]["tools"])
    events = run(spec, per_token_chunks("qwen2.5-instruct", c["input"]["raw_output"]))
    pieces = [e.text for e in events if type(e).__name__ == "ToolCallArguments"]
    # (a call's events are released when it completes, issue 22, so no count of pieces)
    assert "".join(pieces) == c["expected"]["tool_calls"][0]["function"]["arguments"]


@pytest.mark.parametrize("arguments", ['{}', '""', 'null', None])
def test_case11_parameterless_forms_give_empty_object(arguments):
    c = case(11)
    name = c["input"]["tools"][0]["function"]["name"]
    body = {"name": name} if arguments is None else None
    text = ("<tool_call>\n" + (json.dumps(body) if body else f'{{"name": "{name}", "arguments": {arguments}}}')
            + "\n</tool_call>")
    msg = all_runs(ParserSpec(tool="hermes", tools=c["input"]["tools"]), text)
    assert calls_of(msg) == [{"name": name, "arguments": "{}"}]


@pytest.mark.parametrize("family,text", [
    ("llama3_json", '{"name": "search", "parameters": {"query": "explain the ; and } token"}}'),
    ("granite", '<|tool_call|>[{"name": "search", "arguments": {"query": "a ]}] b"}}]'),
    ("mistral", '[TOOL_CALLS]search[ARGS]{"query": "[TOOL_CALLS] inside"}'),
    ("deepseek_v31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>"
                     '{"query": "<｜tool▁call▁end｜>"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
    ("kimi_k2", '<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0<|tool_call_argument_begin|>'
                '{"query": "<|tool_call_end|>"}<|tool_call_end|><|tool_calls_section_end|>'),
])
def test_case12_neighbours_end_marker_inside_json_string(family, text):
    """Case 12's kind in other JSON families: a marker inside a JSON string is just text."""
    msg = all_runs(ParserSpec(tool=family, tools=case(12)["input"]["tools"]), text)
    assert len(msg.tool_calls) == 1
    query = json.loads(msg.tool_calls[0].arguments)["query"]
    assert query in text and len(query) > 5


def test_case14_neighbour_list_arguments_before_name():
    msg = all_runs(ParserSpec(tool="granite"), '<|tool_call|>[{"arguments": {"n1": 2}, "name": "sum"}]')
    assert calls_of(msg) == [{"name": "sum", "arguments": '{"n1": 2}'}]


# -- qwen3_coder: case 15 ---------------------------------------------------------------

def test_case15_qwen3coder():
    c = case(15)
    spec = ParserSpec(tool="qwen3_coder", tools=c["input"]["tools"])
    a = all_runs(spec, c["input"]["raw_output_a"])
    assert calls_of(a) == expected_calls(c["expected"]["a"])
    b_text = c["input"]["raw_output_b_two_calls_one_chunk"]
    b = all_runs(spec, b_text, [per_token_chunks("qwen3", b_text)])
    assert calls_of(b) == expected_calls(c["expected"]["b"])
    trunc = all_runs(spec, c["input"]["raw_output_c_truncated"])
    # the "completed call" of the case's two allowed answers: cut between parameters, the
    # object of whole values is closed (issue 40: a started call streams, never taken back)
    assert calls_of(trunc) == [{"name": "get_weather", "arguments": '{"city": "Tokyo"}'}] and trunc.content is None


@pytest.mark.parametrize("family,text", [
    ("glm45", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>echo '}'</arg_value></tool_call>"
              "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Tokyo</arg_value></tool_call>"),
    ("minimax_m2", "<minimax:tool_call><invoke name=\"get_weather\"><parameter name=\"city\">echo '}'</parameter>"
                   "</invoke><invoke name=\"get_weather\"><parameter name=\"city\">Tokyo</parameter></invoke>"
                   "</minimax:tool_call>"),
])
def test_case15_neighbours_other_xml_families(family, text):
    msg = all_runs(ParserSpec(tool=family, tools=case(15)["input"]["tools"]), text)
    assert calls_of(msg) == [{"name": "get_weather", "arguments": '{"city": "echo \'}\'"}'},
                             {"name": "get_weather", "arguments": '{"city": "Tokyo"}'}]


def test_case15_integer_parameter_typed_by_schema():
    tools = [tool("get_weather", city="string", days="integer")]
    text = "<tool_call>\n<function=get_weather>\n<parameter=days>\n5\n</parameter>\n</function>\n</tool_call>"
    assert parse_complete(ParserSpec(tool="qwen3_coder", tools=tools), text).tool_calls[0].arguments == '{"days": 5}'
    untyped = [tool("get_weather", days="string")]
    assert parse_complete(ParserSpec(tool="qwen3_coder", tools=untyped), text).tool_calls[0].arguments == '{"days": "5"}'


# -- kimi_k2: case 17 --------------------------------------------------------------------

@pytest.mark.parametrize("part", ["a", "b"])
def test_case17_kimi(part):
    c = case(17)
    text = c["input"][f"raw_output_{part}"]
    spec = ParserSpec(tool="kimi_k2")
    # per marker ("per token": the markers are special tokens) and the whole delta at once
    marker_chunks = [p for p in re.split(r"(<\|[a-z_]+\|>)", text) if p]
    msg = all_runs(spec, text, [marker_chunks])
    want = c["expected"][part]
    assert [{"id": t.id, "name": t.name, "arguments": t.arguments} for t in msg.tool_calls] == \
        [{"id": w["id"], **{k: w["function"][k] for k in ("name", "arguments")}} for w in want]
    assert msg.content == c["expected"]["content"]


# -- llama3_json: case 18 --------------------------------------------------------------

def test_case18_llama3_semicolon_and_variants():
    c = case(18)
    spec = ParserSpec(tool="llama3_json")
    raw = c["input"]["raw_output"]
    want = expected_calls(c["expected"]["tool_calls"])
    for text in (raw, raw.replace("<|python_tag|>", ""), raw.replace("};{", "}; {")):
        msg = all_runs(spec, text, [per_token_chunks("llama-3.1-instruct", text)])
        assert calls_of(msg) == want
        assert msg.content == c["expected"]["content"]
    params = all_runs(spec, raw.replace('"arguments"', '"parameters"'))
    assert calls_of(params) == want


def test_case18_prose_object_is_not_a_call():
    for text in ('Here is a user: {"name": "Alice"}', '{"name": "Alice"}', '{"name": "Alice", "age": 3}'):
        msg = all_runs(ParserSpec(tool="llama3_json"), text)
        assert msg.tool_calls == [] and msg.content == text


# -- harmony: case 20 ---------------------------------------------------------------------

@pytest.mark.parametrize("part", ["a", "b", "c"])
def test_case20_harmony_recipient_on_any_channel(part):
    c = case(20)
    key = {"a": "raw_output_a", "b": "raw_output_b", "c": "raw_output_c_normal"}[part]
    tools = [tool(s.split("(")[0], **{s.split("(")[1].split(":")[0]: "string"}) for s in c["input"]["tools"]]
    text = c["input"][key]
    spec = ParserSpec(reasoning="openai_gptoss", tool="openai", tools=tools)
    msg = all_runs(spec, text, [per_token_chunks("gpt-oss", text)])
    want = c["expected"][part]
    assert calls_of(msg) == expected_calls(want["tool_calls"])
    assert msg.reasoning == want.get("reasoning_content")
    assert msg.content == want.get("content")


# -- non-ASCII: case 21 ----------------------------------------------------------------------

def test_case21_nonascii_literal_in_every_family():
    c = case(21)
    tools = c["input"]["tools"]
    want = c["expected"]["tool_calls"][0]["function"]
    args = '{"customer_name": "你好啊集团", "note": "🚀 launch"}'
    texts = {
        "xlam": c["input"]["raw_output_xlam"],
        "hermes": '<tool_call>{"name": "create_customer", "arguments": ' + args + '}</tool_call>',
        "llama3_json": '{"name": "create_customer", "parameters": ' + args + '}',
        "mistral": '[TOOL_CALLS]create_customer[ARGS]' + args,
        "qwen3_coder": "<tool_call><function=create_customer><parameter=customer_name>你好啊集团</parameter>"
                       "<parameter=note>🚀 launch</parameter></function></tool_call>",
        "pythonic": '[create_customer(customer_name="你好啊集团", note="🚀 launch")]',
        "openai": "<|channel|>commentary to=functions.create_customer<|message|>" + args + "<|call|>",
    }
    for family, text in texts.items():
        msg = all_runs(ParserSpec(tool=family, tools=tools), text)
        assert calls_of(msg) == [want], family
        assert "\\u" not in msg.tool_calls[0].arguments


# -- mistral: case 22 ---------------------------------------------------------------------

def _mistral_tools(signatures: list[str]) -> list[dict]:
    out = []
    for sig in signatures:
        name, params = sig.rstrip(")").split("(")
        out.append(tool(name, **dict(p.strip().split(": ") for p in params.split(","))))
    return out


def test_case22_mistral_both_formats():
    c = case(22)
    spec = ParserSpec(tool="mistral", tools=_mistral_tools(c["input"]["tools"]))
    a = all_runs(spec, c["input"]["a_raw_output_with_special_tokens"])
    assert calls_of(a) == expected_calls(c["expected"]["a"]["tool_calls"])
    assert a.content is None
    chunks = c["input"]["b_stream_chunks"]
    b = all_runs(spec, "".join(chunks), [chunks])
    assert calls_of(b) == expected_calls(c["expected"]["b"]["tool_calls"])


def test_case22_skipped_marker_is_plain_content_not_guessed():
    """With [TOOL_CALLS] stripped by skip_special_tokens the text is not a call (the fix is
    to decode with specials; see the case's rule) — it stays content, intact."""
    text = case(22)["input"]["a_raw_output_with_special_tokens"].replace("[TOOL_CALLS]", "")
    msg = all_runs(ParserSpec(tool="mistral"), text)
    assert msg.tool_calls == [] and msg.content == text


# -- reasoning: cases 23, 25, 26, 27, 29 -----------------------------------------------------

def test_case23_preopened_think():
    c = case(23)
    starts = prompt_starts_in_reasoning("qwen3", c["input"]["rendered_prompt_tail"], {})
    assert starts is True
    spec = ParserSpec(reasoning="qwen3", starts_in_reasoning=starts)
    text = c["input"]["raw_output"]
    msg = all_runs(spec, text, [per_token_chunks("qwen3", text)])
    assert (msg.reasoning, msg.content) == (c["expected"]["reasoning_content"], c["expected"]["content"])


@pytest.mark.parametrize("kwargs", [{"enable_thinking": False}, {}])
def test_case25_closed_think_block_means_content(kwargs):
    """Both the kwarg and the variant where only the template closed the block (#53284)."""
    c = case(25)
    starts = prompt_starts_in_reasoning("qwen3", c["input"]["rendered_prompt_tail"], kwargs)
    assert starts is False
    for reasoning in ("qwen3", "deepseek_r1"):
        assert prompt_starts_in_reasoning(reasoning, c["input"]["rendered_prompt_tail"], kwargs) is False
        msg = all_runs(ParserSpec(reasoning=reasoning, starts_in_reasoning=starts, chat_template_kwargs=kwargs),
                       c["input"]["raw_output"])
        assert msg.reasoning is None
        assert msg.content == c["expected"]["message"]["content"]


def test_case26_split_end_tag():
    c = case(26)
    for starts in (False, True):
        a = all_runs(ParserSpec(reasoning="qwen3", starts_in_reasoning=starts), "".join(c["input"]["stream_chunks_a"]),
                     [c["input"]["stream_chunks_a"]])
        assert (a.reasoning, a.content) == (c["expected"]["a"]["reasoning_content"], c["expected"]["a"]["content"])
    b = all_runs(ParserSpec(reasoning="deepseek_r1", starts_in_reasoning=True), "weighing it</think>Answer.")
    assert (b.reasoning, b.content) == (c["expected"]["b"]["reasoning_content"], c["expected"]["b"]["content"])
    cc = all_runs(ParserSpec(reasoning="qwen3", starts_in_reasoning=True), "".join(c["input"]["stream_chunks_c"]),
                  [c["input"]["stream_chunks_c"]])
    assert (cc.reasoning, cc.content) == (c["expected"]["c"]["reasoning_content"], c["expected"]["c"]["content"])


def test_case26_every_two_chunk_split_every_marker_family():
    """The note's exhaustive check, for every tag spelling we support."""
    for reasoning, (start, end) in {"qwen3": ("<think>", "</think>"), "mistral": ("[THINK]", "[/THINK]"),
                                    "seed_oss": ("<seed:think>", "</seed:think>"),
                                    "granite": ("Here is my thought process:", "Here is my response:")}.items():
        text = f"{start}reason{end}answer"
        spec = ParserSpec(reasoning=reasoning)
        assert_restore_invariant(spec, text)
        msg = message_from_events(assert_chunking_invariant(spec, text))
        assert (msg.reasoning, msg.content) == ("reason", "answer"), reasoning


def test_case26_neighbour_tool_marker_split():
    text = 'ok<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    for k in range(len(text) + 1):
        msg = message_from_events(run(ParserSpec(tool="hermes"), [text[:k], text[k:]]))
        assert msg.content == "ok" and [c.name for c in msg.tool_calls] == ["a"]


def test_case27_text_before_opening_tag_all_paths():
    c = case(27)
    text = c["input"]["raw_output"]
    i = text.index("<think>")
    paths = [[text[:i], text[i:i + 7], text[i + 7:]], [text[:i + 1], text[i + 1:]], [text]]
    for reasoning in ("qwen3", "glm45", "kimi_k2"):
        starts = prompt_starts_in_reasoning(reasoning, "<|im_start|>assistant\n", {})
        assert starts is False
        msg = all_runs(ParserSpec(reasoning=reasoning, starts_in_reasoning=starts), text, paths)
        want = c["expected"]["all_paths"]
        assert (msg.reasoning, msg.content) == (want["reasoning_content"], want["content"]), reasoning


def test_case29_first_end_tag_wins_later_tags_are_content():
    c = case(29)
    text = c["input"]["raw_output"]
    for reasoning in ("qwen3", "deepseek_r1", "glm45", "kimi_k2", "minimax_m2"):
        spec = ParserSpec(reasoning=reasoning, starts_in_reasoning=True)
        msg = all_runs(spec, text, [per_token_chunks("qwen3", text)])
        assert (msg.reasoning, msg.content) == (c["expected"]["reasoning_content"], c["expected"]["content"])
    mistral = all_runs(ParserSpec(reasoning="mistral"), "[THINK]a[/THINK]b [/THINK] c")
    assert (mistral.reasoning, mistral.content) == ("a", "b [/THINK] c")
