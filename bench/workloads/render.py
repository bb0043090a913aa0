"""Render workloads: ``render-long`` (one long unique prompt per request) and
``agent-loop`` (a conversation that grows turn by turn with tool calls and results).

Both POST OpenAI chat requests to ``/v1/chat/completions/render`` (wire brief §1.3) and
record the rendered prompt length (``len(token_ids)``) of every answer.
"""

from __future__ import annotations

import argparse
import json

from .. import corpus
from ..stats import latency_summary
from .base import RENDER_PATH, Call, ExactPrompts, Probe, Session, Workload, check_render, with_model

MAX_TOKENS = 1024


def _chat(messages: list[dict], model: str | None, tools: list[dict] | None = None) -> dict:
    body = {"messages": messages, "max_completion_tokens": MAX_TOKENS}
    if tools:
        body["tools"] = tools
    return with_model(body, model)


class RenderLong(Workload):
    """Chat render of a ``prompt_tokens``-long prompt: system prompt + one user message of
    real code and a question; the user message is sized so that the *rendered* prompt
    (template included, measured on the first target) has exactly ``prompt_tokens`` tokens."""

    name = "render-long"

    def __init__(self, prompt_tokens: int = 9000, seed: int = 0) -> None:
        self.prompt_tokens, self.seed = prompt_tokens, seed
        self.prompts: ExactPrompts | None = None
        self.overhead: int | None = None
        self.model: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "RenderLong":
        return cls(args.prompt_tokens or 9000, args.seed)

    @staticmethod
    def _messages(text: str) -> list[dict]:
        return [{"role": "system", "content": corpus.SYSTEM_PROMPT}, {"role": "user", "content": text}]

    def prepare(self, probe: Probe) -> None:
        tok, self.model = probe.tokenizer, probe.model
        resp = probe.post(RENDER_PATH, _chat(self._messages("x"), self.model))
        if isinstance(resp, dict) and isinstance(resp.get("token_ids"), list):
            self.overhead = len(resp["token_ids"]) - tok.count("x")
        else:
            probe.warn("render-long: the probe render failed; prompts are sized without the template")
            self.overhead = 0
        self.prompts = ExactPrompts(tok, max(32, self.prompt_tokens - self.overhead), self.seed)

    def session(self, index: int) -> Session:
        yield Call(RENDER_PATH, _chat(self._messages(self.prompts.text(index)), self.model), check=check_render)

    def params(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "template_overhead_tokens": self.overhead,
                "user_message_tokens": self.prompts.tokens if self.prompts else None,
                "ticket_keeps_length": self.prompts.stable if self.prompts else None}

    def context_tokens(self) -> int:
        return self.prompt_tokens + MAX_TOKENS + 64

    def summarise(self, samples: list[tuple[float, dict]]) -> dict:
        lens = [t["prompt_tokens"] for _, t in samples if "prompt_tokens" in t]
        return {"prompt_tokens_min": min(lens, default=None), "prompt_tokens_max": max(lens, default=None)}

    def rows(self, extra: dict) -> list[tuple[str, float | None, str]]:
        return [("rendered prompt tokens (max)", extra.get("prompt_tokens_max"), "d")]


