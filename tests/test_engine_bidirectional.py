"""Bidirectional KV on the reference engine with a real model (SmolLM2-135M GGUF, llama.cpp).

Turn N's decode keeps its answer's KV under a lease (``retain_kv``); turn N+1's prefill
pulls it, computes only what follows, and never uses a position past the first token
where its prompt leaves the held sequence. Greedy output must equal that of one engine
computing the whole prompt; prefill's own metrics must say how many tokens it computed.
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
GREEDY = {"temperature": 0, "max_tokens": 12}
SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"


@pytest.fixture(scope="module")
def tok():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(MODELS / "smollm2-135m-instruct" / "tokenizer.json"))


def chatml(tok, turns: list[tuple[str, str]]) -> list[int]:
    text = SYSTEM + "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in turns)
    return tok.encode(text + "<|im_start|>assistant\n", add_special_tokens=False).ids


@pytest.fixture(scope="module")
def engines():
    with EngineProcess(role="both") as both, EngineProcess(role="prefill") as p, \
            EngineProcess("--kv-lease-duration", "60", role="decode") as d:
        yield {"both": both, "p": p, "d": d}


def post(eng, prompt, sampling, **extra) -> dict:
    r = httpx.post(eng.url + GEN, json={"token_ids": prompt, "sampling_params": sampling, **extra}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def stream(eng, prompt, sampling, **extra) -> tuple[list[int], dict]:
    r = httpx.post(eng.url + GEN, timeout=120, json={"token_ids": prompt, "sampling_params": sampling,
                                                      "stream": True, **extra})
    chunks = [json.loads(e[len("data: "):]) for e in r.text.split("\n\n") if e and e != "data: [DONE]"]
    ids = [t for c in chunks for ch in c.get("choices") or [] for t in ch["token_ids"]]
    last = next(c for c in reversed(chunks) if c.get("choices"))
    return ids, last


def turn(engines, prompt: list[int], pull: dict | None) -> tuple[list[int], dict, dict]:
    """Prefill (pulling ``pull`` when given) → decode that retains its KV; (ids, prefill body, kept)."""
    p_params = {**P_LEG_KV, **pull} if pull else dict(P_LEG_KV)
    p_body = post(engines["p"], prompt, {**GREEDY, "max_tokens": 1}, kv_transfer_params=p_params)
    ids, last = stream(engines["d"], prompt, GREEDY, kv_transfer_params={**p_body["kv_transfer_params"],
                                                                         "retain_kv": True})
    return ids, p_body, last["kv_transfer_params"]


def pull_fields(kept: dict, tokens: int) -> dict:
    return {k: kept[k] for k in ("remote_engine_id", "remote_host", "remote_port", "remote_block_ids")} | {
        "remote_num_tokens": tokens}


def test_turn_two_computes_only_the_new_tokens(engines, tok):
    p1 = chatml(tok, [("user", "Name a fruit.")])
    out1, body1, kept = turn(engines, p1, None)
    assert body1["metrics"]["kv_computed_prompt_tokens"] == len(p1)
    assert kept["remote_num_tokens"] == len(p1) + len(out1) - 1  # the last sampled token was never evaluated
    assert kept["remote_port"] == engines["d"].port and kept["kv_lease_duration"] == 60

    # Turn 2 extends the held sequence: prompt_1 + output_1 + the template's next text.
    p2 = p1 + out1 + tok.encode("\n<|im_start|>user\nAnother one.<|im_end|>\n<|im_start|>assistant\n",
                                add_special_tokens=False).ids
    before = httpx.get(engines["p"].url + "/stats").json()["counters"]
    out2, body2, _ = turn(engines, p2, pull_fields(kept, kept["remote_num_tokens"]))
    m = body2["metrics"]
    assert m["kv_source"] == "remote" and m["kv_remote_tokens"] == kept["remote_num_tokens"]
    assert m["kv_computed_prompt_tokens"] == len(p2) - kept["remote_num_tokens"]
    after = httpx.get(engines["p"].url + "/stats").json()["counters"]
    assert after["kv_pulled"] == before["kv_pulled"] + 1
    assert after["kv_pulled_tokens"] - before["kv_pulled_tokens"] == kept["remote_num_tokens"]
    assert out2 == conversation_on_one_engine(engines["both"], [p1, p2])[1]

    # The handle is used once: a second pull of it finds nothing and prefill computes everything.
    again = post(engines["p"], p2, {**GREEDY, "max_tokens": 1},
                 kv_transfer_params={**P_LEG_KV, **pull_fields(kept, kept["remote_num_tokens"])})
    assert again["metrics"]["kv_source"] == "local" and again["metrics"]["kv_computed_prompt_tokens"] == len(p2)
    assert "404" in again["metrics"]["kv_error"]


def conversation_on_one_engine(eng, prompts: list[list[int]]) -> list[list[int]]:
    """Greedy answers of one engine that carries the conversation in its own cache (each turn
    keeps its KV and the next starts from it): the reference for P/D with reuse. llama.cpp on
    CPU is not batch-invariant, so the reference must have evaluated the history the same
    way — generated tokens one by one — as the decode engine whose KV prefill pulls."""
    answers, kept = [], None
    for prompt in prompts:
        params = {"retain_kv": True, **({k: kept[k] for k in ("remote_engine_id", "remote_host", "remote_port",
                                                               "remote_block_ids")} if kept else {})}
        body = post(eng, prompt, GREEDY, kv_transfer_params=params)
        answers.append(body["choices"][0]["token_ids"])
        kept = body["kv_transfer_params"]
    return answers


def stale_output(prompt: list[int], held: list[int], n: int) -> list[int]:
    """What a prefill that trusted all ``n`` positions of ``held`` for ``prompt`` would make the
    model say (greedy, in this process): the counterfactual the engine must never produce."""
    from reference_engine.llama_backend import LlamaBackend, default_model_path

    b = LlamaBackend(default_model_path(), n_ctx=2048, n_threads=1)
    llm = b.llm
    llm.reset()
    llm._ctx.kv_cache_clear()
    llm.eval(held[:n])
    llm.eval(prompt[n:])
    sampler = b._internals.LlamaSampler()
    sampler.add_greedy()
    out = []
    for _ in range(GREEDY["max_tokens"]):
        t = sampler.sample(llm._ctx, -1)
        out.append(t)
        if t in b.eos_token_ids:
            break
        llm.eval([t])
    return out


def test_kv_is_never_reused_past_the_divergence(engines, tok):
    """Turn 2's history asks about another country than turn 1 did (the client edited it).
    KV reused past that token answers about the old country (France/French instead of
    Japan/Japanese with this model); the pull stops right there."""
    p1 = chatml(tok, [("user", "What is the capital of France?")])
    out1, _, kept = turn(engines, p1, None)
    held = p1 + out1
    p2 = chatml(tok, [("user", "What is the capital of Japan?"), ("assistant", tok.decode(out1)),
                      ("user", "And what language do they speak there?")])
    diverge = next(i for i, (a, b) in enumerate(zip(held, p2)) if a != b)
    assert diverge < len(p1) and len(p2) > kept["remote_num_tokens"]
    reference = conversation_on_one_engine(engines["both"], [p1, p2])[1]
    assert stale_output(p2, held, kept["remote_num_tokens"]) != reference  # the test can tell stale KV apart

    # Even a proxy that asks for every held position gets only the shared ones.
    out2, body2, _ = turn(engines, p2, pull_fields(kept, kept["remote_num_tokens"]))
    assert body2["metrics"]["kv_remote_tokens"] == diverge
    assert body2["metrics"]["kv_computed_prompt_tokens"] == len(p2) - diverge
    assert out2 == reference


def test_expired_lease_means_a_full_prefill(tok):
    with EngineProcess(role="prefill") as p, EngineProcess("--kv-lease-duration", "0.2", role="decode") as d:
        engines = {"p": p, "d": d}
        p1 = chatml(tok, [("user", "Hi")])
        out1, _, kept = turn(engines, p1, None)
        time.sleep(1.0)
        p2 = p1 + out1 + tok.encode("\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n",
                                    add_special_tokens=False).ids
        body = post(p, p2, {**GREEDY, "max_tokens": 1},
                    kv_transfer_params={**P_LEG_KV, **pull_fields(kept, kept["remote_num_tokens"])})
        assert body["metrics"]["kv_source"] == "local" and body["metrics"]["kv_computed_prompt_tokens"] == len(p2)
        assert httpx.get(p.url + "/stats").json()["counters"]["kv_pull_failed"] == 1
