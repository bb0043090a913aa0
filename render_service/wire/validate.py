"""A client body → its typed request model, or one 400 naming the first bad field."""

from __future__ import annotations

import functools
from typing import Any, TypeVar

import pydantic

from ..errors import bad_request

M = TypeVar("M", bound=pydantic.BaseModel)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""The widest integers a body may carry: JSON numbers past them reach pydantic as floats."""


MAX_ERRORS_LISTED = 5
"""Validation errors a 400's message lists; the rest are counted, not listed."""


class FieldError(ValueError):
    """A validator's ValueError that names the field at fault below where the validator runs
    (a model validator's errors have no location of their own, so ``param`` was null).

    Args:
        message: the error, for the 400's message.
        where: the field's path from the body's root, dotted or with ``[i]`` indexes
            (``tools[0].function.name``); it becomes the 400's ``param`` (``tools.0.function.name``).
    """

    def __init__(self, message: str, where: str) -> None:
        super().__init__(message)
        self.path = where.replace("[", ".").replace("]", "")


def validate(model: type[M], data: Any) -> M:
    """Validate ``data`` into ``model``.

    Raises:
        OpenAIError: 400 for a body that is not a JSON object, or that ``model`` refuses
        (``param`` = the dotted path of the first error; the message gives the count and
        lists the first `MAX_ERRORS_LISTED`). Its cost does not grow with the body: every
        client list is fail-fast (`limits.fail_fast_list`), and the errors are built
        without their input values.
    """
    if not isinstance(data, dict):
        raise bad_request("Request body must be a JSON object.")
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        param = _param(exc, errors[0]) or None
        listed = "; ".join(f"{field_path(e['loc']) or 'body'}: {_message(model, e)}"
                           for e in errors[:MAX_ERRORS_LISTED])
        more = f"; and {len(errors) - MAX_ERRORS_LISTED} more" if len(errors) > MAX_ERRORS_LISTED else ""
        raise bad_request(f"{len(errors)} validation error(s): {listed}{more}", param=param) from None


def _param(exc: pydantic.ValidationError, first: dict) -> str:
    """The first error's field path, or the deeper one its `FieldError` names."""
    path = field_path(first["loc"])
    if first["type"] != "value_error":
        return path
    cause = (exc.errors(include_url=False, include_input=False)[0].get("ctx") or {}).get("error")
    if not isinstance(cause, FieldError):
        return path
    return cause.path if not path or cause.path.startswith(path) else f"{path}.{cause.path}"


_UNION_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none", "bytes", "any"})


def field_path(loc: tuple) -> str:
    """A pydantic error location as a dotted field path: union-branch tags (``str``,
    ``list[any]``, ``function-after[...]``, ``constrained-str``), which name a type, not a field, are dropped, so
    ``{"input": 5}`` is ``input``, not ``input.str``."""
    return ".".join(str(p) for p in loc if not (isinstance(p, str) and (p in _UNION_TAGS or "[" in p or p.startswith("constrained-"))))


def check_types(obj: dict, types: dict[str, Any], where: str) -> None:
    """Raise `FieldError` (a ValueError naming ``where.key``) for the first field of ``obj`` that is present, not null, and not of
    its type in ``types``: a type or a tuple of types (a boolean is no ``int``), or a
    frozenset of the strings allowed (an enum). For the plain-dict parts of a body (items,
    messages, tools) that the models keep as data; the tables are vLLM 0.33's types, from
    its JSON Schemas."""
    for key, kind in types.items():
        value = obj.get(key)
        if value is None:
            continue
        if isinstance(kind, frozenset):
            if not (isinstance(value, str) and value in kind):
                raise FieldError(f"{where}.{key} must be one of {', '.join(sorted(kind))}", f"{where}.{key}")
            continue
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            raise FieldError(f"{where}.{key} must be {names}", f"{where}.{key}")


_TYPE_NAMES = {str: "a string", bool: "a boolean", int: "an integer", float: "a number", dict: "an object",
               list: "a list"}


def _message(model: type[pydantic.BaseModel], error: dict) -> str:
    """pydantic's message, except for integers too large to parse (pydantic says "Unable to
    parse input string as an integer"): those name the field's range instead."""
    if error["type"] != "int_parsing_size":
        return error["msg"]
    lo, hi = integer_range(model, tuple(error["loc"]))
    return f"integer out of range; it must be from {lo} to {hi}"


def integer_range(model: type[pydantic.BaseModel], loc: tuple) -> tuple[int, int]:
    """The inclusive range ``model`` allows for the integer at ``loc`` (a pydantic error
    location), from its JSON Schema; the 64-bit range where the field declares none."""
    lo, hi = INT64_MIN, INT64_MAX
    schema = _schema(model)
    for node in _nodes_at(schema, schema, loc):
        if node.get("type") != "integer":
            continue
        if "minimum" in node or "exclusiveMinimum" in node:
            lo = max(lo, node.get("minimum", node.get("exclusiveMinimum", INT64_MIN - 1) + 1))
        if "maximum" in node or "exclusiveMaximum" in node:
            hi = min(hi, node.get("maximum", node.get("exclusiveMaximum", INT64_MAX + 1) - 1))
        break
    return lo, hi


@functools.cache
def _schema(model: type[pydantic.BaseModel]) -> dict:
    try:
        return model.model_json_schema()
    except Exception:  # a model whose types have no JSON Schema: fall back to the 64-bit range
        return {}


def _nodes_at(root: dict, node: Any, loc: tuple) -> list[dict]:
    """The schema nodes that may describe the value at ``loc`` (every branch of a union)."""
    if not isinstance(node, dict):
        return []
    if "$ref" in node:
        ref = node["$ref"].rsplit("/", 1)[-1]
        return _nodes_at(root, root.get("$defs", {}).get(ref), loc)
    branches = node.get("anyOf") or node.get("oneOf") or node.get("allOf")
    if branches:
        return [n for b in branches for n in _nodes_at(root, b, loc)]
    if not loc:
        return [node]
    head, rest = loc[0], loc[1:]
    if isinstance(head, int) or str(head).isdigit():
        items = node.get("items") or (node.get("prefixItems") or [None])[0]
        return _nodes_at(root, items, rest)
    props = node.get("properties", {})
    if head in props:
        return _nodes_at(root, props[head], rest)
    return _nodes_at(root, node.get("additionalProperties"), rest) if isinstance(head, str) else []
