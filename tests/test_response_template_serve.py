"""The ``hf``/``beam`` parsers through a real server: the checkpoint's ``response_template``
(``tokenizer_config.json``) flows from the model bundle into render's
``starts_in_reasoning``, derender's parser and ``auto`` detection; a model without it is
refused at start-up; and no parser name can turn a derender request into a 5xx."""

from __future__ import annotations

import itertools
import json
import shutil

import httpx
import pytest

from conftest import MODELS, needs_shared, serve_app
from parsers_fixtures.families import RT_QWEN, family_markers

pytestmark = needs_shared

CHAT = "/v1/chat/completions/derender"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
CALL_TEXT = ('<think>\nUser asks for Paris weather.\n</think>\n\n'
             '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>')


@pytest.fixture(scope="module")
def rt_model(tmp_path_factory) -> str:
    """A copy of the qwen3 tokenizer dir whose tokenizer_config.json carries a Qwen3
    response_template (the shape of transformers' own chat_parsing templates)."""
    path = tmp_path_factory.mktemp("qwen3-rt") / "qwen3"
    shutil.copytree(MODELS / "qwen3", path)
    cfg_path = path / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["response_template"] = RT_QWEN
    cfg_path.write_text(json.dumps(cfg))
    return str(path)


@pytest.fixture(scope="module")
def rt_bundle(rt_model):
    from render_service.model import load_model

    return load_model(rt_model)


def _server(bundle, model: str, **flags):
    """A real server on loopback for ``bundle`` after start-up's parser checks."""
    from render_service.config.serve import ServeConfig
    from render_service.http.app import create_app
    from render_service.serve.server import resolve_parsers

    config = resolve_parsers(ServeConfig(model=model, **flags), bundle)
    return serve_app(create_app(bundle, config)), config


def test_bundle_reads_response_template(rt_bundle):
    from render_service.model import load_model

    assert rt_bundle.response_template == RT_QWEN
    assert load_model(str(MODELS / "qwen3")).response_template is None


@pytest.mark.parametrize("flags", [dict(reasoning_parser="hf", tool_call_parser="hf"),
                                   dict(reasoning_parser="auto", tool_call_parser="auto"),
                                   dict(reasoning_parser="beam", tool_call_parser="beam")])
def test_hf_render_then_derender_through_a_real_server(rt_bundle, rt_model, flags):
    served, config = _server(rt_bundle, rt_model, enable_auto_tool_choice=True, **flags)
    assert config.reasoning_parser in ("hf", "beam") and config.tool_call_parser in ("hf", "beam")
    tok = rt_bundle.tokenizer
    with served as url, httpx.Client(base_url=url, timeout=30) as c:
        r = c.post("/v1/chat/completions/render", json={"model": rt_model, "messages": MESSAGES, "tools": TOOLS})
        assert r.status_code == 200, r.text
        gen = r.json()
        # qwen3's template leaves the generation prompt outside <think>: the template's region is not open
        assert gen["parse_context"]["starts_in_reasoning"] is False
        ids = tok.encode(CALL_TEXT) + [151645]
        choice = {"index": 0, "finish_reason": "stop", "stop_reason": None, "token_ids": ids}
        for extra in ({"parse_context": gen["parse_context"]},
                      {"chat_request": {"model": "x", "messages": MESSAGES, "tools": TOOLS}}):
            body = {"generate_response": {"request_id": "generate-tokens-chatcmpl-t", "choices": [choice]},
                    "prompt_token_ids": gen["token_ids"], **extra}
            r = c.post(CHAT, json=body)
            assert r.status_code == 200, r.text
            ch = r.json()["choices"][0]
            m = ch["message"]
            assert m["reasoning"] == "\nUser asks for Paris weather.\n"
            (call,) = m["tool_calls"]
            assert call["function"]["name"] == "get_weather"
            assert json.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 2}
            assert ch["finish_reason"] == "tool_calls"
        # streamed, token by token, the same split
        state, reasoning, args = None, "", ""
        for i, t in enumerate(ids):
            last = i == len(ids) - 1
            body = {"stream": True, "stream_state": state, "prompt_token_ids": gen["token_ids"],
                    "parse_context": gen["parse_context"],
                    "generate_chunk": {"request_id": "generate-tokens-chatcmpl-t", "choices": [
                        {"index": 0, "finish_reason": "stop" if last else None, "stop_reason": None,
                         "token_ids": [t]}]}}
            r = c.post(CHAT, json=body)
            assert r.status_code == 200, r.text
            data = r.json()
            state = data["stream_state"]
            for ch in data["chunk"]["choices"] if data["chunk"] else []:
                reasoning += ch["delta"].get("reasoning") or ""
                for tc in ch["delta"].get("tool_calls") or []:
                    args += tc["function"].get("arguments") or ""
        assert reasoning == "\nUser asks for Paris weather.\n"
        assert json.loads(args) == {"city": "Paris", "days": 2}


