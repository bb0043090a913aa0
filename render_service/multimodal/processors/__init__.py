"""Image/video processors per model family: one module per family, one row per ``model_type``.

A processor is built from the model directory and its ``config.json`` and offers:
``placeholder_tokens`` ({modality: token the chat template writes once per item}),
``process_image(rgb [H, W, 3] uint8, param) -> ProcessedItem`` and optionally
``process_video(frames, fps, param)``, and ``image_num_tokens(height, width, param)`` /
``video_num_tokens(frames, height, width, param)`` (the placeholder count without pixels, for
``mm_payload: "none"``; without them that path processes in full). Adding a family (Llama 4, Gemma 3, InternVL) is a
module here plus a row in `FAMILIES`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from .qwen2_vl import Qwen2VLProcessor

# config.json "model_type" -> factory(model_dir, config) -> processor
FAMILIES: dict[str, Callable[[Path, dict], Any]] = {
    "qwen2_vl": Qwen2VLProcessor.from_model_dir,
    "qwen2_5_vl": Qwen2VLProcessor.from_model_dir,
}


def load_processor(model_dir: str | Path | None) -> Any | None:
    """The processor for the model directory's family, or None (text-only model or unknown family)."""
    if model_dir is None:
        return None
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return None
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    factory = FAMILIES.get(config.get("model_type", ""))
    if factory is None:
        return None
    from ..resize import warm_up

    warm_up()
    return factory(model_dir, config)
