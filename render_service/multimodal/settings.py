"""The media settings of a `ServeConfig` (its ``serve`` flags: serve/flags.py) as the
`MultimodalConfig` the media pipeline runs with."""

from __future__ import annotations

from typing import Any

from .defaults import DEFAULT_LIMIT_PER_PROMPT, MediaLimits


def from_serve_config(config: Any):
    """The `MultimodalConfig` of a `ServeConfig` (model id: ``--mm-hash-model-id`` or ``--model`` as given)."""
    from .pipeline import MultimodalConfig

    return MultimodalConfig(
        model_id=config.mm_hash_model_id or config.model or "",
        limits=MediaLimits(
            allowed_local_media_path=config.allowed_local_media_path,
            allow_remote=config.allow_remote_media,
            allowed_domains=tuple(config.allowed_media_domains or ()),
            max_bytes=config.max_media_bytes,
            fetch_timeout_s=config.media_fetch_timeout,
            max_redirects=config.media_max_redirects,
        ),
        limit_per_prompt={**DEFAULT_LIMIT_PER_PROMPT, **(config.limit_mm_per_prompt or {})},
        max_image_pixels=config.max_image_pixels,
        cache_bytes=int(config.mm_processor_cache_gb * (1 << 30)),
        hash_algorithm=config.mm_hasher_algorithm,
    )
