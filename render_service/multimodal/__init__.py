"""Images and video in render: vLLM-identical placeholders, hashes and tensors, without torch.

Public surface:
- `MultimodalRenderer` / `MultimodalConfig` (pipeline.py): parts → expanded token ids + ``features``;
- `MediaPart`, `chat_media_part`, `anthropic_image_url` (parts.py): front-door parts;
- `load_processor` (processors/): the family processor for a model directory, or None
  (`families.takes_media` says which without importing a processor).
"""

import importlib

# Loaded on first use (PEP 562): a text model, `serve --help` and the flag table never pay for
# Pillow, NumPy and numba.
_HOMES = {
    "MediaLimits": "defaults", "anthropic_image_url": "parts", "chat_media_part": "parts",
    "LoadedItem": "pipeline", "MediaPart": "parts", "MultimodalConfig": "pipeline", "MultimodalRenderer": "pipeline",
    "FAMILIES": "processors", "load_processor": "processors",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
