"""The other vision families through a real render server on loopback, against vLLM 0.33's answers.

``tests/fixtures/vllm_mm/answers_<family>.json`` holds what vLLM 0.33's ``vllm launch render``
answered for each family's model directory (recorder: ``record_families.py``). Each recorded
request is replayed through our server with the real tokenizer, template and processor:
``token_ids``, ``mm_placeholders``, ``mm_hashes`` equal, ``kwargs_data`` tensors equal byte for
byte (and ``mm_metadata``), the same 400s. A deliberate difference is listed in `DIFFERENCES`
with its reason (and in docs/multimodal.md).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import httpx
import pytest

from conftest import MODELS, fixture_module, needs_shared, render_server
from render_service.multimodal import FAMILIES

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_mm"
sys.path.insert(0, str(FIXTURES))
import media as test_media  # noqa: E402
record = fixture_module("vllm_mm/record.py")
families = fixture_module("vllm_mm/record_families.py")
from test_multimodal_pipeline import assert_payload_equal  # noqa: E402

RENDER = "/v1/chat/completions/render"
RECORDINGS = {p.stem.removeprefix("answers_"): json.loads(p.read_text()) for p in sorted(FIXTURES.glob("answers_*.json"))}

# (family, case) -> why our answer differs from vLLM's on purpose (a 400 instead); none so far
DIFFERENCES: dict[tuple[str, str], str] = {}


def _model_type(family: str) -> str:
    base = families.DERIVED[family][0] if family in families.DERIVED else RECORDINGS[family]["model_dir"]
    return json.loads((MODELS / base / "config.json").read_text())["model_type"]


def _model_dir(family: str, tmp_root: Path) -> Path:
    """The family's model directory: shipped, or derived from one (config files changed) under ``tmp_root``."""
    if family in families.DERIVED:
        base = families.DERIVED[family][0]
        if not (MODELS / base).is_dir():
            pytest.skip(f"../shared/models/{base} not present")
        return families.derive(family, MODELS, tmp_root)
    model = MODELS / RECORDINGS[family]["model_dir"]
    if not model.is_dir():
        pytest.skip(f"../shared/models/{RECORDINGS[family]['model_dir']} not present")
    return model

CASES = [(family, case) for family, rec in RECORDINGS.items() for case in rec["cases"]]
pytestmark = needs_shared


def _require_media(rec: dict, case: dict) -> None:
    text = json.dumps(case["request"])
    for name, sha in rec["image_sha256"].items():
        if f'"$image": "{name}"' in text and hashlib.sha256(test_media.image_bytes(name)).hexdigest() != sha:
            pytest.skip(f"{name}: this Pillow encodes the test image differently from the recording")
    for name, sha in rec.get("mp4_sha256", {}).items():
        if f'"$mp4": "{name}"' in text:
            pytest.importorskip("cv2", reason="MP4 cases need OpenCV (render-service[video])")
            if hashlib.sha256(test_media.mp4(*test_media.MP4S[name])).hexdigest() != sha:
                pytest.skip(f"{name}: this OpenCV encodes the test video differently from the recording")


_servers: dict = {}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """One server per family, started on first use and stopped at the end of the module."""
    stack = []
    root = tmp_path_factory.mktemp("derived-models")
    yield lambda family: _server(family, stack, root)
    for ctx in reversed(stack):
        ctx.__exit__(None, None, None)
    _servers.clear()


def _server(family: str, stack: list, root: Path) -> str:
    if family not in _servers:
        rec = RECORDINGS[family]
        model = _model_dir(family, root)
        ctx = render_server(model=str(model), mm_hash_model_id=rec["model_id"],
                            served_model_name=(str(model), rec["model_id"]))
        _servers[family] = ctx.__enter__()
        stack.append(ctx)
        # vLLM's context length, from the model's config alone (Gemma 3's names none: transformers' default)
        assert httpx.get(_servers[family] + "/v1/models").json()["data"][0]["max_model_len"] == rec["max_model_len"]
    return _servers[family]