class AgentLoop(Workload):
    """A coding agent's conversation, rendered once per turn as it grows.

    Turn 1 renders [system, user task]; before each later turn the assistant's tool call
    (``read_file`` / ``run_tests``, with a short thought as content so templates without
    tool support still render) and the tool's result (about ``turn_tokens`` tokens of real
    code) are appended. Latency is reported per turn. Sessions differ from their first
    message (ticket number) and in every tool result.
    """

    name = "agent-loop"
    unit = "conversation"

    def __init__(self, turns: int = 10, turn_tokens: int = 600, seed: int = 0) -> None:
        self.turns, self.turn_tokens, self.seed = turns, turn_tokens, seed
        self.chars_per_token = 3.5
        self.model: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "AgentLoop":
        return cls(args.turns or 10, args.turn_tokens or 600, args.seed)

    def prepare(self, probe: Probe) -> None:
        sample = corpus.excerpt(corpus.offset_for(self.seed), 20_000)
        self.chars_per_token = len(sample) / max(1, probe.tokenizer.count(sample))
        self.model = probe.model

    def conversation(self, index: int):
        """The messages of conversation ``index`` before each turn (turn 1 to ``turns``)."""
        seed = self.seed * 1_000_003 + index
        messages = [{"role": "system", "content": corpus.SYSTEM_PROMPT},
                    {"role": "user", "content": f"Ticket {index % 10**9:09d}. The tests of the loader fail after the "
                                                f"last refactor; find out why and fix it."}]
        result_chars = int(self.turn_tokens * self.chars_per_token)
        for turn in range(1, self.turns + 1):
            yield turn, messages
            call_id = f"call_{index % 10**9:09d}_{turn:03d}"
            offset = corpus.offset_for(seed * 131 + turn)
            if turn % 3 == 0:
                name, args = "run_tests", {"paths": ["tests/test_loader.py"], "keyword": f"case_{turn}"}
            else:
                name, args = "read_file", {"path": f"src/module_{(seed + turn) % 97}.py", "start_line": 1}
            messages = messages + [
                {"role": "assistant", "content": corpus.reasoning(seed + turn, 2),
                 "tool_calls": [{"id": call_id, "type": "function",
                                 "function": {"name": name, "arguments": json.dumps(args)}}]},
                {"role": "tool", "tool_call_id": call_id, "content": corpus.excerpt(offset, result_chars)},
            ]

    def session(self, index: int) -> Session:
        for turn, messages in self.conversation(index):
            yield Call(RENDER_PATH, _chat(messages, self.model, corpus.TOOLS), {"turn": turn}, check_render)

    def params(self) -> dict:
        return {"turns": self.turns, "turn_tokens": self.turn_tokens}

    def context_tokens(self) -> int:
        return (self.turns + 1) * (self.turn_tokens + 200) + MAX_TOKENS + 1024

    def summarise(self, samples: list[tuple[float, dict]]) -> dict:
        by_turn: dict[int, list[tuple[float, int | None]]] = {}
        for lat, tag in samples:
            if "turn" in tag:
                by_turn.setdefault(tag["turn"], []).append((lat, tag.get("prompt_tokens")))
        rows = []
        for turn in sorted(by_turn):
            lats = [lat for lat, _ in by_turn[turn]]
            lens = [n for _, n in by_turn[turn] if n is not None]
            summary = latency_summary(lats)
            rows.append({"turn": turn, "n": summary["n"], "p50_ms": summary["p50_ms"], "p99_ms": summary["p99_ms"],
                         "prompt_tokens": round(sum(lens) / len(lens)) if lens else None})
        return {"by_turn": rows}

    def rows(self, extra: dict) -> list[tuple[str, float | None, str]]:
        turns = extra.get("by_turn") or []
        if not turns:
            return []
        picks = {turns[0]["turn"]: turns[0], turns[len(turns) // 2]["turn"]: turns[len(turns) // 2],
                 turns[-1]["turn"]: turns[-1]}
        out = [(f"turn {turn} p50 ms", row["p50_ms"], ".2f") for turn, row in sorted(picks.items())]
        last = turns[-1]
        return out + [(f"turn {last['turn']} prompt tokens", last["prompt_tokens"], "d")]


class RenderShort(Workload):
    """A one-line chat question (about 50 rendered tokens with Qwen3's template): what a
    request costs beyond its tokens (HTTP, validation, template, metrics, logging)."""

    name = "render-short"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.model: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "RenderShort":
        return cls(args.seed)

    def prepare(self, probe: Probe) -> None:
        self.model = probe.model

    def session(self, index: int) -> Session:
        text = (f"Ticket {index % 10**9:09d}. In one sentence: why does a Python dict keep insertion order, "
                f"and since which version is that guaranteed?")
        yield Call(RENDER_PATH, _chat([{"role": "user", "content": text}], self.model), check=check_render)


class AgentTrace(AgentLoop):
    """A long coding-agent trace: `AgentLoop` with 41 turns of ~3,300-token tool results
    (the prompt grows to ~136k tokens), then ``cold`` renders of a last-turn prompt never
    seen before (another conversation's), tagged ``{"cold": True}``: late turns against a
    cold render of the same size is what incremental tokenization must win."""

    name = "agent-trace"
    COLD_RENDERS = 6  # a cold render's CPU varies by a tenth or more between calls: its median needs several
    COLD_BASE = 500_000_000  # conversation indices for the cold renders: never rendered as turns

    def __init__(self, turns: int = 41, turn_tokens: int = 3300, seed: int = 0) -> None:
        super().__init__(turns, turn_tokens, seed)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "AgentTrace":
        return cls(args.turns or 41, args.turn_tokens or 3300, args.seed)

    def last_messages(self, index: int) -> list[dict]:
        """Conversation ``index``'s messages at its last turn."""
        messages: list[dict] = []
        for _, messages in self.conversation(index):
            pass
        return messages

    def session(self, index: int) -> Session:
        yield from super().session(index)
        for k in range(self.COLD_RENDERS):
            cold = self.last_messages(self.COLD_BASE + index * self.COLD_RENDERS + k)
            yield Call(RENDER_PATH, _chat(cold, self.model, corpus.TOOLS), {"turn": self.turns, "cold": True},
                       check_render)

    def summarise(self, samples: list[tuple[float, dict]]) -> dict:
        out = super().summarise([s for s in samples if not s[1].get("cold")])
        cold = [lat for lat, tag in samples if tag.get("cold")]
        out["cold"] = latency_summary(cold)
        return out

    def rows(self, extra: dict) -> list[tuple[str, float | None, str]]:
        return super().rows(extra) + [("cold render p50 ms", (extra.get("cold") or {}).get("p50_ms"), ".2f")]
