"""Reference engine with a real model (SmolLM2-135M-Instruct GGUF on llama.cpp).

The P/D contract: prefill (max_tokens 1) → KV pulled over HTTP → decode must give exactly the
greedy (or seeded) output of one engine doing both, and decode must say it loaded the KV.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from conftest import MODELS, P_LEG_KV, needs_shared, skip_unless_smollm2_engine
from reference_engine.testing import EngineProcess

skip_unless_smollm2_engine()

pytestmark = needs_shared
GEN = "/inference/v1/generate"
GREEDY = {"temperature": 0, "max_tokens": 16}


@pytest.fixture(scope="module")
def prompt() -> list[int]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(MODELS / "smollm2-135m-instruct" / "tokenizer.json"))
    text = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nName three colours of the rainbow.<|im_end|>\n<|im_start|>assistant\n")
    return tok.encode(text, add_special_tokens=False).ids


@pytest.fixture(scope="module")
def engines():
    with EngineProcess() as both, EngineProcess(role="prefill") as p, \
            EngineProcess(role="decode") as d_fail, \
            EngineProcess("--kv-load-failure-policy", "recompute", role="decode") as d_re:
        yield {"both": both, "p": p, "d_fail": d_fail, "d_re": d_re}


def generate(eng, prompt, sampling, **extra) -> dict:
    r = httpx.post(eng.url + GEN, json={"token_ids": prompt, "sampling_params": sampling, **extra}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def prefill(eng, prompt, sampling) -> dict:
    body = generate(eng, prompt, {**sampling, "max_tokens": 1}, kv_transfer_params=P_LEG_KV)
    assert body["choices"][0]["finish_reason"] == "length"
    return body


def stream_tokens(eng, prompt, sampling, **extra) -> tuple[list[int], list]:
    r = httpx.post(eng.url + GEN, json={"token_ids": prompt, "sampling_params": sampling, "stream": True, **extra},
                   timeout=60)
    events = [b[len("data: "):] for b in r.text.split("\n\n") if b]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    return [t for c in chunks if c.get("choices") for t in c["choices"][0]["token_ids"]], chunks


def counters(eng) -> dict:
    return httpx.get(eng.url + "/stats").json()["counters"]


def test_greedy_prefill_then_decode_equals_one_engine(engines, prompt):
    ref = generate(engines["both"], prompt, GREEDY)["choices"][0]["token_ids"]
    assert len(ref) >= 4

    p_body = prefill(engines["p"], prompt, GREEDY)
    assert p_body["choices"][0]["token_ids"] == ref[:1]  # P samples the same first token
    params = p_body["kv_transfer_params"]
    assert params["remote_num_tokens"] == len(prompt) and params["remote_port"] == engines["p"].port

    loaded_before = counters(engines["d_fail"])["kv_loaded"]
    d_body = generate(engines["d_fail"], prompt, GREEDY, kv_transfer_params=params)
    assert d_body["choices"][0]["token_ids"] == ref
    assert d_body["metrics"] == {"kv_source": "remote", "kv_remote_tokens": len(prompt) - 1,
                                 "kv_computed_prompt_tokens": 1}
    assert counters(engines["d_fail"])["kv_loaded"] == loaded_before + 1

    params = prefill(engines["p"], prompt, GREEDY)["kv_transfer_params"]
    ids, chunks = stream_tokens(engines["d_fail"], prompt, GREEDY, kv_transfer_params=params)
    assert ids == ref and chunks[-1]["metrics"]["kv_source"] == "remote"


def test_seeded_sampling_survives_the_handoff(engines, prompt):
    sampling = {"temperature": 0.9, "top_p": 0.95, "top_k": 50, "seed": 1234, "max_tokens": 12}
    ref = generate(engines["both"], prompt, sampling)["choices"][0]["token_ids"]
    assert generate(engines["both"], prompt, sampling)["choices"][0]["token_ids"] == ref
    params = prefill(engines["p"], prompt, sampling)["kv_transfer_params"]
    assert generate(engines["d_re"], prompt, sampling, kv_transfer_params=params)["choices"][0]["token_ids"] == ref


def test_stop_token_ids_and_min_tokens(engines, prompt):
    ref = generate(engines["both"], prompt, GREEDY)["choices"][0]["token_ids"]
    k = next(i for i in range(2, len(ref)) if ref[i] not in ref[:i])
    stop_id = ref[k]
    choice = generate(engines["both"], prompt, {**GREEDY, "stop_token_ids": [stop_id]})["choices"][0]
    assert (choice["token_ids"], choice["finish_reason"], choice["stop_reason"]) == (ref[: k + 1], "stop", stop_id)
    # below min_tokens the stop id is masked out of sampling, not just ignored
    out = generate(engines["both"], prompt, {**GREEDY, "stop_token_ids": [stop_id], "min_tokens": k + 3})
    ids = out["choices"][0]["token_ids"]
    assert len(ids) >= k + 3 and stop_id not in ids[: k + 3]


def test_prefill_killed_before_fetch(engines, prompt):
    ref = generate(engines["both"], prompt, GREEDY)["choices"][0]["token_ids"]
    with EngineProcess(role="prefill") as doomed:
        params = prefill(doomed, prompt, GREEDY)["kv_transfer_params"]
        doomed.kill()

    r = httpx.post(engines["d_fail"].url + GEN, timeout=60,
                   json={"token_ids": prompt, "sampling_params": GREEDY, "kv_transfer_params": params})
    err = r.json()["error"]
    assert r.status_code == 500 and err["type"] == "InternalServerError" and err["code"] == 500
    assert "KV transfer from the prefill engine failed" in err["message"] and "cannot reach" in err["message"]
    ids, chunks = stream_tokens(engines["d_fail"], prompt, GREEDY, kv_transfer_params=params)
    assert ids == [] and chunks[0]["error"]["code"] == 500

    before = counters(engines["d_re"])["kv_recomputed"]
    body = generate(engines["d_re"], prompt, GREEDY, kv_transfer_params=params)
    assert body["choices"][0]["token_ids"] == ref
    assert body["metrics"]["kv_source"] == "recompute" and body["metrics"]["kv_remote_tokens"] == 0
    assert counters(engines["d_re"])["kv_recomputed"] == before + 1


def test_kv_from_another_model_is_refused(engines, prompt, tmp_path):
    script = tmp_path / "s.json"
    script.write_text('{"responses": [{"token_ids": [1, 2]}]}')
    with EngineProcess("--scripted", str(script), role="prefill") as fake_p:
        params = prefill(fake_p, prompt, GREEDY)["kv_transfer_params"]
        r = httpx.post(engines["d_fail"].url + GEN, timeout=60,
                       json={"token_ids": prompt, "sampling_params": GREEDY, "kv_transfer_params": params})
    assert r.status_code == 500 and "computed by model 'scripted'" in r.json()["error"]["message"]


def test_abort_stops_model_generation_between_tokens(engines, prompt):
    eng = engines["both"]
    n, aborted = 0, False
    with httpx.stream("POST", eng.url + GEN, headers={"X-Request-Id": "long"}, timeout=60, json={
            "token_ids": prompt, "stream": True,
            "sampling_params": {"temperature": 0, "max_tokens": 400, "ignore_eos": True}}) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            n += len(chunk["choices"][0]["token_ids"])
            if n >= 3 and not aborted:
                aborted = True
                httpx.post(eng.url + "/inference/v1/abort_requests", json={"request_ids": ["generate-tokens-long"]})
            last = chunk["choices"][0]["finish_reason"]
    assert last == "abort" and n < 60, (last, n)  # of 400 tokens: ended at the abort, counted not timed
