"""Helpers for the derender HTTP tests (no tests here): real servers, router-like clients, views."""

from __future__ import annotations

import contextlib
import json
import random
from typing import Any, Iterator

import httpx
import orjson
import pytest

from conftest import MODELS, serve_app


# -- servers ---------------------------------------------------------------------------
_bundles: dict[str, Any] = {}


def bundle(name: str) -> Any:
    from render_service.model import load_model

    if name not in _bundles:
        _bundles[name] = load_model(str(MODELS / name))
    return _bundles[name]


@contextlib.contextmanager
def derender_server(model: str, **config: Any) -> Iterator[str]:
    """A real server on loopback: `create_app` with the real parsers."""
    from render_service.config.serve import ServeConfig
    from render_service.http.app import create_app

    app = create_app(bundle(model), ServeConfig(model=str(MODELS / model), **config))
    with serve_app(app) as url:
        yield url


QWEN_CFG = dict(reasoning_parser="qwen3", tool_call_parser="hermes", enable_auto_tool_choice=True)
USER = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"  # ChatML, ends at the generation prompt


def client_fixture(model: str, **config: Any) -> Any:
    """A module-scoped fixture: an ``httpx.Client`` on a `derender_server` for ``model``
    (assign it to the fixture's name: ``smol = client_fixture("smollm2-135m-instruct")``)."""
    @pytest.fixture(scope="module")
    def client() -> Iterator[httpx.Client]:
        with derender_server(model, **config) as url, httpx.Client(base_url=url, timeout=30) as c:
            yield c
    return client


# -- clients ---------------------------------------------------------------------------
CHAT = "/v1/chat/completions/derender"


def gen_choice(ids: list[int], finish: str | None = None, stop_reason: Any = None, index: int = 0, logprobs: Any = None) -> dict:
    return {"index": index, "finish_reason": finish, "stop_reason": stop_reason, "token_ids": ids,
            "routed_experts": None, "sampling_mask": None, "weight_versions": None, "logprobs": logprobs}


