"""MiniMax M3's nested-element arguments (vLLM ``minimax_m3``; MiniMax M3 chat template).

Every structural tag carries the namespace prefix ``]<]minimax[>[``::

    ]<]minimax[>[<invoke name="create_order">
    ]<]minimax[>[<user_id>42]<]minimax[>[</user_id>
    ]<]minimax[>[<items>]<]minimax[>[<item>]<]minimax[>[<sku>b-1]<]minimax[>[</sku>
    ]<]minimax[>[</item>]<]minimax[>[</items>
    ]<]minimax[>[</invoke>

Each parameter is an element named after the argument; an element holding elements is an
object, or an array where the tool's schema says so (the template writes list items as
``<item>``); text is typed by the schema (:func:`parsers.schema.coerce`), a string where
it says nothing. The schema is read whole at every depth, as for the other XML families
(:func:`parsers.schema.tool_schema`: ``$ref``, ``allOf``, ``anyOf``/``oneOf``,
``enum``/``const``). The framing row's header (``<invoke name="…">``) started the call; this
body collects up to ``</invoke>`` and writes the arguments once. A call cut off by the end
of output is not complete; its arguments hold the parameters that were whole.
"""

from __future__ import annotations

import json

from .calls import Calls
from .collected import Collected, close_started
from .scanner import find_marker
from .schema import SchemaView, coerce, tool_schema

NS = "]<]minimax[>["
_END = NS + "</invoke>"
_MAX_DEPTH = 64


class NestedXmlCall(Collected):
    """Arguments of one MiniMax M3 ``<invoke>``."""

    kind = "nested_xml"
    __slots__ = ()

    def _scan(self, text: str, final: bool) -> tuple[int | None, int]:
        i, m = find_marker(text[self.mark:], (_END,), final)
        if m is None:
            self.mark += i
            return None, self.mark
        return self.mark + i + len(m), self.mark + i + len(m)

    def _emit(self, body: str, calls: Calls, complete: bool) -> bool:
        if complete:
            body = body[:-len(_END)]
        root = tool_schema(calls.tools, calls.name)
        props = root.properties() if root is not None else {}
        args = _object(_elements(body, 0, 0)[0], props)
        return close_started(calls, json.dumps(args, ensure_ascii=False), complete)


def _elements(text: str, pos: int, depth: int, close: str | None = None):
    """Child elements from ``pos`` up to ``close`` -> ([(name, str | list)], end, mixed text)."""
    out: list = []
    texts: list[str] = []
    while True:
        k = text.find(NS, pos)
        if k < 0:
            return (out, len(text), None) if close is None else (None, len(text), None)
        texts.append(text[pos:k])
        if close is not None and text.startswith(close, k):
            return out, k + len(close), "".join(texts)
        if not text.startswith(NS + "<", k) or text.startswith(NS + "</", k) or depth >= _MAX_DEPTH:
            return (out, k, None) if close is None else (None, k, None)
        j = text.find(">", k + len(NS) + 1)
        if j < 0:
            return (out, len(text), None) if close is None else (None, len(text), None)
        name = text[k + len(NS) + 1:j].strip()
        children, pos, inner = _elements(text, j + 1, depth + 1, f"{NS}</{name}>")
        if children is None:  # unterminated element: keep the parameters before it
            return (out, pos, None) if close is None else (None, pos, None)
        out.append((name, children if children else inner))


def _convert(value, view: SchemaView | None):
    """An element's value under its schema (None: no schema says anything)."""
    d = view.describe() if view is not None else None
    if isinstance(value, str):
        return json.loads(coerce(value, d.types, d.values)) if d and (d.types or d.values) else value
    items = view.items() if view is not None else None
    if (d and "array" in d.types) or (items is not None and "object" not in d.types):
        return [_convert(v, items) for _, v in value]
    return _object(value, view.properties() if view is not None else {})


def _object(children: list, props: dict) -> dict:
    """Child elements as an object; an element repeated under one name is a list of its
    values (as vLLM 0.33 reads it), each typed by that name's schema (its items' if an array)."""
    names: dict[str, list] = {}
    for name, value in children:
        names.setdefault(name, []).append(value)
    out = {}
    for name, values in names.items():
        view = props.get(name)
        if len(values) == 1:
            out[name] = _convert(values[0], view)
            continue
        items = view.items() if view is not None else None
        out[name] = [_convert(v, items if items is not None else view) for v in values]
    return out


__all__ = ["NestedXmlCall"]