@pytest.mark.parametrize("family,case", CASES, ids=[f"{f}-{c['name']}" for f, c in CASES])
def test_recorded_case_equals_vllm(servers, family, case):
    rec = RECORDINGS[family]
    _require_media(rec, case)
    url = servers(family)
    resp = httpx.post(url + case.get("path", RENDER), json=record.resolve(case["request"]), timeout=300)
    if _model_type(family) not in FAMILIES:   # recorded for the day it is added; until then a clear 400
        assert resp.status_code == 400, resp.text[:300]
        message = resp.json()["error"]["message"]
        if "image_url" in json.dumps(case["request"]):
            assert repr(_model_type(family)) in message and "Supported model_type values: " in message, message
        return
    why = DIFFERENCES.get((family, case["name"]))
    if why is not None:
        assert resp.status_code == 400, resp.text[:300]
        return
    assert resp.status_code == case["status"], resp.text[:500]
    if case["status"] != 200:
        error = resp.json()["error"]
        assert error["code"] == case["status"] and error["message"]
        for phrase in ("mm_placeholders must be globally non-overlapping", "Per-request mm_processor_kwargs are disabled"):
            if phrase in case["answer"]["error"]["message"]:
                assert phrase in error["message"]
        return
    ours, vllm = resp.json(), case["answer"]
    assert ours["token_ids"] == vllm["token_ids"]
    assert ours["features"]["mm_placeholders"] == vllm["features"]["mm_placeholders"]
    assert ours["features"]["mm_hashes"] == vllm["features"]["mm_hashes"]
    assert_payload_equal(ours["features"], vllm["features"])
    assert ours["sampling_params"]["max_tokens"] == vllm["sampling_params"]["max_tokens"]


def test_every_difference_names_a_recorded_case():
    recorded = {(f, c["name"]) for f, c in CASES}
    assert all(key in recorded for key in DIFFERENCES if key[0] in RECORDINGS)


def _no_pixels(*args, **kwargs):
    raise AssertionError("mm_payload none decoded or processed an image in full")


@pytest.mark.parametrize("family", list(RECORDINGS))
def test_none_payload_counts_without_pixels_as_vllm(family, monkeypatch, tmp_path):
    """Every recorded request of the family, re-sent with ``mm_payload: "none"`` to a fresh server: vLLM's
    ids, placeholders and hashes, while no image is decoded in full, resized or normalized."""
    from render_service.multimodal import pipeline
    from render_service.multimodal.processors import load_processor

    rec = RECORDINGS[family]
    model = _model_dir(family, tmp_path)
    monkeypatch.setattr(pipeline, "decode_rgb", _no_pixels)
    cls = type(load_processor(model, _TokenizerStub()))
    for name in ("process_image", "process_video"):
        if hasattr(cls, name):
            monkeypatch.setattr(cls, name, _no_pixels)
    cases = [c for c in rec["cases"] if c["status"] == 200 and (family, c["name"]) not in DIFFERENCES]
    with render_server(model=str(model), mm_hash_model_id=rec["model_id"], max_model_len=rec["max_model_len"],
                       served_model_name=(str(model), rec["model_id"])) as url:
        for case in cases:
            _require_media(rec, case)
            body = {**record.resolve(case["request"]), "mm_payload": "none"}
            resp = httpx.post(url + RENDER, json=body, timeout=300)
            assert resp.status_code == 200, (case["name"], resp.text[:300])
            ours, vllm = resp.json(), case["answer"]
            assert ours["token_ids"] == vllm["token_ids"], case["name"]
            assert ours["features"]["mm_placeholders"] == vllm["features"]["mm_placeholders"], case["name"]
            assert ours["features"]["mm_hashes"] == vllm["features"]["mm_hashes"], case["name"]
            assert ours["features"]["kwargs_data"] is None and ours["features"]["mm_metadata"] is None


class _TokenizerStub:
    """Enough of a tokenizer to build a processor and read its class."""

    def token_to_id(self, token: str) -> int:
        return 1

    def encode(self, text: str) -> list[int]:
        return [1]


def _copy_with_config(tmp_path: Path, base: str, changes: dict) -> Path:
    import shutil

    if not (MODELS / base).is_dir():
        pytest.skip(f"../shared/models/{base} not present")
    out = tmp_path / f"{base}-changed"
    shutil.copytree(MODELS / base, out)
    path = out / "config.json"
    path.chmod(0o644)
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return out


@pytest.mark.parametrize("changes,phrases", [
    ({"model_type": "internvl_chat"}, ("'internvl_chat'", "MiniCPMV", "Supported model_type values: ", "minicpmv")),
    ({"version": 2.6}, ("MiniCPM-V version 2.6", "MiniCPMV")),
], ids=["unknown_family", "other_minicpmv_version"])
def test_vision_model_without_processor_refuses_images_clearly(tmp_path, changes, phrases):
    """A vision model we have no processor for (an unknown family, or a MiniCPM-V version other
    than 4.0) serves text and answers an image with a 400 saying why: never another rule's placeholders."""
    model = _copy_with_config(tmp_path, "minicpm-v-4", changes)
    body = record.resolve({"messages": families.user(families.img("rgb_64"), families.text("Describe."))})
    with render_server(model=str(model), max_model_len=4096) as url:
        resp = httpx.post(url + RENDER, json=body, timeout=60)
        assert resp.status_code == 400, resp.text[:300]
        message = resp.json()["error"]["message"]
        assert all(p in message for p in phrases), message
        text_only = httpx.post(url + RENDER, json={"messages": [{"role": "user", "content": "Hello."}]}, timeout=60)
        assert text_only.status_code == 200 and text_only.json()["features"] is None