def splits(n: int, how: str | int, rnd: random.Random | None = None) -> list[tuple[int, int]]:
    """Chunk boundaries over ``n`` tokens: "token" (one per chunk), "all", or a random split."""
    if how == "token":
        cuts = list(range(1, n))
    elif how == "all":
        cuts = []
    else:
        rnd = rnd or random.Random(how)
        cuts = sorted(rnd.sample(range(1, n), min(n - 1, rnd.randint(1, max(1, n // 3))))) if n > 1 else []
    bounds = [0] + cuts + [n]
    return list(zip(bounds, bounds[1:]))


class Derender:
    """Talks to a derender server the way a router would."""

    def __init__(self, client: httpx.Client, *, prompt: list[int] | None = None, extra: dict | None = None,
                 path: str = CHAT) -> None:
        self.c, self.prompt, self.extra, self.path = client, prompt, extra or {}, path

    def post(self, body: dict, path: str | None = None) -> httpx.Response:
        return self.c.post(path or self.path, content=orjson.dumps(body), headers={"content-type": "application/json"})

    def whole(self, choices: list[dict], **gen: Any) -> dict:
        body = {"model": None, "generate_response": {"request_id": "generate-tokens-chatcmpl-t", "choices": choices, **gen},
                "prompt_token_ids": self.prompt, **self.extra}
        if self.path.startswith("/v1/completions"):
            body = {"generate_responses": [body.pop("generate_response")], "prompt_token_ids": [self.prompt], **self.extra}
        r = self.post(body)
        assert r.status_code == 200, r.text
        return r.json()

    def stream(self, chunks: list[dict], key: str = "chunk") -> tuple[list[Any], list[dict]]:
        """Each item: a generate chunk (``{"choices": [...], "usage"?: …}``). Returns (each
        answer's ``key`` — the chat chunk, or a front door's ``events`` — , states)."""
        state, out, states = None, [], []
        for gen in chunks:
            body = {"stream": True, "generate_chunk": {"request_id": "generate-tokens-chatcmpl-t", **gen},
                    "stream_state": state, "prompt_token_ids": self.prompt, **self.extra}
            r = self.post(body)
            assert r.status_code == 200, r.text
            data = r.json()
            state = data["stream_state"]
            out.append(data[key])
            states.append(state)
        return out, states

    def pipe(self, chunks: list[dict], header: dict | None = None, byte_split: int | None = None) -> list[dict]:
        head = {"prompt_token_ids": self.prompt, **self.extra, **(header or {})}
        sse = b"".join(b"data: " + orjson.dumps({"request_id": "generate-tokens-chatcmpl-t", **g}) + b"\n\n" for g in chunks)
        sse += b"data: [DONE]\n\n"
        body = orjson.dumps(head) + b"\n" + sse
        step = byte_split or len(body)

        def gen():
            for i in range(0, len(body), step):
                yield body[i:i + step]

        r = self.c.post(self.path + "/pipe", content=gen())
        assert r.status_code == 200, r.text
        return parse_sse(r.content)


def parse_sse(raw: bytes) -> list[dict]:
    events = []
    for block in raw.split(b"\n\n"):
        if block.startswith(b"data: "):
            payload = block[6:]
            events.append({"done": True} if payload == b"[DONE]" else orjson.loads(payload))
    return events


def token_chunks(ids: list[int], how: str | int, finish: str = "stop", stop_reason: Any = None) -> list[dict]:
    parts = splits(len(ids), how)
    return [{"choices": [gen_choice(ids[a:b], finish if b == len(ids) else None, stop_reason if b == len(ids) else None)]}
            for a, b in parts]


# -- views to compare ------------------------------------------------------------------
def _args(s: str) -> Any:
    try:
        return json.loads(s) if s else s
    except ValueError:
        return s  # a cut-off call's partial arguments (issue 40)


def message_view(resp: dict, index: int = 0) -> dict:
    ch = next(c for c in resp["choices"] if c["index"] == index)
    if "message" in ch:
        m = ch["message"]
        calls = [(t["function"]["name"], _args(t["function"]["arguments"])) for t in m.get("tool_calls") or []]
        return {"content": m["content"] or None, "reasoning": m["reasoning"], "tool_calls": calls,
                "finish_reason": ch["finish_reason"], "stop_reason": ch["stop_reason"]}
    return {"content": ch["text"] or None, "finish_reason": ch["finish_reason"], "stop_reason": ch["stop_reason"]}


def stream_view(chunks: list[dict], index: int = 0) -> dict:
    """Concatenate deltas of one choice; checks the tool-call streaming discipline on the way."""
    content, reasoning, calls, finish, stop_reason, kind, roles = "", "", {}, None, None, "chat", 0
    for chunk in chunks:
        for ch in chunk.get("choices", []):
            if ch["index"] != index:
                continue
            if "text" in ch:
                kind = "completion"
                content += ch["text"] or ""
            else:
                d = ch["delta"]
                roles += d.get("role") == "assistant"
                content += d.get("content") or ""
                reasoning += d.get("reasoning") or ""
                assert (d.get("reasoning") or None) == (d.get("reasoning_content") or None)
                for tc in d.get("tool_calls") or []:
                    i = tc["index"]
                    if i not in calls:
                        assert tc["id"].startswith("chatcmpl-tool-") or tc["id"], tc
                        assert tc["type"] == "function" and tc["function"]["name"], tc
                        calls[i] = {"id": tc["id"], "name": tc["function"]["name"], "args": ""}
                    else:
                        assert "id" not in tc and "name" not in tc["function"], "id/name sent twice"
                    calls[i]["args"] += tc["function"].get("arguments") or ""
            if ch["finish_reason"] is not None:
                assert finish is None, "two finish reasons"
                finish, stop_reason = ch["finish_reason"], ch["stop_reason"]
    if kind == "completion":
        return {"content": content or None, "finish_reason": finish, "stop_reason": stop_reason}
    assert roles == 1, f"role sent {roles} times"
    return {"content": content or None, "reasoning": reasoning or None,
            "tool_calls": [(c["name"], _args(c["args"])) for _, c in sorted(calls.items())],
            "finish_reason": finish, "stop_reason": stop_reason}
