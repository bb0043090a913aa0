"""LLaVA-1.5 image processor (``model_type`` ``llava``), as vLLM 0.33 runs it.

vLLM calls transformers' ``CLIPImageProcessor`` (torchvision backend) with the model's
``preprocessor_config.json`` and no device normalization (LLaVA does not declare
``supports_mm_device_do_normalize``), so an image item is:

- ``pixel_values``: ``[3, crop, crop]`` in the model dtype (float16 for llava-1.5-7b-hf on CPU),
  batched field. The image is resized so its short side is ``size.shortest_edge`` (long side
  ``int(short · long / short)``, bicubic, antialiased, uint8), center-cropped to
  ``crop_size`` (top/left ``int((size - crop) / 2)``), then ``(x - mean·255) / (std·255)`` in float32;
- placeholders: the template writes ``<image>`` once per image; it becomes
  ``(image_size / patch_size)²`` copies (CLIP's tokens minus the CLS token for the
  ``default`` feature select strategy; 576 for 336/14), whatever the image's size.

Source: vLLM 0.33 ``model_executor/models/llava.py`` (``BaseLlavaMultiModalProcessor``,
``get_num_selected_vision_tokens``), ``model_executor/models/clip.py``; transformers 5.20.2
``models/clip/image_processing_clip.py``, ``image_processing_backends.TorchvisionBackend``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ..items import Field, ProcessedItem
from ..resize import resize_bicubic_aa
from .normalize import NormalizeTable, model_dtype
from .qwen2_vl import _read_json

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def shortest_edge_size(height: int, width: int, shortest_edge: int) -> tuple[int, int]:
    """``(height, width)`` with the short side ``shortest_edge`` (transformers' ``get_resize_output_image_size``)."""
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = shortest_edge, int(shortest_edge * long / short)
    return (new_long, new_short) if width <= height else (new_short, new_long)


@dataclass(frozen=True)
class LlavaProcessor:
    """LLaVA-1.5 processor built from ``preprocessor_config.json``, ``processor_config.json`` and ``config.json``.

    Attributes:
        shortest_edge: resize target of the short side (pixels).
        crop_height, crop_width: center crop (pixels).
        mean, std: per-channel normalization (of 0-1 values).
        rescale_factor: 1/255.
        num_image_tokens: placeholder tokens per image.
        dtype: wire dtype of ``pixel_values`` (``float16`` / ``bfloat16``).
    """

    shortest_edge: int = 336
    crop_height: int = 336
    crop_width: int = 336
    mean: tuple[float, ...] = OPENAI_CLIP_MEAN
    std: tuple[float, ...] = OPENAI_CLIP_STD
    rescale_factor: float = 1 / 255
    num_image_tokens: int = 576
    dtype: str = "float16"
    image_token: str = "<image>"

    @property
    def placeholder_tokens(self) -> dict[str, str]:
        return {"image": self.image_token}

    @classmethod
    def from_model_dir(cls, model_dir: Path, config: dict) -> "LlavaProcessor":
        """Read the model's processor files; the token count follows vLLM's rule for the vision tower.

        Raises:
            ValueError: a feature select strategy or resize mode vLLM's LLaVA processor does not use here.
        """
        pre = _read_json(model_dir / "preprocessor_config.json")
        proc = _read_json(model_dir / "processor_config.json")
        vision = config.get("vision_config") or {}
        strategy = config.get("vision_feature_select_strategy", "default")
        if strategy not in ("default", "full"):
            raise ValueError(f"LLaVA vision_feature_select_strategy {strategy!r} is not supported")
        image_size, patch = int(vision.get("image_size", 336)), int(vision.get("patch_size", 14))
        patches = (image_size // patch) ** 2
        size, crop = pre.get("size") or {}, pre.get("crop_size") or {}
        if "shortest_edge" not in size or not pre.get("do_center_crop", True):
            raise ValueError(f"LLaVA preprocessor size {size!r} (center crop {pre.get('do_center_crop')}) is not supported")
        return cls(
            shortest_edge=int(size["shortest_edge"]),
            crop_height=int(crop.get("height", size["shortest_edge"])),
            crop_width=int(crop.get("width", size["shortest_edge"])),
            mean=tuple(pre.get("image_mean", OPENAI_CLIP_MEAN)),
            std=tuple(pre.get("image_std", OPENAI_CLIP_STD)),
            rescale_factor=float(pre.get("rescale_factor", 1 / 255)),
            num_image_tokens=patches if strategy == "default" else patches + 1,
            dtype=model_dtype(config),
            image_token=proc.get("image_token", "<image>"),
        )

    def image_num_tokens(self, height: int, width: int, param: str | None = None) -> int:
        """Placeholder tokens of an image: the same for every size."""
        return self.num_image_tokens

    @cached_property
    def _table(self) -> NormalizeTable:
        return NormalizeTable(list(self.mean), list(self.std), self.rescale_factor, self.dtype)

    def pixels(self, rgb: np.ndarray) -> np.ndarray:
        """Decoded RGB ``[H, W, 3]`` uint8 → normalized ``[3, crop_h, crop_w]`` in the wire dtype
        (float16; bfloat16 as uint16 bit patterns)."""
        height, width = shortest_edge_size(rgb.shape[0], rgb.shape[1], self.shortest_edge)
        resized = resize_bicubic_aa(rgb, height, width)
        top, left = int((height - self.crop_height) / 2.0), int((width - self.crop_width) / 2.0)
        return self._table.chw(resized[top:top + self.crop_height, left:left + self.crop_width])

    def process_image(self, rgb: np.ndarray, param: str | None = None) -> ProcessedItem:
        """One decoded RGB image ``[H, W, 3]`` uint8 → the ``image`` item vLLM builds."""
        wire = "bfloat16" if self.dtype == "bfloat16" else None
        return ProcessedItem(
            modality="image",
            fields={"pixel_values": Field(self.pixels(rgb), "batched", wire_dtype=wire)},
            num_tokens=self.num_image_tokens,
        )

