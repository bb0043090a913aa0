"""The multimodal pipeline (load → hash → process → expand) against vLLM 0.33's recorded answers.

Input ids are vLLM's own ``token_ids`` with each run of placeholders collapsed back to the one
token the chat template writes, so this checks expansion, placeholders, hashes and the
``kwargs_data`` / ``mm_metadata`` payloads without a tokenizer; the same cases through the
real template and a server are in test_multimodal_render.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

from render_service.errors import OpenAIError
from render_service.multimodal import MediaLimits, MultimodalConfig, MultimodalRenderer, chat_media_part
from render_service.multimodal.processors import load_processor
from render_service.multimodal.serde import decode_item

from conftest import MODELS, fixture_module

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_mm"
sys.path.insert(0, str(FIXTURES))
import media as test_media  # noqa: E402
record = fixture_module("vllm_mm/record.py")
from test_multimodal_units import ANSWERS, require_media  # noqa: E402

IMAGE_PAD, VIDEO_PAD = 151655, 151656
QWEN_VL = MODELS / "qwen2.5-vl-instruct"
CHAT = "/v1/chat/completions/render"
OK_CASES = [c for c in ANSWERS["cases"] if c["status"] == 200 and c.get("path", CHAT) == CHAT
            and not c["name"].startswith(("uuid_", "file_url"))]


def collapse(ids: list[int]) -> list[int]:
    out: list[int] = []
    for t in ids:
        if t in (IMAGE_PAD, VIDEO_PAD) and out and out[-1] == t:
            continue
        out.append(t)
    return out


def media_parts(request: dict) -> list:
    parts = []
    for m, msg in enumerate(request["messages"]):
        if isinstance(msg["content"], list):
            for p, part in enumerate(msg["content"]):
                mp = chat_media_part(part, f"messages.{m}.content.{p}")
                if mp is not None:
                    parts.append(mp)
    return parts


def make_renderer(**overrides) -> MultimodalRenderer:
    if not QWEN_VL.is_dir():
        pytest.skip("../shared/models/qwen2.5-vl-instruct not present")
    config = MultimodalConfig(model_id=ANSWERS["model_id"], **overrides)
    return MultimodalRenderer(load_processor(QWEN_VL), config, {"image": IMAGE_PAD, "video": VIDEO_PAD})


def run(renderer: MultimodalRenderer, request: dict, token_ids: list[int]):
    payload = request.get("mm_payload") or ("none" if request.get("return_mm_kwargs") is False else "tensors")

    async def go():
        items = await renderer.load(media_parts(record.resolve(request)), payload)
        return renderer.expand(token_ids, items, payload)
    return asyncio.run(go())


def assert_payload_equal(ours: dict, vllm: dict) -> None:
    """kwargs_data tensors equal (sha256 of decoded bytes), mm_metadata byte-equal."""
    if vllm["kwargs_data"] is None:
        assert ours["kwargs_data"] is None and ours["mm_metadata"] is None
        return
    for modality, items in vllm["kwargs_data"].items():
        assert len(ours["kwargs_data"][modality]) == len(items)
        for mine, theirs in zip(ours["kwargs_data"][modality], items):
            decoded = decode_item(mine)
            assert set(decoded) == set(theirs["fields"])
            for name, want in theirs["fields"].items():
                dtype, shape, raw, _ = decoded[name]
                assert (dtype, shape) == (want["dtype"], want["shape"])
                if dtype == "list" and want["values"] and isinstance(want["values"][0], dict):   # tensors (MiniCPM-V)
                    assert [(d, s) for d, s, _ in raw] == [(w["dtype"], w["shape"]) for w in want["values"]], name
                    assert [hashlib.sha256(r).hexdigest() for _, _, r in raw] == [w["sha256"] for w in want["values"]], name
                    continue
                if dtype == "list":   # a plain value (Qwen3-VL's timestamps)
                    assert raw == want["values"], name
                    continue
                assert hashlib.sha256(raw).hexdigest() == want["sha256"], name
            if theirs["b64"] is not None:
                assert mine == theirs["b64"]
    if vllm["mm_metadata"] is None:   # no keep_on_cpu / metadata field (LLaVA)
        assert ours["mm_metadata"] is None
        return
    assert set(ours["mm_metadata"]) == set(vllm["mm_metadata"])
    for modality, items in vllm["mm_metadata"].items():
        assert ours["mm_metadata"][modality] == [x["b64"] if x else None for x in items]


@pytest.mark.parametrize("case", OK_CASES, ids=[c["name"] for c in OK_CASES])
def test_case_equals_vllm(case):
    require_media(case)
    vllm = case["answer"]
    ids, features = run(make_renderer(), case["request"], collapse(vllm["token_ids"]))
    assert ids == vllm["token_ids"]
    assert features["mm_hashes"] == vllm["features"]["mm_hashes"]
    assert features["mm_placeholders"] == vllm["features"]["mm_placeholders"]
    assert_payload_equal(features, vllm["features"])


def test_uuid_parts_use_the_processor_cache():
    by_name = {c["name"]: c for c in ANSWERS["cases"]}
    renderer = make_renderer()
    unknown = by_name["uuid_only_unknown"]
    with pytest.raises(OpenAIError) as err:
        run(renderer, unknown["request"], [])
    assert err.value.status == unknown["status"] == 400
    assert err.value.message == unknown["answer"]["error"]["message"]
    for name in ("uuid_with_data", "uuid_only_cached"):
        vllm = by_name[name]["answer"]
        ids, features = run(renderer, by_name[name]["request"], collapse(vllm["token_ids"]))
        assert ids == vllm["token_ids"] and features["mm_hashes"] == {"image": ["e-uuid-64"]}
        assert_payload_equal(features, vllm["features"])


def test_file_url_hash_is_the_file_bytes(tmp_path):
    case = next(c for c in ANSWERS["cases"] if c["name"] == "file_url_allowed")
    (tmp_path / "rgb_224.png").write_bytes(test_media.IMAGES["rgb_224"][0]())
    request = {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"file://{tmp_path}/rgb_224.png"}}, {"type": "text", "text": "Describe."}]}]}
    renderer = make_renderer(limits=MediaLimits(allowed_local_media_path=str(tmp_path)))
    ids, features = run(renderer, request, collapse(case["answer"]["token_ids"]))
    assert features["mm_hashes"] == case["answer"]["features"]["mm_hashes"]
    assert ids == case["answer"]["token_ids"]


def test_cache_hit_skips_processing_and_gives_the_same_answer():
    renderer = make_renderer()
    case = next(c for c in OK_CASES if c["name"] == "single_rgb_224")
    first = run(renderer, case["request"], collapse(case["answer"]["token_ids"]))
    hits = renderer.cache.hits
    second = run(renderer, case["request"], collapse(case["answer"]["token_ids"]))
    assert renderer.cache.hits > hits and first == second


def test_too_many_images_is_a_400():
    renderer = make_renderer(limit_per_prompt={"image": 2, "video": 0})
    request = {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": test_media.image_url("tiny_10x10")}}] * 3}]}
    with pytest.raises(OpenAIError) as err:
        run(renderer, request, [])
    assert err.value.status == 400 and "At most 2 image" in err.value.message


@pytest.mark.parametrize("ids", [[1, 2, 3], [IMAGE_PAD, 5, IMAGE_PAD]])
def test_placeholder_count_mismatch_is_a_400(ids):
    renderer = make_renderer()
    request = {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": test_media.image_url("tiny_10x10")}}]}]}
    with pytest.raises(OpenAIError) as err:
        run(renderer, request, ids)
    assert err.value.status == 400


def test_text_only_prompt_passes_through():
    renderer = make_renderer()
    assert renderer.expand([1, 2], []) == ([1, 2], None)
    assert renderer.expand([1, IMAGE_PAD], []) == ([1, IMAGE_PAD], None)   # vLLM: features null


def test_bad_media_is_a_400_with_vllms_status():
    renderer = make_renderer()
    for name in ("bad_base64", "undecodable", "truncated_png", "unsupported_scheme", "single_too_wide_2100x10"):
        case = next(c for c in ANSWERS["cases"] if c["name"] == name)
        with pytest.raises(OpenAIError) as err:
            run(renderer, case["request"], [IMAGE_PAD])
        assert err.value.status == case["status"] == 400, name


def test_grids_are_plausible_for_random_sizes():
    """Every size in a sweep yields a grid of even multiples whose token count matches the pixels."""
    renderer = make_renderer()
    proc = renderer.processor
    rng = np.random.default_rng(1)
    for _ in range(200):
        h, w = (int(x) for x in rng.integers(1, 4000, 2))
        if max(h, w) / min(h, w) > 200:
            continue
        rh, rw = proc.resized_size(h, w)
        assert rh % 28 == 0 and rw % 28 == 0 and 3136 <= rh * rw <= 12845056


def _no_full_decode(*args, **kwargs):
    raise AssertionError("a request without pixels decoded and processed an item in full")


@pytest.mark.parametrize("case", OK_CASES, ids=[c["name"] for c in OK_CASES])
def test_none_payload_counts_without_pixels_as_vllm(case, monkeypatch):
    """Every recorded request, sent with ``mm_payload: "none"``: vLLM's token_ids, placeholders and
    hashes, while no image is decoded in full, resized or patched (the header-only path)."""
    require_media(case)
    from render_service.multimodal import pipeline

    monkeypatch.setattr(pipeline, "decode_rgb", _no_full_decode)
    renderer = make_renderer()
    monkeypatch.setattr(renderer.processor.__class__, "process_image", _no_full_decode)
    monkeypatch.setattr(renderer.processor.__class__, "process_video", _no_full_decode)
    vllm = case["answer"]
    request = {**case["request"], "mm_payload": "none"}
    ids, features = run(renderer, request, collapse(vllm["token_ids"]))
    assert ids == vllm["token_ids"]
    assert features["mm_hashes"] == vllm["features"]["mm_hashes"]
    assert features["mm_placeholders"] == vllm["features"]["mm_placeholders"]
    assert features["kwargs_data"] is None and features["mm_metadata"] is None


def test_a_count_only_entry_is_processed_again_for_tensors():
    """``none`` then ``tensors`` with the same image: the second answer has vLLM's tensors."""
    renderer = make_renderer()
    case = next(c for c in OK_CASES if c["name"] == "single_jpeg_640x480")
    vllm = case["answer"]
    _, none = run(renderer, {**case["request"], "mm_payload": "none"}, collapse(vllm["token_ids"]))
    assert none["kwargs_data"] is None and len(renderer.cache) == 1
    ids, features = run(renderer, case["request"], collapse(vllm["token_ids"]))
    assert ids == vllm["token_ids"] and features["mm_hashes"] == none["mm_hashes"]
    assert_payload_equal(features, vllm["features"])
    _, again = run(renderer, {**case["request"], "mm_payload": "none"}, collapse(vllm["token_ids"]))
    assert again == none   # the full entry answers a later count-only request


