"""Media defaults that the ``serve`` flags name, stated once and kept free of heavy imports:
``render-service serve --help`` and a flag error answer without loading Pillow, NumPy or numba."""

from dataclasses import dataclass

DEFAULT_MAX_IMAGE_PIXELS = 178_956_970   # vLLM's VLLM_MAX_IMAGE_PIXELS
HASH_ALGORITHMS = ("blake3", "sha256", "sha512")  # --mm-hasher-algorithm choices, vLLM's
DEFAULT_LIMIT_PER_PROMPT = {"image": 32, "video": 4}
DEFAULT_PROCESSOR_CACHE_GB = 4.0                # --mm-processor-cache-gb, vLLM's


@dataclass(frozen=True)
class MediaLimits:
    """Operator limits on loading media (the `serve` flags of the same names).

    Attributes:
        allowed_local_media_path: directory ``file://`` URLs must lie under; None refuses them.
        allow_remote: fetch ``http(s)://`` URLs at all.
        allowed_domains: when non-empty, the only hostnames (exact match, as vLLM's
            ``--allowed-media-domains``) a fetch or any of its redirects may reach; giving
            them also allows remote fetches.
        max_bytes: largest encoded media item, any source (bytes).
        fetch_timeout_s: wall-clock bound on one remote fetch, connect to last byte (seconds).
        max_redirects: redirects followed on a remote fetch.
    """

    allowed_local_media_path: str | None = None
    allow_remote: bool = False
    allowed_domains: tuple[str, ...] = ()
    max_bytes: int = 20 * 1024 * 1024
    fetch_timeout_s: float = 5.0
    max_redirects: int = 3
