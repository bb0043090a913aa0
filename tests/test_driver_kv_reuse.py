"""Driver with bidirectional KV reuse (``drive --kv-reuse``), end to end on a real model.

SmolLM2-135M on llama.cpp: a prefill and a decode engine process, render/derender in the
driver. Turn by turn through one ``conversation_id``: from turn 2 prefill pulls decode's
KV and its own metrics show it computed only the new tokens; greedy output equals one
engine computing the whole prompt; a history the client edited is pulled only up to the
first diverging token, with the reason in the response headers.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from conftest import serve_app, skip_unless_smollm2_engine

skip_unless_smollm2_engine()

from render_service.config.serve import ServeConfig  # noqa: E402
from render_service.driver.app import create_app  # noqa: E402
from render_service.serve.drive import build_driver  # noqa: E402
from render_service.driver.config import DriverConfig  # noqa: E402
from render_service.render import render_chat  # noqa: E402
from render_service.wire.openai import ChatCompletionRequest  # noqa: E402
from reference_engine.testing import EngineProcess  # noqa: E402

ONE_CORE = ("--n-threads", "1")
CHAT = "/v1/chat/completions"
QUESTIONS = ["What is the capital of France?", "And what language do they speak there?",
             "Name one famous museum there.", "Thanks. Summarise in five words."]


@pytest.fixture(scope="module")
def setup():
    with EngineProcess(*ONE_CORE, role="prefill") as p, EngineProcess(*ONE_CORE, role="decode") as d, \
            EngineProcess(*ONE_CORE, role="both") as both:
        driver, _ = build_driver(DriverConfig(prefill=(p.url,), decode=(d.url,), serve=ServeConfig(), kv_reuse=True))
        with serve_app(create_app(driver)) as url:
            yield {"url": url, "both": both, "driver": driver}


def ask(setup, messages: list[dict], conversation: str, stream: bool) -> tuple[dict, httpx.Headers]:
    """One turn through the driver: the answer's text and ids, the prompt it had (rendered
    here the same way, without history ids), and the response headers."""
    body = {"messages": messages, "max_tokens": 24, "temperature": 0, "return_token_ids": True}
    prompt = render_chat(setup["driver"].hops.bundle, ServeConfig(), ChatCompletionRequest.model_validate(body),
                         "ref")["token_ids"]
    body["conversation_id"] = conversation
    if not stream:
        r = httpx.post(setup["url"] + CHAT, json=body, timeout=120)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert r.json()["prompt_token_ids"] == prompt
        return {"text": choice["message"]["content"], "token_ids": choice["token_ids"],
                "prompt_token_ids": prompt}, r.headers
    r = httpx.post(setup["url"] + CHAT, json={**body, "stream": True}, timeout=120)
    assert r.status_code == 200, r.text
    chunks = [json.loads(e[len("data: "):]) for e in r.text.split("\n\n") if e.startswith("data: {")]
    text = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c.get("choices"))
    ids = [t for c in chunks if c.get("choices") for t in c["choices"][0].get("token_ids") or []]
    return {"text": text, "token_ids": ids, "prompt_token_ids": prompt}, r.headers


class OneEngine:
    """The reference: one engine carrying the conversation in its own cache (each turn keeps
    its KV, the next starts from it). llama.cpp on CPU is not batch-invariant, so the
    reference evaluates the history the same way — generated tokens one by one — as the
    decode engine whose KV prefill pulls; greedy output must then be identical."""

    def __init__(self, eng) -> None:
        self.eng, self.kept = eng, None

    def answer(self, prompt: list[int]) -> list[int]:
        params = {"retain_kv": True}
        if self.kept:
            params.update({k: self.kept[k] for k in ("remote_engine_id", "remote_host", "remote_port",
                                                      "remote_block_ids")})
        r = httpx.post(self.eng.url + "/inference/v1/generate", timeout=120,
                       json={"token_ids": prompt, "sampling_params": {"temperature": 0, "max_tokens": 24},
                             "kv_transfer_params": params})
        self.kept = r.json()["kv_transfer_params"]
        return r.json()["choices"][0]["token_ids"]


def test_turn_by_turn_only_new_tokens_and_same_output(setup):
    messages: list[dict] = []
    held = 0
    reference = OneEngine(setup["both"])
    for turn, question in enumerate(QUESTIONS, start=1):
        messages.append({"role": "user", "content": question})
        answer, headers = ask(setup, messages, "conv-a", stream=turn % 2 == 0)
        prompt = answer["prompt_token_ids"]
        assert answer["token_ids"] == reference.answer(prompt), turn
        computed = int(headers["x-prefill-computed-tokens"])
        pulled = int(headers["x-prefill-pulled-tokens"])
        assert pulled + computed == len(prompt)
        if turn == 1:
            assert headers["x-kv-reuse"] == "no_history" and pulled == 0
        else:
            # SmolLM2's template keeps history verbatim: the prompt extends the held sequence,
            # and prefill takes all of it that decode evaluated (its last token never was).
            assert headers["x-kv-reuse"] == "pulled", headers
            assert headers["x-continuity"].endswith("reason=none")
            assert pulled == held - 1 and computed == len(prompt) - pulled
        held = len(prompt) + len(answer["token_ids"])
        messages.append({"role": "assistant", "content": answer["text"]})
    metrics = httpx.get(setup["url"] + "/metrics").text
    assert 'render_service_driver_kv_reuse_total{outcome="pulled"} 3.0' in metrics
    assert 'render_service_driver_continuity_common_prefix_ratio_count{reason="extends"} 3.0' in metrics


def test_edited_history_is_pulled_only_up_to_the_divergence(setup):
    first = [{"role": "user", "content": "What is the capital of France?"}]
    answer, _ = ask(setup, first, "conv-b", stream=False)
    reference = OneEngine(setup["both"])
    assert reference.answer(answer["prompt_token_ids"]) == answer["token_ids"]
    held = answer["prompt_token_ids"] + answer["token_ids"]
    # The client rewrites turn 1's question: KV past it would answer about France.
    edited = [{"role": "user", "content": "What is the capital of Japan?"},
              {"role": "assistant", "content": answer["text"]},
              {"role": "user", "content": "And what language do they speak there?"}]
    answer2, headers = ask(setup, edited, "conv-b", stream=True)
    prompt = answer2["prompt_token_ids"]
    diverge = next(i for i, (a, b) in enumerate(zip(held, prompt)) if a != b)
    assert "reason=message_edited" in headers["x-continuity"] and f"common={diverge};" in headers["x-continuity"]
    assert headers["x-kv-reuse"] == "pulled" and int(headers["x-prefill-pulled-tokens"]) == diverge
    assert answer2["token_ids"] == reference.answer(prompt)


def test_other_conversations_and_plain_requests_are_untouched(setup):
    msgs = [{"role": "user", "content": "Hi"}]
    r = httpx.post(setup["url"] + CHAT, json={"messages": msgs, "max_tokens": 4, "temperature": 0}, timeout=120)
    assert r.status_code == 200 and "x-kv-reuse" not in r.headers
    _, headers = ask(setup, msgs, "conv-c", stream=False)
    assert headers["x-kv-reuse"] == "no_history"


def test_fallbacks_end_to_end_give_a_full_prefill_and_the_same_output():
    """An expired lease, and a decode engine that died holding the KV: full prefill, same answer."""
    with EngineProcess(*ONE_CORE, role="prefill") as p, \
            EngineProcess(*ONE_CORE, "--kv-lease-duration", "0.3", role="decode") as d_short, \
            EngineProcess(*ONE_CORE, role="decode") as d_a, EngineProcess(*ONE_CORE, role="decode") as d_b, \
            EngineProcess(*ONE_CORE, role="both") as both:
        for decodes, case in (((d_short.url,), "expired"), ((d_a.url, d_b.url), "gone")):
            driver, _ = build_driver(DriverConfig(prefill=(p.url,), decode=decodes, serve=ServeConfig(),
                                                  kv_reuse=True))
            with serve_app(create_app(driver)) as url:
                setup = {"url": url, "driver": driver}
                first = [{"role": "user", "content": "What is the capital of France?"}]
                answer, _ = ask(setup, first, f"conv-{case}", stream=False)
                held_by = driver.kv_reuse.table.get(f"conv-{case}").decode_url
                if case == "expired":
                    time.sleep(1.0)
                else:
                    (d_a if held_by == d_a.url else d_b).kill()
                second = first + [{"role": "assistant", "content": answer["text"]},
                                  {"role": "user", "content": "And of Italy?"}]
                answer2, headers = ask(setup, second, f"conv-{case}", stream=True)
                prompt = answer2["prompt_token_ids"]
                assert headers["x-kv-reuse"] == ("lease_expired" if case == "expired" else "pull_failed")
                assert headers["x-prefill-pulled-tokens"] == "0"
                assert int(headers["x-prefill-computed-tokens"]) == len(prompt)
                fresh = httpx.post(both.url + "/inference/v1/generate", timeout=120, json={
                    "token_ids": prompt, "sampling_params": {"temperature": 0, "max_tokens": 24}}).json()
                assert answer2["token_ids"] == fresh["choices"][0]["token_ids"]


@pytest.mark.parametrize("door", ["responses", "messages"])
def test_responses_and_messages_doors_reuse_too(setup, door):
    """Agents on the Responses and Anthropic Messages APIs get the same reuse: turn 2 pulls
    turn 1's KV and prefill computes only what follows."""
    headers = {"X-Conversation-Id": f"door-{door}"}

    def turn(history: list[dict], stream: bool) -> tuple[str, httpx.Headers]:
        if door == "responses":
            body = {"input": history, "max_output_tokens": 16, "temperature": 0, "stream": stream}
        else:
            body = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "messages": history, "max_tokens": 16,
                    "temperature": 0, "stream": stream}
        r = httpx.post(f"{setup['url']}/v1/{door}", json=body, headers=headers, timeout=120)
        assert r.status_code == 200, r.text
        if stream:
            return "", r.headers
        data = r.json()
        if door == "responses":
            return "".join(c["text"] for o in data["output"] if o["type"] == "message" for c in o["content"]), r.headers
        return "".join(b["text"] for b in data["content"] if b["type"] == "text"), r.headers

    history = [{"role": "user", "content": "What is the capital of France?"}]
    text, first = turn(history, stream=False)
    assert first["x-kv-reuse"] == "no_history"
    history += [{"role": "assistant", "content": text}, {"role": "user", "content": "And of Italy?"}]
    _, second = turn(history, stream=True)
    assert second["x-kv-reuse"] == "pulled", dict(second)
    pulled, computed = int(second["x-prefill-pulled-tokens"]), int(second["x-prefill-computed-tokens"])
    assert pulled > 0 and computed < pulled
