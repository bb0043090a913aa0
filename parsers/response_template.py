"""vLLM's ``hf`` parser: the checkpoint's own ``response_template`` drives the split.

A checkpoint may ship parsing metadata next to its chat template: the ``response_template``
key of ``tokenizer_config.json`` (what ``transformers``' ``tokenizer.parse_response`` and
``get_response_parser`` read; ``transformers.utils.chat_parsing``). Its shape::

    {"version": 1,
     "start_anchor": "<|im_start|>assistant\\n",          # where the assistant turn begins
     "fields": {
        "thinking":   {"open": "<think>", "close": "</think>"},
        "tool_calls": {"open": "<tool_call>", "close": "</tool_call>", "content": "json",
                       "repeats": true,
                       "transform": {"type": "function", "function": "{content}"}},
        "content":    {}}}                                  # no "open": the implicit region

vLLM serves the fields ``thinking`` (→ reasoning), ``content`` and ``tool_calls``, as we do;
other fields are refused when the template is loaded. A model with this metadata needs no
named parser: ``--tool-call-parser hf`` / ``--reasoning-parser hf`` (and vLLM's ``beam``,
the same mechanism) read it, and ``detect_parsers`` picks ``hf`` when it is present.

Theory of operation. One machine, the same shape as transformers' ``ResponseParser``: the
output is a sequence of *regions*. Outside an explicit region the text belongs to the
implicit one (or nowhere, if the template has none); there the machine watches every
field's ``open`` literal and the implicit field's ``close``; inside an explicit region it
watches only that region's ``close``. Literals are found with :mod:`parsers.scanner`, so a
marker split across feeds is held, never leaked; the earliest marker wins, the longer one
on a tie. ``*_pattern`` (regex) anchors are refused: they cannot be matched incrementally
without guessing.

Text regions stream raw, as vLLM 0.33's ``hf`` parser streams transformers' region chunks:
``thinking`` as reasoning (as content when no reasoning parser is set), ``content`` as
content; several runs of a region are concatenated (``parse_response`` would strip each
and keep the last one; vLLM's wire keeps the chunks). ``tool_calls`` regions are collected
and parsed when they close (``json`` with its ``string_delims``/``unquoted_keys``/
``allow_non_json`` knobs, ``python-call-list``, ``xml-inline``, ``kv-lines``), then the
``transform`` is applied; each resulting call (``{"name", "arguments"}`` or
``{"function": {…}}``) is written once, its string arguments typed by the tool's schema as
transformers does. A region that does not parse, or that yields no usable call, is given
back as content (markers included), never lost (vLLM drops such a region with a warning;
issue 15: text that is not a call stays content).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

from .calls import Calls
from .events import Content, Event, Reasoning
from .namedcalls import _python_literals
from .pythonic import call_to_json
from .scanner import find_marker

THINKING, CONTENT, TOOL_CALLS = "thinking", "content", "tool_calls"
_FIELDS = (THINKING, CONTENT, TOOL_CALLS)
_WS = " \t\r\n"
_FIELD_KEYS = {"open", "open_pattern", "close", "close_pattern", "content", "content_args", "repeats",
               "join", "optional", "transform", "transform_each"}
_PARSERS = ("text", "int", "float", "bool", "json", "xml-inline", "kv-lines", "python-call-list")
_PLACEHOLDER = re.compile(r"\{(\w+(?:\.\w+)*)\}")


def _literals(scope: str, spec: dict, key: str) -> tuple[str, ...]:
    if key + "_pattern" in spec:
        raise ValueError(f"{scope}: '{key}_pattern' (regex) anchors are not supported, only literal '{key}'")
    raw = spec.get(key)
    if raw is None:
        return ()
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
        raise ValueError(f"{scope}: '{key}' must be a non-empty string or list of strings")
    return tuple(dict.fromkeys(values))


@dataclass(frozen=True)
class Region:
    """One field of a response template (see the module docstring)."""

    name: str
    open: tuple[str, ...]
    close: tuple[str, ...]
    content: str = "text"
    args: dict = field(default_factory=dict)
    transform: object = None
    transform_each: bool = False


@dataclass(frozen=True)
class ResponseTemplate:
    """A validated ``response_template`` (literal anchors only)."""

    regions: dict[str, Region]
    implicit: str | None
    start_anchor: tuple[str, ...]

    @classmethod
    def from_dict(cls, spec: dict) -> "ResponseTemplate":
        """Validate transformers' ``response_template`` dict. Raises ``ValueError`` for a
        malformed template, an unsupported field (vLLM serves ``thinking``, ``content``,
        ``tool_calls``) or a regex anchor."""
        if not isinstance(spec, dict) or spec.get("version", 1) != 1:
            raise ValueError("response_template must be a dict with version 1")
        unknown = set(spec) - {"version", "defaults", "fields", "start_anchor", "start_anchor_pattern"}
        if unknown:
            raise ValueError(f"unknown keys in response_template: {sorted(unknown)}")
        if set(spec.get("defaults") or {}) - {"role"}:
            raise ValueError("response_template defaults other than 'role' are not supported")
        fields = spec.get("fields")
        if not isinstance(fields, dict) or not fields:
            raise ValueError("response_template.fields must be a non-empty dict")
        regions = {}
        for name, raw in fields.items():
            scope = f"response_template field {name!r}"
            if name not in _FIELDS:
                raise ValueError(f"{scope}: unsupported field; supported: {', '.join(_FIELDS)}")
            if not isinstance(raw, dict) or set(raw) - _FIELD_KEYS:
                raise ValueError(f"{scope}: must be a dict with keys from {sorted(_FIELD_KEYS)}")
            content = raw.get("content", "text")
            if content not in _PARSERS:
                raise ValueError(f"{scope}: unknown content parser {content!r}")
            if name != TOOL_CALLS and (content != "text" or raw.get("transform") is not None
                                       or raw.get("join") is not None):
                raise ValueError(f"{scope}: uses semantics that cannot be streamed (text only)")
            regions[name] = Region(name, _literals(scope, raw, "open"), _literals(scope, raw, "close"),
                                   content, dict(raw.get("content_args") or {}),
                                   raw.get("transform"), bool(raw.get("transform_each", False)))
        if CONTENT not in regions and all(r.open for r in regions.values()):
            regions[CONTENT] = Region(CONTENT, (), ())  # vLLM adds the implicit content region
        implicit = [r.name for r in regions.values() if not r.open]
        if len(implicit) > 1:
            raise ValueError(f"at most one response_template field may omit 'open': {implicit}")
        anchor = _literals("response_template", spec, "start_anchor")
        if not anchor:
            raise ValueError("response_template must define 'start_anchor'")
        return cls(regions, implicit[0] if implicit else None, anchor)

    def prompt_tail(self, prompt_text: str) -> str:
        """The prompt after its last start anchor: what the template already wrote of the
        assistant turn (e.g. an opening ``<think>``)."""
        ends = [prompt_text.rfind(a) + len(a) for a in self.start_anchor if a in prompt_text]
        return prompt_text[max(ends):] if ends else prompt_text


class ResponseTemplateStage:
    """Sans-IO splitter driven by a :class:`ResponseTemplate`; ``feed``/``finish`` return
    the events (written through ``calls``).

    State (plain data): ``cur`` current region (None: the null sink), ``opened`` (an
    explicit region was entered, or the implicit one received text), ``buf`` held text
    (a possible partial marker), ``body`` collected text of a tool-call region and
    ``marker`` the marker that opened it (given back with it if it is not a call)."""

    __slots__ = ("tpl", "calls", "tools_on", "reasoning_on", "cur", "opened", "buf", "body", "marker")

    def __init__(self, tpl: ResponseTemplate, calls: Calls, extract_tools: bool,
                 starts_in_reasoning: bool = False, reasoning: bool = True) -> None:
        self.tpl, self.calls, self.tools_on, self.reasoning_on = tpl, calls, extract_tools, reasoning
        self.cur, self.opened = tpl.implicit, False
        self.buf = self.body = self.marker = ""
        if starts_in_reasoning and THINKING in tpl.regions:
            self.cur, self.opened = THINKING, True

    def export(self) -> dict:
        return {"cur": self.cur, "opened": self.opened, "buf": self.buf, "body": self.body,
                "marker": self.marker}

    def load(self, data: dict) -> None:
        for key in ("cur", "opened", "buf", "body", "marker"):
            setattr(self, key, data[key])

    def feed(self, text: str) -> list[Event]:
        self.buf += text
        self._run(final=False)
        return self.calls.take()

    def finish(self) -> list[Event]:
        self._run(final=True)
        self._close()
        return self.calls.take()

    # -- the machine ----------------------------------------------------------------------
    def _watch(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(open markers, close markers) that matter in the current region."""
        regions = self.tpl.regions
        if self.cur is not None and self.cur != self.tpl.implicit:
            return (), regions[self.cur].close
        opens = tuple(m for r in regions.values() for m in r.open)
        return opens, regions[self.tpl.implicit].close if self.tpl.implicit else ()

    def _run(self, final: bool) -> None:
        buf, pos = self.buf, 0
        while True:
            opens, closes = self._watch()
            i, m = find_marker(buf[pos:], opens + closes, final)
            self._text(buf[pos:pos + i])
            pos += i
            if m is None:
                break
            pos += len(m)
            self._close(closed_by=m if m in closes else "")
            if m in opens and m not in closes:
                self.cur = next(r.name for r in self.tpl.regions.values() if m in r.open)
                self.opened, self.marker = True, m
        self.buf = buf[pos:]

    def _text(self, s: str) -> None:
        if not s or self.cur is None:
            return
        self.opened = True
        if self.cur == TOOL_CALLS:
            self.body += s
        elif self.cur == THINKING and self.reasoning_on:
            self.calls.out.append(Reasoning(s))
        else:
            self.calls.out.append(Content(s))

    def _close(self, closed_by: str = "") -> None:
        """End the current region; back to the implicit one."""
        if self.cur == TOOL_CALLS and self.opened:
            self._tool_calls(self.body, closed_by)
        self.cur, self.opened = self.tpl.implicit, False
        self.body = self.marker = ""

    def _tool_calls(self, body: str, closed_by: str) -> None:
        region = self.tpl.regions[TOOL_CALLS]
        found = None
        if self.tools_on:
            try:
                found = _calls_of(_transformed(region, _parse(region, body)))
            except (ValueError, KeyError, TypeError, AttributeError):
                found = None
            # one call in the region: a name missing from tools makes it text; in a list of
            # calls it is still a call (the calls after it are kept), as in the other families
            usable = self.calls.valid if len(found or ()) == 1 else self.calls.plausible
            found = [(n, a) for n, a in found or () if usable(n)]
        if not found:  # not a call after all: the region is content, markers included
            text = self.marker + body + closed_by
            if text:
                self.calls.out.append(Content(text))
            return
        for name, args in found:
            self.calls.start(name)
            self.calls.args(json.dumps(_typed(args, self.calls.tools, name), ensure_ascii=False))
            self.calls.end()


