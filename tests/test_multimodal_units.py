"""Multimodal pieces against vLLM 0.33's recorded answers (tests/fixtures/vllm_mm/answers.json).

Sans-HTTP: hashing, decoding, the Qwen2.5-VL processor, the msgpack encoding, media loading
and the processor cache. End-to-end checks through a server are in test_multimodal_render.py.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from render_service.errors import OpenAIError
from render_service.multimodal.cache import CachedItem, ProcessorCache
from render_service.multimodal.decode import decode_rgb, decoded_size, read_header
from render_service.multimodal.hashing import image_hash
from render_service.multimodal.items import Field, ProcessedItem
from render_service.multimodal.media import MediaLimits, load_media
from render_service.multimodal.processors.qwen2_vl import Qwen2VLProcessor, smart_resize
from render_service.multimodal.resize import axis_weights, resize_bicubic_aa
from render_service.multimodal.serde import decode_item, encode_item

from conftest import MODELS, needs_shared

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_mm"
sys.path.insert(0, str(FIXTURES))
import media as test_media  # noqa: E402

ANSWERS = json.loads((FIXTURES / "answers.json").read_text())
SINGLE = [c for c in ANSWERS["cases"] if c["name"].startswith("single_") and c["status"] == 200]
QWEN_VL = MODELS / "qwen2.5-vl-instruct"


def image_bytes(name: str) -> bytes:
    data = test_media.IMAGES[name][0]()
    if hashlib.sha256(data).hexdigest() != ANSWERS["image_sha256"][name]:
        pytest.skip(f"{name}: this Pillow encodes the test image differently from the recording")
    return data


def require_media(case: dict) -> None:
    """Skip a recorded case whose MP4 this environment cannot make byte-identically (no OpenCV,
    or another OpenCV build than the recording's)."""
    for name in test_media.MP4S:
        if f'"$mp4": "{name}"' in json.dumps(case["request"]):
            pytest.importorskip("cv2", reason="MP4 cases need OpenCV (render-service[video])")
            if hashlib.sha256(test_media.mp4(*test_media.MP4S[name])).hexdigest() != ANSWERS["mp4_sha256"][name]:
                pytest.skip(f"{name}: this OpenCV encodes the test video differently from the recording")


@pytest.fixture(scope="module")
def processor() -> Qwen2VLProcessor:
    if not QWEN_VL.is_dir():
        pytest.skip("../shared/models/qwen2.5-vl-instruct not present")
    return Qwen2VLProcessor.from_model_dir(QWEN_VL, {})


@pytest.mark.parametrize("case", SINGLE, ids=[c["name"] for c in SINGLE])
def test_hash_equals_vllm(case):
    data = image_bytes(case["name"].removeprefix("single_"))
    header = read_header(data)
    assert image_hash(ANSWERS["model_id"], data, header.io_config) == case["answer"]["features"]["mm_hashes"]["image"][0]


def test_hash_depends_on_model_id_and_bytes():
    data = image_bytes("rgb_64")
    a = image_hash("/models/a", data, None)
    assert a != image_hash("/models/b", data, None)
    assert a != image_hash("/models/a", data + b"\0", None)
    assert a != image_hash("/models/a", data, {"image_mode": "RGB", "rgba_background_color": (255, 255, 255)})


@needs_shared
@pytest.mark.parametrize("case", SINGLE, ids=[c["name"] for c in SINGLE])
def test_processed_item_equals_vllm(case, processor):
    item = processor.process_image(decode_rgb(image_bytes(case["name"].removeprefix("single_"))))
    feats = case["answer"]["features"]
    want = feats["kwargs_data"]["image"][0]
    pv = item.fields["pixel_values"].data
    assert pv.dtype == np.uint8 and list(pv.shape) == want["fields"]["pixel_values"]["shape"]
    assert hashlib.sha256(pv.tobytes()).hexdigest() == want["fields"]["pixel_values"]["sha256"]
    assert item.num_tokens == feats["mm_placeholders"]["image"][0]["length"]
    if want["b64"] is not None:                    # small items are recorded verbatim: byte-equal msgpack
        assert encode_item(item) == want["b64"]
    assert encode_item(item, metadata_only=True) == feats["mm_metadata"]["image"][0]["b64"]


def test_encode_decode_roundtrip():
    item = ProcessedItem("image", {
        "pixel_values": Field(np.arange(2 * 1176, dtype=np.uint8).reshape(2, 1176), "flat"),
        "image_grid_thw": Field(np.array([1, 2, 4], dtype=np.int64), "batched", keep_on_cpu=True, metadata=True),
    }, num_tokens=2)
    decoded = decode_item(encode_item(item))
    assert decoded["pixel_values"][:2] == ("uint8", [2, 1176])
    assert decoded["pixel_values"][2] == item.fields["pixel_values"].data.tobytes()
    assert decoded["pixel_values"][3] == ["flat", {"keep_on_cpu": False, "slices": [[[0, 2, None]]], "dim": 0}]
    assert np.frombuffer(decoded["image_grid_thw"][2], np.int64).tolist() == [1, 2, 4]
    assert set(decode_item(encode_item(item, metadata_only=True))) == {"image_grid_thw"}


def test_bfloat16_scalar_encoding():
    item = ProcessedItem("video", {"second_per_grid_ts": Field(np.array(1.0, np.float32), "batched", keep_on_cpu=True,
                                                                 wire_dtype="bfloat16")}, num_tokens=0)
    dtype, shape, raw, _ = decode_item(encode_item(item))["second_per_grid_ts"]
    assert (dtype, shape, raw) == ("bfloat16", [], b"\x80\x3f")   # 1.0 in bfloat16 = 0x3F80


@pytest.mark.parametrize("h,w,expect", [(64, 64, (56, 56)), (224, 224, (224, 224)), (480, 640, (476, 644)),
                                        (720, 1280, (728, 1288)), (1200, 300, (1204, 308)), (10, 10, (56, 56))])
def test_smart_resize_known_sizes(h, w, expect):
    assert smart_resize(h, w, 28, 3136, 12845056) == expect


def test_aspect_ratio_over_200_is_a_400(processor):
    data = image_bytes("too_wide_2100x10")
    with pytest.raises(OpenAIError) as err:
        processor.process_image(decode_rgb(data))
    assert err.value.status == 400 and "aspect ratio" in err.value.message
    vllm = next(c for c in ANSWERS["cases"] if c["name"] == "single_too_wide_2100x10")
    assert vllm["status"] == 400


def test_resize_identity_and_weights():
    img = np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    assert (resize_bicubic_aa(img, 30, 40) == img).all()
    index, weights, precision = axis_weights(100, 50)
    # each output's fixed-point weights sum to 1.0 within rounding
    assert np.all(np.abs(weights.sum(axis=1) - (1 << precision)) <= index.shape[1])


@pytest.mark.parametrize("payload,fragment", [
    (b"this is not an image", "Failed to load image"),
    (test_media.png(64, 64, 1)[:500], "Failed to load image"),
])
def test_undecodable_is_400(payload, fragment):
    with pytest.raises(OpenAIError) as err:
        decode_rgb(payload)
    assert err.value.status == 400 and fragment in err.value.message


def test_too_many_pixels_is_400():
    with pytest.raises(OpenAIError) as err:
        read_header(test_media.png(100, 100, 0), max_pixels=5000)
    assert err.value.status == 400


def _load(url: str, limits: MediaLimits):
    return asyncio.run(load_media(url, limits, None, "messages.0.content.0"))


def test_data_url_and_limits():
    data = test_media.png(8, 8, 0)
    assert _load(test_media.data_url(data, "image/png"), MediaLimits()).data == data
    for url, limits in [
        ("data:image/png;base64,@@@", MediaLimits()),
        ("data:image/png,rawbytes", MediaLimits()),
        (test_media.data_url(data, "image/png"), MediaLimits(max_bytes=10)),
        ("ftp://example.com/a.png", MediaLimits()),
        ("http://127.0.0.1:9/a.png", MediaLimits()),              # remote fetch off by default
    ]:
        with pytest.raises(OpenAIError) as err:
            _load(url, limits)
        assert err.value.status == 400 and err.value.param == "messages.0.content.0"


def test_file_urls_only_under_allowed_path(tmp_path):
    inside = tmp_path / "ok"
    inside.mkdir()
    (inside / "a.png").write_bytes(b"png-bytes")
    (tmp_path / "secret.png").write_bytes(b"secret")
    limits = MediaLimits(allowed_local_media_path=str(inside))
    assert _load(f"file://{inside}/a.png", limits).data == b"png-bytes"
    for url, lim in [(f"file://{inside}/../secret.png", limits), (f"file://{tmp_path}/secret.png", limits),
                     (f"file://{inside}/missing.png", limits), (f"file://{inside}/a.png", MediaLimits())]:
        with pytest.raises(OpenAIError) as err:
            _load(url, lim)
        assert err.value.status == 400
    (inside / "link.png").symlink_to(tmp_path / "secret.png")
    with pytest.raises(OpenAIError):
        _load(f"file://{inside}/link.png", limits)


def _entry(nbytes: int) -> CachedItem:
    return CachedItem(ProcessedItem("image", {"pixel_values": Field(np.zeros(nbytes, np.uint8), "flat")}, 1))


def test_processor_cache_is_bounded_in_bytes():
    cache = ProcessorCache(capacity_bytes=1000)
    for i in range(5):
        cache.put(f"h{i}", _entry(300))
    assert len(cache) == 3 and cache.size_bytes == 900
    assert cache.get("h0") is None and cache.get("h4") is not None
    cache.get("h2")                       # h2 recently used: h3 is evicted next
    cache.put("h5", _entry(300))
    assert cache.get("h3") is None and cache.get("h2") is not None
    cache.put("big", _entry(5000))        # larger than the whole cache: not kept
    assert cache.get("big") is None and cache.size_bytes <= 1000
    assert ProcessorCache(0).get("x") is None


def test_cache_counts_encodings():
    cache = ProcessorCache(capacity_bytes=10_000)
    entry = _entry(100)
    cache.put("h", entry)
    kwargs_b64, metadata = cache.encodings("h", entry)
    assert kwargs_b64 and base64.b64decode(kwargs_b64) and metadata is None   # no field is metadata: null, as vLLM
    assert entry.item is None and entry.num_tokens == 1          # the tensors give way to their encoding
    assert cache.size_bytes == len(kwargs_b64)
    again, metadata = cache.encodings("h", entry)
    assert again is kwargs_b64 and metadata is None              # the kept string itself
    assert (cache.encoded, cache.reused) == (1, 1)               # encoded once, then reused


def test_compiled_and_numpy_resize_agree():
    """The numba kernels and the NumPy steps are the same integer arithmetic (either may run)."""
    rng = np.random.default_rng(3)
    for h, w, oh, ow in [(37, 91, 56, 84), (300, 200, 140, 112), (5, 800, 28, 812), (64, 64, 64, 128)]:
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        assert (resize_bicubic_aa(img, oh, ow, compiled=False) == resize_bicubic_aa(img, oh, ow)).all()


def test_compiled_and_numpy_patchify_agree(processor):
    """The numba patch kernel equals the NumPy reshape/transpose, for stills and odd frame counts."""
    rng = np.random.default_rng(4)
    for shape in [(1, 56, 84, 3), (2, 112, 56, 3), (3, 56, 56, 3)]:
        frames = rng.integers(0, 256, shape, dtype=np.uint8)
        (a, ga), (b, gb) = processor._patchify(frames), processor._patchify(frames, compiled=False)
        assert ga == gb and (a == b).all()


@pytest.mark.parametrize("patch, temporal, merge", [(14, 2, 2), (16, 2, 2), (16, 3, 1)])
def test_fused_resize_patchify_equals_resize_then_patchify(patch, temporal, merge):
    """The one-pass kernel (vertical resize written into patch rows, whole-unit copies: 2 bytes
    for 14-pixel patches, 8 for 16) equals the NumPy resize then reshape/transpose: up- and
    downscaling, unchanged axes, stills and frame counts that leave a temporal slot to repeat."""
    proc = Qwen2VLProcessor(patch_size=patch, temporal_patch_size=temporal, merge_size=merge)
    rng = np.random.default_rng(5)
    f = patch * merge
    for t, h, w, oh, ow in [(1, 100, 130, 2 * f, 3 * f), (1, 2 * f, 4 * f, 2 * f, 4 * f), (1, 9, 700, f, 20 * f),
                            (2, 70, 50, 3 * f, 2 * f), (3, 2 * f, 61, 2 * f, 2 * f), (5, 40, 40, f, f)]:
        frames = rng.integers(0, 256, (t, h, w, 3), dtype=np.uint8)
        fused, grid = proc.resize_patchify(frames, oh, ow)
        steps, want = proc.resize_patchify(frames, oh, ow, compiled=False)
        assert grid == want and fused.shape == steps.shape and (fused == steps).all(), (t, h, w, oh, ow)


def test_transposed_decode_gives_the_same_item(processor):
    """The pipeline decodes Qwen-VL images transposed ([W, H, 3], Pillow swapping the pixels):
    the item equals the one from the upright array, EXIF turns and transparency included."""
    for name in ("jpeg_640x480", "rgb_1280x720", "exif_rot6_160x120", "rgba_200x150", "tall_300x1200", "tiny_10x10"):
        data = test_media.image_bytes(name)
        upright = processor.process_image(decode_rgb(data))
        flipped = processor.process_image(decode_rgb(data, transposed=True), transposed=True)
        assert decode_rgb(data, transposed=True).shape == decode_rgb(data).shape[1::-1] + (3,)
        for field, want in upright.fields.items():
            assert (flipped.fields[field].data == want.data).all(), (name, field)
        assert flipped.num_tokens == upright.num_tokens


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_minicpmv_compiled_patches_equal_numpy(dtype):
    """MiniCPM-V's one-pass normalize + reshape_by_patch kernel equals the NumPy gather and transpose."""
    from render_service.multimodal.processors.minicpmv import MiniCPMVProcessor

    proc = MiniCPMVProcessor(dtype=dtype)
    rng = np.random.default_rng(6)
    for h, w in [(336, 602), (406, 490), (14, 14), (28, 700), (700, 28)]:
        view = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        fast, steps = proc._patches(view), proc._patches(view, compiled=False)
        assert fast.dtype == steps.dtype and fast.shape == steps.shape
        assert (fast.view(np.uint8) == steps.view(np.uint8)).all(), (h, w)


BROKEN = json.loads((FIXTURES / "broken_answers.json").read_text())


@pytest.fixture(scope="module")
def broken_variants() -> dict:
    import broken

    return broken.variants()


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_images_as_vllms_loader(name, broken_variants):
    """Truncated or overwritten images with valid headers: both decoders (full, and the header +
    1/8-scale check of requests without pixels) refuse exactly what vLLM 0.33's ImageMediaIO
    refuses, and give its size (and, in full, its pixels) for what it loads."""
    data, vllm = broken_variants[name], BROKEN[name]
    if hashlib.sha256(data).hexdigest() != vllm["sha256"]:
        pytest.skip(f"{name}: this Pillow encodes the test image differently from the recording")
    if not vllm["ok"]:
        for decode in (decode_rgb, decoded_size):
            with pytest.raises(OpenAIError) as err:
                decode(data)
            assert err.value.status == 400 and "Failed to load image" in err.value.message
        return
    assert decoded_size(data) == (vllm["height"], vllm["width"])
    rgb = decode_rgb(data)
    assert rgb.shape == (vllm["height"], vllm["width"], 3)
    assert hashlib.sha256(rgb.tobytes()).hexdigest() == vllm["rgb_sha256"]


@pytest.mark.parametrize("case", SINGLE, ids=[c["name"] for c in SINGLE])
def test_decoded_size_is_the_decoded_arrays(case):
    data = image_bytes(case["name"].removeprefix("single_"))
    assert decoded_size(data) == decode_rgb(data).shape[:2]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_normalize_table_equals_normalizing_every_pixel(dtype):
    """The 3 x 256 table (compiled gather and NumPy gathers) gives the bytes of (x - mean) / std per pixel, then the cast."""
    from render_service.multimodal.processors import normalize
    from render_service.multimodal.serde import bfloat16_bits

    rgb = np.random.default_rng(3).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    mean, std = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
    m, s = normalize.fused_mean_std(mean, std, 1 / 255)
    direct = (rgb.transpose(2, 0, 1).astype(np.float32) - m[:, None, None]) / s[:, None, None]
    want = bfloat16_bits(direct).tobytes() if dtype == "bfloat16" else direct.astype(np.float16).tobytes()
    table = normalize.NormalizeTable(mean, std, 1 / 255, dtype)
    assert table.chw(rgb).tobytes() == want
    kernel, normalize._gather_kernel = normalize._gather_kernel, None
    try:
        assert table.chw(rgb).tobytes() == want
    finally:
        normalize._gather_kernel = kernel


def test_gemma3_pan_and_scan_crops_as_transformers():
    """The crop grid transformers 5.20.2's Gemma3ImageProcessor made for these sizes (number of crops
    2 for 1280x720, 4 for 1200x300 and 300x1200, none for 64x64 / 200x150), and off by default."""
    from render_service.multimodal.processors.gemma3 import Gemma3Processor, PanAndScan

    on = PanAndScan(enabled=True)
    assert on.grid(720, 1280) == (1, 2) and on.grid(300, 1200) == (1, 4) and on.grid(1200, 300) == (4, 1)
    assert on.grid(64, 64) == (0, 0) and on.grid(150, 200) == (0, 0)
    processor = Gemma3Processor(pan_and_scan=on)
    crops = processor._crops(np.zeros((720, 1280, 3), np.uint8))
    assert [c.shape for c in crops] == [(720, 640, 3)] * 2
    assert PanAndScan().grid(300, 1200) == (0, 0)
