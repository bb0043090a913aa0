"""Reasoning formats as data, and the one machine that splits reasoning from content.

Theory of operation. Four states (:class:`State`); the markers each state looks for and
where they lead are the table :data:`TRANSITIONS`::

    PRE  --start tag-->  IN  --end tag / tool start-->  DONE
    OPEN --start tag (absorbed) / first real text--> IN
    OPEN --end tag / tool start--> DONE

* ``PRE`` (the prompt did not open reasoning): text is content; an opening tag starts
  reasoning (case 27: ``Sure.<think>checking</think>Done.`` → content ``Sure.Done.``).
  A tool-call start marker closes the door (a ``<think>`` inside tool arguments is text).
* ``OPEN`` (the prompt left reasoning open, or the family starts there): text is
  reasoning; one opening tag before any real text is absorbed together with the blanks
  before it (Qwen3 writes ``<think>`` itself when the template did not).
* ``IN``: reasoning until the FIRST end tag (case 29: later literal tags are content), or
  a tool-call start marker where the family's format puts calls inside thinking
  (``tool_ends``: kimi_k2, plamo3) — that marker is content, handed to the tool stage.
* ``DONE``: everything is content, no scanning.

The rules that do not fit the table sit beside it in :meth:`ReasoningStage.feed`: in OPEN,
real text before any marker moves to IN (there is no tag to absorb); the text before a
marker is content in PRE, reasoning in IN, and in OPEN (only blanks) dropped unless an end
tag follows; a tool marker is content, handed to the tool stage; a tool marker ends OPEN
or IN only for families with ``tool_ends``.

Markers are found with :mod:`parsers.scanner`, so a tag split across feeds (case 26) is
held, never leaked. Rows follow the vLLM 0.33 brief §5.4.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .events import Content, Reasoning
from .framing import FRAMINGS, NONE, Framing
from .scanner import find_marker


class State(StrEnum):
    """Where the reasoning machine is; the values are the codes exported states carry."""

    PRE = "pre"      # content; an opening tag starts reasoning
    OPEN = "open"    # reasoning; an opening tag before any real text is absorbed
    IN = "in"        # reasoning until the first end tag
    DONE = "done"    # all content, no scanning


PRE, OPEN, IN, DONE = State.PRE, State.OPEN, State.IN, State.DONE

# marker kinds: the row's opening tags, its end tags, the tool parser's call-start markers
START, END, TOOL = "start", "end", "tool"

# state -> marker kind -> next state (a kind missing from a row is not looked for there)
TRANSITIONS: dict[State, dict[str, State]] = {
    PRE: {START: IN, TOOL: DONE},
    OPEN: {START: IN, END: DONE, TOOL: DONE},
    IN: {END: DONE, TOOL: DONE},
}

THINK = ("<think>",), ("</think>",)

# Where a rendered prompt's last turn begins (the prompt scan stops there).
TURN_MARKERS = ("<|im_start|>", "<|im_end|>", "<｜User｜>", "<｜Assistant｜>", "<|user|>",
                "<|assistant|>", "<|system|>", "<|observation|>", "<|im_assistant|>",
                "<|im_user|>", "<|im_middle|>", "[INST]", "[/INST]", "<|start_of_role|>",
                "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "]~b]", "[e~[")


@dataclass(frozen=True)
class ReasoningFormat:
    """One reasoning family.

    * ``start``/``end``: opening / closing markers.
    * ``default_on``: starts in reasoning when the prompt shows no think block. Off for
      families whose models write their own opening tag (qwen3, glm45, kimi_k2): text
      before that tag is then content (case 27), not reasoning. On where the model may
      leave the tag out (deepseek_r1 original template, minimax_m2).
    * ``off_kwargs``: template kwargs that turn thinking off when set to false.
    * ``on_kwargs``: if non-empty, reasoning is parsed only when one of these kwargs is true
      (deepseek_v3: ``thinking``); otherwise the output is all content.
    * ``off_when``: ``(kwarg, value)`` pairs that turn reasoning off whatever else says
      (DeepSeek V4 ``reasoning_effort: "none"``, HY V3 ``reasoning_effort: "no_think"``).
    * ``tool_ends``: a tool-call start marker of the configured tool parser ends an open
      reasoning block. Only where the family's own format puts calls inside thinking
      (Kimi K2 Thinking interleaves calls with its chain of thought; PLaMo 3, which
      starts in reasoning, ends it with its tool-requests block); every other
      template writes calls after the closed block, so there a marker the model writes
      before ``</think>`` is reasoning text — a call it only thought about (issue 15).
    * ``trim_trailing``: trailing whitespace of the reasoning is dropped (kimi_k2).
    * ``content_prefix``: no split at all, content starts with this text
      (minimax_m2_append_think).
    * ``detect``: needle sets for ``--reasoning-parser auto``: a chat template holding every
      needle of one set is this family's (:mod:`parsers.detect`).
    * ``framing``: the family's response framing (:mod:`parsers.framing`), removed from
      content with this parser alone too.
    """

    name: str
    start: tuple[str, ...] = THINK[0]
    end: tuple[str, ...] = THINK[1]
    default_on: bool = True
    off_kwargs: tuple[str, ...] = ("enable_thinking", "thinking")
    on_kwargs: tuple[str, ...] = ()
    on_by_default: bool = False
    tool_ends: bool = False
    trim_trailing: bool = False
    content_prefix: str | None = None
    detect: tuple[tuple[str, ...], ...] = ()
    off_when: tuple[tuple[str, object], ...] = ()
    framing: Framing = NONE
    families: str = ""

    def active(self, kwargs: dict) -> bool:
        """Whether reasoning is parsed at all under these template kwargs."""
        if self.content_prefix is not None or any(kwargs.get(k) == v for k, v in self.off_when):
            return False
        if self.on_kwargs:
            vals = [kwargs.get(k) for k in self.on_kwargs if kwargs.get(k) is not None]
            return bool(vals[0]) if vals else self.on_by_default
        return True

    def thinking(self, kwargs: dict) -> bool:
        """Default start state when the prompt gives no signal."""
        if not self.default_on:
            return False
        return not any(kwargs.get(k) is False for k in self.off_kwargs)


FORMATS: dict[str, ReasoningFormat] = {f.name: f for f in (
    ReasoningFormat("qwen3", default_on=False,
                    detect=(("<|im_start|>", "<think>"),),
                    families="Qwen3, Qwen3-2507 thinking, QwQ"),
    ReasoningFormat("deepseek_r1", off_kwargs=(), detect=(("<｜Assistant｜>", "</think>"),),
                    families="DeepSeek R1 and distills"),
    ReasoningFormat("deepseek_v3", on_kwargs=("thinking", "enable_thinking"),
                    detect=(("<｜Assistant｜>", "</think>", "thinking"),),
                    families="DeepSeek V3.1 / V3.2 (thinking flag)"),
    ReasoningFormat("holo2", on_kwargs=("thinking", "enable_thinking"), on_by_default=True,
                    families="Holo2 (deepseek_v3, thinking on by default)"),
    ReasoningFormat("glm45", default_on=False, detect=(("<arg_key>", "<think>"),),
                    families="GLM-4.5 / 4.6 / 4.7"),
    ReasoningFormat("kimi_k2", default_on=False, tool_ends=True, trim_trailing=True,
                    detect=(("<|im_middle|>", "<think>"),),
                    families="Kimi K2 thinking"),
    ReasoningFormat("minimax_m2", off_kwargs=(), detect=(("<minimax:tool_call>", "<think>"),),
                    families="MiniMax-M2"),
    ReasoningFormat("minimax_m2_append_think", content_prefix="<think>",
                    families="MiniMax-M2 (reasoning kept inline)"),
    ReasoningFormat("mistral", start=("[THINK]",), end=("[/THINK]",), default_on=False,
                    detect=(("[THINK]",),),
                    families="Magistral (tokenizer v13+)"),
    ReasoningFormat("granite", start=("Here is my thought process:", "Here's my thought process:"),
                    end=("Here is my response:", "Here's my response:"), default_on=False,
                    detect=(("thought process",),),
                    families="Granite 3.2 / 3.3 (thinking=True)"),
    ReasoningFormat("seed_oss", start=("<seed:think>",), end=("</seed:think>",), default_on=False,
                    detect=(("<seed:think>",),),
                    families="Seed-OSS"),
)}

_THINK_FLAGS = ("thinking", "enable_thinking")

# Families added for vLLM 0.33's remaining names (``tests/fixtures/vllm/parser_names.json``).
# ``default_on`` follows where vLLM 0.33's parser starts (in reasoning, or in content).
FORMATS.update({f.name: f for f in (
    ReasoningFormat("deepseek_v4", on_kwargs=_THINK_FLAGS, on_by_default=True,
                    off_when=(("reasoning_effort", "none"),),
                    families="DeepSeek V4 (thinking unless turned off)"),
    ReasoningFormat("deepseek_v41", on_kwargs=_THINK_FLAGS, on_by_default=True,
                    off_when=(("reasoning_effort", "none"),),
                    families="DeepSeek V4.1 (thinking unless turned off)"),
    ReasoningFormat("poolside_v1", on_kwargs=_THINK_FLAGS, families="Poolside v1 (deepseek_v3 rules)"),
    # Command A starts in reasoning; a model that skips thinking opens its answer (or its
    # action) straight away, which ends the reasoning (SUPPORTED.md)
    ReasoningFormat("cohere_command4", start=("<|START_THINKING|>",),
                    end=("<|START_RESPONSE|>", "<|START_TEXT|>", "<|END_THINKING|>"), tool_ends=True,
                    framing=FRAMINGS["cohere"], families="Command A reasoning (Command 4)"),
    ReasoningFormat("cohere_command3", start=("<|START_THINKING|>",), end=("<|END_THINKING|>",),
                    default_on=False, framing=FRAMINGS["cohere"], families="Command R7B / R+ (Command 3)"),
    # ERNIE and Hunyuan-A13B wrap the answer (<response>, <answer>): the end markers take the
    # opening wrapper with them; the closing one is dropped by the family's tool row.
    ReasoningFormat("ernie45", end=("</think>\n\n<response>", "</think>"), families="ERNIE 4.5 thinking"),
    ReasoningFormat("gemma4", start=("<|channel>thought\n", "<|channel>thought"), end=("<channel|>",),
                    default_on=False, families="Gemma 4 (thought channel)"),
    ReasoningFormat("ling3", families="Ling 3 (GLM markers, thinking on by default)"),
    ReasoningFormat("granite_thinking_parser", end=("</think>\n", "</think>"), trim_trailing=True,
                    families="Granite 4.2 thinking"),
    ReasoningFormat("hunyuan_a13b", start=("<think>\n", "<think>"),
                    end=("\n</think>\n<answer>\n", "\n</think>\n", "</think>"), default_on=False,
                    framing=FRAMINGS["hunyuan_a13b"], families="Hunyuan-A13B"),
    ReasoningFormat("hy_v3", on_kwargs=("reasoning_effort",), off_when=(("reasoning_effort", "no_think"),),
                    families="Hunyuan (HY) V3 (reasoning_effort)"),
    ReasoningFormat("hy_v4", start=("<think:opensource>", "<think>"), end=("</think:opensource>", "</think>"),
                    families="Hunyuan (HY) V4 (suffixed or unsuffixed tokens)"),
    ReasoningFormat("kimi_k3", start=("<|open|>think<|sep|>",), end=("<|close|>think<|sep|>",),
                    framing=FRAMINGS["kimi_k3"],
                    families="Kimi K3 (XTML think channel, on unless thinking is turned off)"),
    # K2 Horizon calls from inside its thinking (vLLM 0.33's parser and its tests): the
    # tool-calls block ends the reasoning (SUPPORTED.md)
    ReasoningFormat("k2_horizon", start=("<ifm|think>", "<ifm|think_fast>", "<ifm|think_faster>"),
                    end=("</ifm|think>", "</ifm|think_fast>", "</ifm|think_faster>"), off_kwargs=(), tool_ends=True,
                    families="K2 Horizon (effort-specific tags)"),
    ReasoningFormat("mimo", families="MiMo (thinking on by default)"),
    ReasoningFormat("minicpmv", families="MiniCPM-V"),
    ReasoningFormat("minimax_m3", start=("<mm:think>",), end=("</mm:think>",), default_on=False,
                    families="MiniMax M3"),
    ReasoningFormat("nemotron_v3", trim_trailing=True, families="Nemotron 3 (Qwen3 markers)"),
    ReasoningFormat("olmo3", off_kwargs=(), families="OLMo 3 Think"),
    # PLaMo 3 starts in reasoning without an opening tag; its tool-requests block ends the
    # thinking, as vLLM 0.33's PLaMo parser and its tests have it (SUPPORTED.md)
    ReasoningFormat("plamo3", start=("<|plamo:begin_think:plamo|>",), end=("<|plamo:end_think:plamo|>",),
                    tool_ends=True, framing=FRAMINGS["plamo3"], families="PLaMo 3"),
    ReasoningFormat("step3", off_kwargs=(), families="Step-3 (end tag only)"),
    ReasoningFormat("step3p5", off_kwargs=(), trim_trailing=True,
                    families="Step-3.5 / 3.7 (template always opens <think>)"),
    # the message marker before a thinking block goes with it (no label between them)
    ReasoningFormat("inkling", start=("<|message_model|><|content_thinking|>", "<|content_thinking|>"),
                    end=("<|end_message|>",),
                    default_on=False, families="Inkling (thinking block)"),
)})

# Harmony (gpt-oss) reasoning lives in the channels; handled by parsers.harmony.
HARMONY_REASONING_NAMES = ("openai_gptoss",)

ALIASES = {"glm47": "glm45", "step5": "deepseek_r1"}


def _last_turn_block(fmt: ReasoningFormat, prompt_text: str) -> str:
    """``"open"``, ``"closed"`` or ``"none"``: the think block in the prompt's last turn."""
    turn = 0
    for marker in TURN_MARKERS:
        at = prompt_text.rfind(marker)
        if at >= 0 and at + len(marker) > turn:
            turn = at + len(marker)
    # positions from the last turn on (-1: not there); only their order matters
    last_start = max([prompt_text.rfind(m, turn) for m in fmt.start])
    last_end = max([prompt_text.rfind(m, turn) for m in fmt.end])
    if last_start > last_end:
        return "open"
    return "closed" if last_end >= 0 else "none"


