"""What the request's tools say: known names and parameter types.

XML-style formats (qwen3_coder, glm45, minimax_m2, seed_oss) write every argument as raw
text; the tool's JSON schema decides whether ``5`` is the integer 5 or the string
``"5"``. Coercion order follows vLLM's engine parsers (§5.1 of the wire-protocol brief):
null > integer > number > boolean > object > array > string, restricted to the types the
schema allows; text that fits none of them stays a string, so nothing is lost.
"""

from __future__ import annotations

import json
import math
import re

_INT = re.compile(r"[-+]?\d+\Z")
_ORDER = ("null", "integer", "number", "boolean", "object", "array")


def tool_names(tools: list[dict] | None) -> list[str] | None:
    """Function names of OpenAI tool dicts (``{"type":"function","function":{"name":…}}``).

    ``None`` when no tools were given, meaning "accept any name".
    """
    if not tools:
        return None
    names = []
    for t in tools:
        fn = t.get("function", t) if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.append(fn["name"])
    return names


def param_types(tools: list[dict] | None, name: str) -> dict[str, list[str]]:
    """``{parameter: [json types]}`` for tool ``name``; unknown schema shapes give ``[]``."""
    for t in tools or ():
        fn = t.get("function", t) if isinstance(t, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            props = (fn.get("parameters") or {}).get("properties") or {}
            return {k: _types(v) for k, v in props.items() if isinstance(v, dict)}
    return {}


def _types(schema: dict) -> list[str]:
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    out: list[str] = []
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            if isinstance(sub, dict):
                out += _types(sub)
    if not out and "enum" in schema:
        out = sorted({_json_type(v) for v in schema["enum"]})
    return out


def _json_type(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    return {dict: "object", list: "array"}.get(type(v), "string")


def is_string_only(types: list[str]) -> bool:
    """True when the value is streamed as a JSON string (no schema, or only ``string``)."""
    return not types or all(t == "string" for t in types)


def coerce(raw: str, types: list[str]) -> str:
    """JSON text for raw XML argument text under the allowed ``types``.

    >>> coerce("5", ["integer"]), coerce("5", ["string"]), coerce("x", ["integer"])
    ('5', '"5"', '"x"')
    """
    text = raw.strip()
    for t in _ORDER:
        if t not in types:
            continue
        value = _try(t, text)
        if value is not _NO:
            return json.dumps(value, ensure_ascii=False)
    return json.dumps(raw, ensure_ascii=False)


_NO = object()


def _try(t: str, text: str):
    low = text.lower()
    if t == "null":
        return None if low in ("null", "none") else _NO
    if t == "integer":
        return int(text) if _INT.match(text) else _NO
    if t == "number":
        if _INT.match(text):
            return int(text)
        try:
            f = float(text)
        except ValueError:
            return _NO
        return f if math.isfinite(f) else _NO
    if t == "boolean":
        return {"true": True, "false": False}.get(low, _NO)
    try:
        v = json.loads(text)
    except ValueError:
        return _NO
    return v if isinstance(v, dict if t == "object" else list) else _NO


__all__ = ["tool_names", "param_types", "is_string_only", "coerce"]
