"""A quick "surely valid" verdict for JSON Schema (draft 2020-12), with `jsonschema` as the judge.

`jsonschema` walks a 9,000-token prompt item by item through Python validator objects (about
90 ms; 1 ms for a 50-token one): more than the whole scripted engine may spend on a request.
`SurelyValid` compiles a schema once into plain predicates over what `orjson.loads` returns,
for the keywords a pydantic-made schema uses (``type``, ``enum``, ``const``, ``anyOf``,
``$ref`` into ``$defs``, ``properties``, ``required``, ``additionalProperties``, ``items``,
``prefixItems``, ``minItems``/``maxItems``, ``minLength``/``maxLength``, ``minimum``/``maximum``/
``exclusiveMinimum``/``exclusiveMaximum``; ``title``, ``description``, ``default`` and
``examples`` are annotations). Each predicate answers True only when every keyword of its
node holds in the narrowest reading (an ``integer`` is a Python ``int``, not ``1.0``; an
``enum`` member must have the value's exact type), so True implies jsonschema's verdict is
"valid"; False means "not known": the caller runs jsonschema, which decides (and words the
error). A keyword outside that list makes its node answer False.

A property value that answered False inside a body that jsonschema then found valid is
itself valid (the keywords above judge properties independently; misses inside an ``anyOf``
branch are dropped, since a valid body says only that some branch holds), so it is
remembered by its JSON text: the next body carrying the same value there passes without
jsonschema.
"""

from __future__ import annotations

from typing import Any, Callable

import orjson

Check = Callable[[Any, list], bool]
"""``check(value, misses) -> surely valid``; appends to ``misses`` the memo keys of property
values it could not vouch for."""

_ANNOTATIONS = frozenset(("title", "description", "default", "examples", "$defs", "$schema"))
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "integer": (int,), "number": (int, float),
    "boolean": (bool,), "null": (type(None),),
}
_SCALARS = (str, int, float, bool, type(None))
_MEMO_LIMIT = 4096


class Unsupported(Exception):
    """A keyword this compiler does not read."""


def _never(value: Any, misses: list) -> bool:
    return False


def _always(value: Any, misses: list) -> bool:
    return True


