"""Request bounds and types that every front door shares (tester2 items 3-5): one real render
server on loopback, every front door (chat, completions, Responses, Anthropic Messages).

- the hardening limits (stop strings, ``logit_bias`` ids, pass-through nesting) hold at
  render as they do at derender (`render_service.wire.limits`);
- one request cannot carry unbounded work: prompts per completions batch, their total
  length, messages / input items per conversation;
- a body vLLM 0.33's JSON Schemas refuse (a typed field with a value of another type) is a
  400 here too, for every typed scalar field of the four request schemas and the chat
  message fields.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx
import pytest

from conftest import SHARED, render_server
from render_service.wire import limits

CHAT = "/v1/chat/completions/render"
COMPLETIONS = "/v1/completions/render"
RESPONSES = "/v1/responses/render"
MESSAGES = "/v1/messages/render"
SCHEMAS = SHARED / "design" / "vllm-0.33-schemas"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with render_server() as base:
        yield base


@pytest.fixture(scope="module")
def model(url) -> str:
    return httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]


def base_body(route: str, model: str) -> dict[str, Any]:
    """The smallest valid body of each front door."""
    return {
        CHAT: {"messages": [{"role": "user", "content": "hi"}]},
        COMPLETIONS: {"prompt": "hi"},
        RESPONSES: {"input": "hi"},
        MESSAGES: {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
    }[route]


def post(url: str, route: str, body: dict) -> httpx.Response:
    return httpx.post(url + route, json=body, timeout=60)


def error_of(r: httpx.Response) -> dict:
    """The error object of an OpenAI or an Anthropic error body."""
    return r.json()["error"]


def nested(levels: int) -> dict:
    """``levels`` objects, one inside the other, a number at the bottom."""
    obj: Any = 1
    for _ in range(levels):
        obj = {"a": obj}
    return obj


# -- item 3: derender's limits hold at render, on every front door -----------------------

STOP_FIELD = {CHAT: "stop", COMPLETIONS: "stop", RESPONSES: "stop", MESSAGES: "stop_sequences"}


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS, RESPONSES, MESSAGES])
@pytest.mark.parametrize("stops", [["s%d" % i for i in range(limits.MAX_STOP_STRINGS + 1)],
                                   ["x" * (limits.MAX_STOP_CHARS + 1)]], ids=["65-strings", "1001-chars"])
def test_stop_strings_past_the_limits_are_400_at_render(url, model, route, stops):
    field = STOP_FIELD[route]
    r = post(url, route, {**base_body(route, model), field: stops})
    assert r.status_code == 400, r.text[:300]
    assert "stop" in error_of(r)["message"].lower()
    within = ["x" * limits.MAX_STOP_CHARS] if len(stops) == 1 else stops[: 4 if route == MESSAGES else 64]
    ok = post(url, route, {**base_body(route, model), field: within})
    assert ok.status_code == 200, ok.text[:300]


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS, RESPONSES])
@pytest.mark.parametrize("bias", [{"18446744073709551616": 1e300}, {"-5": 3}, {"abc": 1}, {"49152": 1}],
                         ids=["past-2^31", "negative", "not-an-id", "past-vocab"])
def test_logit_bias_keys_outside_the_vocabulary_are_400(url, model, route, bias):
    r = post(url, route, {**base_body(route, model), "logit_bias": bias})
    assert r.status_code == 400, r.text[:300]
    assert error_of(r)["param"] == "logit_bias", r.text[:300]


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS, RESPONSES])
def test_logit_bias_values_are_clamped_as_vllm_does(url, model, route):
    r = post(url, route, {**base_body(route, model), "logit_bias": {"5": 1e300, "+7": -1e300, " 9": 3}})
    assert r.status_code == 200, r.text[:300]
    gen = r.json()[0] if route == COMPLETIONS else r.json()
    assert gen["sampling_params"]["logit_bias"] == {"5": 100.0, "7": -100.0, "9": 3.0}


PASS_THROUGH = [(CHAT, "kv_transfer_params"), (COMPLETIONS, "kv_transfer_params"), (RESPONSES, "kv_transfer_params"),
                (MESSAGES, "kv_transfer_params"), (CHAT, "vllm_xargs"), (RESPONSES, "vllm_xargs"),
                (MESSAGES, "metadata"), (CHAT, "chat_template_kwargs"), (COMPLETIONS, "ec_transfer_params")]


@pytest.mark.parametrize("route,field", PASS_THROUGH)
@pytest.mark.parametrize("levels", [limits.MAX_NESTING + 1, 500, 900])
def test_pass_through_objects_nested_past_the_cap_are_400_with_a_clear_message(url, model, route, field, levels):
    r = post(url, route, {**base_body(route, model), field: nested(levels)})
    assert r.status_code == 400, r.text[:300]
    message = error_of(r)["message"]
    assert f"nested deeper than {limits.MAX_NESTING} levels" in message and "Recursion" not in message, message
    ok = post(url, route, {**base_body(route, model), field: nested(limits.MAX_NESTING)})
    assert ok.status_code == 200, ok.text[:300]


@pytest.mark.parametrize("route,body", [
    (CHAT, {"tools": [{"type": "function", "function": {"name": "f", "parameters": nested(600)}}]}),
    (RESPONSES, {"tools": [{"type": "function", "name": "f", "parameters": nested(600)}]}),
    (CHAT, {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": nested(600)}}}),
])
def test_deep_schemas_are_400_not_a_serialiser_error(url, model, route, body):
    r = post(url, route, {**base_body(route, model), **body})
    assert r.status_code == 400, r.text[:300]
    assert "nested deeper" in error_of(r)["message"], r.text[:300]


@pytest.mark.parametrize("body", [
    {"chat_request": {"messages": [], "tools": [{"type": "function", "function": {"name": "f", "parameters": nested(600)}}]}},
    {"chat_request": {"messages": [], "chat_template_kwargs": nested(600)}},
    {"parse_context": {"tools": [{"type": "function", "function": {"name": "f", "parameters": nested(600)}}]}},
], ids=["chat_request.tools", "chat_request.chat_template_kwargs", "parse_context.tools"])
def test_derender_request_objects_nested_past_the_cap_are_400(url, body):
    gen = {"choices": [{"index": 0, "token_ids": [28], "finish_reason": "stop"}]}
    r = post(url, "/v1/chat/completions/derender", {"generate_response": gen, "prompt_token_ids": [1], **body})
    assert r.status_code == 400 and "nested deeper" in error_of(r)["message"], r.text[:300]


# -- item 4: work per request is bounded ------------------------------------------------

def test_completions_batch_past_the_prompt_count_is_400(url):
    r = post(url, COMPLETIONS, {"prompt": ["hello world"] * (limits.MAX_BATCH_PROMPTS + 1)})
    assert r.status_code == 400 and error_of(r)["param"] == "prompt", r.text[:300]
    assert str(limits.MAX_BATCH_PROMPTS) in error_of(r)["message"]
    tokens = post(url, COMPLETIONS, {"prompt": [[28, 29]] * (limits.MAX_BATCH_PROMPTS + 1)})
    assert tokens.status_code == 400 and error_of(tokens)["param"] == "prompt", tokens.text[:300]
    ok = post(url, COMPLETIONS, {"prompt": ["hello world"] * limits.MAX_BATCH_PROMPTS, "max_tokens": 1})
    assert ok.status_code == 200 and len(ok.json()) == limits.MAX_BATCH_PROMPTS, ok.text[:300]


def test_completions_batch_past_the_total_length_is_400(url):
    each = limits.MAX_BATCH_PROMPT_LENGTH // limits.MAX_BATCH_PROMPTS + 2  # each prompt well within the context
    r = post(url, COMPLETIONS, {"prompt": ["a " * (each // 2)] * limits.MAX_BATCH_PROMPTS})
    assert r.status_code == 400 and error_of(r)["param"] == "prompt", r.text[:300]
    assert str(limits.MAX_BATCH_PROMPT_LENGTH) in error_of(r)["message"]


def test_completions_derender_takes_no_more_responses_than_render_makes_prompts(url):
    gen = {"choices": [{"index": 0, "token_ids": [28], "finish_reason": "stop"}]}
    r = post(url, "/v1/completions/derender", {"generate_responses": [gen] * (limits.MAX_BATCH_PROMPTS + 1)})
    assert r.status_code == 400 and error_of(r)["param"] == "generate_responses", r.text[:300]
    ok = post(url, "/v1/completions/derender", {"generate_responses": [gen] * limits.MAX_BATCH_PROMPTS})
    assert ok.status_code == 200 and len(ok.json()["choices"]) == limits.MAX_BATCH_PROMPTS, ok.text[:300]


def test_batch_bounds_follow_the_serve_flags():
    import argparse

    from render_service.serve.cli import add_serve_parser
    from render_service.serve.flags import serve_config

    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers(dest="command"))
    config = serve_config(parser.parse_args(["serve", "--max-batch-prompts", "2", "--max-batch-prompt-length", "12"]))
    assert (config.max_batch_prompts, config.max_batch_prompt_length) == (2, 12)
    with render_server(max_batch_prompts=config.max_batch_prompts,
                       max_batch_prompt_length=config.max_batch_prompt_length) as small:
        assert post(small, COMPLETIONS, {"prompt": ["hi", "ho"]}).status_code == 200
        three = post(small, COMPLETIONS, {"prompt": ["hi", "ho", "ha"]})
        assert three.status_code == 400 and "--max-batch-prompts" in error_of(three)["message"], three.text[:300]
        long = post(small, COMPLETIONS, {"prompt": [[28] * 7, [29] * 6]})
        assert long.status_code == 400 and "--max-batch-prompt-length" in error_of(long)["message"], long.text[:300]


@pytest.mark.parametrize("route,field,item", [
    (CHAT, "messages", {"role": "user", "content": "hi"}),
    (RESPONSES, "input", {"role": "user", "content": "hi"}),
    (MESSAGES, "messages", {"role": "user", "content": "hi"}),
])
def test_conversations_past_the_message_count_are_400(url, model, route, field, item):
    r = post(url, route, {**base_body(route, model), field: [item] * (limits.MAX_MESSAGES + 1)})
    assert r.status_code == 400, r.text[:300]
    # refused by the bound before any template work (not by the context length, later)
    assert f"at most {limits.MAX_MESSAGES} items" in error_of(r)["message"], r.text[:300]


# -- item 5: what vLLM 0.33's schemas refuse is refused here ----------------------------

needs_schemas = pytest.mark.skipif(not SCHEMAS.is_dir(), reason="../shared vLLM 0.33 schemas not present")
SCHEMA_ROUTES = {"ChatCompletionRequest": CHAT, "CompletionRequest": COMPLETIONS, "ResponsesRequest": RESPONSES,
                 "AnthropicMessagesRequest": MESSAGES}
# Values of another type that vLLM's pydantic models refuse in their (lax) mode too:
# no number becomes a string, "x" is no number or boolean, 1.5 no integer.
WRONG = {"string": [5, {}], "integer": ["x", 1.5, {}], "number": ["x", {}], "boolean": ["x", {}]}


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.json").read_text())


def _scalar_types(node: dict, root: dict) -> set | None:
    """The scalar types a schema node allows (("enum", values) for an enum), None if it
    allows anything not scalar."""
    if "$ref" in node:
        return _scalar_types(root["$defs"][node["$ref"].rsplit("/", 1)[-1]], root)
    if "anyOf" in node:
        out: set = set()
        for branch in node["anyOf"]:
            types = _scalar_types(branch, root)
            if types is None:
                return None
            out |= types
        return out
    if "enum" in node or "const" in node:
        return {("enum", tuple(node.get("enum", [node.get("const")])))}
    return {node["type"]} if node.get("type") in ("string", "integer", "number", "boolean", "null") else None


def _fits(value: Any, kind: Any) -> bool:
    if isinstance(kind, tuple):
        return value in kind[1]
    return {"string": isinstance(value, str), "null": value is None, "boolean": isinstance(value, bool),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, (int, float)) and not isinstance(value, bool)}[kind]


def wrong_values(node: dict, root: dict) -> list:
    """Values of the wrong type for a scalar field (none for a field that is not scalar)."""
    types = _scalar_types(node, root)
    if not types:
        return []
    values = [v for kind in types - {"null"} for v in (["not-one-of-them"] if isinstance(kind, tuple) else WRONG[kind])]
    return [v for v in values if not any(_fits(v, kind) for kind in types)]


def _top_level_cases() -> list:
    if not SCHEMAS.is_dir():
        return []
    cases = []
    for name in SCHEMA_ROUTES:
        schema = _schema(name)
        for field, node in schema["properties"].items():
            for value in wrong_values(node, schema):
                cases.append(pytest.param(name, {field: value}, id=f"{name}.{field}={value!r}"))
    return cases


def refuses(body: dict, name: str) -> bool:
    """Whether vLLM's schema ``name`` refuses ``body``."""
    import jsonschema

    return not jsonschema.Draft202012Validator(_schema(name)).is_valid(body)


