"""Public surface of ``parsers``: spec in, events out (docs/ARCHITECTURE.md "Parsers").

One :class:`OutputParser` per choice of one request. It is sans-IO: ``feed(text)`` takes
the next piece of detokenized output (any split, down to single characters) and returns
events from :mod:`parsers.events`; ``finish()`` flushes what was held back and closes an
unfinished tool call. Non-streaming is ``feed(all) + finish()`` — the same code path — so
for every family and every chunking the concatenated events are identical.

Pipeline inside a parser::

    text --> ReasoningStage --reasoning--> Reasoning events
                    \\--content--> ToolStage (framing + body mechanism) --> Content / ToolCall*

Harmony (gpt-oss) replaces both stages with :class:`parsers.harmony.HarmonyStage`.

State: ``export_state()`` is a small JSON-able dict (held partial markers, the current
state of each machine, the open call's bookkeeping, counters). It never contains text that
was already emitted, only text whose fate is undecided. ``OutputParser.restore(spec,
state)`` continues exactly where the exported parser was.

``tool_choice`` (OpenAI request field):

* ``"none"``: no extraction; call markup stays content (Harmony: call bodies are content).
* ``"auto"``: the family's native syntax.
* ``"required"``: native syntax, and at the start of output a JSON list
  ``[{"name", "parameters"|"arguments"}, …]`` (the JSON-schema form vLLM constrains to).
* ``{"type":"function","function":{"name":N}}``: native syntax, and at the start of output
  a bare JSON object, which is N's arguments.

Malformed output never raises. A call opens only once its name is known and valid
(one of ``tools`` when tools were given; in a JSON list any name, as vLLM reports it) and,
for JSON envelopes, its arguments got past their opening brace; until then its raw text
is held and given back as content if it turns out not to be a call. From then on the call
streams as the model writes it (issue 40): its start, then argument pieces whose
concatenation is the whole answer's ``arguments``, then its end. Arguments are never
completed by invention: a call cut off by the end of the output (``finish_reason:
"length"``) or whose JSON breaks ends not complete, its arguments the text written so far
(``ToolCallEnd.complete`` false) — streamed and whole alike. ``cut_calls="content"``
(opt-in, issue 22's rule) holds a call until it completes and gives a cut one back as
content (:mod:`parsers.calls`).
Complete calls have JSON-object arguments.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from . import registry
from .calls import Calls
from .detect import detect_parsers
from .events import Content, Event, Reasoning, ToolCallArguments, ToolCallEnd, ToolCallStart
from .formats import ToolFormat
from .harmony import HarmonyStage
from .muse import MuseStage
from .response_template import ResponseTemplate, ResponseTemplateStage, template_starts_in_reasoning
from .reasoning import ReasoningStage, prompt_reasoning, rules_out_reasoning, starts_open
from .registry import reasoning_parser_names, tool_parser_names
from .schema import tool_names
from .framing import NONE, ContentFilter, StopFilter
from .tools import ToolStage

STATE_VERSION = 1

# tool_choice "required"/named without a family parser: only the JSON forms exist
_BARE = ToolFormat("json", "list")


@dataclass(frozen=True)
class ParserSpec:
    """Everything a parser needs; JSON-able (``to_dict``/``from_dict``).

    ``reasoning``/``tool``: registry names (``reasoning_parser_names()``,
    ``tool_parser_names()``) or None. ``tools``: OpenAI tool dicts, used for name checks
    and schema typing. ``tool_choice``: ``"none" | "auto" | "required" |
    {"type": "function", "function": {"name": N}}``. ``starts_in_reasoning``: from
    :func:`prompt_starts_in_reasoning`. ``chat_template_kwargs``: effective template kwargs
    (``enable_thinking``, ``thinking`` …). ``response_template``: the checkpoint's
    ``tokenizer_config.json`` ``response_template`` dict, required by the ``hf``/``beam``
    parsers (:mod:`parsers.response_template`). ``cut_calls``: ``"call"`` (default) streams
    a call as written and ends a cut one not complete; ``"content"`` holds each call until
    it completes and makes a cut one content (:mod:`parsers.calls`).
    """

    reasoning: str | None = None
    tool: str | None = None
    tools: list[dict] | None = None
    tool_choice: str | dict = "auto"
    starts_in_reasoning: bool = False
    chat_template_kwargs: dict = field(default_factory=dict)
    response_template: dict | None = None
    cut_calls: str = "call"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ParserSpec":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class ParsedToolCall:
    """One complete call: ``arguments`` is a JSON object string; ``id`` only if the model wrote one."""

    name: str
    arguments: str
    id: str | None = None


@dataclass(frozen=True)
class ParsedMessage:
    """Non-streaming result. Empty reasoning/content are None."""

    reasoning: str | None
    content: str | None
    tool_calls: list[ParsedToolCall]


def _named_function(tool_choice) -> str | None:
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function") or {}
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            raise ValueError("tool_choice object needs function.name")
        return name
    if tool_choice not in ("none", "auto", "required"):
        raise ValueError(f"tool_choice must be none, auto, required or a function object, not {tool_choice!r}")
    return None


class OutputParser:
    """Sans-IO reasoning + tool-call parser for one output; see the module docstring."""

    __slots__ = ("spec", "calls", "reasoning", "stage", "finished", "stop")

    def __init__(self, spec: ParserSpec) -> None:
        self.spec = spec
        named = _named_function(spec.tool_choice)
        choice = spec.tool_choice if named is None else "named"
        kwargs = spec.chat_template_kwargs or {}
        rfmt = registry.reasoning_format(spec.reasoning) if spec.reasoning else None
        tfmt = registry.tool_format(spec.tool) if spec.tool else None
        for kwarg, value, row in getattr(tfmt, "variants", ()):
            if kwargs.get(kwarg) == value:
                tfmt = row
        if spec.cut_calls not in ("call", "content"):
            raise ValueError(f"cut_calls must be call or content, not {spec.cut_calls!r}")
        self.calls = Calls(spec.tools, tool_names(spec.tools), hold=spec.cut_calls == "content")
        self.reasoning: ReasoningStage | None = None
        self.finished = False
        # the family's response framing applies whichever of its parsers is active (issue 22)
        framing = getattr(rfmt, "framing", NONE) + (tfmt.content_framing if isinstance(tfmt, ToolFormat) else NONE)
        self.stop = StopFilter(framing.stop) if framing.stop else None
        if registry.HARMONY in (rfmt, tfmt):
            self.stage = HarmonyStage(self.calls, tfmt == registry.HARMONY and choice != "none")
            return
        if registry.MUSE in (rfmt, tfmt):
            self.stage = MuseStage(self.calls, tfmt == registry.MUSE and choice != "none",
                                   reasoning=rfmt == registry.MUSE)
            return
        if registry.RESPONSE_TEMPLATE in (rfmt, tfmt):
            tpl = _response_template(spec.response_template)
            for fmt, field, flag in ((rfmt, "thinking", "--reasoning-parser"),
                                     (tfmt, "tool_calls", "--tool-call-parser")):
                if fmt == registry.RESPONSE_TEMPLATE and field not in tpl.regions:  # as vLLM refuses at startup
                    raise ValueError(f"{flag} hf needs a response_template with a {field} field")
            self.stage = ResponseTemplateStage(
                tpl, self.calls, tfmt == registry.RESPONSE_TEMPLATE and choice != "none", spec.starts_in_reasoning,
                reasoning=rfmt == registry.RESPONSE_TEMPLATE)
            return
        if choice == "none" or (tfmt is None and choice == "auto"):
            self.stage = ContentFilter(self.calls, framing)
            markers: tuple[str, ...] = ()
        else:
            fmt = tfmt or _BARE
            at_start = dict(fmt.at_start)
            if choice == "required":
                at_start["["] = "list|pythonic" if at_start.get("[") == "pythonic" else "list"
            elif choice == "named" and "{" not in at_start:
                at_start["{"] = "named"
            self.stage = ToolStage(fmt, self.calls, at_start, named, framing.drop)
            markers = fmt.all_text_markers
        if rfmt is not None:
            self.reasoning = ReasoningStage(rfmt, spec.starts_in_reasoning, kwargs, markers)

    # -- streaming --------------------------------------------------------------------
    def feed(self, text: str) -> list[Event]:
        """Consume the next piece of output text; returns the events it completes."""
        if self.finished:
            raise ValueError("feed() after finish()")
        return self._step(text, final=False)

    def finish(self) -> list[Event]:
        """End of output: flush held text, close an unfinished call. Idempotent."""
        if self.finished:
            return []
        self.finished = True
        return self._step("", final=True)

    def _step(self, text: str, final: bool) -> list[Event]:
        out: list[Event] = []
        stage = self.stage
        if self.stop is not None:
            text = self.stop.feed(text, final)
        if self.reasoning is None:
            if text:
                out += stage.feed(text)
        else:
            for ev in self.reasoning.feed(text, final):
                out += [ev] if isinstance(ev, Reasoning) else stage.feed(ev.text)
        if final:
            out += stage.finish()
        return merge_events(out)

    # -- state ------------------------------------------------------------------------
    def export_state(self) -> dict:
        """Small JSON-able dict; see the module docstring."""
        stage = self.stage.export()
        state = {"v": STATE_VERSION, "calls": self.calls.export(_raw(stage)), "stage": stage,
                 "reasoning": self.reasoning.export() if self.reasoning else None,
                 "finished": self.finished}
        if self.stop is not None:
            state["stop"] = self.stop.export()
        return state

    @classmethod
    def restore(cls, spec: ParserSpec, state: dict) -> "OutputParser":
        """A parser for ``spec`` continuing from ``state``. Raises ``ValueError`` if the state
        does not belong to this kind of parser or is damaged."""
        parser = cls(spec)
        try:
            if state.get("v") != STATE_VERSION:
                raise ValueError(f"parser state version {state.get('v')!r} != {STATE_VERSION}")
            if (state["reasoning"] is None) != (parser.reasoning is None):
                raise ValueError("parser state does not match the spec's reasoning parser")
            parser.calls.load(state["calls"], _raw(state["stage"]))
            parser.stage.load(state["stage"])
            if parser.reasoning is not None:
                parser.reasoning.load(state["reasoning"])
            parser.finished = bool(state["finished"])
            if parser.stop is not None and "stop" in state:
                parser.stop.load(state["stop"])
        except (KeyError, TypeError, IndexError, AttributeError) as exc:
            raise ValueError(f"damaged parser state: {exc!r}") from None
        return parser


def _raw(stage_state) -> str:
    """The raw text of an open call in an exported stage (the framing machine's; ``""`` for
    stages that keep none): `Calls` exports the call's held arguments as a slice of it."""
    raw = stage_state.get("raw") if isinstance(stage_state, dict) else None
    return raw if isinstance(raw, str) else ""