def test_none_payload_refuses_the_bad_media_vllm_refuses():
    renderer = make_renderer()
    for name in ("undecodable", "truncated_png", "single_too_wide_2100x10"):
        case = next(c for c in ANSWERS["cases"] if c["name"] == name)
        with pytest.raises(OpenAIError) as err:
            run(renderer, {**case["request"], "mm_payload": "none"}, [IMAGE_PAD])
        assert err.value.status == case["status"] == 400, name


def test_uuid_only_after_a_none_request():
    """An image sent only with ``none`` is cached as a count: a uuid-only part gets its placeholders
    with ``none`` and a cache-miss 400 with tensors (a difference from vLLM, in docs/multimodal.md)."""
    by_name = {c["name"]: c for c in ANSWERS["cases"]}
    renderer = make_renderer()
    first = by_name["uuid_with_data"]
    ids = collapse(first["answer"]["token_ids"])
    run(renderer, {**first["request"], "mm_payload": "none"}, ids)
    cached = by_name["uuid_only_cached"]
    again, features = run(renderer, {**cached["request"], "mm_payload": "none"}, ids)
    assert again == cached["answer"]["token_ids"] and features["mm_hashes"] == {"image": ["e-uuid-64"]}
    with pytest.raises(OpenAIError) as err:
        run(renderer, cached["request"], ids)
    assert err.value.status == 400 and "Cache miss" in err.value.message
