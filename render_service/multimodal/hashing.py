"""``mm_hashes`` exactly as vLLM 0.33 computes them (``multimodal/hasher.py``, ``processing/inputs.py``).

The digest (BLAKE3 hex by default) is fed a framed stream built from named inputs in name
order: ``model_id`` (the model path the engine was started with) and the modality
(``image`` / ``video``) holding the item. Framing: every byte chunk is preceded by its
length (8 bytes little-endian); every value by a kind byte (0x00 none, 0x01 sequence +
8-byte count, 0x02 mapping + 8-byte count with each key framed as a string, 0x03 leaf).
Strings are UTF-8, ints/floats the raw bytes of a NumPy scalar (int64 / float64).

An image loaded from encoded bytes is the leaf ``{"image": <file bytes>}``, or, when decoding
changed its mode (transparency composited on a background, L/P/CMYK → RGB),
``{"image": {"io_config": {"image_mode": "RGB", "rgba_background_color": (r, g, b)},
"data": <file bytes>}}``. A part's ``uuid`` is used verbatim as the hash when no per-request
processor or media kwargs apply (the only case this server accepts).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np
from blake3 import blake3

from .defaults import HASH_ALGORITHMS

_NONE, _SEQ, _MAP, _LEAF = b"\x00", b"\x01", b"\x02", b"\x03"
ALGORITHMS = dict(zip(HASH_ALGORITHMS, (blake3, hashlib.sha256, hashlib.sha512)))


def _length(n: int) -> bytes:
    return n.to_bytes(8, "little")


def _framed(chunk: bytes | memoryview) -> Iterator[bytes | memoryview]:
    yield _length(memoryview(chunk).nbytes)
    yield chunk


def _leaf(obj: object) -> Iterator[bytes | memoryview]:
    if isinstance(obj, (bytes, bytearray, memoryview)):
        yield from _framed(obj)
    elif isinstance(obj, str):
        yield from _framed(obj.encode("utf-8"))
    elif isinstance(obj, (bool, int, float, np.generic)):
        yield from _framed(np.array(obj).tobytes())
    elif isinstance(obj, Keyed):
        yield from _keyed(obj.key, obj.value)
    elif isinstance(obj, np.ndarray):
        yield from _keyed("ndarray", {"dtype": obj.dtype.str, "shape": tuple(obj.shape),
                                      "data": np.ascontiguousarray(obj).view(np.uint8).data})
    else:
        raise TypeError(f"cannot hash {type(obj).__name__}")


def _value(obj: object) -> Iterator[bytes | memoryview]:
    if obj is None:
        yield _NONE
    elif isinstance(obj, (list, tuple)):
        yield _SEQ
        yield _length(len(obj))
        for elem in obj:
            yield from _value(elem)
    elif isinstance(obj, dict):
        yield _MAP
        yield _length(len(obj))
        for k, v in obj.items():
            yield from _framed(str(k).encode("utf-8"))
            yield from _value(v)
    else:
        yield _LEAF
        yield from _leaf(obj)


def _keyed(key: str, obj: object) -> Iterator[bytes | memoryview]:
    yield from _framed(key.encode("utf-8"))
    yield from _value(obj)


class Keyed:
    """A leaf that serializes as a nested ``key: value`` pair (vLLM's media-with-bytes leaves)."""

    __slots__ = ("key", "value")

    def __init__(self, key: str, value: object):
        self.key, self.value = key, value


def hash_kwargs(algorithm: str = "blake3", /, **kwargs: object) -> str:
    """vLLM's ``MultiModalHasher.hash_kwargs``: hex digest over the framed, name-sorted inputs."""
    hasher = ALGORITHMS[algorithm]()
    for key, value in sorted(kwargs.items()):
        for chunk in _keyed(key, value):
            hasher.update(chunk)
    return hasher.hexdigest()


def image_hash(model_id: str, data: bytes, io_config: dict | None, algorithm: str = "blake3") -> str:
    """Hash of an image given as encoded file bytes; ``io_config`` when decoding changed its mode."""
    inner = {"io_config": io_config, "data": data} if io_config else data
    return hash_kwargs(algorithm, model_id=model_id, image=Keyed("image", inner))


def video_hash(model_id: str, data: bytes, frames: np.ndarray, metadata: dict, algorithm: str = "blake3") -> str:
    """Hash of a video: ``(its bytes, or the decoded frames when those are smaller, metadata)``, as vLLM pairs them."""
    media = frames if frames.nbytes < len(data) else data
    return hash_kwargs(algorithm, model_id=model_id, video=(Keyed("video", media), metadata))
