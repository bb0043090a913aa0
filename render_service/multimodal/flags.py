"""The ``serve`` flags for media (names follow `vllm launch render` where it has the flag).

`add_arguments` registers them, `overrides` reads them back into `ServeConfig` fields, and
`from_serve_config` turns those fields into a `MultimodalConfig`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..config.serve import ServeConfig  # the defaults, stated once
from .defaults import DEFAULT_LIMIT_PER_PROMPT, HASH_ALGORITHMS


def _limits(value: str) -> dict:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    if not isinstance(parsed, dict) or not all(isinstance(v, int) and v >= 0 for v in parsed.values()):
        raise argparse.ArgumentTypeError('must be a JSON object of counts, e.g. {"image": 4, "video": 1}')
    return parsed


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Media flags of ``serve``."""
    g = p.add_argument_group("media (vision-language models)")
    g.add_argument("--allowed-local-media-path", default=None,
                   help="directory file:// media URLs must lie under (default: file:// refused)")
    g.add_argument("--allow-remote-media", action="store_true",
                   help="fetch http(s) media URLs (off by default: a render tier that fetches any URL is an SSRF hole)")
    g.add_argument("--allowed-media-domains", nargs="+", default=None, metavar="HOST",
                   help="only these hostnames (exact) may be fetched, redirects included; implies remote fetches")
    g.add_argument("--media-fetch-timeout", type=float, default=ServeConfig.media_fetch_timeout, help="seconds for one remote fetch, connect to last byte")
    g.add_argument("--max-media-bytes", type=int, default=ServeConfig.max_media_bytes, help="largest encoded media item")
    g.add_argument("--media-max-redirects", type=int, default=ServeConfig.media_max_redirects, help="redirects followed on a remote fetch")
    g.add_argument("--max-image-pixels", type=int, default=ServeConfig.max_image_pixels, help="largest decoded image (pixels)")
    g.add_argument("--limit-mm-per-prompt", type=_limits, default=None,
                   help=f"JSON, most items per modality in one request (default {json.dumps(DEFAULT_LIMIT_PER_PROMPT)})")
    g.add_argument("--mm-processor-cache-gb", type=float, default=ServeConfig.mm_processor_cache_gb, help="processor cache size (0 disables)")
    g.add_argument("--mm-hash-model-id", default=None,
                   help="model id mm_hashes are computed with: the model path the engine was started with "
                        "(default: --model as given, as vLLM does)")
    g.add_argument("--mm-hasher-algorithm", choices=HASH_ALGORITHMS, default=ServeConfig.mm_hasher_algorithm)


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """`ServeConfig` fields from the parsed media flags."""
    return {
        "allowed_local_media_path": args.allowed_local_media_path,
        "allow_remote_media": args.allow_remote_media,
        "allowed_media_domains": tuple(args.allowed_media_domains or ()),
        "media_fetch_timeout": args.media_fetch_timeout,
        "max_media_bytes": args.max_media_bytes,
        "media_max_redirects": args.media_max_redirects,
        "max_image_pixels": args.max_image_pixels,
        "limit_mm_per_prompt": args.limit_mm_per_prompt or {},
        "mm_processor_cache_gb": args.mm_processor_cache_gb,
        "mm_hash_model_id": args.mm_hash_model_id,
        "mm_hasher_algorithm": args.mm_hasher_algorithm,
    }


def from_serve_config(config: Any):
    """The `MultimodalConfig` of a `ServeConfig` (model id: ``--mm-hash-model-id`` or ``--model`` as given)."""
    from .media import MediaLimits
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
