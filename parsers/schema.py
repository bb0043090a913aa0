"""What the request's tools say: known names and parameter types.

XML-style formats (qwen3_coder, glm45, minimax_m2, seed_oss) write every argument as raw
text; the tool's JSON schema decides whether ``5`` is the integer 5 or the string
``"5"``. Coercion order follows vLLM's engine parsers (§5.1 of the wire-protocol brief):
null > integer > number > boolean > object > array > string, restricted to the types the
schema allows; text that fits none of them stays a string, so nothing is lost. Where an
``enum``/``const`` lists values, the one the text spells wins (``"7"`` vs ``7``). The schema
is read whole: local ``$ref`` (resolved with the ``referencing`` library), ``allOf``,
``anyOf``/``oneOf`` at the root and per parameter (issue 15).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

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
    """``{parameter: [json types]}`` for tool ``name``; ``[]`` where the schema does not
    restrict the type. See :func:`param_schemas` for what is understood."""
    return {k: v.types for k, v in param_schemas(tools, name).items()}


@dataclass(frozen=True)
class ParamSchema:
    """What a parameter's schema says about its value: allowed JSON ``types`` (``[]``: any)
    and, from ``enum``/``const``, the allowed ``values`` (None: any)."""

    types: list[str]
    values: list | None = None


def param_schemas(tools: list[dict] | None, name: str, known: dict | None = None) -> dict[str, ParamSchema]:
    """Parameter schemas of tool ``name``, resolved: local ``$ref`` (``#/$defs/…``,
    ``#/definitions/…``, JSON-pointer escapes ``~0 ~1 %xx``; resolved by the
    ``referencing`` library, the one ``jsonschema`` uses), ``allOf`` (all must hold),
    ``anyOf``/``oneOf`` (one must) at the root (parameters spread over branches) and per
    parameter, ``const`` and ``enum``. A reference that cannot be resolved (remote,
    broken) restricts nothing; nothing is fetched. ``known``: arguments already read in this
    call (``{parameter: value}``); an ``anyOf``/``oneOf`` branch whose ``const``/``enum`` one of
    them contradicts is left out (a discriminator written first selects the branch that
    types the rest), unless that would leave none."""
    view = tool_schema(tools, name)
    if view is None:
        return {}
    props = _properties(view.schema, view.resolver, 0, known or {})
    return {k: ParamSchema(list(t or ()), None if v is None else list(v)) for k, (t, v) in props.items()}


def tool_schema(tools: list[dict] | None, name: str) -> "SchemaView | None":
    """The parameters schema of tool ``name`` for walking nested values (objects inside
    objects, array items), resolved as :func:`param_schemas` resolves it; None when the
    tool is unknown or declares no parameters object."""
    for t in tools or ():
        fn = t.get("function", t) if isinstance(t, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            root = fn.get("parameters")
            if not isinstance(root, dict):
                return None
            return SchemaView(root, Registry().with_resource(_BASE, Resource.from_contents(
                root, default_specification=DRAFT202012)).resolver(base_uri=_BASE))
    return None


@dataclass(frozen=True)
class SchemaView:
    """One sub-schema of a tool's parameters and the resolver its local ``$ref`` resolve
    against. ``describe()`` is what a value there must be (the same reading as
    :func:`param_schemas`); ``properties()`` and ``items()`` step into an object's
    parameters and an array's items through ``$ref``, ``allOf`` and ``anyOf``/``oneOf``."""

    schema: object
    resolver: object
    depth: int = 0

    def describe(self) -> ParamSchema:
        types, values = _describe(self.schema, self.resolver, self.depth)
        return ParamSchema(list(types or ()), None if values is None else list(values))

    def properties(self) -> dict[str, "SchemaView"]:
        """Each parameter's schema: all of those the schema's parts give for it."""
        found = self._collect(lambda s: s.get("properties") if isinstance(s.get("properties"), dict) else {})
        return {k: SchemaView(v, self.resolver, self.depth + 1) for k, v in found.items()}

    def items(self) -> "SchemaView | None":
        """The schema of an array's items, None where the schema names none."""
        found = self._collect(lambda s: {"": s["items"]} if isinstance(s.get("items"), dict) else {})
        return SchemaView(found[""], self.resolver, self.depth + 1) if found else None

    def _collect(self, pick, schema=None, depth: int | None = None) -> dict:
        """``{key: sub-schema}`` from ``pick`` over the schema's own keywords, its ``$ref``
        and ``allOf`` (joined as ``allOf``) and its ``anyOf``/``oneOf`` (as ``anyOf``)."""
        schema, depth = (self.schema, self.depth) if schema is None else (schema, depth)
        schema, _, ref = _deref(schema, self.resolver, depth)
        if not isinstance(schema, dict) or depth > _MAX_DEPTH:
            return {}
        musts = [dict(pick(schema))]
        musts += [self._collect(pick, sub, depth + 1) for sub in _branches(schema, "allOf")]
        if ref:
            musts.append(self._collect(pick, ref[0], depth + 1))
        for combinator in ("anyOf", "oneOf"):
            alts: dict[str, list] = {}
            for sub in _branches(schema, combinator):
                for key, value in self._collect(pick, sub, depth + 1).items():
                    alts.setdefault(key, []).append(value)
            musts.append({k: v[0] if len(v) == 1 else {"anyOf": v} for k, v in alts.items()})
        out: dict[str, list] = {}
        for part in musts:
            for key, value in part.items():
                out.setdefault(key, []).append(value)
        return {k: v[0] if len(v) == 1 else {"allOf": v} for k, v in out.items()}


