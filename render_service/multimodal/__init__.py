"""Images and video in render: vLLM-identical placeholders, hashes and tensors, without torch.

Public surface:
- `MultimodalRenderer` / `MultimodalConfig` (pipeline.py): parts → expanded token ids + ``features``;
- `MediaPart`, `image_part`, `chat_media_part`, `anthropic_image_url` (parts.py): front-door parts;
- `load_processor` (processors/): the family processor for a model directory, or None.
"""

from .media import MediaLimits
from .parts import anthropic_image_url, chat_media_part, image_part
from .pipeline import LoadedItem, MediaPart, MultimodalConfig, MultimodalRenderer
from .processors import FAMILIES, load_processor

__all__ = [
    "FAMILIES", "LoadedItem", "MediaLimits", "MediaPart", "MultimodalConfig", "MultimodalRenderer",
    "anthropic_image_url", "chat_media_part", "image_part", "load_processor",
]