USER = {"role": "user", "content": "hi"}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
# Objects inside a body: (schema, the fields of a valid body that hold one, where it sits,
# the schema definition that types it). Each typed scalar field of the definition gets a
# wrong value; cases the schema still accepts (another union branch takes them) are dropped.
NESTED = [
    ("ChatCompletionRequest", {"messages": [USER]}, ("messages", 0), "ChatCompletionUserMessageParam"),
    ("ChatCompletionRequest", {"messages": [{"role": "system", "content": "hi"}]}, ("messages", 0),
     "ChatCompletionSystemMessageParam"),
    ("ChatCompletionRequest", {"messages": [{"role": "developer", "content": "hi"}]}, ("messages", 0),
     "ChatCompletionDeveloperMessageParam"),
    ("ChatCompletionRequest", {"messages": [USER, {"role": "assistant", "content": "hi"}]}, ("messages", 1),
     "ChatCompletionAssistantMessageParam"),
    ("ChatCompletionRequest", {"messages": [USER, {"role": "tool", "content": "hi", "tool_call_id": "c1"}]},
     ("messages", 1), "ChatCompletionToolMessageParam"),
    ("ChatCompletionRequest", {"messages": [USER, {"role": "assistant", "content": None, "tool_calls": [CALL]}]},
     ("messages", 1, "tool_calls", 0, "function"), "Function"),
    ("ChatCompletionRequest", {"messages": [USER], "tools": [{"type": "function", "function": {"name": "f"}}]},
     ("tools", 0), "ChatCompletionToolsParam"),
    ("ChatCompletionRequest", {"messages": [USER], "tools": [{"type": "function", "function": {"name": "f"}}]},
     ("tools", 0, "function"), "vllm__entrypoints__generate__base__protocol__FunctionDefinition"),
    ("ChatCompletionRequest", {"messages": [USER], "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}, ("response_format", "json_schema"),
     "JsonSchemaResponseFormat"),
    ("ResponsesRequest", {"input": [{"type": "message", "role": "user", "content": "hi"}]}, ("input", 0),
     "EasyInputMessageParam"),
    ("ResponsesRequest", {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]},
     ("input", 0), "ResponseFunctionToolCallParam"),
    ("ResponsesRequest", {"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
     ("input", 0), "FunctionCallOutput"),
    ("ResponsesRequest", {"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {}}]},
     ("tools", 0), "FunctionTool"),
    ("AnthropicMessagesRequest", {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
     ("messages", 0, "content", 0), "AnthropicContentBlock"),
    ("AnthropicMessagesRequest", {"messages": [USER], "tools": [{"name": "f", "input_schema": {"type": "object"}}]},
     ("tools", 0), "AnthropicTool"),
    ("AnthropicMessagesRequest", {"messages": [USER], "tool_choice": {"type": "auto"}}, ("tool_choice",),
     "AnthropicToolChoice"),
    ("AnthropicMessagesRequest", {"messages": [USER], "max_tokens": 2048,
                                  "thinking": {"type": "enabled", "budget_tokens": 1024}}, ("thinking",),
     "AnthropicThinkingConfigEnabled"),
]
MODEL = "model-name"  # replaced by the served name in the test


def _nested_cases() -> list:
    if not SCHEMAS.is_dir():
        return []
    import copy

    cases = []
    for name, fields, where, definition in NESTED:
        schema = _schema(name)
        base = {**base_body(SCHEMA_ROUTES[name], MODEL), **fields}
        for field, node in schema["$defs"][definition]["properties"].items():
            for value in wrong_values(node, schema):
                if field == "arguments" and isinstance(value, dict):
                    continue  # an object is our documented extension (render.messages)
                body = copy.deepcopy(base)
                target = body
                for step in where:
                    target = target[step]
                target[field] = value
                if refuses(body, name):
                    path = ".".join(map(str, where))
                    cases.append(pytest.param(name, body, id=f"{name}.{path}.{field}={value!r}"))
    return cases


NAMED_CASES = [  # the tester's examples, by name
    pytest.param("ResponsesRequest", {"include": ["bogus"]}, id="responses-include"),
    pytest.param("ResponsesRequest", {"metadata": {"a": {"b": 1}}}, id="responses-metadata"),
    pytest.param("ResponsesRequest", {"service_tier": "bogus"}, id="responses-service_tier"),
    pytest.param("ChatCompletionRequest", {"user": 5}, id="chat-user"),
    pytest.param("ChatCompletionRequest", {"messages": [{"role": "user", "content": "hi", "name": 5}]}, id="chat-name"),
    pytest.param("ChatCompletionRequest", {"messages": [{"role": "user", "content": "hi"}, {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": 5}}]}]}, id="chat-arguments"),
]


@needs_schemas
@pytest.mark.parametrize("schema_name,change", NAMED_CASES + _top_level_cases() + _nested_cases())
def test_bodies_vllm_schemas_refuse_are_400(url, model, schema_name, change):
    import jsonschema

    route = SCHEMA_ROUTES[schema_name]
    validator = jsonschema.Draft202012Validator(_schema(schema_name))
    base = base_body(route, model)
    assert validator.is_valid(base), "the base body must be valid for vLLM"
    body = {**base, **change}
    if body.get("model") == MODEL:
        body["model"] = model
    assert not validator.is_valid(body), "vLLM's schema accepts this body: not a case"
    r = post(url, route, body)
    assert r.status_code == 400, f"vLLM refuses, we answered {r.status_code}: {r.text[:300]}"


@needs_schemas
def test_the_schema_cases_cover_every_typed_scalar_field():
    """The generator above must keep finding fields (a schema change that hid them would
    otherwise leave the test above passing with nothing to check)."""
    assert len(_top_level_cases()) > 150 and len(_nested_cases()) > 40


# -- the driver's front doors go through the same models --------------------------------

@pytest.fixture(scope="module")
def driver_url() -> Iterator[str]:
    """`drive` with in-process render and engines that do not exist: every answer here must
    come from validation, before any hop."""
    from conftest import free_port, serve_app
    from render_service.config.serve import ServeConfig
    from render_service.driver.app import create_app
    from render_service.driver.config import DriverConfig
    from render_service.driver.flow import Driver
    from render_service.serve.server import load_bundle

    cfg = ServeConfig()
    nowhere = f"http://127.0.0.1:{free_port()}"
    config = DriverConfig(prefill=(nowhere,), decode=(nowhere,), serve=cfg)
    with serve_app(create_app(Driver(config, load_bundle(cfg)))) as base:
        yield base


DRIVE = {CHAT: "/v1/chat/completions", COMPLETIONS: "/v1/completions", RESPONSES: "/v1/responses",
         MESSAGES: "/v1/messages"}


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS, RESPONSES, MESSAGES])
@pytest.mark.parametrize("change", [
    pytest.param(lambda route: {"kv_transfer_params": nested(500)}, id="deep-kv_transfer_params"),
    pytest.param(lambda route: {STOP_FIELD[route]: ["x" * (limits.MAX_STOP_CHARS + 1)]}, id="long-stop"),
])
def test_driver_front_doors_refuse_the_same_bodies(driver_url, model, route, change):
    r = post(driver_url, DRIVE[route], {**base_body(route, model), **change(route)})
    assert r.status_code == 400, r.text[:300]
    assert "Recursion" not in r.text


@pytest.fixture(scope="module")
def padded_model(tmp_path_factory) -> Iterator[tuple[str, int, int]]:
    """A render server on the default model's tokenizer with a config.json whose
    ``vocab_size`` is padded past it (as Qwen3's 151,936 rows for 151,669 tokens):
    ``(url, tokenizer's vocabulary, config.json's)``."""
    from render_service.model import load_model

    default = load_model(None)
    hf = default.tokenizer.hf
    tokens = hf.get_vocab_size(with_added_tokens=True)
    folder = tmp_path_factory.mktemp("padded")
    (folder / "chat_template.jinja").write_text(default.template_source)
    hf.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    (folder / "config.json").write_text(json.dumps({"vocab_size": tokens + 64, "max_position_embeddings": 2048}))
    with render_server(str(folder)) as base:
        yield base, tokens, tokens + 64


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("field", ["logit_bias", "allowed_token_ids"])
def test_token_ids_are_checked_against_the_models_vocab_size(padded_model, route, field):
    """vLLM's engine bounds ``logit_bias`` and ``allowed_token_ids`` by config.json's
    ``vocab_size`` (the model's logit rows), not the tokenizer's count: an id in the padding
    passes, one past it is a 400 (``allowed_token_ids`` passed render unchecked), and an
    empty ``allowed_token_ids`` (nothing to sample) is a 400 as at vLLM's engine."""
    url, tokens, rows = padded_model
    body = base_body(route, "")

    def value(i: int):
        return {str(i): 1} if field == "logit_bias" else [i]

    ok = post(url, route, {**body, field: value(tokens + 5)})
    assert ok.status_code == 200, ok.text[:300]
    for bad in (rows, -1) if field == "logit_bias" else (rows,):
        r = post(url, route, {**body, field: value(bad)})
        assert r.status_code == 400 and error_of(r)["param"] == field, r.text[:300]
        assert f"[0, {rows})" in error_of(r)["message"] or "-1" in error_of(r)["message"], r.text[:300]
    if field == "allowed_token_ids":
        r = post(url, route, {**body, field: []})
        assert r.status_code == 400 and error_of(r)["param"] == field, r.text[:300]