def merge_events(events: list[Event]) -> list[Event]:
    """Merge neighbouring text events of the same kind (and the same call). ``feed`` and
    ``finish`` return merged lists; merging the concatenation of several feeds' events
    gives what one whole feed returns."""
    out: list[Event] = []
    for ev in events:
        if out and type(ev) is type(out[-1]):
            prev = out[-1]
            if isinstance(ev, (Content, Reasoning)):
                out[-1] = type(ev)(prev.text + ev.text)
                continue
            if isinstance(ev, ToolCallArguments) and ev.index == prev.index:
                out[-1] = ToolCallArguments(ev.index, prev.text + ev.text)
                continue
        out.append(ev)
    return out


def _response_template(data: dict | None) -> ResponseTemplate:
    if data is None:
        raise ValueError("the hf/beam parsers need the checkpoint's response_template "
                         "(tokenizer_config.json); this model has none")
    return ResponseTemplate.from_dict(data)


def create_parser(spec: ParserSpec) -> OutputParser:
    """New parser for one choice. Raises ``ValueError`` for unknown parser names or a bad
    ``tool_choice``."""
    return OutputParser(spec)


def prompt_starts_in_reasoning(reasoning: str | None, prompt_text: str,
                               chat_template_kwargs: dict | None = None,
                               response_template: dict | None = None) -> bool:
    """Does generation start inside reasoning, judged from the rendered prompt's tail?

    Open think tag in the last turn ⇒ True (case 23: Qwen3-2507 templates pre-open
    ``<think>``); a closed (possibly empty) think block ⇒ False (case 25: Qwen3 with
    ``enable_thinking: false``, whatever kwarg caused it); no tag ⇒ the family default under
    the kwargs: True for deepseek_r1 / minimax_m2 (models that may omit the opening tag),
    for deepseek_v3 only when ``thinking`` is true, False for families whose models write
    ``<think>`` themselves (qwen3, glm45, kimi_k2; case 27 then routes text before the tag
    to content). Harmony and no reasoning parser ⇒ False. ``hf``/``beam``: the prompt's
    assistant turn (after the template's start anchor) leaves the ``thinking`` region open.
    """
    if not reasoning:
        return False
    fmt = registry.reasoning_format(reasoning)
    if fmt in (registry.HARMONY, registry.MUSE):
        return False
    if fmt == registry.RESPONSE_TEMPLATE:
        return template_starts_in_reasoning(_response_template(response_template), prompt_text)
    return starts_open(fmt, prompt_text, chat_template_kwargs or {})


