"""Gemma 3 image processor (``model_type`` ``gemma3``), as vLLM 0.33 runs it.

vLLM calls transformers' ``Gemma3ImageProcessor`` (torchvision backend), no device
normalization, so an image item is:

- ``pixel_values``: ``[1 + crops, 3, 896, 896]`` bfloat16 (flat field, one row per crop): the
  whole image resized to ``size`` (bilinear, antialiased, uint8, aspect ratio not kept), then
  each pan-and-scan crop resized alike; ``(x - 127.5) / 127.5`` in float32;
- ``num_patches``: int64 scalar ``1 + crops`` (batched, ``keep_on_cpu``: it is also ``mm_metadata``);
- prompt: the template writes ``<start_of_image>`` once per image; vLLM replaces it with the
  tokens of ``"\\n\\n<start_of_image>" + 256 × "<image_soft_token>" + "<end_of_image>\\n\\n"``
  (with crops: "Here is the original image {that} and here are some crops to help you see
  better {that} {that}…"), then merges ``\\n`` + ``\\n\\n`` into the single tokens the
  tokenizer would have made. A range covers the whole replacement, found again in the ids with
  merged newlines split back: so two images with nothing between them overlap (the
  ``\\n\\n\\n\\n`` between them belongs to both) and vLLM refuses them with a 400.

Pan-and-scan is off, whatever ``preprocessor_config.json`` says: vLLM 0.33 resolves it from
``Gemma3ProcessorKwargs``' defaults (``do_pan_and_scan: False``), which win over the image
processor's own setting, so only ``--mm-processor-kwargs`` (or trusted per-request kwargs)
turn it on; render-service takes neither. Recorded: a copy of gemma-3-4b-it with
``do_pan_and_scan: true`` gets no crops from vLLM (``answers_gemma3_pan_and_scan.json``).
`PanAndScan` holds the crop rule for that day (checked against transformers' crops).

Source: vLLM 0.33 ``model_executor/models/gemma3_mm.py``; transformers 5.20.2
``models/gemma3/image_processing_gemma3.py``, ``processing_gemma3.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..items import Field, ProcessedItem
from ..prompt_updates import replace_token_matches
from ..resize import resize_aa
from .normalize import NormalizeTable, model_dtype
from .qwen2_vl import _read_json

_RESAMPLE = {2: "bilinear", 3: "bicubic"}


@dataclass(frozen=True)
class PanAndScan:
    """Gemma 3's pan-and-scan settings (transformers' defaults; off, as vLLM runs it without --mm-processor-kwargs)."""

    enabled: bool = False
    min_crop_size: int = 256
    max_num_crops: int = 4
    min_ratio_to_activate: float = 1.2

    def grid(self, height: int, width: int) -> tuple[int, int]:
        """``(rows, cols)`` of crops for an image, ``(0, 0)`` when it is not cropped (vLLM's ``get_num_crops``)."""
        if not self.enabled:
            return 0, 0
        if width >= height:
            if width / height < self.min_ratio_to_activate:
                return 0, 0
            cols = min(int(math.floor(width / self.min_crop_size)), int(math.floor(width / height + 0.5)))
            rows, cols = 1, min(self.max_num_crops, max(2, cols))
        else:
            if height / width < self.min_ratio_to_activate:
                return 0, 0
            rows = min(int(math.floor(height / self.min_crop_size)), int(math.floor(height / width + 0.5)))
            rows, cols = min(self.max_num_crops, max(2, rows)), 1
        if min(int(math.ceil(width / cols)), int(math.ceil(height / rows))) < self.min_crop_size:
            return 0, 0
        return rows, cols


@dataclass
class Gemma3Processor:
    """Gemma 3 processor; `bind` gives it the tokenizer (its replacement is tokenized text).

    Attributes:
        height, width: the size every image and crop is resized to.
        resample: ``"bilinear"`` (``resample: 2``) or ``"bicubic"``.
        mean, std, rescale_factor: normalization.
        image_seq_length: soft tokens per image or crop.
        dtype: wire dtype of ``pixel_values``.
        pan_and_scan: crop settings.
    """

    height: int = 896
    width: int = 896
    resample: str = "bilinear"
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)
    rescale_factor: float = 1 / 255
    image_seq_length: int = 256
    dtype: str = "bfloat16"
    pan_and_scan: PanAndScan = field(default_factory=PanAndScan)
    boi_token: str = "<start_of_image>"
    eoi_token: str = "<end_of_image>"
    image_token: str = "<image_soft_token>"
    split_tokens: dict[int, tuple[int, ...]] = field(default_factory=dict)
    _encode: Any = None
    _merges: tuple = ()
    _replacements: dict = field(default_factory=dict)
    _table: NormalizeTable | None = None

    @property
    def placeholder_tokens(self) -> dict[str, str]:
        return {"image": self.boi_token}

    @classmethod
    def from_model_dir(cls, model_dir: Path, config: dict) -> "Gemma3Processor":
        """Read ``preprocessor_config.json`` / ``processor_config.json`` / ``tokenizer_config.json``.

        Raises:
            ValueError: a resample filter other than bilinear / bicubic.
        """
        pre = _read_json(model_dir / "preprocessor_config.json")
        proc = _read_json(model_dir / "processor_config.json")
        tok = _read_json(model_dir / "tokenizer_config.json")
        size = pre.get("size") or {}
        resample = _RESAMPLE.get(int(pre.get("resample", 2)))
        if resample is None:
            raise ValueError(f"Gemma 3 resample {pre.get('resample')!r} is not supported")
        return cls(
            height=int(size.get("height", 896)), width=int(size.get("width", 896)), resample=resample,
            mean=tuple(pre.get("image_mean") or (0.5,) * 3), std=tuple(pre.get("image_std") or (0.5,) * 3),
            rescale_factor=float(pre.get("rescale_factor", 1 / 255)),
            image_seq_length=int(proc.get("image_seq_length") or pre.get("image_seq_length") or config.get("mm_tokens_per_image") or 256),
            dtype=model_dtype(config),
            boi_token=tok.get("boi_token", "<start_of_image>"), eoi_token=tok.get("eoi_token", "<end_of_image>"),
            image_token=tok.get("image_token", "<image_soft_token>"),
        )

    def bind(self, tokenizer: Any) -> None:
        """Take the model's `TextTokenizer`: replacements are encoded with it, newline ids come from it.

        Raises:
            ValueError: the vocabulary lacks one of the newline tokens vLLM merges.
        """
        ids = [tokenizer.token_to_id(t) for t in ("\n", "\n\n", "\n\n\n", "\n\n\n\n")]
        if None in ids:
            raise ValueError("Gemma 3 tokenizer lacks the newline tokens vLLM's processor merges")
        n1, n2, n3, n4 = ids
        self._encode = tokenizer.encode
        self._merges = (((n1, n2), (n3,)), ((n2, n1), (n3,)), ((n2, n2), (n4,)))
        self.split_tokens = {n3: (n1, n2), n4: (n2, n2)}

    def merge_ids(self, token_ids: list[int]) -> list[int]:
        """Merge newline pairs the replacement left next to each other, in vLLM's order."""
        for match, new in self._merges:
            token_ids = replace_token_matches(token_ids, match, new)
        return token_ids

    def _replacement(self, crops: int) -> tuple[int, ...]:
        cached = self._replacements.get(crops)
        if cached is None:
            full = f"\n\n{self.boi_token}{self.image_token * self.image_seq_length}{self.eoi_token}\n\n"
            if crops == 0:
                text = full
            else:
                text = (f"Here is the original image {full} and here are some crops to help you see better "
                        + " ".join([full] * crops))
            cached = self._replacements[crops] = tuple(self._encode(text))
        return cached

    def image_num_tokens(self, height: int, width: int, param: str | None = None) -> int:
        """Soft tokens of an image (``(1 + crops) · image_seq_length``); the prompt takes `image_replacement`."""
        rows, cols = self.pan_and_scan.grid(height, width)
        return (1 + rows * cols) * self.image_seq_length

    def image_replacement(self, height: int, width: int, param: str | None = None) -> tuple[int, ...]:
        """The token ids replacing the image's ``<start_of_image>``."""
        rows, cols = self.pan_and_scan.grid(height, width)
        return self._replacement(rows * cols)

    def _crops(self, rgb: np.ndarray) -> list[np.ndarray]:
        height, width = rgb.shape[:2]
        rows, cols = self.pan_and_scan.grid(height, width)
        if rows == 0:
            return []
        ch, cw = int(math.ceil(height / rows)), int(math.ceil(width / cols))
        return [rgb[r * ch:(r + 1) * ch, c * cw:(c + 1) * cw] for r in range(rows) for c in range(cols)]

    def process_image(self, rgb: np.ndarray, param: str | None = None) -> ProcessedItem:
        """One decoded RGB image ``[H, W, 3]`` uint8 → the ``image`` item vLLM builds."""
        if self._table is None:
            self._table = NormalizeTable(list(self.mean), list(self.std), self.rescale_factor, self.dtype)
        views = [rgb] + self._crops(rgb)
        pixels = np.stack([self._table.chw(resize_aa(np.ascontiguousarray(v), self.height, self.width, self.resample))
                           for v in views])
        return ProcessedItem(
            modality="image",
            fields={
                "pixel_values": Field(pixels, "flat", wire_dtype="bfloat16" if self.dtype == "bfloat16" else None),
                "num_patches": Field(np.array(len(views), dtype=np.int64), "batched", keep_on_cpu=True),
            },
            num_tokens=len(views) * self.image_seq_length,
            replacement=self.image_replacement(rgb.shape[0], rgb.shape[1]),
        )