def prompt_reasoning(fmt: ReasoningFormat, prompt_text: str, kwargs: dict) -> tuple[bool, bool]:
    """``(starts_open(...), rules_out_reasoning(...))`` with the prompt's last turn read once."""
    if fmt.content_prefix is not None:
        return False, True
    block = _last_turn_block(fmt, prompt_text)
    if block != "none":
        return block == "open", block == "closed" or not fmt.active(kwargs)
    active = fmt.active(kwargs)
    off = any(kwargs.get(k) is False for k in fmt.off_kwargs)
    return active and fmt.thinking(kwargs), not active or off


def starts_open(fmt: ReasoningFormat, prompt_text: str, kwargs: dict) -> bool:
    """Does the rendered prompt leave the model inside reasoning? (cases 23 and 25)

    Looks only at the prompt's last turn: an opening tag with no closing tag after it ⇒
    True; a closing tag after the last opening tag (the template wrote a closed, maybe
    empty, think block) ⇒ False; neither ⇒ the family default under ``kwargs``.
    """
    return prompt_reasoning(fmt, prompt_text, kwargs)[0]


def rules_out_reasoning(fmt: ReasoningFormat, prompt_text: str, kwargs: dict) -> bool:
    """Does the prompt leave no room for reasoning? A closed block in the last turn (the
    template answered for the model, case 25), or thinking switched off by a kwarg. A prompt
    with no block where the model may open one itself (Qwen3's default) is not ruled out."""
    return prompt_reasoning(fmt, prompt_text, kwargs)[1]


