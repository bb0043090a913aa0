"""Responses and Anthropic Messages render on a real server, against vLLM 0.33's answers.

The corpus (tests/fixtures/vllm/responses_messages/cases.json) was sent to vLLM 0.33's
``vllm launch render`` with the Qwen3 tokenizer and hermes/qwen3 parsers (record.py says
how to re-record); each body goes to our ``/v1/responses/render`` or
``/v1/messages/render`` over HTTP. Asserted: the same status; on 200 the same
``token_ids`` and the same value of every field the front doors decide (``FIELDS``,
``SAMPLING``). Not asserted — they belong to the chat path both doors share and are listed
in the README's deliberate differences or are vLLM quirks: neutral sampling values that
vLLM 0.33 writes out (``presence_penalty: 0.0``…), EOS ids in ``stop_token_ids``, the
``cohere_format`` template kwarg vLLM leaks into every request, the shape of
``structured_outputs`` and the tool-call grammar vLLM adds for ``required``/named tools.
"""

from __future__ import annotations

import json
import sys

import httpx
import pytest

from conftest import MODELS, REPO, fixture_module, needs_shared, render_server, vllm_differences

pytestmark = needs_shared

FIXTURES = REPO / "tests" / "fixtures" / "vllm" / "responses_messages"
_record = fixture_module("vllm/responses_messages/record.py")
PATHS, expand = _record.PATHS, _record.expand

CORPUS = json.loads((FIXTURES / "cases.json").read_text())
RECORDED = json.loads((FIXTURES / "recorded.json").read_text())["results"]
FIELDS = ("request_id", "reasoning_ended", "stream", "stream_options", "cache_salt", "priority",
          "kv_transfer_params", "ec_transfer_params", "return_token_ids", "output_mode", "features")
SAMPLING = ("temperature", "top_p", "top_k", "seed", "stop", "max_tokens", "ignore_eos", "include_stop_str_in_output",
            "skip_special_tokens", "output_kind", "logprobs", "extra_args", "thinking_token_budget", "bad_words",
            "skip_reading_prefix_cache")

# Cases where we still differ from vLLM, with the reason (the one list: fixtures/vllm/differences.py,
# keys ("front-door", case name)); strict xfails, so a fix shows up as a failure to remove the entry.
KNOWN: dict[str, str] = {case: reason for (where, case), reason in vllm_differences().KNOWN_GAPS.items()
                         if where == "front-door"}


@pytest.fixture(scope="module")
def server():
    with render_server(str(MODELS / "qwen3"), reasoning_parser="qwen3", tool_call_parser="hermes",
                       enable_auto_tool_choice=True) as url:
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        yield url, model


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.xfail(reason=KNOWN[c["name"]], strict=True))
                                  if c["name"] in KNOWN else c for c in CORPUS["cases"]], ids=lambda c: c["name"])
def test_render_matches_vllm(server, case):
    url, model = server
    want = RECORDED[case["name"]]
    body = expand(CORPUS, case, model)
    headers = {"content-type": case.get("content_type", "application/json")}
    if case["route"] == "messages":
        headers["x-request-id"] = case["name"]
    r = httpx.post(url + PATHS[case["route"]], content=json.dumps(body), headers=headers, timeout=60)
    assert r.status_code == want["status"], r.text[:500]
    got = r.json()
    if r.status_code != 200:
        # vLLM's render routes answer in the OpenAI shape, Messages included.
        assert set(got) == {"error"} and got["error"]["code"] == r.status_code
        if case["name"] == "r_bad_previous_response_id":  # this tier is stateless, and says so as vLLM does
            assert got == want["body"]
        return
    exp = want["body"]
    assert got["token_ids"] == exp["token_ids"]
    assert list(got) == list(exp)
    for key in FIELDS:
        if key == "request_id" and case.get("random_request_id"):
            assert got[key].startswith("resp_")
            continue
        assert got[key] == exp[key], key
    assert (got["parse_context"] is None) == (exp["parse_context"] is None)
    if exp["parse_context"] is not None:
        for key in ("tools", "parallel_tool_calls", "include_reasoning", "history_tool_call_cnt"):
            assert got["parse_context"][key] == exp["parse_context"][key], key
    for key in SAMPLING:
        assert got["sampling_params"].get(key) == exp["sampling_params"].get(key), f"sampling_params.{key}"


# -- images (Qwen2.5-VL) -------------------------------------------------------------------

QWEN_VL = MODELS / "qwen2.5-vl-instruct"
IMAGE_CORPUS = json.loads((FIXTURES / "cases_images.json").read_text())
IMAGE_RECORDED = json.loads((FIXTURES / "recorded_images.json").read_text())


@pytest.fixture(scope="module")
def vl_server():
    if not QWEN_VL.is_dir():
        pytest.skip("../shared/models/qwen2.5-vl-instruct not present")
    # vLLM hashes images with its model path; the recorder's server copied the model there.
    with render_server(str(QWEN_VL), mm_hash_model_id=IMAGE_RECORDED["model"]) as url:
        yield url, httpx.get(url + "/v1/models").json()["data"][0]["id"]


