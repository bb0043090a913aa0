"""``four-hop``: OpenAI chat requests through a four-hop driver (render → prefill → decode →
derender behind ``POST /v1/chat/completions``, e.g. ``render-service drive``).

The target is the driver, not a render server: the figure is what a client sees end to
end. Each request is a system prompt + a unique user message of exactly ``prompt_tokens``
tokens (real code and a question); ``max_tokens`` bounds the output. With ``tools`` it
brings the coding-agent tools too, which a driver answers only when started with a tool
parser and ``--enable-auto-tool-choice`` (vLLM's 400 otherwise), so the default sends none:
the driver as docs/driver.md starts it has no tool parser. With ``stream`` the response is
read as server-sent events and time to first event is recorded too.
"""

from __future__ import annotations

import argparse
from collections import Counter

from .. import corpus
from ..stats import latency_summary
from .base import CHAT_PATH, Call, ExactPrompts, Probe, Session, Workload, check_choice, require, with_model


def _check_completion(resp) -> dict:
    choice = check_choice(resp, "chat completion")
    usage = resp.get("usage") or {}
    return {"finish_reason": choice.get("finish_reason"), "completion_tokens": usage.get("completion_tokens")}


def _check_events(events: list) -> dict:
    chunks = [e for e in events if isinstance(e, dict) and e.get("object") == "chat.completion.chunk"]
    require(bool(chunks), "chat completion stream without chat.completion.chunk events")
    finish = next((c["finish_reason"] for e in chunks for c in e.get("choices") or [] if c.get("finish_reason")), None)
    usage = next((e["usage"] for e in reversed(chunks) if e.get("usage")), {}) or {}
    return {"finish_reason": finish, "completion_tokens": usage.get("completion_tokens"), "events": len(chunks)}


class FourHop(Workload):
    """Chat completions through the driver; see the module docstring."""

    name = "four-hop"
    target_kind = "openai"

    def __init__(self, prompt_tokens: int = 512, max_tokens: int = 64, stream: bool = False, seed: int = 0,
                 tools: bool = False) -> None:
        self.prompt_tokens, self.max_tokens, self.stream, self.seed = prompt_tokens, max_tokens, stream, seed
        self.tools = tools
        self.prompts: ExactPrompts | None = None
        self.model: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "FourHop":
        return cls(args.prompt_tokens or 512, args.max_tokens, args.stream, args.seed, args.tools)

    def prepare(self, probe: Probe) -> None:
        self.model = probe.model
        self.prompts = ExactPrompts(probe.tokenizer, self.prompt_tokens, self.seed)

    def session(self, index: int) -> Session:
        body = {"messages": [{"role": "system", "content": corpus.SYSTEM_PROMPT},
                             {"role": "user", "content": self.prompts.text(index)}],
                "max_tokens": self.max_tokens}
        if self.tools:
            body["tools"] = corpus.TOOLS
        if self.stream:
            body.update(stream=True, stream_options={"include_usage": True})
        check = _check_events if self.stream else _check_completion
        yield Call(CHAT_PATH, with_model(body, self.model), check=check, sse=self.stream)

    def params(self) -> dict:
        return {"user_message_tokens": self.prompts.tokens if self.prompts else self.prompt_tokens,
                "max_tokens": self.max_tokens, "stream": self.stream, "tools": self.tools}

    def context_tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens + 1024

    def summarise(self, samples: list[tuple[float, dict]]) -> dict:
        ttft = latency_summary([t["ttft_s"] for _, t in samples if "ttft_s" in t])
        tokens = [t["completion_tokens"] for _, t in samples if isinstance(t.get("completion_tokens"), int)]
        return {"ttft_p50_ms": ttft["p50_ms"], "ttft_p99_ms": ttft["p99_ms"],
                "completion_tokens_mean": sum(tokens) / len(tokens) if tokens else None,
                "finish_reasons": dict(Counter(str(t.get("finish_reason")) for _, t in samples))}

    def rows(self, extra: dict) -> list[tuple[str, float | None, str]]:
        rows = [("completion tokens (mean)", extra.get("completion_tokens_mean"), ".1f")]
        if self.stream:
            rows += [("TTFT p50 ms", extra.get("ttft_p50_ms"), ".2f"), ("TTFT p99 ms", extra.get("ttft_p99_ms"), ".2f")]
        return rows
