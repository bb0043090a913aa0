"""A read-only view of an ASCII ``str``'s own characters: its bytes without a copy.

Multi-megabyte ASCII strings cross this service twice: a request's base64 ``data:`` URLs
(decoded to the file bytes) and the base64 ``kwargs_data`` an answer carries (written to the
socket). ``str.encode()`` or a slice copies them; a view does not. CPython keeps a compact
ASCII ``str``'s characters right after the object header, one byte each; `ascii_bytes` views
that memory (through NumPy's ``__array_interface__``, an owner object holding the ``str`` so the
view keeps it alive). Every ``str`` made by Python code, orjson, pybase64 or pydantic is compact
(PEP 393; only the deprecated ``Py_UNICODE`` C API, removed in 3.12, made others). The layout is
checked once at import on strings made the way the service makes them (orjson, pybase64); where
it does not hold (another interpreter), or for a non-ASCII or subclassed ``str``, `ascii_bytes`
is ``text.encode()`` (one copy, same bytes).
"""

from __future__ import annotations

import sys

import numpy as np
import orjson
import pybase64

# Offset of a compact ASCII str's first character from the object's address (sizeof(PyASCIIObject))
_ASCII_DATA_OFFSET = sys.getsizeof("") - 1


class _StrBuffer:
    """Exposes a compact ASCII ``str``'s characters to NumPy (``__array_interface__``), keeping it alive."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, text: str):
        self.owner = text
        self.__array_interface__ = {"shape": (len(text),), "typestr": "|u1", "version": 3,
                                    "data": (id(text) + _ASCII_DATA_OFFSET, True)}


def _view_in_place(text: str) -> memoryview:
    # the array's base is the _StrBuffer, which holds the str: the view keeps the characters alive
    return memoryview(np.asarray(_StrBuffer(text)))


def _layout_holds() -> bool:
    if sys.implementation.name != "cpython":
        return False
    probes = (pybase64.b64encode_as_string(bytes(range(256)) * 3), orjson.loads(b'"data:,' + b"ab" * 600 + b'"'))
    return all(type(p) is str and p.isascii() and _view_in_place(p).tobytes() == p.encode() for p in probes)


_IN_PLACE = _layout_holds()


def ascii_bytes(text: str) -> memoryview | bytes:
    """The bytes of an ASCII ``str`` (base64): a read-only view of its own characters where the
    layout check passed, else ``text.encode()``."""
    if _IN_PLACE and type(text) is str and text.isascii():
        return _view_in_place(text)
    return text.encode()
