"""XML-parameter call bodies: ``<parameter=K>V</parameter>`` and its relatives.

Used by qwen3_coder / seed_oss (``<parameter=K>``), glm45 (``<arg_key>K</arg_key>
<arg_value>V</arg_value>``) and minimax_m2 (``<parameter name="K">``); the spelling is an
:class:`parsers.formats.XmlDialect` row. The call was already started by the framing
machine (its name is in the header), so this body only writes the arguments object.

Values are raw text, typed by the tool's JSON schema (:mod:`parsers.schema`):

* string parameters (or parameters with no schema) stream as JSON string pieces as the
  model writes them: ``{"city": "`` … ``Par`` … ``is`` … ``"``. One leading and one
  trailing newline are dropped where the dialect says so (qwen3_coder), so a trailing
  ``\\n`` is held until the next character shows it is not the last one;
* other parameters (integer, number, boolean, object, array, null) are collected until
  their end marker and then written in one piece (``"5"`` → ``5`` for an integer, case 15).

Values end at the first end marker: there is no escaping layer in these formats, so a
literal ``</parameter>`` inside a value cannot be told apart (case 12 notes). A brace in a
value is just a character (case 15a). A call cut off by the end of output is not complete
(:mod:`parsers.calls`): cut inside a value, the arguments end with the value's partial text
(no closing quote or brace invented); cut between parameters, the object of whole values is
closed (case 15c).
"""

from __future__ import annotations

import html
import json
from enum import StrEnum

from .calls import DONE, MORE, Calls, Status
from .formats import attributes
from .jsonstream import JsonValue
from .events import Content
from .scanner import find_marker, release_run
from .schema import coerce, is_string_only

_MAX_KEY = 256
_CDATA = ("<![CDATA[", "]]>")  # a value wrapped verbatim (MiniCPM 5)


class Slot(StrEnum):
    """Where an XML-style call body is; the values are the codes exported states carry."""

    BETWEEN = "between"  # between parameters: a key marker or the call's end
    KEY = "key"          # reading a parameter name
    PREVAL = "preval"    # after the name, before the value marker (glm45)
    VALUE = "value"      # inside a value


