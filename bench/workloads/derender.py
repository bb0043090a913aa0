"""Derender workloads on Qwen3-style outputs: reasoning, then one hermes tool call.

The engine output is the token ids (local tokenizer) of a real-looking text::

    <think>\\n{coding-agent reasoning}\\n</think>\\n\\n<tool_call>\\n{"name": "write_file",
    "arguments": {"path": "src/pkg_000000042.py", "content": "{real code}"}}\\n</tool_call>

followed by the tokenizer's EOS id (dropped by derender as the stop token, wire brief §3.2).
The ``<tool_call>…</tool_call>`` block has exactly ``call_tokens`` tokens (the code is sized
to fit). Served best by ``--reasoning-parser qwen3 --tool-call-parser hermes
--enable-auto-tool-choice`` on a Qwen3 tokenizer; any tokenizer works (markers that are not
special tokens are plain text to it).

- ``derender``: one non-streaming ``POST /v1/chat/completions/derender`` per output (§1.6).
- ``stream-derender``: the stateless streaming API, one token per ``generate_chunk``, each
  call sending back the previous ``stream_state`` unchanged (opaque); latency per chunk
  by position in the tool call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import Counter

from render_service.wire.generate import ENGINE_ID_PREFIX

from .. import corpus
from ..stats import latency_summary
from ..tokens import BenchTokenizer
from .base import DERENDER_PATH, RENDER_PATH, Call, Probe, Session, Workload, check_choice, require, with_model

WINDOW = 50  # chunks per position window (positions 0, L/4, L/2, 3L/4 of the call)


class ToolCallOutputs:
    """A pool of Qwen3-style outputs whose tool-call block is ``call_tokens`` long; output
    ``index`` gets its own reasoning and a fixed-width file name (same token count)."""

    def __init__(self, tok: BenchTokenizer, call_tokens: int, seed: int, pool: int = 4) -> None:
        self.tok, self.seed, self.codes, self.call_tokens = tok, seed, [], call_tokens
        for j in range(pool):
            builders = (lambda k, off=corpus.offset_for(seed * 7 + j + 1 + 1000 * a): self.call(0, corpus.excerpt(off, k))
                        for a in range(8))
            text, got = tok.fit_exact(builders, call_tokens, 3 * call_tokens)
            self.codes.append(self._content(text))
            self.call_tokens = min(self.call_tokens, got)

    @staticmethod
    def call(index: int, code: str) -> str:
        args = {"path": f"src/pkg_{index % 10**9:09d}.py", "content": code}
        return "<tool_call>\n" + json.dumps({"name": "write_file", "arguments": args}) + "\n</tool_call>"

    @staticmethod
    def _content(call_text: str) -> str:
        return json.loads(call_text[len("<tool_call>\n"):-len("\n</tool_call>")])["arguments"]["content"]

    def ids(self, index: int) -> tuple[list[int], int]:
        """(output token ids incl. EOS, index of the first tool-call token)."""
        head = f"<think>\n{corpus.reasoning(self.seed * 1_000_003 + index)}\n</think>\n\n"
        head_ids = self.tok.encode(head)
        ids = head_ids + self.tok.encode(self.call(index, self.codes[index % len(self.codes)]))
        return ids + ([self.tok.eos_id] if self.tok.eos_id is not None else []), len(head_ids)


def _gen_choice(ids: list[int], finish: str | None) -> dict:
    return {"index": 0, "finish_reason": finish, "stop_reason": None, "token_ids": ids,
            "routed_experts": None, "sampling_mask": None, "weight_versions": None, "logprobs": None}


def _check_message(resp) -> dict:
    choice = check_choice(resp, "derender response")
    return {"tool_calls": len(choice["message"].get("tool_calls") or []), "finish_reason": choice.get("finish_reason")}


def _check_chunk(resp) -> dict | None:
    require(isinstance(resp, dict) and isinstance(resp.get("chunk"), dict) and "stream_state" in resp,
            "stream derender response without chunk / stream_state")
    return None


def _check_last_chunk(resp) -> dict:
    _check_chunk(resp)
    choices = resp["chunk"].get("choices") or []
    return {"finish_reason": choices[0].get("finish_reason") if choices else None}


class _DerenderBase(Workload):
    needs_parsers = True
    default_call_tokens = 1600

    def __init__(self, call_tokens: int | None = None, seed: int = 0) -> None:
        self.call_tokens, self.seed = call_tokens or self.default_call_tokens, seed
        self.outputs: ToolCallOutputs | None = None
        self.prompt_ids: list[int] = []
        self.prompt_source = "none"
        self.model: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "_DerenderBase":
        return cls(args.call_tokens, args.seed)

    def prepare(self, probe: Probe) -> None:
        self.model = probe.model
        user = "The tests of the loader fail after the last refactor; rewrite src/loader.py so they pass."
        messages = [{"role": "system", "content": corpus.SYSTEM_PROMPT}, {"role": "user", "content": user}]
        self.chat_request = with_model({"messages": messages, "tools": corpus.TOOLS}, probe.model)
        rendered = probe.post(RENDER_PATH, self.chat_request)
        if isinstance(rendered, dict) and isinstance(rendered.get("token_ids"), list) and rendered["token_ids"]:
            self.prompt_ids, self.prompt_source = rendered["token_ids"], "rendered by the first target"
        else:
            probe.warn(f"{self.name}: the probe render failed; prompt_token_ids are the local encoding of the messages")
            self.prompt_ids = probe.tokenizer.encode(corpus.SYSTEM_PROMPT + "\n" + user + "\n")
            self.prompt_source = "local encoding"
        if probe.tokenizer.eos_id is None:
            probe.warn(f"{self.name}: the tokenizer names no EOS token; outputs end without one")
        self.outputs = ToolCallOutputs(probe.tokenizer, self.call_tokens, self.seed)

    def _common(self) -> dict:
        return {"prompt_tokens": len(self.prompt_ids), "prompt_token_ids": self.prompt_ids,
                "chat_request": self.chat_request}

    def params(self) -> dict:
        return {"call_tokens": self.outputs.call_tokens if self.outputs else self.call_tokens,
                "prompt_tokens": len(self.prompt_ids), "prompt_token_ids_source": self.prompt_source}

    def context_tokens(self) -> int:
        return self.call_tokens + 2048


class Derender(_DerenderBase):
    """Non-streaming derender of a whole reasoning + tool-call output per request."""

    name = "derender"
    default_call_tokens = 400

    def session(self, index: int) -> Session:
        ids, _ = self.outputs.ids(index)
        n = len(self.prompt_ids)
        gen = {"request_id": f"{ENGINE_ID_PREFIX}chatcmpl-bench{index:09d}", "model": self.model,
               "created": int(time.time()),
               "usage": {"prompt_tokens": n, "total_tokens": n + len(ids), "completion_tokens": len(ids),
                         "prompt_tokens_details": None, "completion_tokens_details": None},
               "prompt_logprobs": None, "prompt_token_id_logprobs": None, "prompt_token_ids": None,
               "mm_placeholders": None, "metrics": None, "kv_transfer_params": None, "ec_transfer_params": None,
               "output_mode": "tokens", "choices": [_gen_choice(ids, "stop")]}
        yield Call(DERENDER_PATH, with_model({"generate_response": gen, **self._common()}, self.model),
                   {"output_tokens": len(ids)}, _check_message)

    def summarise(self, samples: list[tuple[float, dict]]) -> dict:
        parsed = sum(1 for _, t in samples if t.get("tool_calls"))
        return {"tool_calls_parsed": parsed / len(samples) if samples else None,
                "finish_reasons": dict(Counter(str(t.get("finish_reason")) for _, t in samples))}

    def rows(self, extra: dict) -> list[tuple[str, float | None, str]]:
        frac = extra.get("tool_calls_parsed")
        return [("tool calls parsed %", None if frac is None else 100 * frac, ".0f")]


class StreamDerender(_DerenderBase):
    """Streaming derender through the stateless API, one token per chunk."""

    name = "stream-derender"
    unit = "stream"

    # Chunks per second one session is sure to get on a busy 2-core machine (4 sessions share
    # ~400-900 calls/s there) when no warm-up measured the box: each round must let every session
    # stream the whole call, or the late positions are never measured and no stream finishes.
    SLOW_CHUNKS_PER_S = 80
    MAX_DEFAULT_S = 600.0

    def default_duration(self, calls_per_s: float | None = None, sessions: int = 4) -> float:
        """Two rounds that each fit one whole stream per session, sized to this box: the warm-up's
        chunk rate for one session, shared by ``sessions`` over the machine's cores, with 1.5x
        headroom (40 s for a 1,600-token call at the 80 chunks/s assumed without a warm-up);
        at most `MAX_DEFAULT_S` — past that the run warns that streams did not finish."""
        per_session = self.SLOW_CHUNKS_PER_S
        if calls_per_s:
            per_session = calls_per_s * min(1.0, (os.cpu_count() or 1) / sessions) / 1.5
        return min(self.MAX_DEFAULT_S, max(10.0, 2 * self.call_tokens / per_session))

    def positions(self) -> list[int]:
        """Window starts in the tool call: 0, L/4, L/2, 3L/4 (0/400/800/1200 for L=1600)."""
        length = self.outputs.call_tokens if self.outputs else self.call_tokens
        return [length * q // 4 for q in range(4)]

    def session(self, index: int) -> Session:
        ids, start = self.outputs.ids(index)
        rid = f"{ENGINE_ID_PREFIX}chatcmpl-bench{index:09d}"
        common, state = self._common(), None
        for k, token in enumerate(ids):
            last = k == len(ids) - 1
            chunk = {"request_id": rid, "usage": None, "output_mode": "tokens",
                     "choices": [_gen_choice([token], "stop" if last else None)]}
            body = with_model({"stream": True, "generate_chunk": chunk, "stream_state": state, **common}, self.model)
            resp = yield Call(DERENDER_PATH, body, {"position": k - start}, _check_last_chunk if last else _check_chunk)
            state = resp["stream_state"]

    def summarise(self, samples: list[tuple[float, dict]]) -> dict:
        by_pos: dict[int, list[float]] = {}
        for lat, tag in samples:
            by_pos.setdefault(tag["position"], []).append(lat)
        window = max(1, min(WINDOW, self.call_tokens // 4))
        windows = []
        for pos in self.positions():
            lats = [x for p in range(pos, pos + window) for x in by_pos.get(p, [])]
            s = latency_summary(lats)
            windows.append({"position": pos, "window": window, "n": s["n"], "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"]})
        bucket = max(1, self.call_tokens // 64)
        curve = []
        for lo in range(min(by_pos, default=0), max(by_pos, default=-1) + 1, bucket):
            lats = [x for p in range(lo, lo + bucket) for x in by_pos.get(p, [])]
            if lats:
                curve.append([lo, 1e3 * statistics.median(lats)])
        finishes = Counter(str(t["finish_reason"]) for _, t in samples if "finish_reason" in t)
        return {"by_position": windows, "curve_ms": curve, "curve_bucket": bucket, "stream_finish_reasons": dict(finishes)}

    def rows(self, extra: dict) -> list[tuple[str, float | None, str]]:
        wins = extra.get("by_position") or []
        out = [(f"chunk p50 ms @ call token {w['position']}", w["p50_ms"], ".3f") for w in wins]
        out += [(f"chunk p99 ms @ call token {w['position']}", w["p99_ms"], ".3f") for w in wins[-1:]]
        if len(wins) > 1 and wins[0]["p50_ms"] and wins[-1]["p50_ms"] is not None:
            out.append(("last/first window p50", wins[-1]["p50_ms"] / wins[0]["p50_ms"], ".2f"))
        return out
