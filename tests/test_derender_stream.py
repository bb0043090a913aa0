"""Streaming derender == non-streaming derender, for every chunking, over real HTTP.

Real servers on loopback with real tokenizers: Qwen3 (``--reasoning-parser qwen3
--tool-call-parser hermes --enable-auto-tool-choice``) for the reasoning and tool-call
cases, SmolLM2 without parsers for plain text and stop strings. For each case the engine
output is the tokenised raw text plus EOS; it is streamed one token per chunk, all at
once, in random splits (fixed seeds and hypothesis), through the stateless API and through
the pipe, and the concatenated deltas must equal the non-streaming response: content,
reasoning, tool-call names, arguments as equal JSON, finish_reason, stop_reason. Where a
shared case states the right value, that value is asserted too.
"""

from __future__ import annotations

import contextlib
import json
import random

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CASES, needs_shared
from test_derender_helpers import (QWEN_CFG, USER, Derender, bundle, client_fixture, derender_server, message_view,
                                   stream_view, token_chunks)

pytestmark = needs_shared

PROMPTS = {
    "neutral": USER,                                   # the model opens <think> itself
    "open": USER + "<think>\n",                        # template pre-opens reasoning (case 23)
    "closed": USER + "<think>\n\n</think>\n\n",        # enable_thinking=false (case 25)
}


def case(n: str) -> dict:
    return json.loads(next(CASES.glob(f"{n}-*.json")).read_text())


WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
LONG_ARGS = json.dumps({"city": "Paris", "notes": "line one\nline \"two\" with {braces} and [brackets] 中文 😀 " * 6})

