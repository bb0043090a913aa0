"""Whether a model directory takes media, decided from its ``config.json`` alone.

The family table lives here, as module and class names, so that a text model's start-up
reads one JSON file and never imports a processor (NumPy, Pillow, numba: ~0.5 s of CPU);
`processors.FAMILIES` imports the classes, for a model that takes media only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# config.json "model_type" -> (module in processors/, class with `from_model_dir(model_dir, config)`)
FAMILY_MODULES: dict[str, tuple[str, str]] = {
    "qwen2_vl": ("qwen2_vl", "Qwen2VLProcessor"),
    "qwen2_5_vl": ("qwen2_vl", "Qwen2VLProcessor"),
    "llava": ("llava", "LlavaProcessor"),
    "gemma3": ("gemma3", "Gemma3Processor"),
    "qwen3_vl": ("qwen3_vl", "Qwen3VLProcessor"),
    "minicpmv": ("minicpmv", "MiniCPMVProcessor"),
}

# config.json keys that only vision-language models carry
VISION_KEYS = ("vision_config", "image_token_index", "image_token_id", "mm_tokens_per_image", "vision_start_token_id",
               "visual", "vision_tower")


def is_vision_config(config: dict) -> bool:
    """True when ``config.json`` describes a vision-language model."""
    return any(key in config for key in VISION_KEYS)


def model_config(model_dir: str | Path | None) -> dict[str, Any] | None:
    """The ``config.json`` object of a model directory; None for no directory, no or unreadable
    ``config.json``, or one that is not a JSON object."""
    if model_dir is None or not Path(model_dir).is_dir():
        return None
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def takes_media(config: dict[str, Any] | None) -> bool:
    """True when `processors.load_processor` gives a processor (or `UnsupportedFamily`) for a
    model with this ``config.json`` (`model_config`), False when it gives None: a text model."""
    if config is None:
        return False
    return str(config.get("model_type", "")) in FAMILY_MODULES or is_vision_config(config)