# -- content parsers (transformers.utils.chat_parsing semantics) ----------------------------

_LAX_OPEN, _LAX_CLOSE = "\x01", "\x02"


def _parse(region: Region, body: str):
    args, kind = region.args, region.content
    text = body.strip() if args.get("strip", True) else body
    if kind == "json":
        return _json(body, args)
    if kind == "python-call-list":
        return _python_call_list(text)
    if kind == "xml-inline":
        return _xml_inline(body, args)
    if kind == "kv-lines":
        return _kv_lines(body, args)
    return text


def _json(text: str, args: dict):
    working, captured = text, []
    for open_d, close_d in args.get("string_delims", []):
        def keep(m: re.Match) -> str:
            captured.append(m.group(1))
            return f"{_LAX_OPEN}{len(captured) - 1}{_LAX_CLOSE}"
        working = re.sub(re.escape(open_d) + r"(.*?)" + re.escape(close_d), keep, working, flags=re.DOTALL)
    if args.get("unquoted_keys"):
        working = re.sub(r'"(?:\\.|[^"\\])*"|(?<=[{,])(\s*)(\w+)(\s*):',
                         lambda m: m.group(0) if m.group(2) is None else f'{m.group(1)}"{m.group(2)}"{m.group(3)}:',
                         working)
    for i, s in enumerate(captured):
        working = working.replace(f"{_LAX_OPEN}{i}{_LAX_CLOSE}", json.dumps(s))
    try:
        return json.loads(working)
    except ValueError:
        if args.get("allow_non_json"):
            return text.strip() if args.get("strip", True) else text
        raise