def test_prompt_open_in_the_thinking_region_starts_in_reasoning(rt_bundle, rt_model):
    """A prompt that ends inside the template's ``thinking`` region (Qwen3-2507 style
    pre-opened ``<think>``): render says so, and derender judges the same from prompt ids."""
    served, _ = _server(rt_bundle, rt_model, reasoning_parser="hf")
    tok = rt_bundle.tokenizer
    prompt = tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n")
    ids = tok.encode("deep thought\n</think>\n\nThe answer.") + [151645]
    with served as url, httpx.Client(base_url=url, timeout=30) as c:
        body = {"generate_response": {"request_id": "generate-tokens-chatcmpl-t", "choices": [
            {"index": 0, "finish_reason": "stop", "stop_reason": None, "token_ids": ids}]},
            "prompt_token_ids": prompt, "chat_request": {"model": "x", "messages": MESSAGES}}
        r = c.post(CHAT, json=body)
        assert r.status_code == 200, r.text
        m = r.json()["choices"][0]["message"]
        assert (m["reasoning"], m["content"]) == ("deep thought\n", "\n\nThe answer.")


@pytest.mark.parametrize("flags", [dict(tool_call_parser="hf", enable_auto_tool_choice=True),
                                   dict(reasoning_parser="hf"), dict(reasoning_parser="beam")])
def test_hf_without_response_template_is_refused_at_startup(flags):
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import StartupError, build_app

    with pytest.raises(StartupError, match="response_template"):
        build_app(ServeConfig(model=str(MODELS / "qwen3"), **flags))


def test_hf_with_a_template_lacking_the_field_is_refused_at_startup(tmp_path):
    from render_service.model import load_model
    from render_service.serve.server import StartupError

    path = tmp_path / "qwen3"
    shutil.copytree(MODELS / "qwen3", path)
    cfg = json.loads((path / "tokenizer_config.json").read_text())
    cfg["response_template"] = {"version": 1, "start_anchor": "<|im_start|>assistant\n",
                                "fields": {"thinking": {"open": "<think>", "close": "</think>"}, "content": {}}}
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    bundle = load_model(str(path))
    _server(bundle, str(path), reasoning_parser="hf")  # thinking alone serves reasoning
    with pytest.raises(StartupError, match="tool_calls"):
        _server(bundle, str(path), tool_call_parser="hf", enable_auto_tool_choice=True)


# -- no parser name can produce a 5xx ---------------------------------------------------
def _outputs(tok, reasoning: str | None, tool: str | None) -> list[tuple[list[int], str]]:
    """Output texts that poke at the family's own markers: whole, cut off, and marker soup."""
    from parsers.api import ParserSpec

    markers = family_markers(ParserSpec(reasoning=reasoning, tool=tool))
    call = '{"name": "get_weather", "arguments": {"city": "Par'
    soup = "".join(f"{m}{call}" for m in markers)
    texts = [("plain answer", "stop"), (CALL_TEXT, "stop"), (CALL_TEXT[:-30], "length"),
             (soup, "length"), (soup + "".join(reversed(markers)), "stop"),
             ("".join(markers) + "get_weather(city='Paris')" + "".join(markers), "stop")]
    return [(tok.encode(t), finish) for t, finish in texts]


def test_no_parser_name_gives_a_5xx(rt_bundle, rt_model):
    """Every name in both registries, paired, behind a real server: every derender request,
    whole and streamed, with each tool_choice, is a 200 or a 4xx."""
    from parsers.api import reasoning_parser_names, tool_parser_names

    reasonings, tools = reasoning_parser_names(), tool_parser_names()
    assert "hf" in reasonings and "hf" in tools
    tok = rt_bundle.tokenizer
    prompt = tok.encode("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    failures = []
    for reasoning, tool in itertools.zip_longest(reasonings, tools):
        served, _ = _server(rt_bundle, rt_model, reasoning_parser=reasoning, tool_call_parser=tool,
                            enable_auto_tool_choice=tool is not None)
        with served as url, httpx.Client(base_url=url, timeout=30) as c:
            for (ids, finish), choice in itertools.product(
                    _outputs(tok, reasoning, tool),
                    ["auto", "required", "none", {"type": "function", "function": {"name": "get_weather"}}]):
                ctx = {"tools": TOOLS, "tool_choice": choice}
                whole = {"generate_response": {"request_id": "generate-tokens-chatcmpl-t", "choices": [
                    {"index": 0, "finish_reason": finish, "stop_reason": None, "token_ids": ids}]},
                    "prompt_token_ids": prompt, "parse_context": ctx}
                r = c.post(CHAT, json=whole)
                if r.status_code >= 500:
                    failures.append((reasoning, tool, choice, "whole", r.status_code, r.text[:200]))
                state, half = None, len(ids) // 2
                for part, last in ((ids[:half], False), (ids[half:], True)):
                    body = {"stream": True, "stream_state": state, "prompt_token_ids": prompt, "parse_context": ctx,
                            "generate_chunk": {"request_id": "generate-tokens-chatcmpl-t", "choices": [
                                {"index": 0, "finish_reason": finish if last else None, "stop_reason": None,
                                 "token_ids": part}]}}
                    r = c.post(CHAT, json=body)
                    if r.status_code >= 500:
                        failures.append((reasoning, tool, choice, "stream", r.status_code, r.text[:200]))
                        break
                    if r.status_code != 200:
                        break
                    state = r.json()["stream_state"]
    assert not failures, failures[:10]