@pytest.mark.parametrize("case", IMAGE_CORPUS["cases"], ids=lambda c: c["name"])
def test_image_render_matches_vllm(vl_server, case):
    """``input_image`` parts and Anthropic ``image`` blocks (also inside a ``tool_result``)
    expand and carry ``features`` exactly as vLLM 0.33's render gives them."""
    url, model = vl_server
    exp = IMAGE_RECORDED["results"][case["name"]]["body"]
    headers = {"x-request-id": case["name"]} if case["route"] == "messages" else {}
    r = httpx.post(url + PATHS[case["route"]], json=expand(IMAGE_CORPUS, case, model), headers=headers, timeout=120)
    assert r.status_code == 200, r.text[:500]
    got = r.json()
    assert got["token_ids"] == exp["token_ids"]
    assert got["features"] == exp["features"]
    assert got["sampling_params"]["max_tokens"] == exp["sampling_params"]["max_tokens"]


def test_inline_system_messages_merge_where_the_template_demands_it(tmp_path):
    """Claude Code sends system messages mid-conversation; a template that refuses them
    after the first turn (vLLM's probe) gets them merged into the leading system prompt."""
    from tokenizers import Tokenizer

    from conftest import TEMPLATES

    body = {"max_tokens": 32, "system": "Rule A.",
            "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                         {"role": "system", "content": " Rule B."}, {"role": "user", "content": "Go"}]}
    template = TEMPLATES / "mistral-nemo.jinja"
    with render_server(str(MODELS / "qwen3"), chat_template=str(template)) as url:
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        r = httpx.post(url + "/v1/messages/render", json={**body, "model": model})
        assert r.status_code == 200, r.text
        text = Tokenizer.from_file(str(MODELS / "qwen3" / "tokenizer.json")).decode(r.json()["token_ids"],
                                                                                    skip_special_tokens=False)
        assert "Rule A. Rule B." in text and text.count("Rule B.") == 1
    with render_server(str(MODELS / "qwen3")) as url:  # Qwen3 takes them in place
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        r = httpx.post(url + "/v1/messages/render", json={**body, "model": model})
        assert r.status_code == 200, r.text
        text = Tokenizer.from_file(str(MODELS / "qwen3" / "tokenizer.json")).decode(r.json()["token_ids"],
                                                                                    skip_special_tokens=False)
        assert "Hello.<|im_end|>\n<|im_start|>system\n Rule B.<|im_end|>" in text


@pytest.mark.parametrize("model, effort", [("qwen3", "none"), ("llama-3.2-instruct", "low")])
def test_disabled_thinking_maps_to_the_probed_effort(model, effort):
    """vLLM's auto rule: ``none`` only where the template can turn thinking off."""
    with render_server(str(MODELS / model)) as url:
        name = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        r = httpx.post(url + "/v1/messages/render", json={"model": name, "max_tokens": 16, "thinking": {"type": "disabled"},
                                                          "messages": [{"role": "user", "content": "Hi"}]})
        assert r.status_code == 200, r.text
        assert r.json()["parse_context"]["chat_template_kwargs"]["reasoning_effort"] == effort


def test_responses_errors_name_responses_fields(server):
    """A bad Responses body is told about in Responses' own fields (``input``,
    ``input.N.content.M``), never the chat fields it is converted to."""
    url, _ = server

    def error(body: dict) -> dict:
        r = httpx.post(url + "/v1/responses/render", json=body)
        assert r.status_code == 400, r.text
        return r.json()["error"]

    err = error({"input": []})
    assert err["param"] == "input" and "messages" not in err["message"]
    for part in ({"type": "input_image"}, {"type": "input_image", "file_id": "file-123"}):
        err = error({"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}, part]}]})
        assert err["param"] == "input.0.content.1.image_url" and "image_url part" not in err["message"]
    assert error({"input": 5})["param"] == "input"
    err = error({"instructions": "be brief", "input": [{"role": "user", "content": "hi"},
                                                       {"role": "user", "content": [{"type": "bogus_part"}]}]})
    assert err["param"].startswith("input.1"), err


def test_messages_errors_name_the_anthropic_block(server):
    """A bad block of an Anthropic body is named by its own path (``messages.N.content.M``),
    not by the chat message it converts to (a tool_result's image becomes a later message)."""
    url, model = server

    def param(messages: list[dict], **extra) -> str:
        r = httpx.post(url + "/v1/messages/render", json={"model": model, "max_tokens": 8, "messages": messages, **extra})
        assert r.status_code == 400, r.text
        return r.json()["error"]["param"]

    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    result = {"type": "tool_result", "tool_use_id": "x", "content": "r"}
    assert param([{"role": "user", "content": [result, image]}], system="s").startswith("messages.0.content.1")
    bad_source = {"type": "image", "source": {"type": "file", "file_id": "f"}}
    assert param([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                  {"role": "user", "content": [{"type": "text", "text": "c"}, bad_source]}]) == "messages.2.content.1.source"


def test_too_long_prompt_hint_names_each_apis_own_field(server):
    """A prompt that leaves no room to generate: the hint names the API's own way out, not
    chat's ``truncate_prompt_tokens``."""
    url, model = server
    limit = httpx.get(url + "/v1/models").json()["data"][0]["max_model_len"]
    text = "hello " * (limit + 10)
    r = httpx.post(url + "/v1/messages/render", json={"model": model, "max_tokens": 8,
                                                      "messages": [{"role": "user", "content": text}]})
    assert r.status_code == 400 and "truncate_prompt_tokens" not in r.json()["error"]["message"], r.text
    r = httpx.post(url + "/v1/responses/render", json={"input": text})
    assert r.status_code == 400, r.text
    assert "truncate_prompt_tokens" not in r.json()["error"]["message"] and "truncation" in r.json()["error"]["message"]