def _python_call_list(text: str) -> list[dict]:
    src = _python_literals(text)
    try:
        node = ast.parse(src, mode="eval").body
    except SyntaxError as exc:
        raise ValueError("python-call-list: not Python") from exc
    if not isinstance(node, ast.List):
        raise ValueError("python-call-list: not a list")
    out = []
    for elt in node.elts:
        parsed = call_to_json(ast.get_source_segment(src, elt) or "")
        if parsed is None:
            raise ValueError("python-call-list: not a keyword call")
        out.append({"name": parsed[0], "arguments": json.loads(parsed[1])})
    return out


def _xml_inline(text: str, args: dict) -> dict:
    out: dict = {}
    for m in re.finditer(args["tag_pattern"], text, flags=re.DOTALL):
        groups = m.groupdict()
        value = _sub_parse(groups.get("value", ""), args.get("value_parser"))
        key = groups["key"]
        if key in out and args.get("merge_duplicates"):
            out[key] = (out[key] if isinstance(out[key], list) else [out[key]]) + [value]
        else:
            out[key] = value
    return out


def _kv_lines(text: str, args: dict) -> dict:
    strip = (lambda s: s.strip()) if args.get("strip", True) else (lambda s: s)
    out = {}
    for line in text.split(args.get("line_sep", "\n")):
        line = strip(line)
        if line and args.get("kv_sep", ":") in line:
            k, v = line.split(args.get("kv_sep", ":"), 1)
            out[strip(k)] = _sub_parse(strip(v), args.get("value_parser"))
    return out


