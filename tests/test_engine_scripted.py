"""Reference engine in scripted mode: wire shapes, validation, abort, P/D handshake.

Every test talks HTTP to real `python -m reference_engine` processes on loopback.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from conftest import P_LEG_KV
from reference_engine.testing import EngineProcess

REPO = Path(__file__).resolve().parents[1]

GEN = "/inference/v1/generate"
EOS = 2
SCRIPT = {
    "eos_token_ids": [EOS],
    "responses": [
        {"match": [77, 78], "token_ids": [100, 101, 102, EOS, 555]},
        {"match": [90], "token_ids": list(range(1000, 1200)), "token_delay": 0.05},
        {"token_ids": [5, 6, 7, 8, 9], "finish_reason": "length"},
    ],
}
RESPONSE_KEYS = [
    "request_id", "model", "created", "usage", "prompt_logprobs", "prompt_token_id_logprobs", "prompt_token_ids",
    "mm_placeholders", "metrics", "kv_transfer_params", "ec_transfer_params", "output_mode", "choices",
]
CHOICE_KEYS = ["index", "finish_reason", "stop_reason", "token_ids", "routed_experts", "sampling_mask",
               "weight_versions", "logprobs"]
PREFILL_PARAM_KEYS = {
    "do_remote_prefill", "do_remote_decode", "remote_block_ids", "remote_engine_id", "remote_request_id",
    "remote_host", "remote_port", "tp_size", "dcp_size", "pp_size", "remote_num_tokens",
    "remote_blocks_expiry_time", "remote_registration_generation", "transfer_mode", "remote_prefill_cached_tokens",
}


@pytest.fixture(scope="module")
def script_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("engine") / "script.json"
    path.write_text(json.dumps(SCRIPT))
    return str(path)


@pytest.fixture(scope="module")
def engine(script_path):
    with EngineProcess("--scripted", script_path, "--served-model-name", "demo", "demo-alias") as eng:
        yield eng


def sse_events(text: str) -> list:
    """Parse an SSE body into JSON objects and the literal "[DONE]"; checks the framing."""
    assert text.endswith("\n\n")
    events = []
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def stats(eng) -> dict:
    return httpx.get(eng.url + "/stats").json()["counters"]


def test_json_response_shape_and_eos_stop(engine):
    r = httpx.post(engine.url + GEN, json={"request_id": "abc", "token_ids": [1, 77, 78],
                                           "sampling_params": {"max_tokens": 10}, "model": "demo-alias"})
    assert r.status_code == 200
    body = r.json()
    assert list(body) == RESPONSE_KEYS
    assert body["request_id"] == "generate-tokens-abc"
    assert body["model"] == "demo-alias"
    assert body["output_mode"] == "tokens" and body["kv_transfer_params"] is None and body["metrics"] is None
    (choice,) = body["choices"]
    assert list(choice) == CHOICE_KEYS
    # the EOS id is part of token_ids and is the stop_reason (tokens-only server, §1.8)
    assert choice["token_ids"] == [100, 101, 102, EOS]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", EOS)
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 7, "completion_tokens": 4,
                             "prompt_tokens_details": None, "completion_tokens_details": None}


def test_header_request_id_wins_and_stop_rules(engine):
    r = httpx.post(engine.url + GEN, headers={"X-Request-Id": "hdr"},
                   json={"request_id": "body", "token_ids": [77, 78], "return_token_ids": True,
                         "sampling_params": {"ignore_eos": True, "stop_token_ids": [555], "max_tokens": 50}})
    body = r.json()
    assert body["request_id"] == "generate-tokens-hdr"
    assert body["prompt_token_ids"] == [77, 78]
    assert body["choices"][0]["token_ids"] == [100, 101, 102, EOS, 555]
    assert body["choices"][0]["stop_reason"] == 555
    r = httpx.post(engine.url + GEN, json={"token_ids": [77, 78], "sampling_params": {"max_tokens": 2}})
    choice = r.json()["choices"][0]
    assert (choice["token_ids"], choice["finish_reason"], choice["stop_reason"]) == ([100, 101], "length", None)
    # min_tokens keeps EOS from stopping before 4 tokens; the script then runs out
    r = httpx.post(engine.url + GEN, json={"token_ids": [77, 78], "sampling_params": {"min_tokens": 5}})
    assert r.json()["choices"][0]["token_ids"] == [100, 101, 102, EOS, 555]


def test_sse_shape_matches_non_stream(engine):
    req = {"sampling_params": {}, "token_ids": [3, 77, 78], "stream": True, "stream_options": {"include_usage": True},
           "return_token_ids": True}
    r = httpx.post(engine.url + GEN, json=req, headers={"X-Request-Id": "s1"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    *chunks, usage = events[:-1]
    assert usage == {"request_id": "generate-tokens-s1", "output_mode": "tokens", "choices": [],
                     "usage": {"prompt_tokens": 3, "total_tokens": 7, "completion_tokens": 4,
                               "prompt_tokens_details": None, "completion_tokens_details": None}}
    assert list(chunks[0]) == ["request_id", "prompt_token_ids", "usage", "output_mode", "choices"]
    assert chunks[0]["prompt_token_ids"] == [3, 77, 78]
    assert all(list(c) == ["request_id", "usage", "output_mode", "choices"] for c in chunks[1:])
    assert all(c["usage"] is None and list(c["choices"][0]) == CHOICE_KEYS for c in chunks)
    ids = [t for c in chunks for t in c["choices"][0]["token_ids"]]
    assert ids == [100, 101, 102, EOS]
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "stop"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["stop_reason"] == EOS

    plain = sse_events(httpx.post(engine.url + GEN, json={"sampling_params": {}, "token_ids": [77, 78], "stream": True}).text)
    assert plain[-1] == "[DONE]" and all(e["choices"] for e in plain[:-1])  # no usage chunk unasked

    cont = sse_events(httpx.post(engine.url + GEN, json={
        "sampling_params": {}, "token_ids": [77, 78], "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}}).text)
    running = 0
    for c in cont[:-2]:  # chunks may bundle tokens; usage counts them cumulatively
        running += len(c["choices"][0]["token_ids"])
        assert c["usage"]["completion_tokens"] == running
    assert running == 4 and cont[-2]["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"token_ids": [1], "sampling_params": {"stop": ["\n"]}}, 400, "sampling_params.stop"),
        ({"token_ids": [1], "sampling_params": {"n": 2}}, 400, "sampling_params.n"),
        ({"token_ids": [1], "sampling_params": {"temperature": 2.5}}, 400, "sampling_params.temperature"),
        ({"token_ids": [1], "sampling_params": {"top_p": 0}}, 400, "sampling_params.top_p"),
        ({"token_ids": [1], "sampling_params": {"max_tokens": 0}}, 400, "sampling_params.max_tokens"),
        ({"token_ids": [1], "sampling_params": {"max_tokens": 2, "min_tokens": 3}}, 400, "sampling_params.min_tokens"),
        ({"token_ids": [1], "sampling_params": {"logprobs": 1}}, 400, "sampling_params.logprobs"),
        ({"token_ids": [1], "sampling_params": {"structured_outputs": {"json_object": True}}}, 400,
         "sampling_params.structured_outputs"),
        ({"token_ids": [1], "sampling_params": {"structured_outputs": {"json": {"type": "object"}}}}, 400,
         "sampling_params.structured_outputs"),
        ({"token_ids": [1], "sampling_params": {"temperature": "hot"}}, 400, "sampling_params.temperature"),
        ({"sampling_params": {}, "token_ids": []}, 400, "token_ids"),
        ({"token_ids": [1, -5]}, 400, "token_ids"),
        ({"sampling_params": {}}, 400, "token_ids"),
        ({"sampling_params": {}, "token_ids": [1], "output_mode": "text"}, 400, "output_mode"),
        ({"sampling_params": {}, "token_ids": [1], "model": "nope"}, 404, "model"),
        ({"sampling_params": {}, "token_ids": [1], "stream": True, "kv_transfer_params": P_LEG_KV}, 400, "stream"),
    ],
)
def test_validation_errors_are_openai_shaped(engine, body, status, param):
    r = httpx.post(engine.url + GEN, json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert list(err) == ["message", "type", "param", "code"]
    assert err["param"] == param and err["code"] == status and err["message"]
    assert err["type"] == ("NotFoundError" if status == 404 else "BadRequestError")


def test_bad_body_and_content_type(engine):
    r = httpx.post(engine.url + GEN, content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    r = httpx.post(engine.url + GEN, content=b'{"token_ids":[1]}', headers={"content-type": "text/plain"})
    assert r.status_code == 400
    for path in ("/inference/v1/abort_requests", "/abort_requests"):
        r = httpx.post(engine.url + path, json={"ids": []})
        assert r.status_code == 400 and r.json()["error"]["param"] == "request_ids"


def test_health_and_models(engine):
    assert httpx.get(engine.url + "/health").status_code == 200
    data = httpx.get(engine.url + "/v1/models").json()["data"]
    assert [m["id"] for m in data] == ["demo", "demo-alias"]


@pytest.mark.parametrize("path", ["/inference/v1/abort_requests", "/abort_requests"])
def test_abort_stops_a_long_stream(engine, path):
    rid = f"long-{path.count('/')}"
    got = []
    with httpx.stream("POST", engine.url + GEN, headers={"X-Request-Id": rid},
                      json={"sampling_params": {}, "token_ids": [90], "stream": True}, timeout=30) as r:
        for line in r.iter_lines():
            if not line:
                continue
            got.append(line)
            if len(got) == 3:
                a = httpx.post(engine.url + path, json={"request_ids": [f"generate-tokens-{rid}"]})
                assert a.status_code == 200 and a.content == b""
    assert got[-1] == "data: [DONE]"
    last = json.loads(got[-2][len("data: "):])["choices"][0]
    assert last["finish_reason"] == "abort"
    n = sum(len(json.loads(x[6:])["choices"][0]["token_ids"]) for x in got[:-1])
    assert n < 20, n  # the script has 200 tokens: the stream ended at the abort, counted not timed


def test_abort_non_stream_and_disconnect(engine):
    before = stats(engine)["requests_aborted"]
    result = {}

    def call():
        result["r"] = httpx.post(engine.url + GEN, headers={"X-Request-Id": "ns"},
                                 json={"sampling_params": {}, "token_ids": [90]}, timeout=30)

    t = threading.Thread(target=call)
    t.start()
    time.sleep(0.4)
    httpx.post(engine.url + "/abort_requests", json={"request_ids": ["generate-tokens-ns"]})
    t.join(5)
    choice = result["r"].json()["choices"][0]
    assert choice["finish_reason"] == "abort" and 0 < len(choice["token_ids"]) < 40

    # a client that hangs up, mid-stream or while waiting for JSON, aborts its request too
    with httpx.stream("POST", engine.url + GEN, json={"sampling_params": {}, "token_ids": [90], "stream": True}, timeout=30) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i == 4:
                break
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(engine.url + GEN, json={"sampling_params": {}, "token_ids": [90]}, timeout=0.5)
    deadline = time.monotonic() + 3
    while stats(engine)["requests_aborted"] < before + 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stats(engine)["requests_aborted"] == before + 3


def test_prefill_decode_handoff_across_processes(script_path):
    prompt = [11, 12, 13]
    with EngineProcess("--scripted", script_path, role="prefill") as p, \
            EngineProcess("--scripted", script_path, role="decode") as d, \
            EngineProcess("--scripted", script_path) as both:
        ref = httpx.post(both.url + GEN, json={"sampling_params": {}, "token_ids": prompt}).json()["choices"][0]
        p_resp = httpx.post(p.url + GEN, headers={"X-Request-Id": "pd"},
                            json={"token_ids": prompt, "kv_transfer_params": P_LEG_KV,
                                  "sampling_params": {"max_tokens": 1}}).json()
        params = p_resp["kv_transfer_params"]
        assert set(params) == PREFILL_PARAM_KEYS
        assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
        assert (params["remote_host"], params["remote_port"]) == ("127.0.0.1", p.port)
        assert params["remote_num_tokens"] == 3 and params["transfer_mode"] == "pull"
        assert params["remote_request_id"].startswith("generate-tokens-pd-")
        assert p_resp["choices"][0]["finish_reason"] == "length"

        d_resp = httpx.post(d.url + GEN, headers={"X-Request-Id": "pd"},
                            json={"sampling_params": {}, "token_ids": prompt, "kv_transfer_params": params}).json()
        assert d_resp["choices"][0]["token_ids"] == ref["token_ids"] == [5, 6, 7, 8, 9]
        assert d_resp["metrics"] == {"kv_source": "remote", "kv_remote_tokens": 2, "kv_computed_prompt_tokens": 1}
        assert stats(d)["kv_loaded"] == 1 and stats(p)["kv_served"] == 1 and stats(p)["kv_leases_active"] == 0
        assert "render_service_engine_kv_loaded_total 1" in httpx.get(d.url + "/metrics").text

        # the snapshot was freed on fetch: a replay of the same params cannot load it
        again = httpx.post(d.url + GEN, json={"sampling_params": {}, "token_ids": prompt, "kv_transfer_params": params})
        assert again.status_code == 500 and again.json()["error"]["type"] == "InternalServerError"
        assert "KV transfer" in again.json()["error"]["message"]
        # a snapshot is only usable for the prompt it was computed for
        params2 = httpx.post(p.url + GEN, json={"token_ids": prompt, "kv_transfer_params": P_LEG_KV,
                                                "sampling_params": {"max_tokens": 1}}).json()["kv_transfer_params"]
        wrong = httpx.post(d.url + GEN, json={"sampling_params": {}, "token_ids": [11, 99, 13], "kv_transfer_params": params2})
        assert wrong.status_code == 500 and "prefix" in wrong.json()["error"]["message"]

        # legs sent to the wrong role are refused up front
        r = httpx.post(d.url + GEN, json={"sampling_params": {}, "token_ids": prompt, "kv_transfer_params": P_LEG_KV})
        assert r.status_code == 400 and r.json()["error"]["param"] == "kv_transfer_params"
        r = httpx.post(p.url + GEN, json={"sampling_params": {}, "token_ids": prompt, "kv_transfer_params": params})
        assert r.status_code == 400


def test_expired_lease_fail_and_recompute(script_path):
    prompt = [21, 22, 23, 24]
    with EngineProcess("--scripted", script_path, "--kv-lease-duration", "0.3", role="prefill") as p, \
            EngineProcess("--scripted", script_path, role="decode") as d_fail, \
            EngineProcess("--scripted", script_path, "--kv-load-failure-policy", "recompute", role="decode") as d_re:

        def prefill():
            return httpx.post(p.url + GEN, json={"token_ids": prompt, "kv_transfer_params": P_LEG_KV,
                                                 "sampling_params": {"max_tokens": 1}}).json()["kv_transfer_params"]

        stale = [prefill(), prefill()]
        time.sleep(1.0)
        assert stats(p)["kv_leases_active"] == 0 and stats(p)["kv_leases_expired"] == 2

        r = httpx.post(d_fail.url + GEN, json={"sampling_params": {}, "token_ids": prompt, "kv_transfer_params": stale[0]})
        assert r.status_code == 500 and r.json()["error"]["code"] == 500
        events = sse_events(httpx.post(d_fail.url + GEN, json={
            "sampling_params": {}, "token_ids": prompt, "kv_transfer_params": stale[0], "stream": True}).text)
        assert events[-1] == "[DONE]" and events[0]["error"]["type"] == "InternalServerError"
        assert stats(d_fail)["kv_load_failed"] == 2

        r = httpx.post(d_re.url + GEN, json={"sampling_params": {}, "token_ids": prompt, "kv_transfer_params": stale[1]})
        body = r.json()
        assert body["choices"][0]["token_ids"] == [5, 6, 7, 8, 9]
        assert body["metrics"]["kv_source"] == "recompute" and "404" in body["metrics"]["kv_error"]
        assert stats(d_re)["kv_recomputed"] == 1


def test_register_adds_engine_subcommand():
    from reference_engine import cli

    parser = argparse.ArgumentParser(prog="render-service")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["engine", "--role", "prefill", "--port", "9001", "--scripted", "s.json",
                              "--kv-lease-duration", "5", "--kv-load-failure-policy", "recompute"])
    assert args.func is cli.run
    config = cli.config_from_args(args)
    assert (config.role, config.port, config.kv_lease_duration, config.kv_load_failure_policy) == (
        "prefill", 9001, 5.0, "recompute")
    with pytest.raises(SystemExit):
        parser.parse_args(["engine", "--model", "m.gguf", "--scripted", "s.json"])


@pytest.mark.parametrize(
    ("script", "needle"),
    [
        ('{"responses": [{"sampling_params": {}, "token_ids": []}]}', "must not be empty"),
        ('{"responses": [{"sampling_params": {}, "token_ids": [1], "finish_reason": "abort"}]}', "finish_reason"),
        ("[1, 2", "not valid JSON"),
    ],
)
def test_bad_script_exits_with_message(tmp_path, script, needle):
    path = tmp_path / "bad.json"
    path.write_text(script)
    proc = subprocess.run([sys.executable, "-m", "reference_engine", "--scripted", str(path), "--port", "9"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2 and needle in proc.stderr


def test_refuses_what_vllms_generate_request_refuses(engine):
    """vLLM 0.33's GenerateRequest schema (reference_engine/schemas) decides before our own model: a
    structured_outputs object with null booleans passed our model but a real vLLM engine refuses it."""
    # no constraint kind set (this engine refuses to pretend to enforce one): only the flags differ
    so = {"json": None, "regex": None, "choice": None, "grammar": None, "json_object": None,
          "disable_any_whitespace": None, "disable_additional_properties": None, "whitespace_pattern": None,
          "structural_tag": None}
    body = {"request_id": "schema", "token_ids": [5, 6], "sampling_params": {"max_tokens": 2, "structured_outputs": so}}
    bad = httpx.post(engine.url + GEN, json=body, timeout=30)
    assert bad.status_code == 400, bad.text
    assert bad.json()["error"]["param"] == "sampling_params.structured_outputs.disable_additional_properties"
    fixed = {**so, "disable_any_whitespace": False, "disable_additional_properties": False}
    good = httpx.post(engine.url + GEN, json={**body, "sampling_params": {"max_tokens": 2, "structured_outputs": fixed}},
                      timeout=30)
    assert good.status_code == 200, good.text
    assert httpx.post(engine.url + GEN, json={**body, "token_ids": "x"}, timeout=30).status_code == 400


@pytest.mark.parametrize(("method", "path", "status"), [("GET", "/nope", 404), ("GET", "/inference/v1/generate", 405)])
def test_unknown_routes_and_methods_are_openai_shaped(engine, method, path, status):
    r = httpx.request(method, engine.url + path)
    assert r.status_code == status and r.headers["content-type"] == "application/json", r.text
    err = r.json()["error"]
    assert err["code"] == status and path in err["message"]
    if status == 405:
        assert r.headers["allow"] == "POST"
