"""Media content parts of each front door → `MediaPart` (the one shape the pipeline takes).

- chat: ``{"type": "image_url", "image_url": {"url": ...} | "...", "uuid"?}`` and
  ``{"type": "video_url", "video_url": {"url": ...}, "uuid"?}``; with a ``uuid`` the URL may be
  absent or null (answered from the processor cache), as vLLM 0.33 parses them;
- Responses ``input_image`` (``image_url`` string) and Anthropic Messages ``image`` blocks
  (``source`` base64 or url) go through `chat_media_part` / `anthropic_image_url`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import bad_request


@dataclass(frozen=True)
class MediaPart:
    """One media content part, whatever the front door (chat, Responses, Messages).

    Attributes:
        modality: ``"image"`` or ``"video"``.
        url: ``data:``, ``file://`` or ``http(s)://`` URL; None for a ``uuid``-only part.
        uuid: the client's id for the item; when given it is the item's ``mm_hash``.
        param: dotted path of the part in the request, for error messages.
    """

    modality: str
    url: str | None
    uuid: str | None = None
    param: str | None = None


CHAT_MEDIA_TYPES = {"image_url": "image", "video_url": "video", "input_image": "image"}


def _url_of(value: Any) -> Any:
    return value.get("url") if isinstance(value, dict) else value


def chat_media_part(part: dict, param: str | None = None) -> MediaPart | None:
    """The `MediaPart` of a chat content part, or None when the part is not media (text, ...).

    Raises:
        OpenAIError: 400 for a media part without a usable URL or uuid.
    """
    ptype = part.get("type")
    uuid = part.get("uuid")
    key = ptype if ptype in CHAT_MEDIA_TYPES else None
    if key is None and (ptype is None or uuid is not None):
        key = next((k for k in ("image_url", "video_url") if k in part), None)
    if key is None:
        return None
    modality = CHAT_MEDIA_TYPES[key]
    url = _url_of(part.get(key))
    if url is not None and not isinstance(url, str):
        raise bad_request(f"`{key}.url` must be a string.", param)
    if not url and uuid is None:
        raise bad_request(f"A {key} part needs `{key}.url`.", param)
    return MediaPart(modality, url or None, None if uuid is None else str(uuid), param)


def anthropic_image_url(source: Any, param: str | None = None) -> str:
    """The URL of an Anthropic ``image`` block's ``source`` (base64 → a data URL; url as is).

    Raises:
        OpenAIError: 400 for a missing or unsupported source.
    """
    if isinstance(source, dict):
        if source.get("type") == "base64" and isinstance(source.get("data"), str):
            return f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
        if source.get("type") == "url" and isinstance(source.get("url"), str):
            return source["url"]
    raise bad_request("An image block needs a `source` of type base64 (with data) or url.", param)