class XmlCall:
    """Arguments of one XML-style call (see module docstring)."""

    kind = "xml"
    __slots__ = ("d", "st", "key", "types", "val", "lead", "tail", "opened", "status", "known", "cdata", "gap",
                 "said")

    def __init__(self, fmt=None) -> None:
        self.d = fmt.xml if fmt is not None else None
        self.st = Slot.BETWEEN
        self.key = ""
        self.types: list[str] | None = None  # None: string value being streamed
        self.val = ""          # collected raw text of a typed value
        self.lead = True       # at the first character of a value
        self.tail = ""         # held trailing newline of a streamed string value
        self.opened = False    # '{' written
        self.status = MORE
        self.known: dict = {}  # values of enum/const parameters read so far (they select schema branches)
        self.cdata = False     # the value is wrapped in <![CDATA[ … ]]> (dialect ``cdata``)
        self.gap = ""          # blank text between parameters, held (release_run)
        self.said = False      # the text between parameters so far is not blank: content

    def export(self) -> list:
        return [self.st.value, self.key, self.types, self.val, self.lead, self.tail, self.opened,
                self.status, self.known, self.cdata, self.gap, self.said]

    @classmethod
    def load(cls, data: list, fmt=None) -> "XmlCall":
        obj = cls(fmt)
        (obj.st, obj.key, obj.types, obj.val, obj.lead, obj.tail, obj.opened,
         obj.status) = data[:8]
        obj.known = data[8] if len(data) > 8 else {}
        obj.cdata = bool(data[9]) if len(data) > 9 else False
        obj.gap, obj.said = (data[10], bool(data[11])) if len(data) > 11 else ("", False)
        obj.st, obj.status = Slot(obj.st), Status(obj.status)
        return obj

    def feed(self, text: str, pos: int, final: bool, calls: Calls) -> int:
        d = self.d
        n = len(text)
        while pos < n and self.status == MORE:
            st = self.st
            if st == Slot.BETWEEN or st == Slot.PREVAL:
                first = d.value_begin if st == Slot.PREVAL else d.key_begin
                i, m = find_marker(text[pos:], (first,) + d.call_end + d.call_end_peek, final)
                if st == Slot.BETWEEN:  # (between key and value: the dialect's skipped type tag)
                    self._between(text[pos:pos + i], calls)
                if m is None:
                    return pos + i
                self.gap, self.said = "", False
                if m == first:
                    pos += i + len(m)
                    if st == Slot.PREVAL:
                        self._begin_value(calls)
                    else:
                        self.st, self.key = Slot.KEY, ""
                else:
                    pos += i + (len(m) if m in d.call_end else 0)
                    self._close(calls)
            elif st == Slot.KEY:
                i, m = find_marker(text[pos:], (d.key_end,), final)
                self.key += text[pos:pos + i]
                if m is None:
                    if len(self.key) > _MAX_KEY:  # not a parameter after all: stop here
                        self._cut(calls)
                    return pos + i
                pos += i + len(m)
                self.key, typed = self._clean_key(self.key)
                if d.value_begin:
                    self.st = Slot.PREVAL
                else:
                    self._begin_value(calls, typed)
            else:  # value
                if d.cdata and self.lead and not self.val and not self.cdata:
                    head = text[pos:pos + len(_CDATA[0])]
                    if head == _CDATA[0]:
                        self.cdata = True
                        pos += len(head)
                        continue
                    if _CDATA[0].startswith(head) and not final:
                        return pos  # may still be the CDATA opener
                ends = (_CDATA[1] + d.value_end, d.value_end) if self.cdata else (d.value_end,)
                i, m = find_marker(text[pos:], ends, final)
                self._value_text(text[pos:pos + i], calls)
                if m is None:
                    return pos + i
                pos += i + len(m)
                self._end_value(calls)
        return pos

    def finish(self, calls: Calls) -> None:
        if self.status == MORE:
            self._cut(calls)

    def _cut(self, calls: Calls) -> None:
        """The call stops before its end marker (end of output): it is not complete.
        Cut inside a value, the arguments keep the text written so far — no closing
        quote or brace is invented; a typed value is kept while it is still JSON (``4``,
        ``tr``). Cut between parameters, every value the model wrote is whole and the
        JSON object that translates them is closed (case 15c: never an unterminated
        object where no value was cut)."""
        if self.st != Slot.VALUE:
            calls.args("}" if self.opened else "{}")
        elif self.types is None:
            if self.tail:
                calls.args(json.dumps(self.tail)[1:-1])
        else:
            raw = (self.val[1:] if self.d.trim_newline and self.val.startswith("\n") else self.val).strip()
            sub = JsonValue()
            end, rel = sub.feed(raw)
            text = rel + sub.cut() if end == len(raw) and not sub.error else ""
            if text:
                calls.args(self._prefix() + text)
        calls.end(complete=False)
        self.status = DONE

    def _between(self, s: str, calls: Calls) -> None:
        """Text between parameters: blanks are the model's layout (dropped at the next
        marker); anything else is content, never lost (issue 40: hy_v4's
        ``</arg_value>JUNK</tool_call>``)."""
        if s:
            s, self.gap, self.said = release_run(self.gap, self.said, s)
            if s:
                calls.out.append(Content(s))

    # -- values -----------------------------------------------------------------------
    def _clean_key(self, key: str) -> tuple[str, list[str] | None]:
        """Key text -> (key, types the key's own attribute gives, or None: the schema decides)."""
        key = key.strip()
        if self.d.string_attr:
            return _attr_key(key, self.d.string_attr)
        if self.d.quoted_key and len(key) >= 2 and key[0] == key[-1] and key[0] in "'\"":
            key = key[1:-1]
        return key, None

    def _begin_value(self, calls: Calls, typed: list[str] | None = None) -> None:
        self.st, self.lead, self.tail, self.val = Slot.VALUE, True, "", ""
        schema = calls.schemas(calls.name, self.known).get(self.key) if typed is None else None
        types = (schema.types if schema else []) if typed is None else typed
        # a string with listed values is collected too: it may select a schema branch
        self.types = None if is_string_only(types) and not (schema and schema.values) else types
        if self.types is None:
            calls.args(self._prefix() + '"')

    def _prefix(self) -> str:
        head = ", " if self.opened else "{"
        self.opened = True
        return head + json.dumps(self.key, ensure_ascii=False) + ": "

    def _value_text(self, s: str, calls: Calls) -> None:
        if not s:
            return
        if self.types is not None:
            self.val += s
            return
        trim = self.d.trim_newline
        if self.lead:
            self.lead = False
            if trim and s[0] == "\n":
                s = s[1:]
        if trim:
            s = self.tail + s
            self.tail = ""
            if s.endswith("\n"):
                s, self.tail = s[:-1], "\n"
        if s:
            calls.args(json.dumps(s, ensure_ascii=False)[1:-1])

    def _end_value(self, calls: Calls) -> None:
        if self.types is None:
            calls.args('"')
        else:
            raw = self.val
            if self.d.trim_newline:
                raw = raw[1:] if raw.startswith("\n") else raw
                raw = raw[:-1] if raw.endswith("\n") else raw
            schema = calls.schemas(calls.name, self.known).get(self.key)
            value = coerce(raw, self.types, schema.values if schema else None)
            if schema and schema.values:
                self.known[self.key] = json.loads(value)
            calls.args(self._prefix() + value)
        self.st, self.val, self.tail, self.types, self.cdata = Slot.BETWEEN, "", "", None, False

    def _close(self, calls: Calls) -> None:
        if self.st == Slot.VALUE:
            self._end_value(calls)
        calls.args("}" if self.opened else "{}")
        calls.end()
        self.status = DONE




_ANY_JSON = ["null", "integer", "number", "boolean", "object", "array", "string"]


def _attr_key(text: str, string_attr: tuple[str, str]) -> tuple[str, list[str] | None]:
    """``"city" string="true"`` -> ``("city", ["string"])``: a quoted key followed by the
    attribute that types its value (DSML, Kimi K3); see ``XmlDialect.string_attr``."""
    quote = text[:1]
    if quote in ("'", '"') and quote in text[1:]:
        end = text.index(quote, 1)
        key, rest = html.unescape(text[1:end]), text[end + 1:]
    else:
        key, _, rest = text.partition(" ")
    attr, string_value = string_attr
    value = attributes(rest).get(attr)
    if value is None:
        return key, None
    return key, ["string"] if value == string_value else _ANY_JSON


__all__ = ["XmlCall"]
