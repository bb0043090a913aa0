"""Fetching a media part's bytes: data URLs, ``file://`` under an allow-list, bounded http(s).

Rules follow vLLM 0.33's ``MediaConnector`` where it has one: base64 ``data:`` URLs only,
``file://`` only beneath ``--allowed-local-media-path``. Remote fetches differ on purpose:
they are off unless ``allow_remote`` (a render tier that fetches any URL a client names is a
server-side request forgery hole), and when on they are bounded in bytes, seconds and
redirects. Every failure is a 400 in the OpenAI error shape; nothing here decodes pixels.
"""

from __future__ import annotations

import asyncio
import binascii
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx
import pybase64

from ..errors import OpenAIError, bad_request
from .ascii_view import ascii_bytes
from .defaults import MediaLimits


JPEG_SEQUENCE = "video/jpeg"   # data:video/jpeg;base64,<jpeg>,<jpeg>,... (vLLM's frame-sequence video)


@dataclass(frozen=True)
class MediaBytes:
    """One media item as its original encoded file bytes (what vLLM hashes)."""

    data: bytes
    media_type: str | None


def _too_big(size: int, limits: MediaLimits, param: str | None) -> OpenAIError:
    return bad_request(f"Media item is {size} bytes; the limit is {limits.max_bytes} bytes.", param)


def load_data_url(url: str, limits: MediaLimits, param: str | None = None) -> MediaBytes:
    """Decode ``data:<type>;base64,<payload>``.

    Raises:
        OpenAIError: 400 for a non-base64 data URL, bad base64, or a payload over ``max_bytes``.
    """
    comma = url.find(",", 5)
    if comma < 0:
        raise bad_request("Malformed data URL: no ',' separating the header from the data.", param)
    media_type, _, encoding = url[5:comma].partition(";")
    if encoding != "base64":
        raise bad_request("Only base64 data URLs are supported.", param)
    size = len(url) - comma - 1
    if size * 3 // 4 > limits.max_bytes + 3:
        raise _too_big(size * 3 // 4, limits, param)
    if media_type.lower() == JPEG_SEQUENCE:
        # vLLM's frame-sequence video: comma-separated base64 JPEGs, hashed as this text
        return MediaBytes(url[comma + 1:].encode("ascii", "replace"), JPEG_SEQUENCE)
    # the payload read in place (megabytes: no slice, no str-to-bytes pass); non-ASCII is bad base64
    payload = ascii_bytes(url)[comma + 1:] if url.isascii() else url[comma + 1:]
    try:
        data = pybase64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request("Data URL payload is not valid base64.", param) from None
    if len(data) > limits.max_bytes:
        raise _too_big(len(data), limits, param)
    return MediaBytes(data, media_type or None)


def load_file_url(url: str, limits: MediaLimits, param: str | None = None) -> MediaBytes:
    """Read a ``file://`` URL that resolves (symlinks followed) beneath the allowed directory.

    Raises:
        OpenAIError: 400 when local media is not enabled, the path escapes the allowed
        directory, the file is missing or unreadable, or larger than ``max_bytes``.
    """
    if limits.allowed_local_media_path is None:
        raise bad_request("Cannot load local files without `--allowed-local-media-path`.", param)
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise bad_request("file:// URLs must not name a host.", param)
    root = Path(limits.allowed_local_media_path).resolve()
    path = Path(unquote(parts.path)).resolve()
    if not path.is_relative_to(root):
        raise bad_request("The file path must be a subpath of `--allowed-local-media-path`.", param)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > limits.max_bytes:
                raise _too_big(size, limits, param)
            data = f.read(limits.max_bytes + 1)
    except OSError:
        raise bad_request("The local media file cannot be read.", param) from None
    if len(data) > limits.max_bytes:
        raise _too_big(len(data), limits, param)
    return MediaBytes(data, None)


async def fetch_remote(url: str, limits: MediaLimits, client: httpx.AsyncClient, param: str | None = None) -> MediaBytes:
    """GET an ``http(s)`` URL, following at most ``max_redirects`` redirects (http(s) only).

    The body is streamed and the fetch abandoned past ``max_bytes``; the whole fetch, connect
    to last byte, is bounded by ``fetch_timeout_s``. Awaiting it never blocks other requests.

    Raises:
        OpenAIError: 400 when remote media is disabled, on a non-2xx answer, a timeout, a
        connection error, too many redirects, or an oversize body.
    """
    if not (limits.allow_remote or limits.allowed_domains):
        raise bad_request("Fetching remote media URLs is disabled on this server (`--allow-remote-media`).", param)
    try:
        async with asyncio.timeout(limits.fetch_timeout_s):
            return await _fetch(url, limits, client, param)
    except TimeoutError:
        raise bad_request(f"Fetching the media URL took longer than {limits.fetch_timeout_s:g} s.", param) from None
    except httpx.HTTPError as exc:
        raise bad_request(f"Fetching the media URL failed: {type(exc).__name__}.", param) from None


def _check_domain(url: str, limits: MediaLimits, param: str | None) -> None:
    host = urlsplit(url).hostname
    if limits.allowed_domains and host not in limits.allowed_domains:
        raise bad_request(f"The URL must be from one of the allowed domains: {list(limits.allowed_domains)}. "
                          f"Input URL domain: {host}", param)


async def _fetch(url: str, limits: MediaLimits, client: httpx.AsyncClient, param: str | None) -> MediaBytes:
    for _ in range(limits.max_redirects + 1):
        _check_domain(url, limits, param)
        async with client.stream("GET", url, follow_redirects=False) as resp:
            if resp.is_redirect:
                url = str(resp.url.join(resp.headers.get("location", "")))
                if urlsplit(url).scheme not in ("http", "https"):
                    raise bad_request("A media URL redirected to a non-http(s) URL.", param)
                continue
            if resp.status_code >= 400:
                raise bad_request(f"Fetching the media URL failed with HTTP {resp.status_code}.", param)
            declared = resp.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > limits.max_bytes:
                raise _too_big(int(declared), limits, param)
            chunks, size = [], 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > limits.max_bytes:
                    raise _too_big(size, limits, param)
                chunks.append(chunk)
            ctype = resp.headers.get("content-type")
            return MediaBytes(b"".join(chunks), ctype.split(";")[0].strip() if ctype else None)
    raise bad_request(f"A media URL redirected more than {limits.max_redirects} times.", param)


async def load_media(url: str, limits: MediaLimits, client: httpx.AsyncClient | None, param: str | None = None) -> MediaBytes:
    """Load any supported media URL (``data:``, ``file://``, ``http(s)://``).

    Raises:
        OpenAIError: 400 for an unsupported scheme or any loader failure above.
    """
    if not isinstance(url, str) or not url:
        raise bad_request("A media part needs a non-empty `url`.", param)
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        return load_data_url(url, limits, param)
    if scheme == "file":
        return load_file_url(url, limits, param)
    if scheme in ("http", "https"):
        if client is None:
            raise bad_request("Fetching remote media URLs is disabled on this server (`--allow-remote-media`).", param)
        return await fetch_remote(url, limits, client, param)
    raise bad_request("The media URL must be a data:, file:// or http(s):// URL.", param)
