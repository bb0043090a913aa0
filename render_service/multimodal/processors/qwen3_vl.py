"""Qwen3-VL image processor (``model_type`` ``qwen3_vl``), as vLLM 0.33 runs it.

Images go through the same transformers ``Qwen2VLImageProcessor`` as Qwen2.5-VL (vLLM's
``Qwen3VLProcessingInfo.get_image_processor``), with Qwen3-VL's ``preprocessor_config.json``:
16-pixel patches, merge 2 (so sizes are multiples of 32), pixels in
``[size.shortest_edge, size.longest_edge]``, device normalization on (uint8 pixels,
``[t·h·w, 3·2·16·16]``). The prompt holds one ``<|image_pad|>`` per image, expanded to
``t·h·w / 4`` pads: `Qwen2VLProcessor` does all of it with these numbers.

Video is not taken yet: Qwen3-VL samples frames with its own video processor and writes a
``<t seconds>`` timestamp before each frame's tokens (vLLM's ``get_video_repl``); a video part
is a 400 rather than Qwen2-VL's rule.

Source: vLLM 0.33 ``model_executor/models/qwen3_vl.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import bad_request
from .qwen2_vl import Qwen2VLProcessor


@dataclass(frozen=True)
class Qwen3VLProcessor(Qwen2VLProcessor):
    """`Qwen2VLProcessor` for Qwen3-VL's images; video parts are refused (see the module doc)."""

    placeholder_tokens = {"image": "<|image_pad|>"}

    @classmethod
    def from_model_dir(cls, model_dir: Path, config: dict) -> "Qwen3VLProcessor":
        base = Qwen2VLProcessor.from_model_dir(model_dir, config)
        return cls(**{name: getattr(base, name) for name in base.__dataclass_fields__})

    def refuse_modality(self, modality: str, param: str | None = None):
        """The 400 for a modality this family takes in vLLM but not here yet."""
        return bad_request(f"{modality} inputs to Qwen3-VL (model_type 'qwen3_vl') are not supported by render-service "
                           "yet: only images are.", param)