class ReasoningStage:
    """Splits text into ``Reasoning`` and ``Content`` events; see the module docstring. The
    content goes on to the tool stage."""

    __slots__ = ("fmt", "tool_markers", "st", "buf", "ws", "prefix")

    def __init__(self, fmt: ReasoningFormat, starts_in_reasoning: bool, kwargs: dict,
                 tool_markers: tuple[str, ...] = ()) -> None:
        self.fmt = fmt
        self.tool_markers = tool_markers
        # an open think block in the prompt turns reasoning on even without the kwarg
        active = fmt.content_prefix is None and (fmt.active(kwargs) or starts_in_reasoning)
        self.st = (OPEN if starts_in_reasoning else PRE) if active else DONE
        self.buf = ""      # held text (partial marker, or leading blanks in OPEN)
        self.ws = ""       # held trailing whitespace of reasoning (trim_trailing)
        self.prefix = fmt.content_prefix or ""

    def export(self) -> dict:
        return {"st": self.st.value, "buf": self.buf, "ws": self.ws, "prefix": self.prefix}

    def load(self, data: dict) -> None:
        self.st, self.buf, self.ws, self.prefix = State(data["st"]), data["buf"], data["ws"], data["prefix"]

    def _markers(self, st: State) -> dict[str, str]:
        """``{marker: kind}`` that state ``st`` looks for (an end tag wins over an equal
        opening tag, an opening tag over an equal tool marker)."""
        row = TRANSITIONS[st]
        fmt = self.fmt
        found: dict[str, str] = {}
        if TOOL in row and (st == PRE or fmt.tool_ends):
            found.update(dict.fromkeys(self.tool_markers, TOOL))
        if START in row:
            found.update(dict.fromkeys(fmt.start, START))
        if END in row:
            found.update(dict.fromkeys(fmt.end, END))
        return found

    def feed(self, text: str, final: bool = False) -> list[Reasoning | Content]:
        out: list[Reasoning | Content] = []
        if self.prefix:
            out.append(Content(self.prefix))
            self.prefix = ""
        if self.st == DONE:
            if text:
                out.append(Content(text))
            return out
        buf, pos = self.buf + text, 0
        while self.st != DONE:
            st = self.st
            kinds = self._markers(st)
            i, m = find_marker(buf[pos:], tuple(kinds), final)
            before = buf[pos:pos + i]
            if st == OPEN and before.strip():
                self.st = IN  # real reasoning text came first: no opening tag to absorb
                continue
            if m is None:
                if st == OPEN and not final:
                    break  # keep leading blanks until we know whether a tag follows
                self._emit(out, st != PRE, before)
                pos += i
                break
            pos += i + len(m)
            kind = kinds[m]
            # the text before the marker: content in PRE, reasoning in IN; in OPEN only
            # blanks, kept as reasoning before an end tag and dropped otherwise
            if st != OPEN or kind == END:
                self._emit(out, st != PRE, before)
            self.st = TRANSITIONS[st][kind]
            if self.st == DONE:
                self.ws = ""
            if kind == TOOL:  # reasoning (if any) is over; the marker is the tool stage's
                out.append(Content(m))
        if self.st == DONE:
            rest, self.buf = buf[pos:], ""
            if rest:
                out.append(Content(rest))
        else:
            self.buf = buf[pos:]
        if final:
            self.ws = ""
        return out

    def _emit(self, out: list, reasoning: bool, s: str) -> None:
        if not s:
            return
        if reasoning and self.fmt.trim_trailing:
            s = self.ws + s
            stripped = s.rstrip()
            self.ws = s[len(stripped):]
            s = stripped
            if not s:
                return
        out.append(Reasoning(s) if reasoning else Content(s))


__all__ = ["ReasoningFormat", "ReasoningStage", "FORMATS", "ALIASES", "HARMONY_REASONING_NAMES",
           "starts_open", "rules_out_reasoning", "prompt_reasoning"]
