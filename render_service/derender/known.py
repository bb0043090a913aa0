"""Request fields a stream repeats with every chunk, parsed and validated once.

A stateless stream sends its whole ``prompt_token_ids`` (hundreds to thousands of ids) and
``chat_request`` (tools with their JSON schemas, stop strings, template kwargs …) with every
chunk, as vLLM's wire has it; parsing and validating them was most of a chunk's request
handling. Two layers keep what was validated before:

`KnownBody` works on the body's bytes. ``loads`` splits the top-level object into its
members' raw JSON (msgspec's scan) and leaves unparsed each repeated field (``fields``) whose
exact bytes came in before; ``validate`` gives such a field the value validated then. Exact:

- the split is trusted only when the members (ASCII keys), laid out again compact or as
  Python's ``json.dumps`` spaces them, are the body byte for byte (after JSON whitespace
  around it; the compact layout is the shortest text of those members, so its length
  suffices): so the body has no duplicate key, nothing between members, and keys without
  escapes, and orjson would see the same members (a body that does not pass, or nests past
  Python's recursion limit, where msgspec's scan stops, goes through ``orjson.loads`` whole,
  errors and all: `http.common.MAX_BODY_DEPTH`, as on every route);
- a kept value is first looked for where ``"field":`` first appears in the bytes (by its
  first bytes, then compared whole; a whole JSON value is prefix-free, so equal bytes there
  are that value) and written ``0`` before the split, so its bytes are not scanned again:
  only when that split (compact) has the ``0`` at that member's offset was it the member,
  else the body is split as it is;
- every other member is parsed by orjson, inside one array so at the depth it has in the
  body; if that fails the whole body is parsed, for orjson's own error;
- a kept field's bytes are equal (compared, never hashed) to bytes orjson parsed before and
  the model validated without error, and validation is a pure function of the value, so
  the value is equal and the body's errors are those of the rest: validated with the field
  null (which every kept field's type admits), in the same order.

`KnownFields` works on a parsed body (one `KnownBody` could not split, or a field too large
to keep by its bytes): a ``chat_request`` is kept by the exact JSON of the keys its model
reads (model field order, so two bodies whose keys come in another order are two entries,
never a wrong hit), since validation reads nothing else of it.

Kept values are shared by the requests that send them and are read-only (nothing in
derender writes to a request model or its prompt ids). Bounded: `KnownBody` keeps at most
``capacity`` values whose bytes total at most `MAX_KEPT_BYTES` (one at most
`MAX_FIELD_BYTES`), `KnownFields` at most ``capacity`` of at most `MAX_KEY_BYTES` of JSON
each; least recently used dropped first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, TypeVar

import msgspec
import orjson
from pydantic import BaseModel

from ..wire.validate import validate

M = TypeVar("M", bound=BaseModel)
MAX_KEY_BYTES = 64 * 1024
"""`KnownFields`: fields whose read keys are longer JSON than this are validated every time."""
MIN_BODY_BYTES = 1024
"""`KnownBody`: shorter bodies are parsed whole (orjson takes a few microseconds)."""
MIN_FIELD_BYTES = 64
"""`KnownBody`: shorter fields are parsed every time (a lookup costs about as much)."""
MAX_FIELD_BYTES = 1 << 20
"""`KnownBody`: longer fields are parsed and validated every time (a 128k-token prompt is ~800 KB)."""
HEAD_BYTES = 64
"""`KnownBody`: a kept value is looked up in a body by its first bytes ..."""
MAX_CANDIDATES = 8
"""... and at most this many kept values with the same first bytes are compared (the most
recent first; a body matching none of them is split as it is, scanning every member)."""
MAX_KEPT_BYTES = 16 << 20
"""`KnownBody`: most bytes of kept fields; their values hold up to ~6x that (a token id is ~6.5
bytes of JSON, 40 of list slot and int object)."""
_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_JSON_WHITESPACE = b" \t\n\r"


class KnownFields:
    """Validated values of one field (e.g. ``chat_request``) of the request models it serves.

    Args:
        field: the body key.
        model: the field's model (its declared fields are the keys read).
        capacity: most values kept.
    """

    def __init__(self, field: str, model: type[BaseModel], capacity: int = 256) -> None:
        self.field, self.capacity = field, capacity
        self.keys = tuple(model.model_fields)
        self._values: OrderedDict[bytes, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    def validate(self, model: type[M], body: Any) -> M:
        """``validate(model, body)`` (same result, same errors), with the field's value taken
        from the kept ones when its read keys are known.

        Raises:
            OpenAIError: 400, as `render_service.wire.validate.validate`.
        """
        raw = body.get(self.field) if type(body) is dict else None
        if type(raw) is not dict:
            return validate(model, body)
        try:
            key = orjson.dumps({k: raw[k] for k in self.keys if k in raw})
        except orjson.JSONEncodeError:  # nested past the JSON writer's limit: validation refuses it
            return validate(model, body)
        with self._lock:
            known = self._values.get(key)
            if known is not None:
                self._values.move_to_end(key)
                self.hits += 1
        if known is None:
            req = validate(model, body)
            value = getattr(req, self.field)
            if value is not None and len(key) <= MAX_KEY_BYTES and self.capacity:
                with self._lock:
                    self._values[key] = value
                    while len(self._values) > self.capacity:
                        self._values.popitem(last=False)
            return req
        req = validate(model, {**body, self.field: None})
        req.__dict__[self.field] = known  # what setattr does (the field is set already), without pydantic's __setattr__
        return req


class SplitBody(dict):
    """A body `KnownBody.loads` split: its members parsed, but for the fields whose bytes were
    known, which it leaves out. ``raw``: field -> its exact bytes, for each field `KnownBody`
    keeps by its bytes (left out, or parsed and to be kept once validated)."""

    __slots__ = ("raw",)


class KnownBody:
    """A body's bytes → its JSON value and its validated model, taking the ``fields`` a
    stream repeats from the values validated before (see the module docstring).

    Args:
        fields: top-level keys kept by their bytes; in every model validated, each field's
            type admits null.
        fallback: the `KnownFields` of bodies not split (or None: plain validation).
        capacity: most values kept (all fields and models together).
    """

    def __init__(self, fields: tuple[str, ...], fallback: KnownFields | None = None, capacity: int = 256) -> None:
        self.fields, self.fallback, self.capacity = frozenset(fields), fallback, capacity
        # (field, bytes) -> {model: validated value}; least recently used first
        self._values: OrderedDict[tuple[str, bytes], dict[type, Any]] = OrderedDict()
        self._bytes = 0
        # (field, first HEAD_BYTES of a kept value) -> those values, most recent last (`_known_spans`)
        self._heads: dict[tuple[str, bytes], list[bytes]] = {}
        self._markers = tuple((f, b'"%s":' % f.encode()) for f in fields)
        self._lock = threading.Lock()
        self.hits = dict.fromkeys(fields, 0)  # field -> requests that took its kept value

    def __len__(self) -> int:
        return len(self._values)

    def loads(self, data: bytes) -> Any:
        """``orjson.loads(data)`` (raises what it raises), or a `SplitBody`: equal to it but
        for the fields whose bytes are known, which it leaves out."""
        if len(data) < MIN_BODY_BYTES or not self.capacity:
            return orjson.loads(data)
        lists = self._known_spans(data)
        members = _members(data if lists is None else lists[0])
        if lists is not None and (members is None or not _at(members, lists[1])):
            members, lists = _members(data), None
        if members is None:
            return orjson.loads(data)
        keys, values, raw = [], [], {}
        with self._lock:
            for key, value in members.items():
                if lists is not None and key in lists[1]:
                    raw[key] = lists[1][key][1]
                    continue
                if key in self.fields and MIN_FIELD_BYTES <= len(value) <= MAX_FIELD_BYTES:
                    raw[key] = b = bytes(value)
                    if (key, b) in self._values:
                        continue
                keys.append(key)
                values.append(value)
        try:
            parsed = orjson.loads(b"[%b]" % b",".join(values))  # each at its depth in the body
        except orjson.JSONDecodeError:
            return orjson.loads(data)  # raises the body's own error
        body = SplitBody(zip(keys, parsed))
        body.raw = raw
        return body

    def _known_spans(self, data: bytes) -> tuple[bytes, dict[str, tuple[int, bytes]]] | None:
        """``data`` with the value of each kept field whose bytes are kept written ``0``, and
        per such field where that ``0`` is and the value's bytes; None when there is none.
        The value is found where ``"field":`` first appears, by its first `HEAD_BYTES` (at
        most `MAX_CANDIDATES` kept values compared, the most recent first); a kept value is a
        whole JSON value, so bytes equal to it there are that value. That first ``"field":``
        need not be the member (it can be inside another value): `_at` checks that the split
        of the text has the ``0`` there, else the body is split as it is. Scanning the token
        ids and the chat_request was most of a chunk's split."""
        found = []
        for field, marker in self._markers:  # (no lock: a dict lookup and a list copy are atomic)
            at = data.find(marker)
            if at < 0:
                continue
            start = at + len(marker)
            same = self._heads.get((field, data[start:start + HEAD_BYTES]))
            for b in reversed(same[-MAX_CANDIDATES:]) if same else ():
                if data.startswith(b, start):
                    found.append((start, start + len(b), field, b))
                    break
        if not found:
            return None
        found.sort()
        view, parts, where, last, shift = memoryview(data), [], {}, 0, 0
        for start, end, field, b in found:
            if start < last:  # overlapping (one inside the other): not two members
                return None
            parts += (view[last:start], b"0")
            where[field] = (start - shift, b)
            shift += end - start - 1
            last = end
        parts.append(view[last:])
        return b"".join(parts), where

    def validate(self, model: type[M], body: Any) -> M:
        """``validate(model, orjson.loads(data))`` for the ``body`` `loads` made of ``data``:
        same result, same errors.

        Raises:
            OpenAIError: 400, as `render_service.wire.validate.validate`.
        """
        if type(body) is not SplitBody:
            return self.fallback.validate(model, body) if self.fallback is not None else validate(model, body)
        known: dict[str, Any] = {}
        data = dict(body) if len(body.raw) else body
        with self._lock:
            for field, b in body.raw.items():
                if field in body:  # parsed by loads: kept below once valid
                    continue
                entry = self._values.get((field, b))
                if entry is not None and model in entry:
                    self._values.move_to_end((field, b))
                    known[field] = entry[model]
                    data[field] = None
                    self.hits[field] += 1
                else:  # kept for another model only, or dropped since loads: orjson parsed these bytes before
                    data[field] = orjson.loads(b"[%b]" % b)[0]
        req = validate(model, data)
        for field, value in known.items():
            req.__dict__[field] = value  # what setattr does (the field is set already), without pydantic's __setattr__
        if len(known) < len(body.raw):
            self._keep(model, req, body.raw, known)
        return req

    def _keep(self, model: type, req: BaseModel, raw: dict[str, bytes], known: dict[str, Any]) -> None:
        """Keep the values ``req`` validated of the fields in ``raw`` not taken from ``known``."""
        with self._lock:
            for field, b in raw.items():
                if field in known:
                    continue
                key = (field, b)
                entry = self._values.get(key)
                if entry is None:
                    entry = self._values[key] = {}
                    self._bytes += len(b)
                    self._heads.setdefault((field, b[:HEAD_BYTES]), []).append(b)
                else:
                    self._values.move_to_end(key)
                entry[model] = getattr(req, field)
            while self._values and (len(self._values) > self.capacity or self._bytes > MAX_KEPT_BYTES):
                (field, b), _ = self._values.popitem(last=False)
                self._bytes -= len(b)
                same = self._heads[(field, b[:HEAD_BYTES])]
                same.remove(b)
                if not same:
                    del self._heads[(field, b[:HEAD_BYTES])]


