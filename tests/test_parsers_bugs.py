"""Issue 15's bug classes, each fixed once in the shared machine and checked on every
family the machine serves (the neighbours are the point: a fix in one family's copy is
what the issue found missing elsewhere).

Every result is checked streamed and not (``assert_chunking_invariant``: one feed,
1/2/3/7-character feeds, all equal) and across export/restore points.
"""

from __future__ import annotations

import pytest

from parsers.api import ParserSpec, message_from_events
from parsers.events import ToolCallEnd
from parsers.pythonic import call_to_json
from parsers.schema import coerce, param_schemas
from conftest import MODELS, needs_shared
from parsers.events import Content
from parsers_fixtures.helpers import assert_chunking_invariant, assert_restore_invariant, coalesce, run, token_pieces
from parsers_fixtures.samples import (DS_CALL, DS_CALLS_BEGIN, DS_CALLS_END, DS_END, DS_SEP, K_ARG, K_CALL, K_END,
                                      K_SEC, K_SEC_END, TOOLS, tool)


def parse(spec: ParserSpec, text: str):
    """Events (equal for every chunking and restore point) and the assembled message."""
    events = assert_chunking_invariant(spec, text)
    assert_restore_invariant(spec, text)
    return events, message_from_events(events)


def calls(msg) -> list[tuple]:
    return [(c.name, c.arguments) for c in msg.tool_calls]


def ends(events) -> list[bool]:
    return [ev.complete for ev in events if isinstance(ev, ToolCallEnd)]


# -- a tool-call marker inside an unclosed think block ---------------------------------------
# Every template in ../shared/templates (qwen3, glm-4.6, minimax-m2; Seed-OSS and Magistral
# likewise) writes calls after the closed think block, so a marker before </think> is a call
# the model only thought about. Kimi K2 Thinking interleaves calls with its thinking: there
# the tool section ends reasoning (its format says so).

HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
THOUGHT_CALLS = [
    ("qwen3", "hermes", "<think>verify\n" + HERMES + "</think>trailing"),
    ("qwen3", "qwen3_coder", "<think>verify\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                             "</parameter>\n</function>\n</tool_call></think>trailing"),
    ("seed_oss", "seed_oss", "<seed:think>verify<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris"
                             "</parameter>\n</function>\n</seed:tool_call></seed:think>trailing"),
    ("glm45", "glm45", "<think>verify<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
                       "</tool_call></think>trailing"),
    ("minimax_m2", "minimax_m2", "<think>verify<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter "
                                 "name=\"city\">Paris</parameter>\n</invoke>\n</minimax:tool_call></think>trailing"),
    ("mistral", "mistral", '[THINK]verify[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[/THINK]trailing'),
]


@pytest.mark.parametrize("reasoning,tool_parser,text", THOUGHT_CALLS, ids=[t[1] for t in THOUGHT_CALLS])
def test_marker_inside_open_reasoning_is_reasoning_text(reasoning, tool_parser, text):
    _, msg = parse(ParserSpec(reasoning=reasoning, tool=tool_parser, tools=TOOLS), text)
    assert msg.tool_calls == []
    assert msg.content == "trailing"
    assert msg.reasoning.startswith("verify") and "Paris" in msg.reasoning


@pytest.mark.parametrize("reasoning,tool_parser,text", THOUGHT_CALLS, ids=[t[1] for t in THOUGHT_CALLS])
def test_same_call_after_the_closed_block_is_a_call(reasoning, tool_parser, text):
    """Neighbour: the model closes its thinking first, then calls (what the templates write)."""
    end = {"[THINK]": "[/THINK]", "<seed:think>": "</seed:think>"}.get(text[:text.index("verify")], "</think>")
    opened = text[:text.index("verify")]
    call = text[text.index("verify") + len("verify"):text.rindex(end)]
    _, msg = parse(ParserSpec(reasoning=reasoning, tool=tool_parser, tools=TOOLS), opened + "verify" + end + call)
    assert msg.reasoning == "verify"
    assert calls(msg) == [("get_weather", '{"city": "Paris"}')]


def test_prompt_opened_reasoning_holds_the_marker_too():
    """Qwen3-2507 templates open <think> in the prompt: the open block is the model's."""
    spec = ParserSpec(reasoning="qwen3", tool="hermes", tools=TOOLS, starts_in_reasoning=True)
    _, msg = parse(spec, "Plan: call." + HERMES)
    assert (msg.reasoning, msg.tool_calls) == ("Plan: call." + HERMES, [])


def test_kimi_k2_thinking_calls_from_inside_its_thinking():
    spec = ParserSpec(reasoning="kimi_k2", tool="kimi_k2", tools=TOOLS)
    text = ("<think>Need weather. " + K_SEC + K_CALL + "functions.get_weather:0" + K_ARG + '{"city": "Paris"}'
            + K_END + K_SEC_END)
    _, msg = parse(spec, text)
    assert msg.reasoning == "Need weather."
    assert calls(msg) == [("get_weather", '{"city": "Paris"}')]


# -- calls are never completed by invention ------------------------------------------------------

CUT = [  # (family, output cut off inside the arguments, the arguments the model wrote)
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": "Par', '{"city": "Par'),
    ("granite4", '<tool_call>{"name": "get_weather", "arguments": {"city": "Par', '{"city": "Par'),
    ("llama3_json", '{"name": "get_weather", "parameters": {"days": 12', '{"days": 12'),
    ("xlam", '[{"name": "get_weather", "arguments": {"days": 1, ', '{"days": 1, '),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Par', '{"city": "Par'),
    ("deepseek_v31", DS_CALLS_BEGIN + DS_CALL + "get_weather" + DS_SEP + '{"city": "Par', '{"city": "Par'),
    ("kimi_k2", K_SEC + K_CALL + "functions.get_weather:0" + K_ARG + '{"metric": tr', '{"metric": tr'),
    ("qwen3_coder", "<tool_call><function=get_weather><parameter=city>Par", '{"city": "Par'),
    ("glm45", "<tool_call>get_weather<arg_key>days</arg_key><arg_value>1", '{"days": 1'),
    ("minimax_m2", '<minimax:tool_call><invoke name="get_weather"><parameter name="city">Par', '{"city": "Par'),
    ("openai", "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Par",
     '{"city":"Par'),
]


@pytest.mark.parametrize("family,text,written", CUT, ids=[c[0] for c in CUT])
def test_cut_off_call_is_a_partial_call(family, text, written):
    """Issue 40, one rule for every family: a call cut off inside its arguments is the call
    as far as the model wrote it, not complete (nothing invented), streamed or not — what
    vLLM streams; ``finish_reason`` stays ``length``."""
    spec = ParserSpec(tool=family, tools=TOOLS, reasoning="openai_gptoss" if family == "openai" else None)
    events, msg = parse(spec, text)
    assert calls(msg) == [("get_weather", written)] and ends(events) == [False]
    assert msg.content is None


@pytest.mark.parametrize("family,text,written", CUT, ids=[c[0] for c in CUT])
def test_cut_off_call_is_content_on_request(family, text, written):
    """The opt-in ``cut_calls="content"`` (issue 22's rule): the call is held until it
    completes, and a cut one is content, the text as written (Harmony: the message body)."""
    spec = ParserSpec(tool=family, tools=TOOLS, reasoning="openai_gptoss" if family == "openai" else None,
                      cut_calls="content")
    events, msg = parse(spec, text)
    assert calls(msg) == [] and ends(events) == []
    assert msg.content == (written if family == "openai" else text)


@needs_shared
@pytest.mark.parametrize("model,family", [("qwen3", "hermes"), ("llama-3.1-instruct", "llama3_json"),
                                          ("deepseek-v3.1", "deepseek_v31"), ("gpt-oss", "openai")])
def test_cut_off_call_token_by_token(model, family):
    """Issue 40 at the model's own token boundaries (its real tokenizer): the same partial
    call; with the opt-in, the same content."""
    text, written = next((t, w) for f, t, w in CUT if f == family)
    spec = ParserSpec(tool=family, tools=TOOLS, reasoning="openai_gptoss" if family == "openai" else None)
    pieces = token_pieces(MODELS / model / "tokenizer.json", text)
    assert "".join(pieces) == text and len(pieces) > 5
    events = run(spec, pieces)
    assert coalesce(run(spec, [text])) == coalesce(events)
    assert message_from_events(events).tool_calls[0].arguments == written
    held = ParserSpec(**{**spec.to_dict(), "cut_calls": "content"})
    expected = [Content(written if family == "openai" else text)]
    assert coalesce(run(held, [text])) == coalesce(run(held, pieces)) == expected


@pytest.mark.parametrize("family,text,written", CUT, ids=[c[0] for c in CUT])
def test_finished_call_is_complete(family, text, written):
    """Neighbour: the same call written to its end is complete, with valid JSON arguments."""
    finish = {"hermes": '"}}</tool_call>', "granite4": '"}}</tool_call>', "llama3_json": "}}", "xlam": '"city": "X"}}]',
              "mistral": '"}', "deepseek_v31": '"}' + DS_END + DS_CALLS_END, "kimi_k2": "ue}" + K_END + K_SEC_END,
              "qwen3_coder": "</parameter></function></tool_call>", "glm45": "</arg_value></tool_call>",
              "minimax_m2": "</parameter></invoke></minimax:tool_call>", "openai": '"}<|call|>'}[family]
    spec = ParserSpec(tool=family, tools=TOOLS, reasoning="openai_gptoss" if family == "openai" else None)
    events, msg = parse(spec, text + finish)
    assert ends(events) == [True] and len(msg.tool_calls) == 1


@pytest.mark.parametrize("family,text", [
    ("hermes", '<tool_call>{"name": "get_weather", "parameters": {invalid json}</tool_call>'),
    ("granite4", '<tool_call>{"name": "get_weather", "parameters": {invalid json}</tool_call>'),
    ("longcat", '<longcat_tool_call>{"name": "get_weather", "parameters": {invalid json}</longcat_tool_call>'),
    ("llama3_json", '{"name": "get_weather", "parameters": {invalid json}'),
    ("internlm", '<|action_start|><|plugin|>{"name": "get_weather", "parameters": {invalid json}<|action_end|>'),
    ("xlam", '[{"name": "get_weather", "arguments": {invalid json}}]'),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {\'city\': \'Paris\'}}</tool_call>'),
])
def test_malformed_arguments_are_not_a_call_with_empty_arguments(family, text):
    _, msg = parse(ParserSpec(tool=family, tools=TOOLS), text)
    assert msg.tool_calls == []
    assert msg.content == text


def test_json_breaking_mid_arguments_ends_the_call():
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris" oops}}</tool_call> tail'
    events, msg = parse(ParserSpec(tool="hermes", tools=TOOLS), text)
    # issue 40: the streamed call ends where its JSON broke, the rest is content
    assert calls(msg) == [("get_weather", '{"city": "Paris" ')] and ends(events) == [False]
    assert msg.content == "oops}} tail"
    events, msg = parse(ParserSpec(tool="hermes", tools=TOOLS, cut_calls="content"), text)
    assert calls(msg) == [] and ends(events) == []  # the opt-in: a broken call is content
    assert msg.content == text


# -- Kimi K2 --------------------------------------------------------------------------------------

@pytest.mark.parametrize("family,begin,end", [
    ("kimi_k2", K_SEC, K_SEC_END), ("kimi_k2", "<|tool_call_section_begin|>", "<|tool_call_section_end|>"),
    ("deepseek_v31", DS_CALLS_BEGIN, DS_CALLS_END), ("deepseek_v3", DS_CALLS_BEGIN, DS_CALLS_END),
    ("minimax_m2", "<minimax:tool_call>", "</minimax:tool_call>"),
])
def test_empty_tool_section_is_not_content(family, begin, end):
    _, msg = parse(ParserSpec(tool=family, tools=TOOLS), "Done." + begin + "\n" + end)
    assert (msg.content, msg.tool_calls) == ("Done.", [])
    _, cut = parse(ParserSpec(tool=family, tools=TOOLS), "Done." + begin)
    assert cut.content == "Done." + begin  # cut before any call opened: the model's text (issue 40)
    # a section holding text that is no call is still shown, markers and all
    _, junk = parse(ParserSpec(tool=family, tools=TOOLS), "Done." + begin + "not a call" + end)
    assert junk.content == "Done." + begin + "not a call" + end


def test_kimi_header_without_index_names_the_call_without_a_false_id():
    text = (K_SEC + K_CALL + "functions.get_weather" + K_ARG + '{"city": "Paris"}' + K_END
            + K_CALL + "get_weather" + K_ARG + '{"city": "Rome"}' + K_END
            + K_CALL + "functions.get_weather:2" + K_ARG + '{"city": "Oslo"}' + K_END + K_SEC_END)
    _, msg = parse(ParserSpec(tool="kimi_k2", tools=TOOLS), text)
    assert [(c.name, c.id) for c in msg.tool_calls] == [
        ("get_weather", None), ("get_weather", None), ("get_weather", "functions.get_weather:2")]


# -- Pythonic ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("src,want", [
    ("get_range(from=1, to=5)", ("get_range", '{"from": 1, "to": 5}')),
    ("f(class='a', lambda=None, import_=2)", ("f", '{"class": "a", "lambda": null, "import_": 2}')),
    ('say(text="line1\nline2")', ("say", '{"text": "line1\\nline2"}')),
    ("say(text='a\nb', n=\"\"\"x\ny\"\"\")", ("say", '{"text": "a\\nb", "n": "x\\ny"}')),
    ('f(a="from=1, (")', ("f", '{"a": "from=1, ("}')),
    ("f(a=1 if True else 2)", None), ("f(from)", None),
])
def test_pythonic_keyword_names_and_raw_newlines(src, want):
    assert call_to_json(src) == want


@pytest.mark.parametrize("family,prefix,suffix", [("pythonic", "", ""),
                                                  ("llama4_pythonic", "<|python_start|>", "<|python_end|>")])
def test_pythonic_families_keep_such_calls(family, prefix, suffix):
    tools = [tool("get_range", **{"from": "integer", "to": "integer"}), tool("say", text="string")]
    text = prefix + '[get_range(from=1, to=5), say(text="a\nb")]' + suffix
    _, msg = parse(ParserSpec(tool=family, tools=tools), text)
    assert calls(msg) == [("get_range", '{"from": 1, "to": 5}'), ("say", '{"text": "a\\nb"}')]


# -- argument typing from the tool's JSON Schema ----------------------------------------------------

def _tool(parameters: dict) -> list[dict]:
    return [{"type": "function", "function": {"name": "f", "parameters": parameters}}]


SCHEMAS = {
    "ref-defs": {"type": "object", "$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}},
    "ref-definitions-escaped": {"type": "object", "definitions": {"a/b~c d": {"type": "integer"}},
                                "properties": {"a": {"$ref": "#/definitions/a~1b~0c%20d"}}},
    "ref-chain": {"$defs": {"m": {"$ref": "#/$defs/n"}, "n": {"type": ["integer", "null"]}},
                  "properties": {"a": {"$ref": "#/$defs/m"}}},
    "allOf": {"properties": {"a": {"allOf": [{"type": ["integer", "string"]}, {"type": "integer"}]}}},
    "allOf-root": {"allOf": [{"properties": {"a": {"type": "integer"}}}, {"required": ["a"]}]},
    "anyOf-root": {"anyOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {"type": "string"}}}]},
    "oneOf-root-ref": {"$defs": {"x": {"properties": {"a": {"type": "integer"}}}}, "oneOf": [{"$ref": "#/$defs/x"}]},
    "ref-root": {"$ref": "#/$defs/x", "$defs": {"x": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
    "const": {"properties": {"a": {"const": 7}}},
    "enum-int": {"properties": {"a": {"enum": [7, 8]}}},
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("family,template", [
    ("qwen3_coder", "<tool_call><function=f><parameter=a>{v}</parameter></function></tool_call>"),
    ("glm45", "<tool_call>f<arg_key>a</arg_key><arg_value>{v}</arg_value></tool_call>"),
    ("minimax_m2", '<minimax:tool_call><invoke name="f"><parameter name="a">{v}</parameter></invoke></minimax:tool_call>'),
    ("seed_oss", "<seed:tool_call><function=f><parameter=a>{v}</parameter></function></seed:tool_call>"),
])
def test_schema_decides_the_type(family, template, name):
    _, msg = parse(ParserSpec(tool=family, tools=_tool(SCHEMAS[name])), template.replace("{v}", "7"))
    assert calls(msg) == [("f", '{"a": 7}')]


@pytest.mark.parametrize("family,template", [
    ("qwen3_coder", "<tool_call><function=f><parameter=a>{v}</parameter></function></tool_call>"),
    ("glm45", "<tool_call>f<arg_key>a</arg_key><arg_value>{v}</arg_value></tool_call>"),
])
def test_enum_with_mixed_types_keeps_the_member_written(family, template):
    tools = _tool({"properties": {"a": {"enum": ["7", 8, None]}}})
    got = [calls(parse(ParserSpec(tool=family, tools=tools), template.replace("{v}", v))[1])[0][1]
           for v in ("7", "8", "null", "9")]
    assert got == ['{"a": "7"}', '{"a": 8}', '{"a": null}', '{"a": 9}']


def test_schema_resolution_edges():
    # a reference that does not resolve (remote or broken) restricts nothing and fetches nothing
    s = param_schemas(_tool({"properties": {"a": {"$ref": "https://example.com/s.json"}, "b": {"$ref": "#/nope"}}}), "f")
    assert (s["a"].types, s["b"].types) == ([], [])
    # a reference cycle ends
    s = param_schemas(_tool({"$defs": {"x": {"$ref": "#/$defs/x"}}, "properties": {"a": {"$ref": "#/$defs/x"}}}), "f")
    assert s["a"].types == []
    # "number" and "integer" meet in integer; const outside the type allows nothing typed
    s = param_schemas(_tool({"properties": {"a": {"allOf": [{"type": "number"}, {"type": "integer"}]},
                                            "b": {"anyOf": [{"const": "x"}, {"type": "boolean"}]}}}), "f")
    assert s["a"].types == ["integer"]
    assert (s["b"].types, s["b"].values) == (["string", "boolean"], None)
    assert coerce("true", ["string", "boolean"]) == "true"
    assert coerce("x", ["string", "boolean"]) == '"x"'


# -- an unknown tool name in a list of calls -----------------------------------------------------------

@pytest.mark.parametrize("family,text", [
    ("xlam", '[{"name": "rm_rf", "arguments": {"p": "/"}}, {"name": "get_weather", "arguments": {"city": "Oslo"}}]'),
    ("mistral", '[TOOL_CALLS] [{"name": "rm_rf", "arguments": {"p": "/"}}, {"name": "get_weather", '
                '"arguments": {"city": "Oslo"}}]'),
    ("granite", '<|tool_call|>[{"name": "rm_rf", "arguments": {"p": "/"}}, {"name": "get_weather", '
                '"arguments": {"city": "Oslo"}}]'),
    ("jamba", '<tool_calls>[{"name": "rm_rf", "arguments": {"p": "/"}}, {"name": "get_weather", '
              '"arguments": {"city": "Oslo"}}]</tool_calls>'),
    ("phi4_mini_json", 'functools[{"name": "rm_rf", "arguments": {"p": "/"}}, {"name": "get_weather", '
                       '"arguments": {"city": "Oslo"}}]'),
    ("llama3_json", '{"name": "rm_rf", "parameters": {"p": "/"}}; {"name": "get_weather", "parameters": {"city": "Oslo"}}'),
    ("pythonic", '[rm_rf(p="/"), get_weather(city="Oslo")]'),
    ("llama4_pythonic", '<|python_start|>[rm_rf(p="/"), get_weather(city="Oslo")]<|python_end|>'),
])
def test_unknown_name_in_a_list_does_not_lose_the_calls_after_it(family, text):
    """vLLM's list parsers return every element; the client answers the unknown one with
    an error and the model goes on: the valid call after it must reach the client."""
    _, msg = parse(ParserSpec(tool=family, tools=TOOLS), text)
    assert calls(msg) == [("rm_rf", '{"p": "/"}'), ("get_weather", '{"city": "Oslo"}')]


def test_required_list_reports_the_unknown_call_too():
    text = '[{"name": "rm_rf", "parameters": {}}, {"name": "noop", "parameters": {}}]'
    _, msg = parse(ParserSpec(tool="hermes", tools=TOOLS, tool_choice="required"), text)
    assert calls(msg) == [("rm_rf", "{}"), ("noop", "{}")]


def test_single_unknown_envelope_stays_content():
    """Neighbour: outside a list an unknown name is no call (the text is the model's answer)."""
    text = 'Hi <tool_call>{"name": "rm_rf", "arguments": {}}</tool_call> bye'
    _, msg = parse(ParserSpec(tool="hermes", tools=TOOLS), text)
    assert (msg.content, msg.tool_calls) == (text, [])


# -- InternLM -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("gap", ["", " ", "\n", " \n\t"])
def test_internlm_blank_between_action_and_plugin(gap):
    text = 'ok<|action_start|>' + gap + '<|plugin|>\n{"name": "get_weather", "parameters": {"city": "Rome"}}<|action_end|>'
    _, msg = parse(ParserSpec(tool="internlm", tools=TOOLS), text)
    assert (msg.content, calls(msg)) == ("ok", [("get_weather", '{"city": "Rome"}')])


def test_internlm_interpreter_action_is_not_a_call():
    text = "ok<|action_start|><|interpreter|>print(1)<|action_end|>"
    _, msg = parse(ParserSpec(tool="internlm", tools=TOOLS), text)
    assert (msg.content, msg.tool_calls) == (text, [])


# -- issue 40: text around XML calls is never lost -------------------------------------------------

HY = ":opensource"
HY_CALL = (f"<tool_call{HY}>get_weather<arg_key{HY}>city</arg_key{HY}><arg_value{HY}>Paris</arg_value{HY}>"
           f"JUNK</tool_call{HY}>")


@pytest.mark.parametrize("family,text,content", [
    ("hy_v4", f"<tool_calls{HY}>{HY_CALL}</tool_calls{HY}>", "JUNK"),
    ("hy_v4", f"<tool_calls{HY}>{HY_CALL.replace(HY, '')}</tool_calls{HY}>".replace(HY, ""), "JUNK"),
    ("glm45", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value> so \n</tool_call>",
     " so \n"),
    ("qwen3_coder", "<tool_call><function=get_weather><parameter=city>Paris</parameter>\nJUNK\n</function></tool_call>",
     "\nJUNK\n"),
])
def test_text_between_xml_parameters_is_content(family, text, content):
    """The shared XML machine: non-blank text between a call's parameters (or before its
    end tag) is content, with the blanks around it; blank layout alone is dropped."""
    _, msg = parse(ParserSpec(tool=family, tools=TOOLS), text)
    assert calls(msg) == [("get_weather", '{"city": "Paris"}')] and msg.content == content


@pytest.mark.parametrize("family,text", [
    ("hy_v4", f"<tool_calls{HY}>{HY_CALL.replace('JUNK', '')}</tool_calls{HY}><tool_calls{HY}>"),
    ("hermes", '<tool_call>{"name": "noop", "arguments": {}}</tool_call><tool_call>'),
    ("kimi_k2", K_SEC + K_CALL + "functions.noop:0" + K_ARG + "{}" + K_END + K_SEC_END + K_SEC),
])
def test_section_cut_before_a_call_is_content(family, text):
    """A section (or call) marker the output ends right after is the model's text, not
    dropped: a call cut before it opened is content (issue 40)."""
    _, msg = parse(ParserSpec(tool=family, tools=TOOLS), text)
    assert len(msg.tool_calls) == 1
    marker = {"hy_v4": f"<tool_calls{HY}>", "hermes": "<tool_call>", "kimi_k2": K_SEC}[family]
    assert msg.content == marker


# -- issue 40: a broken call does not take the calls after it down ---------------------------------

@pytest.mark.parametrize("family,broken,valid,begin,end", [
    ("kimi_k2", K_CALL + "functions.nope:0" + K_ARG + "{}" + K_END, K_CALL + "functions.noop:1" + K_ARG + "{}" + K_END,
     K_SEC, K_SEC_END),
    ("deepseek_v31", DS_CALL + "nope" + DS_SEP + "{}" + DS_END, DS_CALL + "noop" + DS_SEP + "{}" + DS_END,
     DS_CALLS_BEGIN, DS_CALLS_END),
])
@pytest.mark.parametrize("cut_calls", ["call", "content"])
def test_valid_call_after_a_broken_one_in_a_section(family, broken, valid, begin, end, cut_calls):
    """The first call of a section is no call (an unknown function): it is content, with the
    section's marker, and the valid call after it is still a call."""
    spec = ParserSpec(tool=family, tools=TOOLS, cut_calls=cut_calls)
    _, msg = parse(spec, begin + broken + valid + end)
    assert calls(msg) == [("noop", "{}")] and msg.content == begin + broken
    _, alone = parse(spec, begin + broken + end + " after")  # no valid call: all of it is content
    assert calls(alone) == [] and alone.content == begin + broken + end + " after"


def test_kimi_call_whose_json_breaks_before_a_valid_one():
    text = K_SEC + K_CALL + "functions.get_weather:0" + K_ARG + "not json" + K_END + K_CALL + "functions.noop:1" + K_ARG \
        + "{}" + K_END + K_SEC_END
    _, held = parse(ParserSpec(tool="kimi_k2", tools=TOOLS, cut_calls="content"), text)
    assert calls(held) == [("noop", "{}")]
    assert held.content == K_SEC + K_CALL + "functions.get_weather:0" + K_ARG + "not json" + K_END
    events, streamed = parse(ParserSpec(tool="kimi_k2", tools=TOOLS), text)  # streamed: it ends not complete
    assert calls(streamed) == [("get_weather", ""), ("noop", "{}")] and ends(events) == [False, True]


# -- issue 40: a Muse call header quoted in a message is text ---------------------------------------

MUSE_QUOTE = ('<|start|>assistant to=noop<|message|><atem:function_calls><atem:invoke name="noop"></atem:invoke>'
              '</atem:function_calls>')


@pytest.mark.parametrize("to,field", [("user", "content"), ("commentary", "content"), ("self", "reasoning")])
def test_muse_header_quoted_in_a_message_is_text(to, field):
    """Muse scopes calls by their message: a whole call header quoted inside reasoning or an
    answer is that message's text (SUPPORTED.md), up to the message's own end marker."""
    text = f"<|start|>assistant to={to}<|message|>Write {MUSE_QUOTE} to call it.<|eom|>"
    _, msg = parse(ParserSpec(tool="muse", reasoning="muse", tools=TOOLS), text)
    assert msg.tool_calls == [] and getattr(msg, field) == f"Write {MUSE_QUOTE} to call it."
    real = text + MUSE_QUOTE + "<|eom|>"  # the same header as a message of its own is a call
    _, called = parse(ParserSpec(tool="muse", reasoning="muse", tools=TOOLS), real)
    assert calls(called) == [("noop", "{}")]
