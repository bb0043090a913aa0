"""`DriverConfig`: every ``render-service drive`` flag as one frozen value."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config.serve import ServeConfig


@dataclass(frozen=True)
class DriverConfig:
    """Driver settings.

    ``prefill`` / ``decode``: base URLs of tokens-only engines (``http://host:port``, no
    path). ``render``: base URL of a render server; None = render and derender in this
    process with ``serve`` (the model flags shared with ``render-service serve``).
    ``timeout``: seconds an upstream may stay silent (read/write/pool) before the hop
    fails with 504; ``connect_timeout``: seconds to open a connection (a failure there
    is never a duplicate, so the next URL of the hop is tried).
    """

    prefill: tuple[str, ...]
    decode: tuple[str, ...]
    render: str | None = None
    serve: ServeConfig = field(default_factory=ServeConfig)
    host: str = "127.0.0.1"
    port: int = 8192
    timeout: float = 600.0
    connect_timeout: float = 5.0
    abort_timeout: float = 2.0
    max_connections: int = 1024
    kv_reuse: bool = False          # bidirectional KV per conversation (driver.conversations.KVReuse)

    def __post_init__(self) -> None:
        if not self.prefill or not self.decode:
            raise ValueError("--prefill and --decode each need at least one URL")
        for url in (*self.prefill, *self.decode, *((self.render,) if self.render else ())):
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"upstream URL must start with http:// or https://, got {url!r}")
        if self.timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError("timeouts must be positive")


def split_urls(value: str) -> tuple[str, ...]:
    """``"http://a:1, http://b:2/"`` → ``("http://a:1", "http://b:2")`` (trailing slashes dropped)."""
    return tuple(u.strip().rstrip("/") for u in value.split(",") if u.strip())
