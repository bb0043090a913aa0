"""The render cases in ../shared/cases (and their neighbours), through a real server."""

from __future__ import annotations

import json

import httpx
import pytest
import tokenizers

from conftest import CASES, MODELS, TEMPLATES, needs_shared, render_server

pytestmark = needs_shared


def _case(n: str) -> dict:
    return json.loads(next(CASES.glob(f"{n}-*.json")).read_text())


def _render(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions/render", json=body, timeout=60)


def _text(model: str, ids: list[int]) -> str:
    tok = tokenizers.Tokenizer.from_file(str(MODELS / model / "tokenizer.json"))
    return tok.decode(ids, skip_special_tokens=False)


def test_case01_json_string_arguments_render_as_an_object():
    case = _case("01")
    template = str(TEMPLATES / "llama-3.1-instruct.jinja")
    with render_server(str(MODELS / "llama-3.1-instruct"), chat_template=template) as url:
        r = _render(url, {**case["input"], "tool_choice": "none", "add_generation_prompt": True})
    assert r.status_code == 200, r.text
    text = _text("llama-3.1-instruct", r.json()["token_ids"])
    assert '"parameters": {"format": "celsius", "location": "San Francisco, CA"}' in text
    assert case["expected"]["rendered_prompt_must_not_contain"] not in text


def test_case01_string_templates_get_json_text_and_malformed_passes_through():
    """DeepSeek-R1 concatenates arguments as text: it must get the JSON string, not a dict repr."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    bad = {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{not json"}}
    body = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [call, bad]},
                         {"role": "tool", "tool_call_id": "c1", "content": "ok"}, {"role": "user", "content": "and?"}]}
    with render_server(str(MODELS / "deepseek-r1")) as url:
        r = _render(url, body)
    assert r.status_code == 200, r.text
    text = _text("deepseek-r1", r.json()["token_ids"])
    assert '```json\n{"x": 1}\n```' in text and "{not json" in text and "{'x': 1}" not in text


@pytest.mark.parametrize("role", ["user", "assistant", "tool"])
def test_case03_text_parts_render_like_a_string(role):
    messages_parts = [{"role": "user", "content": "q"}, {"role": role, "content": [{"type": "text", "text": "hi"}]}]
    messages_str = [{"role": "user", "content": "q"}, {"role": role, "content": "hi"}]
    multi = [{"role": "user", "content": [{"type": "text", "text": "What's in this text?"},
                                          {"type": "text", "text": "Please explain your answer."}]}]
    with render_server(str(MODELS / "qwen2.5-instruct")) as url:
        a, b = _render(url, {"messages": messages_parts}), _render(url, {"messages": messages_str})
        c = _render(url, {"messages": multi})
        d = _render(url, {"messages": [{"role": "user", "content": "What's in this text?\nPlease explain your answer."}]})
    assert a.status_code == b.status_code == 200
    assert a.json()["token_ids"] == b.json()["token_ids"]
    assert c.json()["token_ids"] == d.json()["token_ids"]  # parts joined with "\n" (vLLM's string format)


def test_case03_image_part_is_a_clear_400():
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}
    with render_server(str(MODELS / "qwen2.5-instruct")) as url:
        r = _render(url, body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages.0.content.0.type"


def test_case04_default_is_parity_and_text_mode_keeps_user_text_as_text():
    transformers = pytest.importorskip("transformers", reason="oracle for sanitize_control_tokens")
    case = _case("04")
    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / "qwen3"))
    forged = [{"role": "user", "content": case["input"]["second_example"][0]["content"]}]
    with render_server(str(MODELS / "qwen3")) as url:
        default = _render(url, {"messages": forged}).json()["token_ids"]
    assert default == list(tok.apply_chat_template(forged, add_generation_prompt=True, tokenize=True)["input_ids"])
    with render_server(str(MODELS / "qwen3"), content_special_tokens="text") as url:
        safe = _render(url, {"messages": forged}).json()["token_ids"]
        only = _render(url, {"messages": [{"role": "user", "content": "<|im_end|>"}]}).json()["token_ids"]
        think = _render(url, {"messages": [{"role": "user", "content": "x <think> y </think> <tool_call>"}]}).json()
    oracle = tok.apply_chat_template(forged, add_generation_prompt=True, tokenize=True, sanitize_control_tokens=True)
    assert safe == list(oracle["input_ids"])
    # Exactly one <|im_start|> / <|im_end|> per genuine turn: user + assistant header.
    assert safe.count(151644) == 2 and safe.count(151645) == 1
    expected = case["expected"]["user_content_tokens_for_'<|im_end|>'"]
    assert any(only[i:i + len(expected)] == expected for i in range(len(only)))
    assert not {151667, 151668, 151657} & set(think["token_ids"])  # <think>, </think>, <tool_call> stay text


def test_case05_single_bos_even_with_add_special_tokens():
    case = _case("05")
    with render_server(str(MODELS / "llama-3.1-instruct")) as url:
        plain = _render(url, {"messages": case["input"]["messages"]}).json()["token_ids"]
        added = _render(url, {"messages": case["input"]["messages"], "add_special_tokens": True}).json()["token_ids"]
    prefix = case["expected"]["prompt_token_ids_prefix"]
    for ids in (plain, added):
        assert ids[: len(prefix)] == prefix and ids.count(128000) == 1


def test_case07_tojson_is_not_html_escaped():
    from render_service.model.templates import ChatTemplate

    case = _case("07")
    t = ChatTemplate("{{ '[TOOL_CALLS][{\"name\": \"' + name + '\", \"arguments\": ' + (args|tojson) + '}]' }}")
    out = t.render([], name="get_weather", args={"city": "Paris", "html": "<a>&'"})
    assert case["expected"]["rendered_prompt_must_not_contain"] not in out
    payload = json.loads(out[len("[TOOL_CALLS]"):])
    assert payload == [{"name": "get_weather", "arguments": {"city": "Paris", "html": "<a>&'"}}]
    with render_server(str(MODELS / "qwen3"), chat_template=str(TEMPLATES / "mistral-small-3.2.jinja")) as url:
        r = _render(url, {"messages": case["input"]["messages"] + [{"role": "user", "content": "thanks"}]})
    assert r.status_code in (200, 400)
    if r.status_code == 200:
        assert "&#34;" not in _text("qwen3", r.json()["token_ids"])


def test_case08_raise_exception_is_a_400_with_the_templates_message():
    case = _case("08")
    with render_server(str(MODELS / "qwen3"), chat_template=str(TEMPLATES / "mistral-nemo.jinja")) as url:
        r = _render(url, {"messages": case["input"]["messages"]})
    assert r.status_code == 400
    err = r.json()["error"]
    assert "alternate" in err["message"] and err["type"] == "BadRequestError" and err["code"] == 400


def test_case09_generation_break_and_reject_in_render():
    from render_service.model.templates import ChatTemplate

    for snippet in _case("09")["input"]["templates_snippets"]:
        t = ChatTemplate(snippet)
        out = t.render([{"role": "user", "content": "hello"}], message={"content": "hello"},
                       param_fields={"a": 1, "b": 2}, handled_keys=["a"])
        assert out in ("hello", "", "b")
    assert ChatTemplate(_case("09")["input"]["templates_snippets"][2]).render(
        [], param_fields={"a": 1, "b": 2}, handled_keys=["a"]) == "b"
    assert ChatTemplate("{% generation %}{{ x }}{% endgeneration %}").render([], x="kept") == "kept"


def test_reasoning_ended_follows_the_prompt_cases_23_25():
    """Qwen3's default prompt leaves the model free to think: not ended; enable_thinking false closes it."""
    flags = {"reasoning_parser": "qwen3", "tool_call_parser": "hermes", "enable_auto_tool_choice": True}
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    with render_server(str(MODELS / "qwen3"), **flags) as url:
        default = _render(url, {"messages": msgs}).json()
        off = _render(url, {"messages": msgs, "chat_template_kwargs": {"enable_thinking": False}}).json()
    assert default["reasoning_ended"] is False and off["reasoning_ended"] is True
    assert default["sampling_params"]["skip_special_tokens"] is False  # markers must survive decoding
    assert default["reasoning_parser_kwargs"]["chat_template_kwargs"]["add_generation_prompt"] is True


@pytest.mark.parametrize("template", ["deepseek-v3", "deepseek-r1-distill", "qwen3"])
def test_null_content_tool_call_turn_keeps_its_calls(template):
    """OpenAI's `content: null` tool-call turn: templates that test `content is none` must still
    write the calls, and templates that read content as text must not fail."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "cold"}, {"role": "user", "content": "thanks"}]
    with render_server(str(MODELS / "deepseek-r1"), chat_template=str(TEMPLATES / f"{template}.jinja")) as url:
        r = _render(url, {"messages": messages})
    assert r.status_code == 200, r.text
    text = _text("deepseek-r1", r.json()["token_ids"])
    assert "get_weather" in text and "Oslo" in text
