"""Media in render: a request's image/video parts → loaded items → expanded ids + ``features``.

The chat front door (and Responses / Messages, whose image parts become chat parts on the way)
collects its media parts in prompt order, awaits `load_media_input` on the event loop (fetches
are async, processing runs on the CPU pool), then hands the `MediaInput` to the synchronous
renderer, which expands the template's placeholders with `MediaInput.expand` (vLLM 0.33:
``features`` with ``mm_hashes``, ``mm_placeholders``, ``kwargs_data``, ``mm_metadata``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import bad_request
from ..multimodal.parts import MediaPart, chat_media_part

if TYPE_CHECKING:  # the pipeline (NumPy, Pillow, httpx) loads only for a model that takes media
    from ..multimodal.pipeline import LoadedItem, MultimodalRenderer

MM_PAYLOADS = ("tensors", "none")


@dataclass(frozen=True)
class MediaInput:
    """A request's processed media, ready to expand into its prompt."""

    renderer: MultimodalRenderer
    items: list[LoadedItem]
    mm_payload: str = "tensors"

    def expand(self, token_ids: list[int], text: str | None = None) -> tuple[list[int], dict | None]:
        """``(expanded token_ids, features)`` (``text``: the prompt ``token_ids`` encode); CPU-bound
        (base64 of the tensors): call it on the pool."""
        return self.renderer.expand(token_ids, self.items, self.mm_payload, text)

    @property
    def text_placeholders(self) -> dict[str, str] | None:
        """``{modality: string}`` vLLM writes into string-format chat content per item (MiniCPM-V), else None."""
        return getattr(self.renderer.processor, "placeholder_texts", None)


def mm_payload(req: Any) -> str:
    """``mm_payload`` of a request (``return_mm_kwargs: false`` is the deprecated ``"none"``).

    Also refuses per-request ``mm_processor_kwargs`` / ``media_io_kwargs`` as vLLM 0.33 does
    without ``--trust-request-mm-kwargs`` (which render-service does not take): they would
    change the processing and the hashes, so they are never accepted and ignored.

    Raises:
        OpenAIError: 400 for a value other than ``tensors`` / ``none``, or non-empty
        ``mm_processor_kwargs`` / ``media_io_kwargs`` (vLLM's message).
    """
    extra = getattr(req, "model_extra", None) or {}
    for name, what in (("mm_processor_kwargs", "multimodal preprocessing"), ("media_io_kwargs", "multimodal media loading")):
        if extra.get(name):
            raise bad_request(f"Per-request {name} are disabled by default because they can change {what} resource "
                              "usage. Start the server with --trust-request-mm-kwargs only when clients are trusted.", name)
    value = getattr(req, "mm_payload", None) or extra.get("mm_payload")
    if value is None:
        return "none" if extra.get("return_mm_kwargs", getattr(req, "return_mm_kwargs", None)) is False else "tensors"
    if value not in MM_PAYLOADS:
        raise bad_request("mm_payload must be 'tensors' or 'none'.", "mm_payload")
    return value


def chat_media_parts(messages: Any) -> list[MediaPart]:
    """The media parts of chat ``messages`` in prompt order (what the template will number)."""
    parts: list[MediaPart] = []
    if not isinstance(messages, list):
        return parts
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, dict):
                found = chat_media_part(part, f"messages.{i}.content.{j}")
                if found is not None:
                    parts.append(found)
    return parts


async def load_media_input(renderer: MultimodalRenderer | None, parts: list[MediaPart], payload: str) -> MediaInput | None:
    """Load and process ``parts``; None for a request without media.

    Raises:
        OpenAIError: 400 when the model takes no media, or for any bad part.
    """
    if not parts:
        return None
    if renderer is None:
        part = parts[0]
        raise bad_request(f"content part type for {part.modality} is not supported: this model takes no media.",
                          f"{part.param}.type" if part.param else None)
    return MediaInput(renderer, await renderer.load(parts, payload), payload)
