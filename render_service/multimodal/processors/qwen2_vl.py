"""Qwen2-VL / Qwen2.5-VL image and video processor, as vLLM 0.33 runs it.

vLLM calls transformers' ``Qwen2VLImageProcessor`` (torchvision backend) with
``do_rescale=False, do_normalize=False`` (the device normalizes), so an item's tensors are:

- image: ``pixel_values`` uint8 ``[t·h·w, 1176]`` (3 channels × 2 temporal × 14 × 14; a still
  image is its frame twice) and ``image_grid_thw`` int64 ``[1, h, w]`` in 14-pixel patches;
- video: ``pixel_values_videos`` uint8 ``[T·H·W, 1176]``, ``video_grid_thw`` int64 ``[T, H, W]``
  and ``second_per_grid_ts`` (temporal patch / sampling fps).

The image is resized to `smart_resize`'s size (multiples of 28 within [min_pixels,
max_pixels], aspect ratio ≤ 200) with PyTorch's exact uint8 bicubic (`..resize`). The prompt
holds one ``<|image_pad|>`` per image; it becomes ``t·h·w / merge²`` pads. Compiled, the
resize's vertical pass writes its rows straight into the patch layout (`_resize_patches_loop`):
no resized image is made and then patched.

Source: transformers 5.20.2 ``models/qwen2_vl/image_processing_qwen2_vl.py``,
``video_processing_qwen2_vl.py``; vLLM 0.33 ``model_executor/models/qwen2_vl.py``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import bad_request
from ..items import Field, ProcessedItem
from ..jit import compile_kernel
from ..resize import horizontal_planar, pass_weights, resize_bicubic_aa, weighted_row_kernel


def smart_resize(height: int, width: int, factor: int = 28, min_pixels: int = 56 * 56,
                 max_pixels: int = 14 * 14 * 4 * 1280) -> tuple[int, int]:
    """The resized ``(height, width)``: multiples of ``factor``, area in ``[min_pixels, max_pixels]``.

    Raises:
        ValueError: when the aspect ratio exceeds 200 (vLLM answers 400 with this message).
    """
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


@dataclass(frozen=True)
class Qwen2VLProcessor:
    """Qwen2-VL family processor (``model_type`` ``qwen2_vl`` / ``qwen2_5_vl``).

    Built from the model directory's ``preprocessor_config.json`` (min/max pixels, patch,
    temporal patch and merge sizes) and ``config.json`` (vision ``tokens_per_second`` is not
    needed here). `placeholder_tokens` maps a modality to the token the chat template writes
    once per item.
    """

    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    video_min_pixels: int = 128 * 28 * 28
    video_max_pixels: int = 28 * 28 * 768
    video_fps: float = 2.0

    placeholder_tokens = {"image": "<|image_pad|>", "video": "<|video_pad|>"}

    @classmethod
    def from_model_dir(cls, model_dir: Path, config: dict) -> "Qwen2VLProcessor":
        """Read ``preprocessor_config.json`` (and ``video_preprocessor_config.json`` when present)."""
        pre = _read_json(model_dir / "preprocessor_config.json")
        video = _read_json(model_dir / "video_preprocessor_config.json") or pre
        size = pre.get("size") or {}
        vsize = video.get("size") or {}
        return cls(
            min_pixels=int(pre.get("min_pixels") or size.get("shortest_edge") or cls.min_pixels),
            max_pixels=int(pre.get("max_pixels") or size.get("longest_edge") or cls.max_pixels),
            patch_size=int(pre.get("patch_size", cls.patch_size)),
            temporal_patch_size=int(pre.get("temporal_patch_size", cls.temporal_patch_size)),
            merge_size=int(pre.get("merge_size", cls.merge_size)),
            video_min_pixels=int(video.get("min_pixels") or vsize.get("shortest_edge") or cls.video_min_pixels),
            video_max_pixels=int(video.get("max_pixels") or vsize.get("longest_edge") or cls.video_max_pixels),
        )

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    def resized_size(self, height: int, width: int, *, video: bool = False, param: str | None = None) -> tuple[int, int]:
        """`smart_resize` with this model's limits; an aspect ratio over 200 is a 400."""
        lo, hi = (self.video_min_pixels, self.video_max_pixels) if video else (self.min_pixels, self.max_pixels)
        try:
            return smart_resize(height, width, self.factor, lo, hi)
        except ValueError as exc:
            raise bad_request(str(exc), param) from None

    def image_num_tokens(self, height: int, width: int, param: str | None = None) -> int:
        """Placeholder tokens of a decoded ``height × width`` image: `process_image`'s count, without pixels.

        Raises:
            OpenAIError: 400 when the aspect ratio exceeds 200.
        """
        return self._num_tokens(1, *self.resized_size(height, width, param=param))

    def video_num_tokens(self, num_frames: int, height: int, width: int, param: str | None = None) -> int:
        """Placeholder tokens of ``num_frames`` sampled ``height × width`` frames: `process_video`'s count."""
        return self._num_tokens(num_frames, *self.resized_size(height, width, video=True, param=param))

    def _num_tokens(self, num_frames: int, height: int, width: int) -> int:
        p, tp = self.patch_size, self.temporal_patch_size
        return -(-num_frames // tp) * (height // p) * (width // p) // (self.merge_size ** 2)

    def _patchify(self, frames: np.ndarray, *, compiled: bool | None = None) -> tuple[np.ndarray, tuple[int, int, int]]:
        """``[T, H, W, C]`` uint8 frames → ``([ceil(T/2)·h·w, C·2·14·14], (t, h, w))`` in Qwen's patch order.

        A frame count that is not a multiple of the temporal patch repeats the last frame (a
        still image is one frame, so its patch holds it twice), as transformers pads.
        """
        p, m, tp = self.patch_size, self.merge_size, self.temporal_patch_size
        frames = np.ascontiguousarray(frames)
        t_in, height, width, channels = frames.shape
        gt, gh, gw = -(-t_in // tp), height // p, width // p
        if compiled is None:
            compiled = _patchify_kernel is not None
        if compiled:
            out = np.empty((gt * gh * gw, channels * tp * p * p), np.uint8)
            _patchify_kernel(frames.reshape(t_in, height, width * channels), p, m, tp, channels, gh, gw, out)
            return out, (gt, gh, gw)
        if pad := -t_in % tp:
            frames = np.concatenate([frames, np.repeat(frames[-1:], pad, axis=0)])
        x = frames.reshape(gt, tp, gh // m, m, p, gw // m, m, p, channels)
        # -> [t, h/m, w/m, m, m, C, tp, p, p]
        x = x.transpose(0, 2, 5, 3, 6, 8, 1, 4, 7)
        return np.ascontiguousarray(x).reshape(gt * gh * gw, channels * tp * p * p), (gt, gh, gw)

    def resize_patchify(self, frames: np.ndarray, height: int, width: int, *, compiled: bool | None = None,
                        transposed: bool = False) -> tuple[np.ndarray, tuple[int, int, int]]:
        """``[T, H, W, 3]`` uint8 frames resized to ``height × width`` (`resize_bicubic_aa`) and
        patched (`_patchify`): the same ``(patches, (t, h, w))``, in one pass when compiled.
        ``transposed``: the frames are given as ``[T, W, H, 3]``."""
        if compiled is None:
            compiled = _resize_patches_kernel is not None
        if not compiled:
            upright = frames.transpose(0, 2, 1, 3) if transposed else frames
            return self._patchify(np.stack([resize_bicubic_aa(np.ascontiguousarray(f), height, width, compiled=False)
                                            for f in upright]), compiled=False)
        p, m, tp = self.patch_size, self.merge_size, self.temporal_patch_size
        t_in = len(frames)
        gt, gh, gw = -(-t_in // tp), height // p, width // p
        rowlen = 3 * tp * p * p
        out = np.empty((gt * gh * gw, rowlen), np.uint8)
        # the layout moves whole p × p blocks: widest unsigned type dividing the block's bytes
        unit = np.dtype(f"u{math.gcd(p * p, 8)}")
        band = np.empty(3 * p * width, np.uint8)
        for f, frame in enumerate(frames):
            planes = horizontal_planar(frame, width, transposed=transposed)
            index, weights, precision = pass_weights(planes.shape[1], height)
            # the last frame also fills the temporal slots after it (transformers repeats it)
            count = tp - f % tp if f == t_in - 1 else 1
            _resize_patches_kernel(planes, index, weights, np.int32(precision), p, m, tp, f // tp, f % tp, count,
                                   gh, gw, band, band.view(unit), out.reshape(-1).view(unit))
        return out, (gt, gh, gw)

    def warm_up(self) -> None:
        """Compile (or load from numba's cache) the kernels `resize_patchify` uses, upright and transposed."""
        f = self.factor
        tiny = np.zeros((1, f, 2 * f, 3), np.uint8)
        self.resize_patchify(tiny, f, f)
        self.resize_patchify(tiny, f, 2 * f)
        self.resize_patchify(tiny.transpose(0, 2, 1, 3), f, f, transposed=True)
        self.resize_patchify(tiny.transpose(0, 2, 1, 3), 2 * f, 2 * f, transposed=True)

    def decode_transposed(self, height: int, width: int) -> bool:
        """Whether `process_image` is better given the image as ``[W, H, 3]`` (``transposed``):
        when the resize changes its width (the horizontal pass works on columns)."""
        try:
            return self.resized_size(height, width)[1] != width
        except Exception:   # an aspect ratio process_image refuses anyway
            return False

    def process_image(self, rgb: np.ndarray, param: str | None = None, *, transposed: bool = False) -> ProcessedItem:
        """One decoded RGB image ``[H, W, 3]`` uint8 (``[W, H, 3]`` when ``transposed``) → the
        ``image`` item vLLM builds.

        Raises:
            OpenAIError: 400 when the aspect ratio exceeds 200.
        """
        rows, cols = (rgb.shape[1], rgb.shape[0]) if transposed else rgb.shape[:2]
        height, width = self.resized_size(rows, cols, param=param)
        patches, grid = self.resize_patchify(rgb[None], height, width, transposed=transposed)
        return ProcessedItem(
            modality="image",
            fields={   # vLLM's item order
                "image_grid_thw": Field(np.array(grid, dtype=np.int64), "batched", keep_on_cpu=True, metadata=True),
                "pixel_values": Field(patches, "flat"),
            },
            num_tokens=grid[0] * grid[1] * grid[2] // (self.merge_size ** 2),
        )

    def process_video(self, frames: np.ndarray, sampled_fps: float, param: str | None = None) -> ProcessedItem:
        """Sampled RGB frames ``[T, H, W, 3]`` uint8 → the ``video`` item vLLM builds.

        ``sampled_fps`` is the rate the frames were sampled at; ``second_per_grid_ts`` =
        temporal patch / fps (bfloat16 on the wire).
        """
        height, width = self.resized_size(frames.shape[1], frames.shape[2], video=True, param=param)
        patches, grid = self.resize_patchify(frames, height, width)
        return ProcessedItem(
            modality="video",
            fields={
                "pixel_values_videos": Field(patches, "flat"),
                "video_grid_thw": Field(np.array(grid, dtype=np.int64), "batched", keep_on_cpu=True, metadata=True),
                "second_per_grid_ts": Field(np.array(self.temporal_patch_size / sampled_fps, dtype=np.float32), "batched", keep_on_cpu=True,
                                            metadata=True, wire_dtype="bfloat16"),
            },
            num_tokens=grid[0] * grid[1] * grid[2] // (self.merge_size ** 2),
        )


def _patchify_loop(frames, p, m, tp, channels, gh, gw, out):   # pragma: no cover - runs compiled
    """One pass from ``[T, H, W*C]`` frames to Qwen's rows: row n = (t, h/m, w/m, m, m), value (C, tp, p, p)."""
    n = 0
    for gt in range(out.shape[0] // (gh * gw)):
        for bh in range(gh // m):
            for bw in range(gw // m):
                for mh in range(m):
                    for mw in range(m):
                        y0, x0 = (bh * m + mh) * p, (bw * m + mw) * p
                        row = out[n]
                        for c in range(channels):
                            for t in range(tp):
                                f = min(gt * tp + t, frames.shape[0] - 1)
                                base = (c * tp + t) * p * p
                                if t > 0 and f == min(gt * tp + t - 1, frames.shape[0] - 1):
                                    row[base:base + p * p] = row[base - p * p:base]   # same frame again
                                    continue
                                frame = frames[f]
                                for i in range(p):
                                    src = frame[y0 + i]
                                    for j in range(p):
                                        row[base + i * p + j] = src[(x0 + j) * channels + c]
                        n += 1
    return out


def _resize_patches_loop(planes, index, weights, precision, p, m, tp, gt, t0, tcount, gh, gw,
                         band, band_units, out_units):   # pragma: no cover - runs compiled
    """The vertical resize pass of one frame, written into Qwen's patch rows as it goes.

    ``planes`` uint8 ``[3, H, W]`` (`horizontal_planar`); ``index/weights/precision`` the
    vertical `pass_weights`. For each band of ``p`` output rows: each row is
    ``clamp((Σ_k weights[y, k] · plane[index[y, k]] + half) >> precision)`` (`..resize._rows_loop`),
    kept in ``band`` in patch order (``[W/p, 3, p, p]`` flat: each patch's ``p × p`` block per
    channel contiguous); then each block is copied whole to its row (``gt``'s patches; temporal
    slots ``t0 .. t0 + tcount - 1``). The copies go in whole units (``band_units`` /
    ``out_units``: the same memory as ``band`` / the flat output, viewed as the widest unsigned
    type dividing ``p²``) over contiguous runs, which the compiler turns into wide moves.
    """
    half = np.int32(1 << (precision - 1))
    width = planes.shape[2]
    acc = np.empty(width, np.int32)
    per = band.shape[0] // band_units.shape[0]          # bytes per unit
    blocku = np.uint64(p * p // per)                    # units per p × p block
    rowu = np.uint64(3 * tp * p * p // per)
    for gy in range(gh):
        for i in range(p):
            y = gy * p + i
            for c in range(3):
                weighted_row_kernel(acc, planes[c], index, weights, y, half)
                for px in range(gw):
                    base = ((px * 3 + c) * p + i) * p
                    for j in range(p):
                        v = acc[px * p + j] >> precision
                        band[base + j] = 0 if v < 0 else (255 if v > 255 else v)
        bh = gy // m
        mh = gy - bh * m
        first = gt * gh * gw + bh * (gw // m) * m * m + mh * m   # row of the band's first patch
        for px in range(gw):
            bw = px // m
            n = np.uint64(first + bw * m * m + (px - bw * m))
            for c in range(3):
                src = np.uint64(px * 3 + c) * blocku
                for t in range(t0, t0 + tcount):
                    dst = n * rowu + np.uint64(c * tp + t) * blocku
                    for j in range(blocku):
                        out_units[dst + np.uint64(j)] = band_units[src + np.uint64(j)]
    return out_units


_patchify_kernel = compile_kernel(_patchify_loop)   # None without numba: the NumPy path
_resize_patches_kernel = compile_kernel(_resize_patches_loop)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
