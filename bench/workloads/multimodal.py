"""``render-mm``: chat render of requests with 1–4 images of 224² to 1280x720 (vision-language models).

Each request is a user turn with a question and 1–4 images (sizes 224x224, 448x448, 640x480,
1024x768, 1280x720, drawn per request from the seed), as base64 ``data:`` URLs — what a
router forwards. The images come from a small pool encoded once in `RenderMM.prepare`
(smooth gradients + noise, JPEG quality 90, as photos travel), and each image of each request
gets a distinct JPEG comment segment carrying its ticket number: the decoded pixels are the
pool's, but the file bytes differ, so every image's ``mm_hash`` is new and no processor cache
on any server can help (a cold render, the expensive case). Same index → same request on
every target, so ours and vLLM's ``vllm launch render`` get identical bodies.

Each image follows a short "Image k:" text part: vision families differ on images with nothing
between them (vLLM refuses two adjacent images for Gemma 3, their newlines overlap), and a label
between them is what multi-image prompts carry anyway. Run it per family (``--tokenizer`` and the
target's model: Qwen2.5-VL, Qwen3-VL, LLaVA-1.5, Gemma 3); the same bodies go to every family.

Figures beyond req/s, latency and server CPU per request: images per request, rendered prompt
tokens and the ``kwargs_data`` base64 per request (the answer's bulk). ``render-mm-route`` sends
the same requests with ``mm_payload: "none"`` (a router that only needs ids, hashes and
placeholders: no pixels in the answer). ``render-mm-repeat`` sends one request's images again and
again (the same bytes every time): after the first, each answer comes from the processor cache —
what a repeated image costs (no decode, no resize, and on our server no encoding either).
"""

from __future__ import annotations

import argparse
import base64
import io
import random
import struct

from .base import RENDER_PATH, Call, Probe, Session, Workload, require, with_model

SIZES = ((224, 224), (448, 448), (640, 480), (1024, 768), (1280, 720))
POOL_PER_SIZE = 2
QUESTION = "Describe what the images show and how they differ."


def _pool_image(width: int, height: int, seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.stack([127 + 120 * np.sin(x / width * 6.3 + seed), 127 + 120 * np.cos(y / height * 4.1 + seed),
                    (x + y) * 255.0 / (width + height)], axis=-1)
    img += rng.normal(0, 8, img.shape)
    buf = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def with_ticket(jpeg: bytes, ticket: int) -> bytes:
    """``jpeg`` with a COM segment ``render-mm <ticket>`` right after SOI: new bytes, same pixels."""
    text = f"render-mm {ticket:012d}".encode()
    return jpeg[:2] + b"\xff\xfe" + struct.pack(">H", len(text) + 2) + text + jpeg[2:]


def check_render_mm(resp) -> dict:
    """A `GenerateRequest` with ``features``: measures prompt length, image count, payload presence."""
    require(isinstance(resp, dict) and isinstance(resp.get("token_ids"), list) and resp["token_ids"],
            "render response without token_ids")
    features = resp.get("features")
    require(isinstance(features, dict) and isinstance(features.get("mm_hashes"), dict),
            "render response without features.mm_hashes")
    images = len(features["mm_hashes"].get("image", []))
    placeholders = features.get("mm_placeholders", {}).get("image", [])
    require(len(placeholders) == images, "mm_placeholders do not match mm_hashes")
    payload = sum(len(x or "") for key in ("kwargs_data", "mm_metadata") for items in (features.get(key) or {}).values()
                  for x in items)
    return {"prompt_tokens": len(resp["token_ids"]), "images": images,
            "image_tokens": sum(p.get("length", 0) for p in placeholders), "payload_b64_bytes": payload}


class RenderMM(Workload):
    """Chat render with 1–4 fresh images per request (see the module docstring)."""

    name = "render-mm"
    mm_payload = "tensors"
    ticket_base = 0   # each workload its own images: one run's does not warm the caches for the next

    def __init__(self, seed: int = 0, min_images: int = 1, max_images: int = 4) -> None:
        self.seed, self.min_images, self.max_images = seed, min_images, max_images
        self.pool: dict[tuple[int, int], list[bytes]] = {}
        self.model: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "RenderMM":
        return cls(args.seed)

    def prepare(self, probe: Probe) -> None:
        self.model = probe.model
        self.pool = {size: [_pool_image(*size, seed=self.seed * 100 + i * 10 + k) for k in range(POOL_PER_SIZE)]
                     for i, size in enumerate(SIZES)}

    def images(self, index: int) -> list[tuple[tuple[int, int], bytes]]:
        """The (size, JPEG bytes) of request ``index``'s images, in prompt order."""
        rng = random.Random(self.seed * 1_000_003 + index)
        out = []
        for k in range(rng.randint(self.min_images, self.max_images)):
            size = rng.choice(SIZES)
            jpeg = self.pool[size][rng.randrange(POOL_PER_SIZE)]
            out.append((size, with_ticket(jpeg, self.ticket_base + index * 8 + k)))
        return out

    def session(self, index: int) -> Session:
        parts = []
        for k, (_, data) in enumerate(self.images(index)):
            parts += [{"type": "text", "text": f"Image {k + 1}:"},
                      {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(data).decode()}}]
        body = {"messages": [{"role": "user", "content": [*parts, {"type": "text", "text": QUESTION}]}],
                "max_completion_tokens": 256}
        if self.mm_payload != "tensors":
            body["mm_payload"] = self.mm_payload
        yield Call(RENDER_PATH, with_model(body, self.model), check=check_render_mm)

    def params(self) -> dict:
        return {"sizes": [f"{w}x{h}" for w, h in SIZES], "images_per_request": [self.min_images, self.max_images],
                "mm_payload": self.mm_payload,
                "encoding": "JPEG q90 data URLs, unique bytes per image (cold processor caches)"}

    def context_tokens(self) -> int:
        return 4 * 1200 + 512

    def summarise(self, samples: list[tuple[float, dict]]) -> dict:
        imgs = [t["images"] for _, t in samples if "images" in t]
        toks = [t["prompt_tokens"] for _, t in samples if "prompt_tokens" in t]
        payload = [t["payload_b64_bytes"] for _, t in samples if "payload_b64_bytes" in t]
        return {"images_total": sum(imgs), "images_per_request_mean": (sum(imgs) / len(imgs)) if imgs else None,
                "prompt_tokens_max": max(toks, default=None),
                "payload_kb_per_request_mean": (sum(payload) / len(payload) / 1024) if payload else None}

    def rows(self, extra: dict) -> list[tuple[str, float | None, str]]:
        return [("images per request (mean)", extra.get("images_per_request_mean"), ".2f"),
                ("rendered prompt tokens (max)", extra.get("prompt_tokens_max"), "d"),
                ("kwargs_data base64 per request (KB, mean)", extra.get("payload_kb_per_request_mean"), ".0f")]


class RenderMMRoute(RenderMM):
    """``render-mm`` with ``mm_payload: "none"``: what a router that only routes asks for
    (token ids, hashes and placeholders; no pixels in the answer)."""

    name = "render-mm-route"
    mm_payload = "none"
    ticket_base = 500_000_000_000


class RenderMMRepeat(RenderMM):
    """``render-mm`` where every request carries the same images (those of request 0): from the
    second request on, every image is a processor-cache hit on every server."""

    name = "render-mm-repeat"
    ticket_base = 600_000_000_000

    def images(self, index: int) -> list[tuple[tuple[int, int], bytes]]:
        return super().images(0)

    def params(self) -> dict:
        return {**super().params(), "encoding": "JPEG q90 data URLs, the same images in every request (warm caches)"}
