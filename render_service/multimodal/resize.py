"""Antialiased bicubic / bilinear resize of uint8 images, bit-identical to PyTorch's CPU kernel.

vLLM runs the Hugging Face image processors with their torchvision backend, which resizes a
uint8 ``[C, H, W]`` tensor with ``F.resize(..., BICUBIC, antialias=True)``. On CPU that is
PyTorch's native uint8 separable kernel (``aten/src/ATen/native/cpu/UpSampleKernel.cpp``,
ported from Pillow-SIMD): Pillow's antialiased cubic filter (a = -0.5), weights rounded to
int16 with a per-axis precision chosen so the largest weight fits, horizontal pass first,
a uint8 intermediate, then the vertical pass. Pillow itself uses 22-bit int32 weights, so
``PIL.Image.resize`` differs from it by 1–2 in about 1 % of the values; this module
reproduces the PyTorch arithmetic exactly with integer NumPy (no float rounding to match).
Bilinear (Gemma 3's ``resample=2``) is the same kernel with the triangle filter and half the
support (``HelperInterpLinear::aa_filter``).

NumPy's ufuncs release the GIL, so resizes in a thread pool run in parallel.
"""

from __future__ import annotations

import math
import threading
from functools import lru_cache

import numpy as np

from .jit import compile_kernel

_A = -0.5          # Pillow's (and PyTorch's antialiased) cubic coefficient