def prompt_ends_reasoning(reasoning: str | None, prompt_text: str,
                          chat_template_kwargs: dict | None = None) -> bool:
    """Is reasoning over before the first generated token? vLLM's ``reasoning_ended`` for
    the engine's structured-output gate (wire brief §2.5): True only when the prompt rules
    thinking out — a closed think block in the last turn, or thinking turned off by a
    template kwarg. An open block, or none where the model may write its own opening tag,
    is False, so an output constraint waits until the model's reasoning ends. Harmony
    (gpt-oss): True, as vLLM 0.33 (its `GptOssReasoningParser.is_reasoning_end` is always true,
    and its engine applies a gpt-oss grammar from the first token whatever render says, since it
    asks that parser itself when the field is null). No reasoning parser: False.
    """
    if not reasoning:
        return False
    fmt = registry.reasoning_format(reasoning)
    if fmt == registry.HARMONY:
        return True
    if fmt in (registry.RESPONSE_TEMPLATE, registry.MUSE):
        return False
    return rules_out_reasoning(fmt, prompt_text, chat_template_kwargs or {})


def prompt_reasoning_state(reasoning: str | None, prompt_text: str, chat_template_kwargs: dict | None = None,
                           response_template: dict | None = None) -> tuple[bool, bool]:
    """``(prompt_ends_reasoning(...), prompt_starts_in_reasoning(...))`` with the prompt read
    once (render asks both of every prompt)."""
    if not reasoning:
        return False, False
    fmt = registry.reasoning_format(reasoning)
    if isinstance(fmt, str):  # Harmony, Muse, a response template: no think-tag row
        return (prompt_ends_reasoning(reasoning, prompt_text, chat_template_kwargs),
                prompt_starts_in_reasoning(reasoning, prompt_text, chat_template_kwargs, response_template))
    starts, ruled_out = prompt_reasoning(fmt, prompt_text, chat_template_kwargs or {})
    return ruled_out, starts