# name -> (prompt, raw output, tools, expected subset of the view)
QWEN_CASES = {
    "c10_partial_json_values": ("closed", case("10")["input"]["raw_output"], case("10")["input"]["tools"],
                                {"tool_calls": [("predict_x", json.loads(case("10")["expected"]["tool_calls"][0]["function"]["arguments"]))],
                                 "finish_reason": "tool_calls", "content": None}),
    "c11_parameterless": ("closed", case("11")["input"]["raw_output"], case("11")["input"]["tools"],
                          {"tool_calls": [("<parameterless_tool>", {})], "finish_reason": "tool_calls"}),
    "c14_arguments_before_name": ("closed", case("14")["input"]["raw_output"], case("14")["input"]["tools"],
                                  {"tool_calls": [("sum", {"n1": 2, "n2": 2})], "finish_reason": "tool_calls"}),
    "c23_preopened_think": ("open", case("23")["input"]["raw_output"], None,
                            {"reasoning": case("23")["expected"]["reasoning_content"],
                             "content": case("23")["expected"]["content"], "finish_reason": "stop"}),
    "c25_thinking_off": ("closed", case("25")["input"]["raw_output"], None,
                         {"content": case("25")["input"]["raw_output"], "reasoning": None}),
    "c26a_split_end_tag": ("neutral", "<think>abcdef</think> answer", None, {"reasoning": "abcdef", "content": " answer"}),
    "c26b_split_end_tag": ("open", "weighing it</think>Answer.", None, {"reasoning": "weighing it", "content": "Answer."}),
    "c29_literal_end_tag_in_answer": ("open", case("29")["input"]["raw_output"], None,
                                      {"reasoning": "figuring it out", "content": "you close the block with </think> when done"}),
    "reasoning_then_long_call": ("neutral", "<think>\nThe user wants weather. 中文 😀\n</think>\n\n<tool_call>\n"
                                 '{"name": "get_weather", "arguments": ' + LONG_ARGS + "}\n</tool_call>", WEATHER,
                                 {"reasoning": "\nThe user wants weather. 中文 😀\n", "content": None,
                                  "tool_calls": [("get_weather", json.loads(LONG_ARGS))], "finish_reason": "tool_calls"}),
    "two_parallel_calls": ("closed", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
                           '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo", "days": 3}}\n</tool_call>', WEATHER,
                           {"tool_calls": [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Tokyo", "days": 3})]}),
    "content_before_call": ("closed", 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
                            WEATHER, {"content": "Checking.\n", "tool_calls": [("get_weather", {"city": "Paris"})]}),
    "tool_markup_without_tools_is_content": ("closed", '<tool_call>\n{"name": "x"}\n</tool_call>', None,
                                             {"content": '<tool_call>\n{"name": "x"}\n</tool_call>', "tool_calls": []}),
    "cjk_emoji_reasoning_and_answer": ("open", "考虑一下 😀🇫🇷</think>\n\n答案是：中文。", None,
                                       {"reasoning": "考虑一下 😀🇫🇷", "content": "\n\n答案是：中文。"}),
}


qwen = client_fixture("qwen3", **QWEN_CFG)
smol = client_fixture("smollm2-135m-instruct")


def _setup(prompt_kind: str, raw: str, tools):
    tok = bundle("qwen3").tokenizer
    prompt = tok.encode(PROMPTS[prompt_kind])
    ids = tok.encode(raw) + [151645]  # <|im_end|>: the EOS the engine stops on
    extra = {"chat_request": {"messages": [], **({"tools": tools} if tools else {})}}
    return prompt, ids, extra


def _check_all_chunkings(client, prompt, ids, extra, chunkings=("token", "all", 1, 2, 3)):
    d = Derender(client, prompt=prompt, extra=extra)
    whole = message_view(d.whole([{"index": 0, "finish_reason": "stop", "stop_reason": None, "token_ids": ids}]))
    for how in chunkings:
        chunks, _ = d.stream(token_chunks(ids, how))
        assert stream_view(chunks) == whole, f"stateless chunking {how!r}"
    piped = d.pipe(token_chunks(ids, "token"), byte_split=7)
    assert piped[-1] == {"done": True}
    assert stream_view(piped[:-1]) == whole, "pipe"
    return whole


@pytest.mark.parametrize("name", sorted(QWEN_CASES))
def test_qwen_cases_stream_equals_whole(qwen, name):
    prompt_kind, raw, tools, expected = QWEN_CASES[name]
    prompt, ids, extra = _setup(prompt_kind, raw, tools)
    whole = _check_all_chunkings(qwen, prompt, ids, extra)
    for key, value in expected.items():
        assert whole[key] == value, (key, whole)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(QWEN_CASES)), seed=st.integers(0, 2**32 - 1))
def test_qwen_random_splits(qwen, name, seed):
    prompt_kind, raw, tools, _ = QWEN_CASES[name]
    prompt, ids, extra = _setup(prompt_kind, raw, tools)
    d = Derender(qwen, prompt=prompt, extra=extra)
    whole = message_view(d.whole([{"index": 0, "finish_reason": "stop", "stop_reason": None, "token_ids": ids}]))
    chunks, _ = d.stream(token_chunks(ids, random.Random(seed).randint(0, 10**9)))
    assert stream_view(chunks) == whole


# -- plain text and stop strings (no parser) ---------------------------------------
PLAIN = "Hello! 中文 and emoji 😀🇫🇷, tabs\tand  double  spaces.\n\nSecond paragraph: ABCDEFGHIJKLMNOP."


@pytest.mark.parametrize("stop,include,expected_content,stop_reason", [
    (None, False, PLAIN, None),
    (["DEFGHIJ"], False, PLAIN[: PLAIN.index("DEFGHIJ")], "DEFGHIJ"),          # case 30 a
    (["DE"], False, PLAIN[: PLAIN.index("DE")], "DE"),                         # case 30 b (mid-token)
    (["DEFGHIJ"], True, PLAIN[: PLAIN.index("DEFGHIJ") + 7], "DEFGHIJ"),
    (["zzz", "GHI", "CDEFG"], False, PLAIN[: PLAIN.index("CDEFG")], "CDEFG"),   # earliest *end* wins
    (["中文 and emoji 😀🇫", "xyz"], False, "Hello! ", "中文 and emoji 😀🇫"),
    (["never there", "ABCDEFGHIJKLMNOPQ"], False, PLAIN, None),                # held back, then flushed at EOS
])
def test_plain_stop_strings(smol, stop, include, expected_content, stop_reason):
    tok = bundle("smollm2-135m-instruct").tokenizer
    ids = tok.encode(PLAIN) + [2]
    extra = {"chat_request": {"messages": [], "stop": stop, "include_stop_str_in_output": include}}
    whole = _check_all_chunkings(smol, tok.encode(USER), ids, extra)
    assert whole["content"] == expected_content
    assert (whole["finish_reason"], whole["stop_reason"]) == ("stop", stop_reason)


def test_stop_string_after_the_stream_ends_with_length(smol):
    tok = bundle("smollm2-135m-instruct").tokenizer
    ids = tok.encode(PLAIN)
    d = Derender(smol, prompt=tok.encode(USER), extra={"chat_request": {"stop": ["PQ-never"]}})
    whole = message_view(d.whole([{"index": 0, "finish_reason": "length", "token_ids": ids}]))
    chunks, _ = d.stream(token_chunks(ids, "token", finish="length"))
    assert stream_view(chunks) == whole == {"content": PLAIN, "reasoning": None, "tool_calls": [],
                                             "finish_reason": "length", "stop_reason": None}


def test_stop_string_then_engine_keeps_going(smol):
    """The engine cannot stop on strings: chunks after the match produce no choices."""
    tok = bundle("smollm2-135m-instruct").tokenizer
    ids = tok.encode("one two three four five six seven")
    d = Derender(smol, prompt=tok.encode(USER), extra={"chat_request": {"stop": [" three"]}})
    chunks, _ = d.stream(token_chunks(ids, "token", finish="length"))
    finished_at = next(i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["finish_reason"])
    assert all(c["choices"] == [] for c in chunks[finished_at + 1:])
    assert stream_view(chunks) == {"content": "one two", "reasoning": None, "tool_calls": [],
                                   "finish_reason": "stop", "stop_reason": " three"}


def test_completions_stream_equals_whole(smol):
    tok = bundle("smollm2-135m-instruct").tokenizer
    ids = tok.encode(PLAIN) + [2]
    d = Derender(smol, prompt=tok.encode("Once upon"), extra={"completion_request": {"stop": ["DEFGHIJ"]}},
                 path="/v1/completions/derender")
    whole = message_view(d.whole([{"index": 0, "finish_reason": "stop", "token_ids": ids}]))
    assert whole == {"content": PLAIN[: PLAIN.index("DEFGHIJ")], "finish_reason": "stop", "stop_reason": "DEFGHIJ"}
    for how in ("token", "all", 5):
        chunks, _ = d.stream(token_chunks(ids, how))
        assert stream_view(chunks) == whole
    assert stream_view(d.pipe(token_chunks(ids, "token"), byte_split=3)[:-1]) == whole


def test_n2_stream_keeps_one_state_per_index(qwen):
    prompt, ids0, extra = _setup("open", "first reasoning</think>first answer", None)
    _, ids1, _ = _setup("open", "second</think>other answer, longer 中文", None)
    d = Derender(qwen, prompt=prompt, extra=extra)
    whole = d.whole([{"index": 0, "finish_reason": "stop", "token_ids": ids0},
                     {"index": 1, "finish_reason": "stop", "token_ids": ids1}])
    # interleave: both choices advance in the same chunks, one token each, then the longer one alone
    chunks = []
    for i in range(max(len(ids0), len(ids1))):
        choices = []
        for idx, ids in ((0, ids0), (1, ids1)):
            if i < len(ids):
                choices.append({"index": idx, "token_ids": [ids[i]], "finish_reason": "stop" if i == len(ids) - 1 else None})
        chunks.append({"choices": choices})
    out, states = d.stream(chunks)
    for idx in (0, 1):
        assert stream_view(out, idx) == message_view(whole, idx)
    assert message_view(whole, 1)["content"] == "other answer, longer 中文"


def test_state_size_does_not_grow_with_streamed_tokens(smol):
    tok = bundle("smollm2-135m-instruct").tokenizer
    words = "The quick brown fox jumps over the lazy dog; 中文 and 😀 too. "
    ids = tok.encode(words * 400)[:5000]
    assert len(ids) == 5000
    d = Derender(smol, prompt=tok.encode(USER), extra={"chat_request": {"stop": ["STOP HERE"]}})
    chunks = [{"choices": [{"index": 0, "token_ids": [t]}]} for t in ids[:10]]
    chunks += [{"choices": [{"index": 0, "token_ids": ids[a:a + 10]}]} for a in range(10, 5000, 10)]
    out, states = d.stream(chunks)
    size = lambda s: len(json.dumps(s))  # noqa: E731
    after_10, after_5000 = size(states[9]), size(states[-1])
    assert abs(after_5000 - after_10) < 64, (after_10, after_5000)
    assert after_5000 < 600
    assert stream_view(out)["content"] == tok.decode(ids)


# -- other families ---------------------------------------------------------------------
GPT_PROMPT = "<|start|>user<|message|>Weather?<|end|><|start|>assistant"
R1_PROMPT = "<｜User｜>Weather?<｜Assistant｜><think>\n"
C15 = case("15")["input"]
R1_CALL = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
           '{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>')