def _sub_parse(raw: str, value_parser: dict | None):
    if value_parser is None:
        return raw
    sub = Region("sub", (), (), value_parser.get("name", "text"), value_parser.get("args", {}))
    return _parse(sub, raw)


def _transformed(region: Region, value):
    if region.transform is None:
        return value
    if region.transform_each:
        return [_apply(region.transform, dict(item)) for item in value]
    return _apply(region.transform, {"content": value})


def _apply(transform, scope: dict):
    if isinstance(transform, dict):
        return {k: _apply(v, scope) for k, v in transform.items()}
    if isinstance(transform, list):
        return [_apply(v, scope) for v in transform]
    whole = _PLACEHOLDER.fullmatch(transform) if isinstance(transform, str) else None
    if not whole:
        return transform
    root, *keys = whole.group(1).split(".")
    value = scope[root]
    for key in keys:
        value = value[key]
    return value


def _calls_of(value) -> list[tuple[str, dict]]:
    """Parsed region value -> ``[(name, arguments dict)]``; raises if it is not calls."""
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        fn = item.get("function", item)
        name, args = fn["name"], fn.get("arguments", fn.get("parameters", {}))
        if isinstance(args, str):
            args = json.loads(args) if args.strip() else {}
        if not isinstance(name, str) or not isinstance(args, dict):
            raise TypeError("not a call")
        out.append((name, args))
    return out


def _typed(args: dict, tools, name: str) -> dict:
    """String arguments cast by the tool's schema, as transformers' ``_coerce_tool_calls``."""
    props = {}
    for t in tools or ():
        fn = t.get("function", t) if isinstance(t, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            props = (fn.get("parameters") or {}).get("properties") or {}
    out = dict(args)
    for key, value in args.items():
        schema = props.get(key)
        if isinstance(value, str) and isinstance(schema, dict):
            out[key] = _coerce(value, _schema_types(schema))
    return out


def _schema_types(schema: dict) -> list[str]:
    t = schema.get("type")
    types = [t] if isinstance(t, str) else [x for x in t or () if isinstance(x, str)]
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            if isinstance(sub, dict):
                types += _schema_types(sub)
    if schema.get("nullable") and "null" not in types:
        types.append("null")
    return types


def _coerce(raw: str, types: list[str]):
    for t in types:
        try:
            if t == "integer":
                number = float(raw)
                if number.is_integer():
                    return int(number)
            elif t == "number":
                number = float(raw)
                if number == number and abs(number) != float("inf"):
                    return int(number) if number.is_integer() and "." not in raw else number
            elif t == "boolean" and raw.strip().lower() in ("true", "1", "false", "0"):
                return raw.strip().lower() in ("true", "1")
            elif t == "null" and raw.strip() in ("null", "None"):
                return None
            elif t in ("object", "array"):
                decoded = json.loads(raw)
                if isinstance(decoded, dict if t == "object" else list):
                    return decoded
        except ValueError:
            continue
    return raw


def template_starts_in_reasoning(tpl: ResponseTemplate, prompt_text: str) -> bool:
    """Does the prompt's assistant turn (after the start anchor) leave ``thinking`` open?"""
    stage = ResponseTemplateStage(tpl, Calls(None, None), extract_tools=False)
    stage.feed(tpl.prompt_tail(prompt_text))
    return stage.cur == THINKING and stage.cur != tpl.implicit


__all__ = ["ResponseTemplate", "ResponseTemplateStage", "Region", "template_starts_in_reasoning"]