_BASE = "urn:render-service:tool-parameters"
_MAX_DEPTH = 16
_ANY: tuple = (None, None)  # (types: tuple | None, values: tuple | None); None = no limit
_NUMERIC = ("integer", "number")


def _deref(schema, resolver, depth: int):
    """``(schema without $ref, resolver, (target, its resolver) | None)``: a schema with
    ``$ref`` and other keywords means both."""
    if not isinstance(schema, dict) or "$ref" not in schema or depth > _MAX_DEPTH:
        return schema, resolver, None
    rest = {k: v for k, v in schema.items() if k != "$ref"}
    try:
        resolved = resolver.lookup(schema["$ref"])
    except (Unresolvable, TypeError, ValueError):
        return rest, resolver, None
    return rest, resolver, (resolved.contents, resolved.resolver)


def _branches(schema: dict, key: str) -> list:
    value = schema.get(key)
    return value if isinstance(value, list) else []


def _properties(schema, resolver, depth: int, known: dict | None = None) -> dict[str, tuple]:
    """``{parameter: (types, values)}`` of an object schema; ``known``: see :func:`param_schemas`."""
    known = known or {}
    schema, resolver, ref = _deref(schema, resolver, depth)
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return {}
    props = schema.get("properties")
    out = {k: _describe(v, resolver, depth + 1) for k, v in props.items()} if isinstance(props, dict) else {}
    musts = [_properties(s, resolver, depth + 1, known) for s in _branches(schema, "allOf")]
    if ref:
        musts.append(_properties(*ref, depth + 1, known))
    for combinator in ("anyOf", "oneOf"):
        branches = [_properties(sub, resolver, depth + 1, known) for sub in _branches(schema, combinator)]
        chosen = [b for b in branches if not _contradicts(b, known)] or branches
        merged: dict[str, tuple] = {}
        for branch in chosen:
            for key, d in branch.items():
                merged[key] = _either(merged[key], d) if key in merged else d
        musts.append(merged)
    for sub_props in musts:
        for key, d in sub_props.items():
            out[key] = _both(out[key], d) if key in out else d
    return out


def _contradicts(props: dict[str, tuple], known: dict) -> bool:
    """A branch's ``const``/``enum`` excludes an argument already read."""
    return any(key in props and props[key][1] is not None and not any(_same(value, v) for v in props[key][1])
               for key, value in known.items())