# name -> (model, server flags, prompt, raw output, end ids, finish, tools, chat_request extras, expected)
FAMILY_CASES = {
    "c15a_xml_brace_in_value": ("qwen3", "xml", USER + "<think>\n\n</think>\n\n", C15["raw_output_a"], [151645], "stop",
                                C15["tools"], {}, {"tool_calls": [("get_weather", {"city": "echo '}'"})]}),
    "c15b_two_calls": ("qwen3", "xml", USER + "<think>\n\n</think>\n\n", C15["raw_output_b_two_calls_one_chunk"], [151645],
                       "stop", C15["tools"], {},
                       {"tool_calls": [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Tokyo"})]}),
    "c15c_truncated": ("qwen3", "xml", USER + "<think>\n\n</think>\n\n", C15["raw_output_c_truncated"], [], "length",
                       C15["tools"], {}, {"finish_reason": "length"}),
    # case 22 kind: markers are special tokens; a client asking to skip specials must not break parsing
    "c22_harmony_special_markers": ("gpt-oss", "harmony", GPT_PROMPT,
                                    '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>'
                                    'commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}',
                                    [200012], "stop", WEATHER, {"skip_special_tokens": True},
                                    {"reasoning": "Need weather.", "tool_calls": [("get_weather", {"city": "Paris"})],
                                     "finish_reason": "tool_calls"}),
    "c29_r1_literal_tag_after_end": ("deepseek-r1", "r1", R1_PROMPT, case("29")["input"]["raw_output"], [1], "stop", None, {},
                                     {"reasoning": "figuring it out", "content": "you close the block with </think> when done"}),
    "r1_reasoning_then_call": ("deepseek-r1", "r1", R1_PROMPT, "Need the weather.\n</think>\n\n" + R1_CALL, [1], "stop",
                               WEATHER, {}, {"reasoning": "Need the weather.\n", "tool_calls": [("get_weather", {"city": "Paris"})],
                                             "finish_reason": "tool_calls"}),
}
FAMILY_FLAGS = {
    "xml": dict(reasoning_parser="qwen3", tool_call_parser="qwen3_xml", enable_auto_tool_choice=True),
    "harmony": dict(reasoning_parser="openai_gptoss", tool_call_parser="openai", enable_auto_tool_choice=True),
    "r1": dict(reasoning_parser="deepseek_r1", tool_call_parser="deepseek_v3", enable_auto_tool_choice=True),
}


@pytest.fixture(scope="module")
def family_servers():
    with contextlib.ExitStack() as stack:
        servers = {}

        def get(model: str, flags: str):
            if (model, flags) not in servers:
                url = stack.enter_context(derender_server(model, **FAMILY_FLAGS[flags]))
                servers[model, flags] = stack.enter_context(httpx.Client(base_url=url, timeout=30))
            return servers[model, flags]
        yield get


@pytest.mark.parametrize("name", sorted(FAMILY_CASES))
def test_other_families_stream_equals_whole(family_servers, name):
    model, flags, prompt_text, raw, end, finish, tools, extra, expected = FAMILY_CASES[name]
    tok = bundle(model).tokenizer
    ids = tok.encode(raw) + end
    req = {"chat_request": {"messages": [], **({"tools": tools} if tools else {}), **extra}}
    client = family_servers(model, flags)
    d = Derender(client, prompt=tok.encode(prompt_text), extra=req)
    whole = message_view(d.whole([{"index": 0, "finish_reason": finish, "stop_reason": None, "token_ids": ids}]))
    for how in ("token", "all", 1, 2):
        chunks, _ = d.stream(token_chunks(ids, how, finish=finish))
        assert stream_view(chunks) == whole, how
    for key, value in expected.items():
        assert whole[key] == value, (key, whole)
    for _, args in whole["tool_calls"]:
        assert isinstance(args, dict)  # arguments always parse as a JSON object, even when cut off (15 c)


def test_min_tokens_protects_an_early_stop_string(smol):
    """§3.2 step 4: a match must end after the text of the first ``min_tokens`` tokens."""
    tok = bundle("smollm2-135m-instruct").tokenizer
    ids = tok.encode("STOP one STOP two") + [2]
    first = len(tok.encode("STOP one"))
    assert ids[:first] == tok.encode("STOP one")
    for min_tokens, content in ((0, None), (first, "STOP one ")):
        extra = {"chat_request": {"stop": ["STOP"], "min_tokens": min_tokens}}
        whole = _check_all_chunkings(smol, tok.encode(USER), ids, extra)
        assert (whole["content"], whole["stop_reason"]) == (content, "STOP")
