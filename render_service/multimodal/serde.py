"""vLLM's wire encoding of a processed item: base64 of a msgpack ``MultiModalKwargsItem``.

Format (vLLM 0.33 ``v1/serial_utils.MsgpackEncoder`` with every tensor inline, as
``entrypoints/scale_out/token_in_token_out/mm_serde.py`` uses it):

    {field_name: {"data": [dtype_name, shape, Ext(3, raw C-order bytes)],
                  "field": ["flat", {"keep_on_cpu": b, "slices": [[[0, rows, None]]], "dim": 0}]
                         | ["batched", {"keep_on_cpu": b}]}}

Fields appear in the processor's order, which is vLLM's item order (image: grid, pixels;
video: pixels, grid, seconds per grid). msgspec (the library vLLM encodes
with) produces the same bytes.

The encoding is made straight into the ``str`` the answer carries (`pybase64.b64encode_as_string`:
no bytes-to-str copy); the processor cache keeps it, so a repeated image costs one copy of it
into the response (orjson's copy of ASCII runs at memory speed), never an encode.
"""

from __future__ import annotations

import threading

import msgspec
import numpy as np
import pybase64   # SIMD base64 (what vLLM uses): ~10x the stdlib's speed on multi-MB payloads

from .items import Field, ProcessedItem

_RAW_VIEW = 3   # vLLM's CUSTOM_TYPE_RAW_VIEW extension code
_encoder = msgspec.msgpack.Encoder()
_SCRATCH_MAX = 64 << 20   # bytes: msgpack payloads up to this size are built in a per-thread reused buffer
_local = threading.local()


def bfloat16_bits(data: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bit patterns as uint16 (round to nearest even, as ``torch.Tensor.to(torch.bfloat16)``)."""
    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _bfloat16_bytes(data: np.ndarray) -> bytes:
    return bfloat16_bits(data).tobytes()


def _tensor(f: Field):
    if isinstance(f.data, list):
        if f.data and isinstance(f.data[0], np.ndarray):   # a list of tensors (MiniCPM-V's slices of one image)
            return [_tensor(Field(x, f.kind, wire_dtype=f.wire_dtype)) for x in f.data]
        return f.data   # a plain value vLLM keeps as a list (Qwen3-VL's timestamps: msgpack floats)
    if f.wire_dtype == "bfloat16":   # float32 values, or uint16 bfloat16 bit patterns already (NormalizeTable)
        raw = np.ascontiguousarray(f.data).data if f.data.dtype == np.uint16 else _bfloat16_bytes(f.data)
        return ["bfloat16", list(f.data.shape), msgspec.msgpack.Ext(_RAW_VIEW, raw)]
    if f.wire_dtype == "float16":   # NumPy's float32 -> float16 rounds to nearest even, as torch's .to(float16)
        return ["float16", list(f.data.shape), msgspec.msgpack.Ext(_RAW_VIEW, np.ascontiguousarray(f.data, np.float16).data)]
    data = np.ascontiguousarray(f.data)   # (0-d arrays come back 1-d: the shape is taken from f.data)
    return [data.dtype.name, list(f.data.shape), msgspec.msgpack.Ext(_RAW_VIEW, data.data)]


def _descriptor(f: Field) -> list:
    if f.kind == "flat":   # (a list value is never flat)
        return ["flat", {"keep_on_cpu": f.keep_on_cpu, "slices": [[[0, int(f.data.shape[0]), None]]], "dim": 0}]
    return [f.kind, {"keep_on_cpu": f.keep_on_cpu}]


def _msgpack(item: ProcessedItem, metadata_only: bool) -> bytearray | bytes | None:
    """The item's msgpack bytes (for tensors, this thread's scratch buffer: use it before the next call)."""
    fields = {name: f for name, f in item.fields.items() if not metadata_only or f.keep_on_cpu or f.metadata}
    if not fields:
        return None
    payload = {name: {"data": _tensor(f), "field": _descriptor(f)} for name, f in fields.items()}
    if metadata_only:   # a few dozen bytes
        return _encoder.encode(payload)
    # A reused, already faulted-in buffer: the multi-MB intermediate costs no allocation or page faults
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = bytearray()
    _encoder.encode_into(payload, buf)
    if len(buf) > _SCRATCH_MAX:   # do not keep an outsized buffer alive in every thread
        _local.buf = None
    return buf


def encode_item(item: ProcessedItem, *, metadata_only: bool = False) -> str | None:
    """Base64 msgpack of the item's fields (only ``keep_on_cpu`` / metadata fields when ``metadata_only``).

    Returns None when ``metadata_only`` leaves no field (vLLM sends null then).
    """
    raw = _msgpack(item, metadata_only)
    return None if raw is None else pybase64.b64encode_as_string(raw)


def decode_item(b64: str) -> dict[str, tuple[str, list[int], bytes, list]]:
    """Inverse of `encode_item` for tests and tools: ``{name: (dtype, shape, raw bytes, descriptor)}``
    (a plain list value: ``("list", None, value, descriptor)``; a list of tensors: ``("list", None,
    [(dtype, shape, raw bytes), ...], descriptor)``)."""
    def ext_hook(code: int, data: memoryview) -> bytes:
        if code != _RAW_VIEW:
            raise ValueError(f"unexpected msgpack extension {code}")
        return bytes(data)

    obj = msgspec.msgpack.decode(pybase64.b64decode(b64), ext_hook=ext_hook)
    out = {}
    for name, v in obj.items():
        data = v["data"]
        if _is_tensor(data):
            out[name] = (data[0], data[1], data[2], v["field"])
        elif data and all(_is_tensor(x) for x in data):   # a list of tensors
            out[name] = ("list", None, [tuple(x) for x in data], v["field"])
        else:   # a plain value: ("list", None, the value, descriptor)
            out[name] = ("list", None, data, v["field"])
    return out


def _is_tensor(data) -> bool:
    return isinstance(data, list) and len(data) == 3 and isinstance(data[0], str) and isinstance(data[2], bytes)
