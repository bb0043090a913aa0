"""Token id lists that carry their JSON encoding.

A render answer's bytes are mostly its ``token_ids`` (a 136k-token prompt: about 800 KB,
1-1.5 ms of ``orjson.dumps``). When a prompt extends one seen before (`segments.PrefixCache`,
turn k of an agent loop), its ids start with that prompt's ids, so the JSON of the answer
starts with that prompt's JSON: `IdsJson` keeps those bytes and appends only the new ids',
written once, straight into the answer (`dumps_answer`), where the next turn finds them.

Why it is exact. orjson writes a list of ints as ``[`` + the decimal ints joined by ``,`` +
``]``, each int independently of its neighbours. So for ids ``a + b`` the bytes are the
bytes of ``a`` without ``]``, a ``,``, then the bytes of ``b`` without ``[`` (`IdsJson.bytes`);
and where the ids ``a[n:]`` start inside the bytes of ``a`` follows from the length of their
own encoding (`IdsJson.head`). `TokenIds` forgets its JSON on every change to the list, so
a stale encoding can never be sent.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import orjson

__all__ = ["IdsJson", "TokenIds", "dumps_answer", "release"]


class IdsJson:
    """The JSON array (orjson's bytes, ``[1,2,3]``) of a list of ids, built on first use:
    on its own (`bytes`) or written straight into an answer (`splice_into`).

    Args:
        head: the encoding of the first ids, ``[`` followed by each id and a ``,`` (just
            ``[`` when there are none): a `head` of another `IdsJson`.
        tail: the remaining ids (not copied: the caller never changes them).
    """

    __slots__ = ("_parts", "_bytes", "_view")

    def __init__(self, head: bytes | memoryview, tail: Sequence[int]) -> None:
        self._parts: tuple[bytes | memoryview, Sequence[int]] | None = (head, tail)
        self._bytes: bytes | None = None
        self._view: memoryview | None = None  # the encoding inside the answer it was written into

    def _pieces(self) -> tuple | None:
        """What the encoding joins from (None once built): the head, then the tail's ids."""
        parts = self._parts
        if parts is None:
            return None
        head, tail = parts
        if tail:
            return head, memoryview(orjson.dumps(tail))[1:]
        return (b"[]",) if len(head) == 1 else (memoryview(head)[:-1], b"]")

    def bytes(self) -> bytes:
        """The JSON array of all the ids (equal to ``orjson.dumps(list(ids))``). Thread-safe:
        two threads asking at once may both build it, never see it half-built."""
        if self._bytes is None:
            pieces = self._pieces()
            if pieces is None:  # built since, here or inside an answer
                return self._bytes if self._bytes is not None else bytes(self._view)
            self._bytes = b"".join(pieces)
            self._parts = None  # after it is built; the head's bytes may be freed now
        return self._bytes

    def splice_into(self, answer: bytes, at: int) -> bytes:
        """``answer`` (JSON bytes with a NUL at ``at``, where these ids go) with the ids in place
        of the NUL. Built there, the encoding stays a view of the result, not a copy of its own."""
        pieces = self._pieces()
        if pieces is None:
            pieces = (self._view if self._view is not None else self._bytes,)
        out = b"".join((memoryview(answer)[:at], *pieces, memoryview(answer)[at + 1:]))
        if self._parts is not None:
            self._view = memoryview(out)[at:at + len(out) - len(answer) + 1]
            self._parts = None
        return out

    def head(self, ids: Sequence[int], n: int) -> memoryview:
        """The encoding of the first ``n`` of ``ids`` (the ids this object encodes) as a head:
        ``[`` + each id + ``,``. A view of `bytes`, no copy; costs an encoding of ``ids[n:]``."""
        full = self._view if self._view is not None else self.bytes()  # built either way
        if n == 0:
            return memoryview(b"[")
        if n >= len(ids):
            return memoryview(b"".join((memoryview(full)[:-1], b",")))
        return memoryview(full)[:len(full) - len(orjson.dumps(ids[n:])) + 1]


def _forgets_json(name: str):
    """``list.<name>`` that first drops a `TokenIds`' kept encoding."""
    method = getattr(list, name)

    def changed(self, *args, **kwargs):
        self._json = None
        return method(self, *args, **kwargs)

    changed.__name__ = changed.__qualname__ = name
    return changed


# The list methods that change a list in place: each drops a `TokenIds`' kept encoding.
_CHANGING = ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend", "insert", "pop", "remove",
             "clear", "sort", "reverse")


def _forgetting(cls: type) -> type:
    for name in _CHANGING:
        setattr(cls, name, _forgets_json(name))
    return cls


@_forgetting
class TokenIds(list):
    """A ``list[int]`` of token ids that may carry its JSON encoding (`IdsJson`).

    Behaves as a list everywhere (orjson serialises it as one). Any change to it (item or
    slice assignment, deletion, ``+=``, ``*=``, append, extend, insert, pop, remove,
    clear, sort, reverse) drops the encoding; slices and copies are plain lists. A list from
    `segments.PrefixCache` is shared with the cache: `release` it when done with it.
    """

    __slots__ = ("_json", "released")

    def __init__(self, ids: Iterable[int] = (), json: IdsJson | None = None) -> None:
        super().__init__(ids)
        self._json = json
        self.released = False

    def release(self) -> None:
        """The caller is done with this list and holds no reference it will use again: the
        prefix cache that made it may change it in place into the ids of the next prompt that
        extends it, instead of copying it (a 136k-id list: ~0.4 ms)."""
        self.released = True

    @property
    def encoding(self) -> IdsJson | None:
        """The kept encoding, or None (none given, or the list changed since)."""
        return self._json

    def json(self) -> bytes:
        """The JSON array of the ids: the kept encoding, else ``orjson.dumps`` of the list."""
        return self._json.bytes() if self._json is not None else orjson.dumps(self)

    def __reduce_ex__(self, protocol):  # pickle / copy: a plain list, never a stale encoding
        return list, (list(self),)


def release(ids: list[int]) -> None:
    """`TokenIds.release` ``ids`` when it is one (after its answer's bytes are built)."""
    if ids.__class__ is TokenIds:
        ids.release()


def dumps_answer(answer: dict, key: str = "token_ids") -> bytes:
    """``orjson.dumps(answer)``, the ids under ``key`` written from their kept encoding
    (`TokenIds`) straight into the result when they have one."""
    ids = answer[key]
    enc = ids.encoding if ids.__class__ is TokenIds else None
    if enc is None:
        return orjson.dumps(answer)
    marked = orjson.dumps({**answer, key: orjson.Fragment(b"\0")})  # orjson escapes every NUL in strings
    return enc.splice_into(marked, marked.index(b"\0"))
