"""Qwen3-VL image and video processor (``model_type`` ``qwen3_vl``), as vLLM 0.33 runs it.

Images go through the same transformers ``Qwen2VLImageProcessor`` as Qwen2.5-VL (vLLM's
``Qwen3VLProcessingInfo.get_image_processor``), with Qwen3-VL's ``preprocessor_config.json``:
16-pixel patches, merge 2 (so sizes are multiples of 32), pixels in
``[size.shortest_edge, size.longest_edge]``, device normalization on (uint8 pixels,
``[t·h·w, 3·2·16·16]``). The prompt holds one ``<|image_pad|>`` per image, expanded to
``t·h·w / 4`` pads: `Qwen2VLProcessor` does all of it with these numbers.

Videos differ from Qwen2-VL's:

- frames: vLLM's ``qwen3_vl`` loader takes ``int(total / fps · 2)`` frames (clamped to
  [4, 768] and the clip) at ``linspace(0, total - 1, n).round()``; frame sequences
  (``data:video/jpeg``) are used as sent (fps 1);
- size: Qwen3-VL's ``smart_resize`` over all frames (``t·h·w`` within the video config's
  ``size``; frames smaller than 32 pixels are scaled up first), bicubic, uint8;
- tensors: ``video_grid_thw`` int64, ``pixel_values_videos`` uint8 ``[T·H·W, 1536]`` (a frame
  count that is not even repeats the last frame), ``timestamps`` (a list of float seconds per
  temporal patch: the mean of its two frames' times, ``index / fps``), grid and timestamps
  also ``mm_metadata``;
- prompt: the template writes ``<|vision_start|><|video_pad|><|vision_end|>``; the
  ``<|video_pad|>`` becomes, per temporal patch, the tokens of ``"<{t:.1f} seconds>"`` then
  ``<|vision_start|>``, ``h·w / 4`` pads, ``<|vision_end|>``. The range covers all of it.

Source: vLLM 0.33 ``model_executor/models/qwen3_vl.py`` (``get_video_repl``,
``_calculate_timestamps``), ``multimodal/video.py`` (``Qwen3VLVideoBackend``); transformers
5.20.2 ``models/qwen3_vl/video_processing_qwen3_vl.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import bad_request
from ..items import Field, ProcessedItem
from ..video import qwen3_vl_indices
from .qwen2_vl import Qwen2VLProcessor, _read_json


def video_smart_resize(num_frames: int, height: int, width: int, temporal_factor: int, factor: int,
                       min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen3-VL's video ``smart_resize``: ``(height, width)`` in multiples of ``factor`` with
    ``frames · height · width`` within ``[min_pixels, max_pixels]``.

    Raises:
        ValueError: aspect ratio over 200 (vLLM answers 400).
    """
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def frame_timestamps(indices: list[int], fps: float, temporal_patch: int) -> list[float]:
    """Seconds per temporal patch: the mean of its first and last frame's ``index / fps`` (vLLM's ``_calculate_timestamps``)."""
    if len(indices) % temporal_patch:
        indices = indices + [indices[-1]] * (temporal_patch - len(indices) % temporal_patch)
    times = [i / fps for i in indices]
    return [(times[i] + times[i + temporal_patch - 1]) / 2 for i in range(0, len(times), temporal_patch)]


@dataclass(frozen=True)
class Qwen3VLProcessor(Qwen2VLProcessor):
    """Qwen3-VL: `Qwen2VLProcessor` for images, its own sampling, size and prompt for videos."""

    video_fps_target: float = 2.0
    _tokens: dict = field(default_factory=dict, compare=False)

    placeholder_tokens = {"image": "<|image_pad|>", "video": "<|video_pad|>"}

    @classmethod
    def from_model_dir(cls, model_dir: Path, config: dict) -> "Qwen3VLProcessor":
        base = Qwen2VLProcessor.from_model_dir(model_dir, config)
        video = _read_json(model_dir / "video_preprocessor_config.json")
        fields = {name: getattr(base, name) for name in Qwen2VLProcessor.__dataclass_fields__}
        return cls(**fields, video_fps_target=float(video.get("fps") or 2.0))

    def bind(self, tokenizer: Any) -> None:
        """Take the tokenizer: timestamps are tokenized text; the vision start / end ids come from it."""
        self._tokens.update(encode=tokenizer.encode, start=tokenizer.token_to_id("<|vision_start|>"),
                            end=tokenizer.token_to_id("<|vision_end|>"), pad=tokenizer.token_to_id("<|video_pad|>"))

    def video_indices(self, total: int, fps: float) -> list[int]:
        """The frames vLLM's ``qwen3_vl`` loader decodes."""
        return qwen3_vl_indices(total, fps, self.video_fps_target)

    def prepare_video(self, frames: np.ndarray, metadata: dict) -> tuple[np.ndarray, list[float]]:
        """``(frames the processor uses, timestamps)``: transformers samples again only when the loader
        read every frame, with the loader's rule (all of them again)."""
        indices = list(metadata["frames_indices"])
        if metadata.get("do_sample_frames"):
            picked = qwen3_vl_indices(metadata["total_num_frames"], metadata["fps"], self.video_fps_target)
            frames, indices = frames[picked], [indices[i] for i in picked]
        return frames, frame_timestamps(indices, metadata["fps"], self.temporal_patch_size)

    def _video_size(self, num_frames: int, height: int, width: int, param: str | None) -> tuple[int, int]:
        try:
            return video_smart_resize(num_frames, height, width, self.temporal_patch_size, self.factor,
                                      self.video_min_pixels, self.video_max_pixels)
        except ValueError as exc:
            raise bad_request(str(exc), param) from None

    def _replacement(self, timestamps: list[float], per_frame: int) -> tuple[int, ...]:
        t = self._tokens
        out: list[int] = []
        for seconds in timestamps:
            out += t["encode"](f"<{seconds:.1f} seconds>")
            out.append(t["start"])
            out += [t["pad"]] * per_frame
            out.append(t["end"])
        return tuple(out)

    def video_prompt(self, num_frames: int, height: int, width: int, timestamps: list[float],
                     param: str | None = None) -> tuple[int, tuple[int, ...]]:
        """``(pad tokens, the ids replacing <|video_pad|>)`` of a video, without pixels."""
        h, w = self._video_size(num_frames, height, width, param)
        per_frame = (h // self.patch_size) * (w // self.patch_size) // (self.merge_size ** 2)
        return per_frame * len(timestamps), self._replacement(timestamps, per_frame)

    def process_video(self, frames: np.ndarray, timestamps: list[float], param: str | None = None) -> ProcessedItem:
        """The sampled RGB frames ``[T, H, W, 3]`` uint8 and their timestamps → the ``video`` item vLLM builds."""
        height, width = self._video_size(len(frames), frames.shape[1], frames.shape[2], param)
        patches, grid = self.resize_patchify(frames, height, width)
        per_frame = grid[1] * grid[2] // (self.merge_size ** 2)
        return ProcessedItem(
            modality="video",
            fields={   # vLLM's item order
                "video_grid_thw": Field(np.array(grid, dtype=np.int64), "batched", keep_on_cpu=True, metadata=True),
                "pixel_values_videos": Field(patches, "flat"),
                "timestamps": Field(list(timestamps), "batched", keep_on_cpu=True, metadata=True),
            },
            num_tokens=per_frame * grid[0],
            replacement=self._replacement(timestamps, per_frame),
        )
