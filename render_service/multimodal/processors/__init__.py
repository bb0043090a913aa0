"""Image/video processors per model family: one module per family, one row per ``model_type``.

A processor is built from the model directory and its ``config.json`` and offers:
``placeholder_tokens`` ({modality: token the chat template writes once per item}),
``process_image(rgb [H, W, 3] uint8, param) -> ProcessedItem`` and optionally
``process_video(frames, fps, param)``, and ``image_num_tokens(height, width, param)`` /
``video_num_tokens(frames, height, width, param)`` (the placeholder count without pixels, for
``mm_payload: "none"``; without them that path processes in full). Optional hooks:
``bind(tokenizer)`` (called once with the model's `TextTokenizer`), ``image_replacement(height,
width, param)`` (the token ids replacing the template's token when they are not
``num_tokens`` copies of it), ``merge_ids(ids)`` + ``split_tokens`` (replacements that merge
with their neighbours, `..prompt_updates`). Adding a family is a module here plus a row in
`..families.FAMILY_MODULES` (docs/multimodal.md, "Add a family").
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

from ...errors import bad_request
from ..families import FAMILY_MODULES, model_config, takes_media

# config.json "model_type" -> factory(model_dir, config) -> processor
FAMILIES: dict[str, Callable[[Path, dict], Any]] = {
    model_type: getattr(importlib.import_module(f".{module}", __name__), cls).from_model_dir
    for model_type, (module, cls) in FAMILY_MODULES.items()
}


class UnsupportedFamily:
    """A vision-language model whose family has no processor here: every media part is a 400
    naming the family and the supported ones (never another family's placeholder rule)."""

    placeholder_tokens: dict[str, str] = {}

    def __init__(self, model_type: str, architectures: list[str], why: str | None = None):
        self.model_type = model_type
        self.architectures = architectures
        self.why = why   # a supported family's model we cannot take (e.g. another MiniCPM-V version)

    def refuse(self, modality: str, param: str | None = None):
        """The 400 for any ``modality`` part."""
        arch = f" ({', '.join(self.architectures)})" if self.architectures else ""
        if self.why is not None:
            return bad_request(f"{modality} inputs are not supported for this model{arch}: {self.why}", param)
        return bad_request(
            f"{modality} inputs are not supported for this model: its family, model_type {self.model_type!r}{arch}, "
            f"has no image processor in render-service. Supported model_type values: {', '.join(sorted(FAMILIES))}.",
            param)


def load_processor(model_dir: str | Path | None, tokenizer: Any = None) -> Any | None:
    """The processor for the model directory's family; `UnsupportedFamily` for a vision model of
    another family; None for a text-only model (or no ``config.json``).

    ``tokenizer`` (the model's `TextTokenizer`) is handed to processors with a ``bind`` hook.
    """
    config = model_config(model_dir)
    if not takes_media(config):
        return None
    model_dir = Path(model_dir)
    model_type = str(config.get("model_type", ""))
    factory = FAMILIES.get(model_type)
    if factory is None:   # a vision config (takes_media)
        return UnsupportedFamily(model_type, [str(a) for a in config.get("architectures") or []])
    from ..resize import warm_up

    warm_up()
    try:
        processor = factory(model_dir, config)
    except NotImplementedError as exc:   # the family's processor does not cover this model's variant
        return UnsupportedFamily(model_type, [str(a) for a in config.get("architectures") or []], str(exc))
    if hasattr(processor, "bind"):
        if tokenizer is None:
            raise ValueError(f"the {model_type} processor needs the model's tokenizer")
        processor.bind(tokenizer)
    if hasattr(processor, "warm_up"):   # its own compiled kernels, now rather than on the first image
        processor.warm_up()
    return processor