class SurelyValid:
    """``SurelyValid(schema)(body, misses)``: True only if ``schema`` accepts ``body``.

    After jsonschema found a body valid, `remember(misses)` with the ``misses`` of that call.
    """

    def __init__(self, schema: dict) -> None:
        self._root = schema
        self._defs: dict[str, Check] = {}
        self._memo: set[tuple[int, bytes]] = set()
        self._check = self._node(schema)

    def __call__(self, body: Any, misses: list) -> bool:
        return self._check(body, misses)

    def remember(self, misses: list) -> None:
        """Mark the missed property values of a body jsonschema accepted as valid."""
        if len(self._memo) + len(misses) > _MEMO_LIMIT:
            self._memo.clear()
        self._memo.update(misses)

    # -- compiling ---------------------------------------------------------------------

    def _node(self, schema: Any) -> Check:
        if schema is True or schema == {}:
            return _always
        if not isinstance(schema, dict):
            return _never
        try:
            checks = [self._keyword(k, v, schema) for k, v in schema.items() if k not in _ANNOTATIONS]
        except Unsupported:
            return _never
        checks = [c for c in checks if c is not None]
        if not checks:
            return _always
        if len(checks) == 1:
            return checks[0]

        def all_of(value: Any, misses: list) -> bool:
            ok = True
            for c in checks:
                ok = c(value, misses) and ok
            return ok

        return all_of

    def _ref(self, ref: str) -> Check:
        prefix = "#/$defs/"
        if not ref.startswith(prefix) or ref[len(prefix):] not in self._root.get("$defs", {}):
            raise Unsupported(ref)
        name = ref[len(prefix):]
        if name not in self._defs:
            self._defs[name] = _never  # a cycle reads as "not known" until compiled
            self._defs[name] = self._node(self._root["$defs"][name])
        return lambda value, misses: self._defs[name](value, misses)

    def _keyword(self, key: str, arg: Any, node: dict) -> Check | None:  # noqa: C901 (one branch per keyword)
        if key == "type":
            kinds = [arg] if isinstance(arg, str) else arg
            if not isinstance(kinds, list) or not all(k in _TYPES for k in kinds):
                raise Unsupported(key)
            allowed = tuple(t for k in kinds for t in _TYPES[k])
            return lambda value, misses: type(value) in allowed
        if key in ("enum", "const"):
            members = arg if key == "enum" else [arg]
            if not isinstance(members, list) or not all(type(m) in _SCALARS for m in members):
                raise Unsupported(key)
            pairs = [(type(m), m) for m in members]
            return lambda value, misses: any(type(value) is t and value == m for t, m in pairs)
        if key == "anyOf":
            # a branch's misses are not kept: a valid body says only that SOME branch holds
            branches = [self._node(b) for b in arg]
            return lambda value, misses: any(b(value, []) for b in branches)
        if key == "$ref":
            return self._ref(arg)
        if key == "properties":
            return self._properties(arg)
        if key == "required":
            names = list(arg)
            return lambda value, misses: type(value) is not dict or all(n in value for n in names)
        if key == "additionalProperties":
            if arg is True:
                return None
            known = set(node.get("properties", ()))
            extra = self._node(arg)
            return lambda value, misses: type(value) is not dict or all(
                extra(v, misses) for k, v in value.items() if k not in known)
        if key == "items":
            return self._items(arg, len(node.get("prefixItems", ())))
        if key == "prefixItems":
            heads = [self._node(s) for s in arg]
            return lambda value, misses: type(value) is not list or all(
                h(v, misses) for h, v in zip(heads, value))
        if key in ("minItems", "maxItems", "minLength", "maxLength"):
            kind = list if key.endswith("Items") else str
            at_least = key.startswith("min")
            return lambda value, misses: type(value) is not kind or (
                len(value) >= arg if at_least else len(value) <= arg)
        if key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            return _bound(key, arg)
        raise Unsupported(key)

    def _properties(self, props: dict) -> Check:
        compiled = {name: self._memoised(id(sub), self._node(sub)) for name, sub in props.items()}

        def properties(value: Any, misses: list) -> bool:
            if type(value) is not dict:
                return True
            ok = True
            for k, v in value.items():
                c = compiled.get(k)
                if c is not None:
                    ok = c(v, misses) and ok
            return ok

        return properties

    def _memoised(self, where: int, check: Check) -> Check:
        memo = self._memo

        def property_value(value: Any, misses: list) -> bool:
            if check(value, misses):
                return True
            try:
                key = (where, orjson.dumps(value))
            except (TypeError, orjson.JSONEncodeError):
                return False
            if key in memo:
                return True
            misses.append(key)
            return False

        return property_value

    def _items(self, sub: Any, skip: int) -> Check:
        item = self._node(sub)
        if item is _always:
            return lambda value, misses: True
        plain = _plain_type(sub)
        if plain is not None and not skip:
            # a list of plain scalars (a prompt's token ids) in one pass over C-level types
            return lambda value, misses: type(value) is not list or set(map(type, value)) <= plain
        return lambda value, misses: type(value) is not list or all(item(v, misses) for v in value[skip:])


def _plain_type(schema: Any) -> frozenset | None:
    """The Python types a ``{"type": ...}``-only schema accepts (narrowly), else None."""
    if not isinstance(schema, dict) or set(schema) - _ANNOTATIONS != {"type"}:
        return None
    kinds = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
    if not isinstance(kinds, list) or not all(k in _TYPES for k in kinds):
        return None
    return frozenset(t for k in kinds for t in _TYPES[k])


def _bound(key: str, limit: Any) -> Check:
    if type(limit) not in (int, float):
        raise Unsupported(key)
    test = {"minimum": lambda v: v >= limit, "maximum": lambda v: v <= limit,
            "exclusiveMinimum": lambda v: v > limit, "exclusiveMaximum": lambda v: v < limit}[key]
    # a bound applies to numbers only (bool is not one); any other value passes the keyword
    return lambda value, misses: type(value) not in (int, float) or test(value)
