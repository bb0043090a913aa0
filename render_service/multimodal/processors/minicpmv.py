"""MiniCPM-V 4.0 image processor (``model_type`` ``minicpmv``, ``version`` 4.0), as vLLM 0.33 runs it.

vLLM runs the model repository's ``MiniCPMVImageProcessor`` (``image_processing_minicpmv.py``,
shipped with the model; implemented here natively, never executed) behind its own vendored
``MiniCPMVProcessor``. An image of size ``(W, H)``:

- **slicing** (``config.json`` ``slice_config``: ``max_slice_nums`` 9, ``scale_resolution`` 448,
  ``patch_size`` 14): `MiniCPMVSlicer.grid` picks a ``(cols, rows)`` grid (None for a small
  image); the source image is resized (Pillow bicubic) to `MiniCPMVSlicer.best_resize`, and
  with a grid the image is also resized to `MiniCPMVSlicer.refine_size` and cut into
  ``rows × cols`` slices, row by row;
- **tensors** (vLLM's field order): ``pixel_values``: a list (one per slice, source first) of
  bfloat16 ``[3, 14, h·w/14]`` (``x / 255`` then ``(x - mean) / std`` in float32, patches of
  14×14 laid side by side: ``reshape_by_patch``); ``image_sizes``: a list of one int64
  ``[W, H]``; ``tgt_sizes``: int64 ``[slices, 2]`` (``h / 14, w / 14``) — all batched,
  the two size fields ``keep_on_cpu``;
- **prompt**: vLLM's placeholder string ``(<image>./</image>)`` is written into the text
  (string-format template); each becomes ``<image_id>{i}</image_id><image>`` + 64 × ``<unk>``
  + ``</image>`` + the slices' ``<slice>`` + 64 × ``<unk>`` + ``</slice>`` (rows joined by
  ``\\n``): in the prompt's ids when every image finds the placeholder's ids there, else (the
  usual case: after ``\\n`` it tokenizes otherwise) in the decoded text, the text segments and
  replacements then encoded one by one (`expand_text`). The placeholder range
  is the whole replacement. vLLM's tokenizer here is transformers 5's ``LlamaTokenizer``
  rebuilt from the vocabulary (`vllm_tokenizer`): ``<image>``, ``<slice>``, ``<image_id>`` …
  are plain text to it, ``<unk>`` is id 0.
- an image 1 or 3 pixels high is refused (400) as vLLM refuses it: the image processor takes
  such an array for channels-first (``infer_channel_dimension_format``) and fails.

Source: vLLM 0.33 ``model_executor/models/minicpmv.py``, ``transformers_utils/processors/minicpmv.py``,
``multimodal/processing/processor.py`` (``_apply_prompt_updates_via_text``); the model's
``image_processing_minicpmv.py``; transformers 5.20.2 ``models/llama/tokenization_llama.py``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tokenizers
from PIL import Image

from ...errors import bad_request
from ..items import Field, ProcessedItem
from ..jit import compile_kernel
from ..serde import bfloat16_bits
from .normalize import model_dtype
from .qwen2_vl import _read_json

PLACEHOLDER = "(<image>./</image>)"


def vllm_tokenizer(model_dir: Path) -> tokenizers.Tokenizer:
    """The tokenizer vLLM 0.33 uses for this model: transformers 5's ``LlamaTokenizer``.

    transformers rebuilds it from ``tokenizer.json``'s vocabulary and merges with its own
    pipeline (no normalizer, ``Metaspace`` prepending ``▁`` always, no split) and only the
    added tokens ``tokenizer_config.json`` lists in ``added_tokens_decoder`` — not the
    ``<image>`` / ``<slice>`` ones ``tokenizer.json`` adds.

    Raises:
        OSError / ValueError: unreadable files.
    """
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    kept = {int(i) for i in config.get("added_tokens_decoder") or {}}
    spec["added_tokens"] = [t for t in spec.get("added_tokens", []) if t["id"] in kept]
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": False}
    spec["post_processor"] = None
    return tokenizers.Tokenizer.from_str(json.dumps(spec))


@dataclass(frozen=True)
class MiniCPMVSlicer:
    """The model's slice rule (``MiniCPMVImageProcessor``); sizes are ``(width, height)``."""

    max_slice_nums: int = 9
    scale_resolution: int = 448
    patch_size: int = 14

    @staticmethod
    def _divide(length: float, unit: int) -> int:
        return max(round(length / unit) * unit, unit)

    def best_resize(self, size: tuple[float, float], upscale: bool = False) -> tuple[int, int]:
        """``find_best_resize``: scale to about ``scale_resolution²`` pixels, sides multiples of the patch."""
        width, height = size
        if width * height > self.scale_resolution * self.scale_resolution or upscale:
            r = width / height
            height = int(self.scale_resolution / math.sqrt(r))
            width = int(height * r)
        return self._divide(width, self.patch_size), self._divide(height, self.patch_size)

    def refine_size(self, size: tuple[int, int], grid: tuple[int, int]) -> tuple[int, int]:
        """``get_refine_size``: the size the image is resized to before it is cut into the grid."""
        width, height = size
        cols, rows = grid
        cell = (self._divide(width, cols) / cols, self._divide(height, rows) / rows)
        best = self.best_resize(cell, upscale=True)
        return best[0] * cols, best[1] * rows

    def grid(self, size: tuple[int, int]) -> tuple[int, int] | None:
        """``get_sliced_grid``: ``(cols, rows)``, None when the image is not sliced."""
        width, height = size
        log_ratio = math.log(width / height)
        ratio = width * height / (self.scale_resolution * self.scale_resolution)
        multiple = min(math.ceil(ratio), self.max_slice_nums)
        if multiple <= 1:
            return None
        best, min_error = (1, 1), float("inf")
        for n in (multiple - 1, multiple, multiple + 1):
            if n == 1 or n > self.max_slice_nums:
                continue
            for m in range(1, n + 1):
                if n % m == 0:
                    error = abs(log_ratio - math.log(m / (n // m)))
                    if error < min_error:
                        best, min_error = (m, n // m), error
        return best


@dataclass
class MiniCPMVProcessor:
    """MiniCPM-V 4.0 processor (its replacements are encoded with `vllm_tokenizer`, not the model's `TextTokenizer`).

    Attributes:
        slicer: the slice rule.
        image_feature_size: ``<unk>`` tokens per source image or slice (64).
        mean, std: normalization.
        dtype: wire dtype of ``pixel_values``.
        use_image_id, slice_mode: ``preprocessor_config.json`` switches.
    """

    slicer: MiniCPMVSlicer = field(default_factory=MiniCPMVSlicer)
    image_feature_size: int = 64
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)
    dtype: str = "bfloat16"
    use_image_id: bool = True
    slice_mode: bool = True
    tokenizer: tokenizers.Tokenizer | None = None
    _table: np.ndarray | None = None
    _target: list[int] | None = None
    _replacements: dict = field(default_factory=dict)

    # the template writes no token per image: vLLM writes PLACEHOLDER into the text (render.messages)
    placeholder_tokens = {}
    placeholder_texts = {"image": PLACEHOLDER}

    @classmethod
    def from_model_dir(cls, model_dir: Path, config: dict) -> "MiniCPMVProcessor":
        """Read ``config.json`` ``slice_config`` and ``preprocessor_config.json``.

        Raises:
            NotImplementedError: a MiniCPM-V version other than 4.0 (their processors differ):
            `load_processor` then refuses its images with this message.
        """
        version = str(config.get("version", ""))
        if version != "4.0":
            raise NotImplementedError(f"MiniCPM-V version {version or '(none)'} has no image processor in "
                                      "render-service (MiniCPM-V 4.0 has).")
        pre = _read_json(model_dir / "preprocessor_config.json")
        sc = config.get("slice_config") or {}
        slicer = MiniCPMVSlicer(
            max_slice_nums=int(pre.get("max_slice_nums", sc.get("max_slice_nums", 9))),
            scale_resolution=int(pre.get("scale_resolution", sc.get("scale_resolution", 448))),
            patch_size=int(pre.get("patch_size", sc.get("patch_size", 14))))
        return cls(slicer=slicer, image_feature_size=int(pre.get("image_feature_size", 64)),
                   mean=tuple(pre.get("norm_mean") or (0.5,) * 3), std=tuple(pre.get("norm_std") or (0.5,) * 3),
                   dtype=model_dtype(config), use_image_id=bool(pre.get("use_image_id", False)),
                   slice_mode=bool(pre.get("slice_mode", True)), tokenizer=vllm_tokenizer(model_dir))

    # ---- prompt ------------------------------------------------------------------------

    def _check(self, height: int, width: int, param: str | None) -> None:
        if height in (1, 3):
            raise bad_request(
                f"Failed to apply MiniCPMVProcessor on an image of {width}x{height}: an image 1 or 3 pixels high "
                "is taken for channels-first by the model's image processor (vLLM 0.33 refuses it alike).", param)

    def _grid(self, height: int, width: int) -> tuple[int, int] | None:
        return self.slicer.grid((width, height)) if self.slice_mode else None

    def _text(self, grid: tuple[int, int] | None, index: int) -> str:
        unk = "<unk>" * self.image_feature_size
        text = (f"<image_id>{index}</image_id>" if self.use_image_id else "") + f"<image>{unk}</image>"
        if grid is not None:
            cols, rows = grid
            text += "\n".join([f"<slice>{unk}</slice>" * cols] * rows)
        return text

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def image_replacement(self, height: int, width: int, param: str | None = None) -> tuple[int, ...]:
        """The ids replacing the image's placeholder when it is the request's first image (`expand_text` renumbers)."""
        self._check(height, width, param)
        grid = self._grid(height, width)
        cached = self._replacements.get(grid)
        if cached is None:
            cached = self._replacements[grid] = tuple(self._encode(self._text(grid, 0)))
        return cached

    def image_num_tokens(self, height: int, width: int, param: str | None = None) -> int:
        """Tokens of the image's replacement (``<unk>`` ones are embedded; the range covers all)."""
        return len(self.image_replacement(height, width, param))

    def expand_text(self, text: str, token_ids: list[int], replacements: list[tuple[int, ...]]) -> tuple[list[int], list[dict]]:
        """vLLM's prompt update: ``(token_ids, mm_placeholders["image"])`` for the rendered prompt ``text``.

        ``token_ids`` is our encoding of ``text``: when it starts with a BOS the text does not
        write (``add_special_tokens: true``), vLLM's encoding has it too. ``replacements`` are the
        images' `image_replacement` ids in prompt order; the i-th image takes the first
        placeholder after the previous one's, its ``<image_id>`` renumbered to ``i`` (vLLM's
        ``_recompute_cached_prompt_update``). As vLLM: the placeholder's own ids are replaced
        when every image finds them in the prompt's ids; otherwise the prompt is decoded, the
        placeholder string replaced in text, and the pieces encoded one by one.

        Raises:
            OpenAIError: 400 when the prompt holds fewer placeholder strings than images.
        """
        decode = self.tokenizer.decode
        ids = self._encode(text)
        bos = self.tokenizer.token_to_id("<s>")
        if token_ids[:1] == [bos] and not text.startswith("<s>"):
            ids = [bos] + ids
        fulls = []
        for i, rep in enumerate(replacements):
            if i and self.use_image_id:
                full = decode(list(rep), skip_special_tokens=False)
                rep = tuple(self._encode(full.replace("<image_id>0</image_id>", f"<image_id>{i}</image_id>", 1)))
            fulls.append(list(rep))
        pieces = self._token_pieces(ids, fulls)
        if pieces is None:
            pieces = self._text_pieces(decode(ids, skip_special_tokens=False), fulls, len(replacements))
        out: list[int] = []
        ranges = []
        for piece, is_item in pieces:
            if is_item:
                ranges.append({"offset": len(out), "length": len(piece)})
            out.extend(piece)
        return out, ranges

    def _token_pieces(self, ids: list[int], fulls: list[list[int]]) -> list[tuple[list[int], bool]] | None:
        """The placeholder's ids replaced where every image finds them in order, else None."""
        if self._target is None:
            self._target = self._encode(PLACEHOLDER)
        target, n = self._target, len(self._target)
        pieces, pos = [], 0
        for full in fulls:
            at = next((k for k in range(pos, len(ids) - n + 1) if ids[k:k + n] == target), None)
            if at is None:
                return None
            pieces += [(ids[pos:at], False), (full, True)]
            pos = at + n
        return pieces + [(ids[pos:], False)]

    def _text_pieces(self, prompt: str, fulls: list[list[int]], count: int) -> list[tuple[list[int], bool]]:
        """vLLM's ``_apply_prompt_updates_via_text`` with segments encoded separately."""
        decode = self.tokenizer.decode
        pieces, pos = [], 0
        for i, full in enumerate(fulls):
            at = prompt.find(PLACEHOLDER, pos)
            if at < 0:
                raise bad_request(f"The prompt has {i} image placeholder(s) for {count} image(s).", "messages")
            pieces += [(self._encode(prompt[pos:at]), False),
                       (self._encode(decode(full, skip_special_tokens=False)), True)]
            pos = at + len(PLACEHOLDER)
        return pieces + [(self._encode(prompt[pos:]), False)]

    # ---- pixels ------------------------------------------------------------------------

    def _normalized(self) -> np.ndarray:
        """``[3, 256]``: ``(x / 255 - mean) / std`` in float32, as the model's processor computes it;
        as bfloat16 bit patterns for a bfloat16 model (else float32: the wire cast is serde's)."""
        if self._table is None:
            x = np.arange(256, dtype=np.float32) / np.float32(255)
            values = (x[None, :] - np.asarray(self.mean, np.float32)[:, None]) / np.asarray(self.std, np.float32)[:, None]
            self._table = bfloat16_bits(values) if self.dtype == "bfloat16" else values.astype(np.float32)
        return self._table

    def _patches(self, rgb: np.ndarray, *, compiled: bool | None = None) -> np.ndarray:
        """uint8 ``[h, w, 3]`` → normalized ``[3, p, (h/p)·(w/p)·p]`` (``reshape_by_patch``)."""
        table = self._normalized()
        p = self.slicer.patch_size
        h, w = rgb.shape[:2]
        if compiled is None:
            compiled = _patches_kernel is not None
        if compiled:   # one pass: each value looked up and written where reshape_by_patch puts it
            out = np.empty((3, p, (h // p) * (w // p) * p), table.dtype)
            return _patches_kernel(np.ascontiguousarray(rgb), table, p, out)
        chw = np.stack([table[c][rgb[:, :, c]] for c in range(3)])
        return np.ascontiguousarray(chw.reshape(3, h // p, p, w // p, p).transpose(0, 2, 1, 3, 4).reshape(3, p, -1))

    def warm_up(self) -> None:
        """Compile (or load from numba's cache) the patch kernel now, not on the first image."""
        p = self.slicer.patch_size
        self._patches(np.zeros((p, 2 * p, 3), np.uint8))

    def _slices(self, rgb: np.ndarray) -> list[np.ndarray]:
        if not self.slice_mode:
            return [rgb]
        height, width = rgb.shape[:2]
        image = Image.fromarray(np.ascontiguousarray(rgb))
        size = (width, height)
        grid = self.slicer.grid(size)
        source = image.resize(self.slicer.best_resize(size, upscale=grid is None), resample=Image.Resampling.BICUBIC)
        views = [np.asarray(source)]
        if grid is not None:
            refine = np.asarray(image.resize(self.slicer.refine_size(size, grid), resample=Image.Resampling.BICUBIC))
            cols, rows = grid
            ch, cw = refine.shape[0] // rows, refine.shape[1] // cols
            views += [refine[r * ch:(r + 1) * ch, c * cw:(c + 1) * cw] for r in range(rows) for c in range(cols)]
        return views

    def process_image(self, rgb: np.ndarray, param: str | None = None) -> ProcessedItem:
        """One decoded RGB image ``[H, W, 3]`` uint8 → the ``image`` item vLLM builds."""
        height, width = rgb.shape[:2]
        replacement = self.image_replacement(height, width, param)
        views = self._slices(rgb)
        p = self.slicer.patch_size
        pixels = [self._patches(v) for v in views]
        return ProcessedItem(
            modality="image",
            fields={
                "pixel_values": Field(pixels, "batched", wire_dtype=self.dtype if self.dtype != "float32" else None),
                "image_sizes": Field([np.array([width, height], dtype=np.int64)], "batched", keep_on_cpu=True),
                "tgt_sizes": Field(np.array([[v.shape[0] // p, v.shape[1] // p] for v in views], dtype=np.int64),
                                   "batched", keep_on_cpu=True),
            },
            num_tokens=len(replacement),
            replacement=replacement,
        )

    def refuse_modality(self, modality: str, param: str | None = None):
        """MiniCPM-V 4.0 takes video in vLLM; render-service does not yet (a clear 400, never ignored)."""
        return bad_request(f"{modality} inputs for MiniCPM-V are not supported by render-service yet (images are).", param)


def _patches_loop(rgb, table, p, out):   # pragma: no cover - runs compiled
    """``out[c, i, (by·(w/p) + bx)·p + j] = table[c, rgb[by·p + i, bx·p + j, c]]``, written in order."""
    nby, nbx = rgb.shape[0] // p, rgb.shape[1] // p
    for c in range(3):
        tc = table[c]
        for i in range(p):
            orow = out[c, i]
            k = 0
            for by in range(nby):
                src = rgb[by * p + i]
                for bx in range(nbx):
                    x0 = bx * p
                    for j in range(p):
                        orow[k] = tc[src[x0 + j, c]]
                        k += 1
    return out


_patches_kernel = compile_kernel(_patches_loop)   # None without numba: the NumPy path
