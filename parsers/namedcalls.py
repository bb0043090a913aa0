"""Call lists whose call names sit inside the body, read whole (see :mod:`parsers.collected`).

* ``keyed`` — Apertus: ``<|tools_prefix|>[{"get_weather": {"city": "Paris"}}, …]<|tools_suffix|>``,
  a JSON list of one-key objects, the key the function name and its value the arguments
  (vLLM ``apertus``; Apertus chat template).
* ``pylines`` — OLMo 3: ``<function_calls>get_weather(city="Paris")\\nsearch(query="x")</function_calls>``,
  one Python call per line, keyword arguments whose values are Python *or* JSON literals
  (``None``/``null``, ``True``/``true``) (vLLM ``olmo3``; OLMo 3 chat template).

As in the other call lists, a name missing from the request's tools is still a call, so the
calls after it are kept; text that is not a list of calls is content. Cut off by the end of
output, each list follows its own kind (issue 15): Apertus's JSON as the JSON lists (the whole
calls, then the cut item as content, issue 22), OLMo 3's Python lines as the
Python call lists (the whole calls, the cut line content).
"""

from __future__ import annotations

import ast
import json
import re

from .calls import Calls
from .collected import Collected
from .events import Content
from .pythonic import call_to_json
from .scanner import find_marker

_JSON_LITERALS = {"null": "None", "true": "True", "false": "False"}
_KEYED_HEAD = re.compile(r'\{\s*"((?:[^"\\]|\\.)*)"\s*:\s*\{')


def _write(calls: Calls, found: list[tuple[str, str]]) -> bool:
    # in a list a name missing from ``tools`` is still a call (as in the JSON and Python call
    # lists, and as vLLM returns it): the calls after it are kept
    usable = [(name, args) for name, args in found if calls.plausible(name)]
    for name, args in usable:
        calls.start(name)
        calls.args(args)
        calls.end()
    return bool(usable)


class KeyedList(Collected):
    """``[{"NAME": {arguments}}, …]``: collected up to the list's closing bracket."""

    kind = "keyed"
    __slots__ = ("depth", "inq", "esc")

    def __init__(self, fmt=None) -> None:
        super().__init__(fmt)
        self.depth, self.inq, self.esc = 0, False, False

    def _export_extra(self) -> list:
        return [self.depth, self.inq, self.esc]

    def _load_extra(self, extra: list) -> None:
        self.depth, self.inq, self.esc = extra

    def _scan(self, text: str, final: bool) -> tuple[int | None, int]:
        i = self.mark
        while i < len(text):
            c = text[i]
            i += 1
            if self.inq:
                if self.esc:
                    self.esc = False
                elif c == "\\":
                    self.esc = True
                elif c == '"':
                    self.inq = False
            elif c == '"':
                self.inq = True
            elif c in "[{":
                self.depth += 1
            elif c in "]}":
                self.depth -= 1
                if self.depth <= 0:
                    return i, i
            elif self.depth == 0 and c not in " \t\r\n":
                return i, i  # not a list: let _emit refuse it
        self.mark = i
        return None, len(text)

    def _emit(self, body: str, calls: Calls, complete: bool) -> bool:
        if not complete:
            return self._emit_cut(body, calls)
        try:
            items = json.loads(body)
        except ValueError:
            return False
        if not isinstance(items, list):
            return False
        found = []
        for item in items:
            if isinstance(item, dict) and len(item) == 1:
                (name, args), = item.items()
                if isinstance(args, dict):
                    found.append((name, json.dumps(args, ensure_ascii=False)))
        return _write(calls, found)

    @staticmethod
    def _emit_cut(body: str, calls: Calls) -> bool:
        """A list cut off: its whole ``{"NAME": {…}}`` items are calls, the cut item is
        content (a call is returned only once complete, issue 22)."""
        items, depth, inq, esc, start = [], 0, False, False, None
        for i, c in enumerate(body):
            if inq:
                esc, inq = (False, True) if esc else (c == "\\", c != '"')
            elif depth == 1 and c not in ' \t\r\n,{':
                return False  # not a list of one-key objects: the block is content
            elif c == '"':
                inq = True
            elif c in "[{":
                depth += 1
                if depth == 2 and c == "{":
                    start = i
            elif c in "]}":
                depth -= 1
                if depth == 1 and start is not None:
                    items.append(body[start:i + 1])
                    start = None
        if not body.lstrip().startswith("["):
            return False
        found = []
        for item in items:
            try:
                parsed = json.loads(item)
            except ValueError:
                return False
            if not (isinstance(parsed, dict) and len(parsed) == 1 and isinstance(next(iter(parsed.values())), dict)):
                return False
            (name, args), = parsed.items()
            found.append((name, json.dumps(args, ensure_ascii=False)))
        m = _KEYED_HEAD.match(body, start) if start is not None else None
        try:
            name = json.loads(f'"{m.group(1)}"') if m else None
        except ValueError:
            name = None
        if name is not None and not calls.plausible(name):
            name = None
        if name is None and not any(calls.plausible(n) for n, _ in found):
            return False
        _write(calls, found)
        if start is not None:
            calls.out.append(Content(body[start:]))  # the cut item is not a call (parsers.calls)
        return True


class PythonLines(Collected):
    """Newline-separated Python calls, collected up to the family's end marker (not consumed)."""

    kind = "pylines"
    __slots__ = ()

    def _scan(self, text: str, final: bool) -> tuple[int | None, int]:
        i, m = find_marker(text[self.mark:], self.fmt.call_end, final)
        if m is None:
            self.mark += i  # text before a possible partial marker is body
            return None, self.mark
        return self.mark + i, self.mark + i

    def _emit(self, body: str, calls: Calls, complete: bool) -> bool:
        """Each line on its own (issue 22): a good call stays a call beside a line that is not
        one (or is cut off), which is content; a block with no call at all is prose."""
        items = []
        for line in body.splitlines(keepends=True):
            if line.strip():
                parsed = call_to_json(_python_literals(line.strip()))
                items.append(parsed if parsed is not None and calls.plausible(parsed[0]) else line)
        if not any(isinstance(item, tuple) for item in items):
            return False
        for item in items:
            if isinstance(item, tuple):
                _write(calls, [item])
            else:
                calls.out.append(Content(item))
        return True


def _python_literals(src: str) -> str:
    """``f(a=null, b=true)`` -> ``f(a=None, b=True)``: JSON literal names outside strings."""
    try:
        node = ast.parse(src, mode="eval")
    except SyntaxError:
        return src
    edits = sorted(((n.col_offset, n.end_col_offset, _JSON_LITERALS[n.id]) for n in ast.walk(node)
                    if isinstance(n, ast.Name) and n.id in _JSON_LITERALS), reverse=True)
    data = src.encode()
    for start, end, new in edits:  # col offsets are UTF-8 byte offsets
        data = data[:start] + new.encode() + data[end:]
    return data.decode()


__all__ = ["KeyedList", "PythonLines"]