def parse_complete(spec: ParserSpec, text: str) -> ParsedMessage:
    """Non-streaming parse of a whole output (``feed(text)`` + ``finish()``)."""
    parser = OutputParser(spec)
    events = parser.feed(text) + parser.finish()
    return message_from_events(events)


def message_from_events(events: list[Event]) -> ParsedMessage:
    """Fold events into a :class:`ParsedMessage` (what a client assembles from a stream)."""
    reasoning: list[str] = []
    content: list[str] = []
    calls: dict[int, list] = {}
    for ev in events:
        if isinstance(ev, Content):
            content.append(ev.text)
        elif isinstance(ev, Reasoning):
            reasoning.append(ev.text)
        elif isinstance(ev, ToolCallStart):
            calls[ev.index] = [ev.name, [], ev.id]
        elif isinstance(ev, ToolCallArguments):
            calls[ev.index][1].append(ev.text)
    return ParsedMessage(
        reasoning="".join(reasoning) or None,
        content="".join(content) or None,
        tool_calls=[ParsedToolCall(name, "".join(args), cid)
                    for _, (name, args, cid) in sorted(calls.items())],
    )


__all__ = ["ParserSpec", "OutputParser", "ParsedMessage", "ParsedToolCall", "create_parser",
           "prompt_starts_in_reasoning", "prompt_ends_reasoning", "prompt_reasoning_state", "parse_complete", "message_from_events", "merge_events",
           "reasoning_parser_names", "tool_parser_names", "detect_parsers",
           "Event", "Content", "Reasoning", "ToolCallStart", "ToolCallArguments", "ToolCallEnd"]