def _at(members: dict[str, msgspec.Raw], where: dict[str, tuple[int, bytes]]) -> bool:
    """Each field of ``where`` is a member whose value is ``0`` at that offset of the compact
    text of ``members`` (`_members` checked the text is it)."""
    pos, hits = 1, 0
    for key, value in members.items():
        pos += len(key) + 3
        if key in where:
            if where[key][0] != pos or bytes(value) != b"0":
                return False
            hits += 1
        pos += len(value) + 1
    return hits == len(where)


def _members(data: bytes) -> dict[str, msgspec.Raw] | None:
    """The top-level members of a JSON object's text, when laid out again they are ``data``
    (see the module docstring), else None."""
    try:
        members = _MEMBERS.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    except RecursionError:  # msgspec recurses on Python's stack: orjson, whose limit every route has, decides
        return None
    keys = "".join(members)
    if not members or not keys.isascii():
        return None
    text = data.strip(_JSON_WHITESPACE) if data[:1] != b"{" or data[-1:] != b"}" else data
    # "{" + '"key":value' joined by "," + "}": the shortest text of these members (an escape
    # in a key, a space, a member given twice all make it longer), so a text of this length is it
    compact = 1 + 4 * len(members) + len(keys) + sum(map(len, members.values()))
    if len(text) == compact:
        return members
    if len(text) != compact + 2 * len(members) - 1:  # json.dumps' default ", " and ": "
        return None
    parts, sep = [], b"{"
    for key, value in members.items():
        parts += (sep, b'"', key.encode(), b'": ', value)
        sep = b", "
    parts.append(b"}")
    return members if b"".join(parts) == text else None


__all__ = ["KnownBody", "KnownFields", "SplitBody", "MAX_KEY_BYTES"]
