"""Decoding image bytes with Pillow the way vLLM 0.33's ``ImageMediaIO`` does.

Steps (``multimodal/media/image.py``, ``multimodal/image.py``): open with vLLM's format
allow-list; refuse more than ``max_pixels``; apply the EXIF orientation; decode; convert to
RGB, compositing any transparency (RGBA, LA, PA, or a ``tRNS`` chunk) over the background
colour. ``io_config`` is set exactly when that conversion changed the image: it enters the
hash. Pillow releases the GIL while decoding, so this runs well in a thread pool.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

from ..errors import bad_request
from .defaults import DEFAULT_MAX_IMAGE_PIXELS

# vLLM's ALLOWED_IMAGE_FORMATS: in-process raster readers only (no EPS/Ghostscript, WMF, stubs).
ALLOWED_IMAGE_FORMATS = (
    "AVIF", "BLP", "BMP", "CUR", "DCX", "DDS", "DIB", "FITS", "FLI", "FTEX", "GBR", "GIF", "ICNS", "ICO",
    "IM", "IMT", "IPTC", "JPEG", "JPEG2000", "MCIDAS", "MSP", "PCD", "PCX", "PIXAR", "PNG", "PPM", "PSD",
    "QOI", "SGI", "SPIDER", "SUN", "TGA", "TIFF", "WEBP", "XBM", "XPM", "XVTHUMB",
)
BACKGROUND = (255, 255, 255)
_ORIENTATION = 0x0112   # EXIF Orientation tag


@dataclass(frozen=True)
class ImageHeader:
    """What the file header tells before any pixel is decoded."""

    width: int
    height: int
    io_config: dict | None   # non-None when decoding will convert the mode (a hash input)


def _needs_conversion(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info or image.mode != "RGB"


def _open(data: bytes, max_pixels: int, param: str | None) -> Image.Image:
    try:
        image = Image.open(io.BytesIO(data), formats=ALLOWED_IMAGE_FORMATS)
    except Exception as exc:   # Pillow raises many types for hostile input; all are the client's fault
        raise bad_request(f"Failed to load image: {_reason(exc)}", param) from None
    w, h = image.size
    if max_pixels > 0 and w * h > max_pixels:
        raise bad_request(f"Image dimensions {w}x{h} ({w * h} pixels) exceed the maximum of {max_pixels} pixels.", param)
    return image


def _reason(exc: Exception) -> str:
    text = re.sub(r"\s*<_io\.BytesIO object( at 0x[0-9a-f]+)?>", "", str(exc)).strip()
    return text or type(exc).__name__


def read_header(data: bytes, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, param: str | None = None) -> ImageHeader:
    """Size and mode conversion of an encoded image without decoding its pixels.

    Raises:
        OpenAIError: 400 for an unknown or disallowed format or too many pixels.
    """
    image = _open(data, max_pixels, param)
    io_config = {"image_mode": "RGB", "rgba_background_color": BACKGROUND} if _needs_conversion(image) else None
    return ImageHeader(image.size[0], image.size[1], io_config)


# EXIF orientations that ImageOps.exif_transpose turns a quarter (width and height swap)
_QUARTER_TURNS = (5, 6, 7, 8)


def decoded_size(data: bytes, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, param: str | None = None) -> tuple[int, int]:
    """``(height, width)`` of the array `decode_rgb` would return, proving the image decodes, without its pixels.

    The answer of a request that sends no pixels (``mm_payload: "none"``) depends on the image
    only through this size, so nothing is transposed, converted or kept. vLLM 0.33 still decodes
    every image and refuses one whose data is broken (``image.load()`` raising), so this decodes
    too, with the same calls in the same order (a load inside the EXIF step whose error is
    swallowed, then a load whose error is a 400) — but a JPEG at 1/8 scale (`Image.draft`):
    libjpeg still entropy-decodes every byte, so truncated or broken data fails as at full
    size, and skips most of the inverse DCT and colour conversion. Other formats decode fully.

    Raises:
        OpenAIError: 400 for what `decode_rgb` refuses: unknown or disallowed format, too many
        pixels, undecodable or truncated data.
    """
    image = _open(data, max_pixels, param)
    width, height = image.size
    try:
        if image.format == "JPEG":
            image.draft(image.mode, (1, 1))   # the smallest scale libjpeg offers (1/8)
        with contextlib.suppress(Exception):   # vLLM's normalize_image: exif_transpose loads, then turns
            image.load()
            if image.getexif().get(_ORIENTATION, 1) in _QUARTER_TURNS:
                width, height = height, width
        image.load()
    except Exception as exc:
        raise bad_request(f"Failed to load image: {_reason(exc)}", param) from None
    return height, width


def decode_rgb(data: bytes, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, param: str | None = None, *,
               transposed: bool = False) -> np.ndarray:
    """Decode to an RGB uint8 ``[H, W, 3]`` array, EXIF orientation applied, transparency on white.

    ``transposed``: the same pixels as ``[W, H, 3]`` (rows and columns swapped), what a
    horizontal resize pass works on; Pillow swaps its 4-byte pixels faster than a copy of the
    array can be transposed.

    Raises:
        OpenAIError: 400 for undecodable, truncated or oversize images.
    """
    image = _open(data, max_pixels, param)
    try:
        with contextlib.suppress(Exception):   # vLLM's normalize_image: exif_transpose loads, then turns
            image.load()   # a failed first load is swallowed; the second may pass (vLLM decodes what it got)
            if image.getexif().get(_ORIENTATION, 1) != 1:   # exif_transpose would only copy otherwise
                image = ImageOps.exif_transpose(image)
        image.load()
        if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
            rgba = image if image.mode == "RGBA" else image.convert("RGBA")
            converted = Image.new("RGB", rgba.size, BACKGROUND)
            converted.paste(rgba, mask=rgba.split()[3])
            image = converted
        elif image.mode != "RGB":
            image = image.convert("RGB")
        if transposed:
            image = image.transpose(Image.Transpose.TRANSPOSE)
        return np.asarray(image)
    except Exception as exc:
        raise bad_request(f"Failed to load image: {_reason(exc)}", param) from None


MAX_VIDEO_FRAMES = 32   # vLLM's VideoMediaIO num_frames default


def decode_jpeg_sequence(text: bytes, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, param: str | None = None,
                         num_frames: int = MAX_VIDEO_FRAMES) -> tuple[np.ndarray, dict]:
    """A ``data:video/jpeg`` payload (comma-separated base64 frames) → ``(frames [T, H, W, 3], metadata)``.

    As vLLM 0.33's ``VideoMediaIO.load_base64``: the first ``num_frames`` frames, each decoded
    like an image; metadata ``{total_num_frames, fps: 1.0, duration, video_backend:
    "jpeg_sequence", frames_indices, do_sample_frames: False}`` (a hash input).

    Raises:
        OpenAIError: 400 for bad base64, an undecodable frame, or frames of different sizes.
    """
    import pybase64

    parts = text.split(b",", num_frames)[:num_frames]
    frames = []
    for k, part in enumerate(parts):
        try:
            data = pybase64.b64decode(part, validate=True)
        except ValueError:
            raise bad_request(f"Video frame {k} is not valid base64.", param) from None
        frames.append(decode_rgb(data, max_pixels, param))
    if len({f.shape for f in frames}) != 1:
        raise bad_request("All frames of a video must have the same size.", param)
    total = len(frames)
    metadata = {"total_num_frames": total, "fps": 1.0, "duration": total / 1.0, "video_backend": "jpeg_sequence",
                "frames_indices": list(range(total)), "do_sample_frames": False}
    return np.stack(frames), metadata
