"""One choice of one request: engine token ids in, an OpenAI delta out. Sans-IO.

Theory of operation
-------------------
Each `step` runs the chunk through a fixed pipeline; every stage is a small state machine
whose state is plain data, so the whole choice can be exported after any chunk and
resumed in another process (stateless streaming) or kept in memory (pipe mode):

    ids ─▶ stop-token drop ─▶ IncrementalDetokenizer ─▶ StopMatcher ─▶ OutputParser ─▶ gates ─▶ Delta
           (§3.2 step 2)      (held: ≤3 bytes)          (held: < longest  (held: partial   (leading
                                                         stop string)      markers/calls)   whitespace)

Non-streaming is the same object fed everything in one `step` with the finish reason,
so streamed deltas concatenate to the non-streaming message by construction.

The gates after the parser: reasoning is dropped with ``include_reasoning:false``; with
``parallel_tool_calls:false`` only call 0 is kept; whitespace-only content before the
first tool call is held and dropped if a call follows (hermes rule, §5.3 — applied
identically to both paths instead of only to the non-streaming one); calls get
``chatcmpl-tool-<16hex>`` ids unless the format carries its own (kimi_k2). A complete
call's arguments are a JSON object by the parsers' event contract (``"{}"`` for a
parameterless call, shared case 11 — checked for every family by the invariant tests);
a call streams as the parsers release it (issue 40: id and name first, then argument pieces);
one cut off inside its arguments keeps the partial text (the finish reason stays ``length``),
nothing is added here.

Nothing in the state grows with output already sent: the detokenizer window, the
stop-string hold-back, the parser's own unfinished state, and a few counters.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from parsers.api import OutputParser, ParserSpec, create_parser, prompt_starts_in_reasoning
from parsers.events import Content, Reasoning, ToolCallArguments, ToolCallStart

from .detokenize import IncrementalDetokenizer
from ..tokenizer import TextTokenizer
from .logprobs import LogprobDecoder, chat_logprobs, completion_logprobs
from .plan import Plan
from ..wire.generate import GenChoice
from .stops import StopMatcher

PROMPT_SCAN_IDS = 64  # prompt ids decoded for `prompt_starts_in_reasoning` (the generation prompt)


@dataclass
class ToolCallDelta:
    """A piece of one tool call: ``id``/``name`` only on the call's first piece."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class Delta:
    """What one step adds to a choice (non-streaming: the whole message)."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    logprobs: dict | None = None
    first: bool = False          # the choice's first delta (carries the role)

    @property
    def empty(self) -> bool:
        return not (self.content or self.reasoning or self.tool_calls or self.finish_reason or self.logprobs)


class ChoiceStream:
    """Derender one choice incrementally.

    Args:
        plan: the request's `Plan`.
        tokenizer: the model tokenizer.
        prompt_ids: the rendered prompt (a tail suffices; ≥64 ids let the parser see the
            whole generation prompt). Only read on a fresh start.
        state: `export_state` of an earlier step, or None for a fresh start.

    Raises:
        ValueError: malformed ``state`` (the caller turns it into a 400).
    """

    def __init__(self, plan: Plan, tokenizer: TextTokenizer, prompt_ids: list[int] | None = None,
                 state: dict | None = None) -> None:
        self.plan = plan
        self._tok = tokenizer
        skip = plan.skip_special_tokens
        if state is None:
            self.detok = IncrementalDetokenizer(tokenizer, skip, prompt_ids)
            self.stops = StopMatcher(list(plan.stops), plan.include_stop_str_in_output)
            self.starts_in_reasoning = self._starts_in_reasoning(prompt_ids)
            self.parser = create_parser(self._spec()) if plan.has_parser else None
            self.n_tokens, self.role_sent, self.done, self.calls = 0, False, False, 0
            self.ws, self.content_started = "", False
            self.lp = LogprobDecoder(tokenizer)
            self.text_offset = 0
            return
        try:
            self.detok = IncrementalDetokenizer.restore(tokenizer, skip, state["d"])
            self.stops = StopMatcher(list(plan.stops), plan.include_stop_str_in_output, state.get("s"))
            self.starts_in_reasoning = bool(state.get("sr", False))
            pstate = state.get("p")
            if plan.has_parser != (pstate is not None):
                raise ValueError("the server's parser configuration or the request's tools changed mid-stream")
            self.parser = OutputParser.restore(self._spec(), pstate) if pstate is not None else None
            self.n_tokens = _int(state.get("n", 0))
            self.role_sent, self.done = bool(state.get("r")), bool(state.get("x"))
            self.calls = _int(state.get("c", 0))
            self.ws, self.content_started = str(state.get("w", "")), bool(state.get("cs"))
            # "na" (calls still without argument text) in states from earlier versions is
            # moot: the parser itself writes a complete call's "{}"
            self.lp = LogprobDecoder(tokenizer, [_int(i) for i in state.get("lc", [])])
            self.text_offset = _int(state.get("to", 0))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed choice state ({exc})") from None

    # -- state -----------------------------------------------------------------------
    def export_state(self) -> dict:
        """Plain JSON-able state; bounded by what is unfinished, not by output length."""
        st: dict[str, Any] = {"d": self.detok.export_state(), "n": self.n_tokens}
        if self.plan.stops:
            st["s"] = self.stops.export_state()
        if self.parser is not None:
            st["p"] = self.parser.export_state()
            st["sr"] = self.starts_in_reasoning
        for key, value, default in (("r", self.role_sent, False), ("x", self.done, False), ("c", self.calls, 0),
                                    ("w", self.ws, ""), ("cs", self.content_started, False),
                                    ("lc", self.lp.context, []), ("to", self.text_offset, 0)):
            if value != default:
                st[key] = value
        return st

    # -- work ------------------------------------------------------------------------
    def step(self, choice: GenChoice) -> Delta | None:
        """Process one engine choice chunk. Returns None once the choice has finished
        (e.g. a stop string matched earlier and the engine kept generating)."""
        if self.done:
            return None
        plan = self.plan
        ids = list(choice.token_ids or [])
        finish, stop_reason = choice.finish_reason, choice.stop_reason
        text_ids = ids
        if finish == "stop" and not isinstance(stop_reason, str) and ids and not plan.include_stop_str_in_output:
            text_ids, stop_reason = self._drop_stop_token(ids, stop_reason)

        protected = max(0, plan.min_tokens - self.n_tokens)
        first = self.detok.push(text_ids[:protected]) if protected else ""
        rest = self.detok.push(text_ids[protected:] if protected else text_ids)
        if finish is not None:
            rest += self.detok.flush()
        self.n_tokens += len(ids)
        text = self.stops.push(first, protected=True) if first else ""
        text += self.stops.push(rest)
        if finish is not None:
            text += self.stops.flush()
        final = finish is not None or self.stops.stopped is not None

        delta = Delta(first=not self.role_sent)
        if self.parser is not None:
            events = self.parser.feed(text) if text else []
            if final:
                events += self.parser.finish()
        else:
            events = [Content(text)] if text else []
        self._apply(events, delta, final)

        if plan.kind == "chat" and plan.keeps_logprobs:
            delta.logprobs = chat_logprobs(self.lp, choice.logprobs, plan.top_logprobs)
        elif plan.kind == "completion":
            delta.logprobs, self.text_offset = completion_logprobs(self.lp, choice.logprobs, plan.top_logprobs, self.text_offset)

        if final:
            self.done = True
            if self.stops.stopped is not None:
                finish, stop_reason = "stop", self.stops.stopped
            finish = finish or "stop"
            if finish == "stop" and self.calls and not plan.named_tool:
                finish = "tool_calls"
            delta.finish_reason, delta.stop_reason = finish, stop_reason
        self.role_sent = True
        return delta

    def _drop_stop_token(self, ids: list[int], stop_reason: int | None) -> tuple[list[int], int | None]:
        """§3.2 step 2: the EOS / stop token is not text. Returns (text ids, stop_reason)."""
        plan, last = self.plan, ids[-1]
        if stop_reason is not None:
            return (ids[:-1], stop_reason) if last == stop_reason else (ids, stop_reason)
        if last == plan.tokenizer_eos_id and not plan.ignore_eos:
            return ids[:-1], None
        if last in plan.stop_token_ids or last in plan.eos_token_ids:
            return ids[:-1], last
        return ids, None

    def _apply(self, events: list, delta: Delta, final: bool) -> None:
        plan = self.plan
        calls: dict[int, ToolCallDelta] = {}
        content: list[str] = []
        for ev in events:
            if isinstance(ev, Content):
                if not ev.text:
                    continue
                if self.content_started:
                    content.append(ev.text)
                elif ev.text.isspace():
                    self.ws += ev.text
                else:
                    content.append(self.ws + ev.text)
                    self.ws, self.content_started = "", True
            elif isinstance(ev, Reasoning):
                if plan.include_reasoning:
                    delta.reasoning += ev.text
            elif isinstance(ev, ToolCallStart):
                if not plan.parallel_tool_calls and ev.index > 0:
                    continue
                self.ws = ""
                self.calls += 1
                calls[ev.index] = ToolCallDelta(ev.index, ev.id or f"chatcmpl-tool-{secrets.token_hex(8)}", ev.name)
            elif isinstance(ev, ToolCallArguments):
                if not ev.text or (not plan.parallel_tool_calls and ev.index > 0):
                    continue
                calls.setdefault(ev.index, ToolCallDelta(ev.index)).arguments += ev.text
        if final and self.ws and not self.calls:
            content.append(self.ws)
            self.ws = ""
        delta.content = "".join(content)
        delta.tool_calls = sorted(calls.values(), key=lambda c: c.index)

    def _spec(self) -> ParserSpec:
        p = self.plan
        return ParserSpec(reasoning=p.reasoning, tool=p.tool, tools=p.tools, tool_choice=p.tool_choice,
                          starts_in_reasoning=self.starts_in_reasoning, chat_template_kwargs=p.chat_template_kwargs,
                          response_template=p.response_template)

    def _starts_in_reasoning(self, prompt_ids: list[int] | None) -> bool:
        """Render's answer from ``parse_context`` when it sent one; else (vLLM-shaped
        requests) judged from the decoded tail of the prompt ids."""
        if not self.plan.reasoning:
            return False
        if self.plan.starts_in_reasoning is not None:
            return self.plan.starts_in_reasoning
        tail = (prompt_ids or [])[-PROMPT_SCAN_IDS:]
        text = self._tok.decode(tail, skip_special_tokens=False) if tail else ""
        return prompt_starts_in_reasoning(self.plan.reasoning, text, self.plan.chat_template_kwargs,
                                          self.plan.response_template)


def _int(v: Any) -> int:
    if type(v) is not int or v < 0:
        raise TypeError(f"expected a non-negative integer, got {v!r}")
    return v
