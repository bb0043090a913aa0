"""The render service on the embedded default model (no ../shared needed): shapes and errors.

Every bad request must get a 4xx in the OpenAI error shape, never a 500 or a hang, and
must not disturb the requests around it.
"""

from __future__ import annotations

import concurrent.futures

import httpx
import pytest

from conftest import needs_shared, render_server, serve_app

GENERATE_REQUEST_KEYS = [
    "request_id", "token_ids", "token_offsets", "features", "content_parts", "sampling_params", "model",
    "reasoning_ended", "reasoning_parser_kwargs", "return_token_ids", "output_mode", "parse_context", "stream",
    "stream_options", "cache_salt", "priority", "kv_transfer_params", "ec_transfer_params",
]


@pytest.fixture(scope="module")
def url():
    with render_server(None, max_model_len=256, max_body_bytes=64 * 1024, served_model_name=("smol",)) as base:
        yield base


@pytest.fixture(scope="module")
def client(url):
    with httpx.Client(base_url=url, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def smol():
    from render_service.model import load_model

    return load_model(None)


def _assert_error(resp: httpx.Response, status: int, param: str | None = "any") -> dict:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status and err["message"]
    if param != "any":
        assert err["param"] == param, err
    return err


def test_chat_render_shape_and_real_ids(client, smol):
    body = {"model": "smol", "messages": [{"role": "user", "content": "What is 12+30?"}],
            "max_completion_tokens": 50, "temperature": 0, "stop": "END", "seed": 7}
    resp = client.post("/v1/chat/completions/render", json=body, headers={"X-Request-Id": "demo-001"})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert list(out) == GENERATE_REQUEST_KEYS
    assert out["request_id"] == "chatcmpl-demo-001" and out["output_mode"] == "tokens" and out["model"] == "smol"
    text = smol.chat_template.render(body["messages"], add_generation_prompt=True, **smol.special_tokens)
    assert out["token_ids"] == smol.tokenizer.encode(text)
    assert smol.tokenizer.decode(out["token_ids"], skip_special_tokens=False).endswith("<|im_start|>assistant\n")
    sp = out["sampling_params"]
    assert sp["max_tokens"] == 50 and sp["stop"] == ["END"] and sp["seed"] == 7 and sp["output_kind"] == 2
    assert "temperature" not in sp or sp["temperature"] == 0  # greedy
    assert 2 in sp["stop_token_ids"]  # <|im_end|>: a tokens-only engine has no tokenizer to know it
    assert client.post("/render", json=body).json()["token_ids"] == out["token_ids"]


def test_max_tokens_defaults_to_remaining_context(client):
    out = client.post("/v1/chat/completions/render", json={"messages": [{"role": "user", "content": "hi"}]}).json()
    assert out["sampling_params"]["max_tokens"] == 256 - len(out["token_ids"])


def test_completions_render_all_prompt_forms(client, smol):
    hello = smol.tokenizer.encode("Hello world")
    cases = {"Hello world": 1, ("a", "b"): 2, tuple(hello): 1, (tuple(hello), (5, 6)): 2}
    for prompt, n in cases.items():
        as_json = [list(p) if isinstance(p, tuple) else p for p in prompt] if isinstance(prompt, tuple) else prompt
        if isinstance(prompt, tuple) and all(isinstance(x, int) for x in prompt):
            as_json = list(prompt)
        resp = client.post("/v1/completions/render", json={"prompt": as_json, "max_tokens": 4}, headers={"X-Request-Id": "r"})
        assert resp.status_code == 200, resp.text
        out = resp.json()
        assert len(out) == n and all(g["sampling_params"]["max_tokens"] == 4 for g in out)
        assert [g["request_id"] for g in out] == (["cmpl-r"] if n == 1 else [f"cmpl-r-{i}" for i in range(n)])
    assert client.post("/v1/completions/render", json={"prompt": "Hello world"}).json()[0]["token_ids"] == hello


def test_tokenize_detokenize_models_health_version(client, smol):
    tok = client.post("/tokenize", json={"prompt": "Hello world", "return_token_strs": True}).json()
    assert tok["tokens"] == smol.tokenizer.encode("Hello world", add_special_tokens=True)
    assert tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 256 and tok["token_strs"][-1] == "Ġworld"
    chat = client.post("/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}).json()
    assert chat["count"] == len(chat["tokens"]) > 5
    assert client.post("/detokenize", json={"tokens": tok["tokens"]}).json()["prompt"] == "Hello world"
    models = client.get("/v1/models").json()
    assert models["data"][0]["id"] == "smol" and models["data"][0]["max_model_len"] == 256
    assert models["data"][0]["permission"][0]["id"] == f"modelperm-{smol.fingerprint[:16]}"
    assert client.get("/v1/models").json() == models  # the cards are made once, on the first call
    assert client.get("/health").status_code == 200 and client.get("/version").json()["version"]
    metrics = client.get("/metrics").text
    assert "process_cpu_seconds_total" in metrics and "render_tokenizer_segment_cache_hits_total" in metrics


BAD_REQUESTS = [
    ("invalid json", b"{not json", "application/json", 400),
    ("wrong content type", b'{"messages": []}', "text/plain", 400),
    ("messages not a list", b'{"messages": "hi"}', "application/json", 400),
    ("empty messages", b'{"messages": []}', "application/json", 400),
    ("message without role", b'{"messages": [{"content": "hi"}]}', "application/json", 400),
    ("temperature out of range", b'{"messages": [{"role": "user", "content": "x"}], "temperature": 9}', "application/json", 400),
    ("n zero", b'{"messages": [{"role": "user", "content": "x"}], "n": 0}', "application/json", 400),
    ("empty tools", b'{"messages": [{"role": "user", "content": "x"}], "tools": []}', "application/json", 400),
    ("tools without parser", b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]}', "application/json", 400),
    ("stream_options without stream", b'{"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}}', "application/json", 400),
    ("max_tokens above context", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}', "application/json", 400),
    ("untrusted request template", b'{"messages": [{"role": "user", "content": "x"}], "chat_template": "{{ 1 }}"}', "application/json", 400),
    ("body is a list", b'[1, 2]', "application/json", 400),
    ("unknown model", b'{"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}', "application/json", 404),
]


@pytest.mark.parametrize("name,body,ctype,status", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_chat_requests_get_openai_errors(client, name, body, ctype, status):
    _assert_error(client.post("/v1/chat/completions/render", content=body, headers={"content-type": ctype}), status)


def test_prompt_longer_than_context_names_both_lengths(client):
    err = _assert_error(client.post("/v1/chat/completions/render",
                                    json={"messages": [{"role": "user", "content": "word " * 400}]}), 400, "input_tokens")
    assert "256" in err["message"] and "input tokens" in err["message"]
    ok = client.post("/v1/chat/completions/render",
                     json={"messages": [{"role": "user", "content": "word " * 400}], "truncate_prompt_tokens": 100})
    assert ok.status_code == 200 and len(ok.json()["token_ids"]) == 100


@pytest.mark.parametrize("prompt,param", [([-1, 5], "prompt"), ([10**9], "prompt"), ([[1], []], None), ([], None)])
def test_bad_token_id_prompts(client, prompt, param):
    _assert_error(client.post("/v1/completions/render", json={"prompt": prompt}), 400)
    _assert_error(client.post("/detokenize", json={"tokens": [10**9]}), 400, "tokens")


def test_oversized_body_is_413_and_server_keeps_serving(client):
    _assert_error(client.post("/v1/chat/completions/render", content=b"x" * 70000,
                              headers={"content-type": "application/json"}), 413)
    assert client.post("/render", json={"messages": [{"role": "user", "content": "hi"}]}).status_code == 200


def test_bad_requests_do_not_affect_good_ones_under_concurrency(url):
    good = {"messages": [{"role": "user", "content": "Count: 1 2 3"}]}
    bad = {"messages": [{"role": "user"}], "n": -3}

    def call(i):
        with httpx.Client(base_url=url, timeout=30) as c:
            return c.post("/render", json=good if i % 2 else bad).status_code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(call, range(40)))
    assert codes.count(200) == 20 and codes.count(400) == 20


def test_api_key_guards_v1_only():
    with render_server(None, api_key=("s3cret",)) as base:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        _assert_error(httpx.post(f"{base}/v1/chat/completions/render", json=body), 401)
        ok = httpx.post(f"{base}/v1/chat/completions/render", json=body, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert httpx.get(f"{base}/health").status_code == 200


def test_startup_errors_are_one_clear_line():
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import StartupError, build_app

    for cfg, words in [
        (ServeConfig(model="/no/such/dir"), "no such file"),
        (ServeConfig(model="org/not-reachable"), "Hugging Face Hub"),
        (ServeConfig(enable_auto_tool_choice=True), "--tool-call-parser"),
    ]:
        with pytest.raises(StartupError, match=words):
            build_app(cfg)


def test_decode_leg_reuses_prompt_token_ids_from_kv_transfer_params(client):
    first = client.post("/render", json={"messages": [{"role": "user", "content": "hi"}]}).json()
    kv = {"do_remote_prefill": True, "prompt_token_ids": first["token_ids"][:5]}
    again = client.post("/render", json={"messages": [{"role": "user", "content": "ignored"}], "kv_transfer_params": kv}).json()
    assert again["token_ids"] == first["token_ids"][:5]
    assert again["kv_transfer_params"] == {"do_remote_prefill": True}
    bad = {"messages": [{"role": "user", "content": "x"}], "kv_transfer_params": {"prompt_token_ids": [-1]}}
    _assert_error(client.post("/render", json=bad), 400, "kv_transfer_params.prompt_token_ids")


FUZZED = [
    ("logit_bias key not an id", {"logit_bias": {"abc": 1}}),
    ("tool_choice function as a string", {"tools": [{"type": "function", "function": {"name": "f"}}],
                                          "tool_choice": {"type": "function", "function": "f"}}),
    ("tool without a name", {"tools": [{"type": "function", "function": {"name": ""}}], "tool_choice": "none"}),
    ("tool parameters not an object", {"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}],
                                       "tool_choice": "none"}),
    ("response_format schema not an object", {"response_format": {"type": "json_schema", "json_schema": "x"}}),
    ("response_format unknown type", {"response_format": {"type": "banana"}}),
    ("top_logprobs above the server limit", {"logprobs": True, "top_logprobs": 1000}),
    ("kwargs nested past the recursion limit", {"chat_template_kwargs": {"x": __import__("functools").reduce(
        lambda acc, _: {"a": acc}, range(900), {})}}),
]


@pytest.mark.parametrize("name,extra", FUZZED, ids=[f[0] for f in FUZZED])
def test_fuzzed_fields_are_400_and_the_connection_survives(url, name, extra):
    body = {"messages": [{"role": "user", "content": "hi"}], **extra}
    with httpx.Client(base_url=url, timeout=30) as c:  # one connection: a 500 used to drop it
        _assert_error(c.post("/v1/chat/completions/render", json=body), 400)
        assert c.post("/render", json={"messages": [{"role": "user", "content": "hi"}]}).status_code == 200


def test_logit_bias_goes_on_the_wire_with_string_keys(client):
    out = client.post("/render", json={"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"5": 300}})
    assert out.status_code == 200 and out.json()["sampling_params"]["logit_bias"] == {"5": 100.0}


def test_api_key_also_guards_the_short_aliases():
    with render_server(None, api_key=("k",)) as base:
        for path in ("/render", "/derender"):
            _assert_error(httpx.post(f"{base}{path}", json={"messages": []}), 401)


def test_api_key_guards_under_a_root_path():
    """Behind a path-routing proxy (``--root-path /api``) uvicorn puts the root path in front of
    the request's path, and the key was checked against that whole path: /api/v1/... is not under
    /v1, so every route answered without a key. As vLLM, the guard looks at the path past the
    root path."""
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_app

    app, _, _ = build_app(ServeConfig(model=None, api_key=("k",), root_path="/api"))
    with serve_app(app, root_path="/api") as base:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        for path in ("/v1/chat/completions/render", "/render", "/v1/models"):
            _assert_error(httpx.request("POST" if "render" in path else "GET", f"{base}{path}", json=body), 401)
        ok = httpx.post(f"{base}/v1/chat/completions/render", json=body, headers={"Authorization": "Bearer k"})
        assert ok.status_code == 200, ok.text
        assert httpx.get(f"{base}/health").status_code == 200


def test_text_part_without_string_text_names_the_field(client):
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}
    err = _assert_error(client.post("/render", json=body), 400, "messages.0.content.0.text")
    assert "not supported" not in err["message"]


def test_request_ids_are_random_unique_and_new_in_a_forked_child():
    import os
    import re

    from render_service.render.request import new_request_id

    ids = [new_request_id() for _ in range(2000)]  # several refills of the pool
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda _: new_request_id(), range(2000)))
    assert len(set(threaded) | set(ids)) == 4000
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child's next id must not be the parent's
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 16).decode() != new_request_id()


@needs_shared
def test_context_length_is_what_transformers_reads_from_every_model_config():
    """vLLM reads config.json through transformers: a key the file leaves out takes the config
    class's default (Gemma 3: 131072, where we said 8192), and max_model_len's default with it."""
    transformers = pytest.importorskip("transformers")
    from conftest import MODELS
    from render_service.model import load_model

    checked = 0
    for model_dir in sorted(MODELS.iterdir()):
        if not (model_dir / "config.json").is_file() or "auto_map" in (model_dir / "config.json").read_text():
            continue  # no config, or one only its own code reads (MiniCPM-V)
        config = transformers.AutoConfig.from_pretrained(model_dir)
        text = getattr(config, "text_config", None) or config
        expected = getattr(config, "max_position_embeddings", None) or getattr(text, "max_position_embeddings")
        assert load_model(str(model_dir)).max_model_len == expected, model_dir.name
        checked += 1
    assert checked >= 4