def _describe(schema, resolver, depth: int) -> tuple:
    """``(types, values)`` a value must satisfy under ``schema``."""
    schema, resolver, ref = _deref(schema, resolver, depth)
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return _ANY
    t = schema.get("type")
    types = None
    if isinstance(t, str):
        types = (_type_name(t),)
    elif isinstance(t, list):
        types = _uniq(_type_name(x) for x in t if isinstance(x, str))
    values = tuple(schema["enum"]) if isinstance(schema.get("enum"), list) else None
    d = (types, values)
    if "const" in schema:
        d = _both(d, (None, (schema["const"],)))
    if ref:
        d = _both(d, _describe(*ref, depth + 1))
    for sub in _branches(schema, "allOf"):
        d = _both(d, _describe(sub, resolver, depth + 1))
    for combinator in ("anyOf", "oneOf"):
        alts = [_describe(sub, resolver, depth + 1) for sub in _branches(schema, combinator)]
        if alts:
            alt = alts[0]
            for other in alts[1:]:
                alt = _either(alt, other)
            d = _both(d, alt)
    types, values = d
    if values is not None:
        if types is not None:
            values = tuple(v for v in values if _fits(v, types))
        types = _uniq(_json_type(v) for v in values)
    return types, values


_TYPE_ALIASES = {"str": "string", "text": "string", "varchar": "string", "char": "string", "enum": "string",
                 "bool": "boolean", "binary": "boolean", "int": "integer", "float": "number", "double": "number",
                 "list": "array", "dict": "object", "map": "object"}


def _type_name(t: str) -> str:
    """A schema's type name as its JSON type: models' tools carry ``int``, ``uint32``,
    ``list`` … (the aliases and prefixes vLLM's XML parsers accept)."""
    if t in _TYPE_ALIASES:
        return _TYPE_ALIASES[t]
    low = t.lower()
    if low.startswith(("int", "uint", "long", "short", "unsigned")):
        return "integer"
    if low.startswith(("num", "float")):
        return "number"
    return t


def _uniq(items) -> tuple:
    return tuple(dict.fromkeys(items))


def _fits(value, types) -> bool:
    jt = _json_type(value)
    return jt in types or (jt == "integer" and "number" in types)


def _same(a, b) -> bool:
    """JSON equality (``1`` is not ``true``, ``"7"`` is not ``7``)."""
    return _json_type(a) == _json_type(b) and a == b


def _both(a: tuple, b: tuple) -> tuple:
    """Both constraints hold."""
    if a[0] is None or b[0] is None:
        types = b[0] if a[0] is None else a[0]
    else:
        types = tuple(t for t in a[0] if t in b[0])
        numeric = [t for t in a[0] + b[0] if t in _NUMERIC]
        if "integer" not in types and "integer" in numeric and set(a[0]) & set(_NUMERIC) \
                and set(b[0]) & set(_NUMERIC):
            types += ("integer",)  # an integer is a number
    if a[1] is None or b[1] is None:
        values = a[1] if b[1] is None else b[1]
    else:
        values = tuple(v for v in a[1] if any(_same(v, w) for w in b[1]))
    return types, values


def _either(a: tuple, b: tuple) -> tuple:
    """One of the constraints holds."""
    types = None if a[0] is None or b[0] is None else _uniq(a[0] + b[0])
    values = None if a[1] is None or b[1] is None else a[1] + tuple(
        v for v in b[1] if not any(_same(v, w) for w in a[1]))
    return types, values


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


def coerce(raw: str, types: list[str], values: list | None = None) -> str:
    """JSON text for raw XML argument text under the allowed ``types``; where ``values``
    (``enum``/``const``) are given, a value the text spells wins: with ``["7", 8]`` the
    text ``7`` is the string ``"7"`` and ``8`` the integer 8.

    >>> coerce("5", ["integer"]), coerce("5", ["string"]), coerce("x", ["integer"])
    ('5', '"5"', '"x"')
    """
    text = raw.strip()
    if values:
        for v in values:
            if isinstance(v, str) and v in (raw, text):
                return json.dumps(v, ensure_ascii=False)
        for v in values:
            if not isinstance(v, str):
                got = _try(_json_type(v), text)
                if got is _NO and _json_type(v) in _NUMERIC:  # "1.0" spells the member 1
                    got = _try("number", text)
                    got = v if got is not _NO and got == v else _NO
                if got is not _NO and _same(got, v):
                    return json.dumps(v, ensure_ascii=False)
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


__all__ = ["tool_names", "param_types", "param_schemas", "ParamSchema", "tool_schema", "SchemaView",
           "is_string_only", "coerce"]