def _cubic(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    near = ((_A + 2) * x - (_A + 3)) * x * x + 1
    far = ((_A * x - 5 * _A) * x + 8 * _A) * x - 4 * _A
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def _triangle(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < 1.0, 1.0 - x, 0.0)


# filter name -> (kernel, half-width at scale 1)
FILTERS = {"bicubic": (_cubic, 2.0), "bilinear": (_triangle, 1.0)}


@lru_cache(maxsize=256)
def axis_weights(in_size: int, out_size: int, kind: str = "bicubic") -> tuple[np.ndarray, np.ndarray, int]:
    """Integer resampling weights for one axis (``kind``: a `FILTERS` name).

    Returns:
        ``(index, weights, precision)``: ``index`` int64 ``[out_size, taps]`` source positions
        (clamped; padded taps repeat a valid index with weight 0), ``weights`` int32
        ``[out_size, taps]`` fixed-point weights, ``precision`` the number of fraction bits.
    """
    kernel, half_width = FILTERS[kind]
    scale = in_size / out_size
    support = half_width * scale if scale >= 1.0 else half_width
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    taps = int(math.ceil(support)) * 2 + 1
    centers = scale * (np.arange(out_size, dtype=np.float64) + 0.5)
    xmin = np.maximum((centers - support + 0.5).astype(np.int64), 0)        # C++ truncating casts
    xmax = np.minimum((centers + support + 0.5).astype(np.int64), in_size)
    xsize = xmax - xmin
    j = np.arange(taps)
    valid = j[None, :] < xsize[:, None]
    w = np.where(valid, kernel((j[None, :] + xmin[:, None] - centers[:, None] + 0.5) * invscale), 0.0)
    total = w.sum(axis=1, keepdims=True)
    w = np.divide(w, total, out=np.zeros_like(w), where=total != 0.0)
    max_weight = float(w.max())
    precision = 0
    while precision < 22 and int(0.5 + max_weight * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    scaled = w * (1 << precision)
    weights = np.where(scaled < 0, scaled - 0.5, scaled + 0.5).astype(np.int64).astype(np.int32)
    index = np.minimum(xmin[:, None] + j[None, :], in_size - 1)
    used = int(xsize.max())
    return index[:, :used], weights[:, :used], precision


_BLOCK_ROWS = 32   # output rows per step: keeps the int32 accumulator in cache (2x faster than whole-array steps)


def _resample_rows(src: np.ndarray, out_size: int, kind: str = "bicubic") -> np.ndarray:
    """Resample a uint8 ``[N, M, C]`` array along axis 0 to ``out_size`` rows (row gathers are contiguous)."""
    index, weights, precision = axis_weights(src.shape[0], out_size, kind)
    out = np.empty((out_size,) + src.shape[1:], np.uint8)
    acc = np.empty((_BLOCK_ROWS,) + src.shape[1:], np.int32)
    term = np.empty_like(acc)
    for start in range(0, out_size, _BLOCK_ROWS):
        stop = min(out_size, start + _BLOCK_ROWS)
        a, t = acc[: stop - start], term[: stop - start]
        a.fill(1 << (precision - 1))
        for k in range(index.shape[1]):
            np.multiply(src[index[start:stop, k]], weights[start:stop, k, None, None], out=t)
            a += t
        a >>= precision
        np.clip(a, 0, 255, out=a)
        out[start:stop] = a
    return out


def _resize_numpy(image: np.ndarray, height: int, width: int, kind: str = "bicubic") -> np.ndarray:
    out = image
    if width != image.shape[1]:   # horizontal pass first, on the transpose so gathers are whole rows
        out = np.ascontiguousarray(_resample_rows(np.ascontiguousarray(out.transpose(1, 0, 2)), width, kind).transpose(1, 0, 2))
    if height != image.shape[0]:
        out = _resample_rows(out, height, kind)
    return out


# The same integer arithmetic, compiled (3x faster than NumPy's whole-array steps). Plain
# functions here; `compile_kernel` turns them into numba kernels (None without numba).

def weighted_row_loop(acc, src, index, weights, at, half):   # pragma: no cover - runs compiled
    """``acc[m] = half + Σ_k weights[at, k] · src[index[at, k], m]`` (int32) for every ``m`` of
    ``acc``: one output row of a resampling pass before its shift and clamp (the kernels below,
    and Qwen-VL's fused vertical pass)."""
    for m in range(acc.shape[0]):
        acc[m] = half
    for k in range(index.shape[1]):
        w = weights[at, k]
        if w != 0:
            row = src[index[at, k]]
            for m in range(acc.shape[0]):
                acc[m] += np.int32(row[m]) * w


weighted_row_kernel = compile_kernel(weighted_row_loop)   # called from the kernels below (compiled in)


def _rows_loop(src, index, weights, precision, out):   # pragma: no cover - runs compiled
    """``out[y, :] = clamp((sum_k weights[y, k] * src[index[y, k], :] + half) >> precision)``."""
    half = 1 << (precision - 1)
    acc = np.empty(src.shape[1], np.int32)
    for y in range(index.shape[0]):
        weighted_row_kernel(acc, src, index, weights, y, half)
        for m in range(src.shape[1]):
            v = acc[m] >> precision
            out[y, m] = 0 if v < 0 else (255 if v > 255 else v)
    return out


def _rows_planar_loop(src, index, weights, precision, tile, out):   # pragma: no cover - runs compiled
    """`_rows_loop` on a transposed RGB image ``[W, H*3]`` written as planes ``[3, H, width]``:
    ``tile`` output columns at a time are resampled into a small block, then spread to the
    planes (one pass; no ``[width, H*3]`` intermediate written and read back)."""
    half = np.int32(1 << (precision - 1))
    n = src.shape[1]
    width = index.shape[0]
    block = np.empty((tile, n), np.uint8)
    acc = np.empty(n, np.int32)
    for x0 in range(0, width, tile):
        x1 = min(x0 + tile, width)
        for x in range(x0, x1):
            weighted_row_kernel(acc, src, index, weights, x, half)
            b = block[x - x0]
            for m in range(n):
                v = acc[m] >> precision
                b[m] = 0 if v < 0 else (255 if v > 255 else v)
        for r in range(n // 3):
            o0, o1, o2 = out[0, r], out[1, r], out[2, r]
            for x in range(x0, x1):
                b = block[x - x0]
                o0[x] = b[3 * r]
                o1[x] = b[3 * r + 1]
                o2[x] = b[3 * r + 2]
    return out


def _transpose_rgb_loop(src, out):   # pragma: no cover - runs compiled
    """``[H, W*3]`` → ``[W, H*3]`` (an RGB image transposed), 64-pixel tiles, channels unrolled."""
    height, width = src.shape[0], out.shape[0]
    for x0 in range(0, width, 64):
        for y0 in range(0, height, 64):
            for x in range(x0, min(x0 + 64, width)):
                orow = out[x]
                for y in range(y0, min(y0 + 64, height)):
                    srow = src[y]
                    orow[3 * y] = srow[3 * x]
                    orow[3 * y + 1] = srow[3 * x + 1]
                    orow[3 * y + 2] = srow[3 * x + 2]
    return out


def _planar_loop(src, out):   # pragma: no cover - runs compiled
    """``[W, H*3]`` → ``[3, H, W]`` (a transposed RGB image back upright, one plane per channel)."""
    width, height = src.shape[0], src.shape[1] // 3
    p0, p1, p2 = out[0], out[1], out[2]
    for y0 in range(0, height, 32):
        y1 = min(y0 + 32, height)
        for x in range(width):
            srow = src[x]
            for y in range(y0, y1):
                p0[y, x] = srow[3 * y]
                p1[y, x] = srow[3 * y + 1]
                p2[y, x] = srow[3 * y + 2]
    return out


def _deinterleave_loop(src, out):   # pragma: no cover - runs compiled
    """``[H, W*3]`` → ``[3, H, W]``."""
    p0, p1, p2 = out[0], out[1], out[2]
    for y in range(src.shape[0]):
        srow, r0, r1, r2 = src[y], p0[y], p1[y], p2[y]
        for x in range(src.shape[1] // 3):
            r0[x] = srow[3 * x]
            r1[x] = srow[3 * x + 1]
            r2[x] = srow[3 * x + 2]
    return out


_rows_kernel = compile_kernel(_rows_loop)
_rows_planar_kernel = compile_kernel(_rows_planar_loop)
_transpose_rgb_kernel = compile_kernel(_transpose_rgb_loop)
_planar_kernel = compile_kernel(_planar_loop)
_deinterleave_kernel = compile_kernel(_deinterleave_loop)


_SCRATCH_MAX = 16 << 20   # bytes: intermediates up to this size reuse a per-thread buffer
_PLANAR_TILE = 16          # output columns per block in `_rows_planar_loop` (16 x H*3 bytes: L1/L2-sized)
_local = threading.local()


def _buffer(shape: tuple[int, ...], slot: int | None) -> np.ndarray:
    """A uint8 array of ``shape``: fresh (``slot`` None or too large), else the calling thread's
    reusable intermediate buffer ``slot`` — already faulted in, so a request does not pay
    page faults for its intermediates (measured ~3,000 faults per cold request before)."""
    size = math.prod(shape)
    if slot is None or size > _SCRATCH_MAX:
        return np.empty(shape, np.uint8)
    bufs = getattr(_local, "bufs", None)
    if bufs is None:
        bufs = _local.bufs = [np.empty(0, np.uint8)] * 3
    if bufs[slot].size < size:
        bufs[slot] = np.empty(size, np.uint8)
    return bufs[slot][:size].reshape(shape)


def _rows_compiled(src: np.ndarray, out_size: int, slot: int | None = None, kind: str = "bicubic") -> np.ndarray:
    index, weights, precision = axis_weights(src.shape[0], out_size, kind)
    flat = src.reshape(src.shape[0], -1)
    out = _rows_kernel(flat, index, weights, np.int32(precision), _buffer((out_size, flat.shape[1]), slot))
    return out.reshape((out_size,) + src.shape[1:])


def _transpose(src: np.ndarray, slot: int | None = None) -> np.ndarray:
    h, w, c = src.shape
    if c != 3:
        return np.ascontiguousarray(src.transpose(1, 0, 2))
    return _transpose_rgb_kernel(src.reshape(h, w * 3), _buffer((w, h * 3), slot)).reshape(w, h, 3)


def _resize_compiled(image: np.ndarray, height: int, width: int, kind: str = "bicubic") -> np.ndarray:
    """Horizontal pass on the transpose, then the vertical pass; intermediates in scratch buffers,
    the result always a fresh array."""
    out = np.ascontiguousarray(image)
    vertical = height != image.shape[0]
    if width != image.shape[1]:
        out = _transpose(_rows_compiled(_transpose(out, 0), width, 1, kind), 2 if vertical else None)
    if vertical:
        out = _rows_compiled(out, height, None, kind)
    return out


IDENTITY_PRECISION = 14


@lru_cache(maxsize=64)
def _identity_weights(size: int) -> tuple[np.ndarray, np.ndarray, int]:
    index = np.arange(size, dtype=np.int64)[:, None]
    return index, np.full((size, 1), 1 << IDENTITY_PRECISION, np.int32), IDENTITY_PRECISION


def pass_weights(in_size: int, out_size: int, kind: str = "bicubic") -> tuple[np.ndarray, np.ndarray, int]:
    """`axis_weights`, or for an axis whose size does not change (PyTorch skips it) one tap of
    weight 1.0: the same ``(index, weights, precision)`` form, and each value passes unchanged."""
    return _identity_weights(in_size) if in_size == out_size else axis_weights(in_size, out_size, kind)


def horizontal_planar(image: np.ndarray, width: int, kind: str = "bicubic", *, transposed: bool = False) -> np.ndarray:
    """PyTorch's horizontal pass (`resize_aa`'s first step) of a uint8 ``[H, W, 3]`` image, as planes.

    ``transposed``: ``image`` is given as ``[W, H, 3]`` (`decode.decode_rgb`'s ``transposed``).
    Returns uint8 ``[3, H, width]`` — this thread's scratch buffer, valid until its next call.
    The vertical pass that follows works a plane at a time on contiguous rows, and a fused one
    can write its rows straight into a processor's layout (`qwen2_vl`'s patches). Compiled only.
    """
    image = np.ascontiguousarray(image)
    if transposed:
        w, h, _ = image.shape
        flat = image.reshape(w, h * 3)
        if w == width:   # PyTorch skips the pass: only the layout changes
            return _planar_kernel(flat, _buffer((3, h, w), 2))
    else:
        h, w, _ = image.shape
        if w == width:
            return _deinterleave_kernel(image.reshape(h, w * 3), _buffer((3, h, w), 2))
        flat = _transpose(image, 0).reshape(w, h * 3)
    index, weights, precision = axis_weights(w, width, kind)
    return _rows_planar_kernel(flat, index, weights, np.int32(precision), _PLANAR_TILE, _buffer((3, h, width), 2))


def resize_aa(image: np.ndarray, height: int, width: int, kind: str = "bicubic", *,
              compiled: bool | None = None) -> np.ndarray:
    """Resize a uint8 ``[H, W, C]`` array to ``[height, width, C]`` as ``torchvision`` does on CPU.

    Bit-identical to ``torchvision.transforms.v2.functional.resize(t, [height, width],
    InterpolationMode.BICUBIC or BILINEAR, antialias=True)`` on the uint8 ``[C, H, W]`` tensor
    ``t`` (``kind``: ``"bicubic"`` / ``"bilinear"``). An axis whose size does not change is not
    resampled (as in PyTorch). ``compiled`` picks the numba kernels (default when numba
    imports) or the NumPy steps; both are exact.
    """
    if image.dtype != np.uint8 or image.ndim != 3:
        raise ValueError(f"expected a uint8 [H, W, C] array, got {image.dtype} {image.shape}")
    if kind not in FILTERS:
        raise ValueError(f"unknown resize filter {kind!r}")
    if compiled is None:
        compiled = _rows_kernel is not None
    return (_resize_compiled if compiled else _resize_numpy)(image, height, width, kind)


def resize_bicubic_aa(image: np.ndarray, height: int, width: int, *, compiled: bool | None = None) -> np.ndarray:
    """`resize_aa` with the bicubic filter (the Qwen-VL and CLIP processors' resample)."""
    return resize_aa(image, height, width, "bicubic", compiled=compiled)


def warm_up() -> None:
    """Compile (or load from numba's cache) the kernels now, not on the first request."""
    resize_bicubic_aa(np.zeros((3, 5, 3), np.uint8), 4, 6)
