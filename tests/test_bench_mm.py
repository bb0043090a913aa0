"""``render-mm`` bench workload: deterministic bodies, cold images, and a short real run.

Figures are not asserted (speed lives in the bench's output); bodies, counts and the answer
checks are.
"""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from bench.workloads.multimodal import SIZES, RenderMM, check_render_mm, with_ticket
from render_service.serve.cli import main

from conftest import MODELS, render_server

QWEN_VL = MODELS / "qwen2.5-vl-instruct"


class _Probe:
    model = None


def _workload() -> RenderMM:
    w = RenderMM(seed=1)
    w.prepare(_Probe())
    return w


def _urls(body: dict) -> list[str]:
    return [p["image_url"]["url"] for p in body["messages"][0]["content"] if p["type"] == "image_url"]


def test_bodies_are_deterministic_and_images_are_cold():
    a, b = _workload(), _workload()
    bodies = [next(a.session(i)).body for i in range(12)]
    assert bodies == [next(b.session(i)).body for i in range(12)]
    urls = [u for body in bodies for u in _urls(body)]
    assert all(1 <= len(_urls(body)) <= 4 for body in bodies)
    assert len(set(urls)) == len(urls)                 # every image's bytes (so its mm_hash) are new
    sizes = {Image.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1]))).size for u in urls}
    assert sizes <= set(SIZES) and len(sizes) > 1


def test_ticket_changes_bytes_not_pixels():
    w = _workload()
    jpeg = w.pool[SIZES[0]][0]
    marked = with_ticket(jpeg, 42)
    assert marked != jpeg
    assert (np.asarray(Image.open(io.BytesIO(marked))) == np.asarray(Image.open(io.BytesIO(jpeg)))).all()


def test_check_requires_features():
    ok = {"token_ids": [1, 2], "features": {"mm_hashes": {"image": ["h"]},
                                            "mm_placeholders": {"image": [{"offset": 0, "length": 2}]}}}
    assert check_render_mm(ok) == {"prompt_tokens": 2, "images": 1, "image_tokens": 2, "payload_b64_bytes": 0}
    ok["features"]["kwargs_data"] = {"image": ["abcd"]}
    assert check_render_mm(ok)["payload_b64_bytes"] == 4
    with pytest.raises(Exception):
        check_render_mm({"token_ids": [1], "features": None})


def test_images_are_labelled_so_every_family_takes_them():
    """Gemma 3 refuses two images with nothing between them (vLLM's overlapping ranges): each image follows a label."""
    content = next(_workload().session(3)).body["messages"][0]["content"]
    for k, part in enumerate(content[:-1]):
        if part["type"] == "image_url":
            assert content[k - 1]["type"] == "text" and content[k - 1]["text"].startswith("Image ")


@pytest.mark.parametrize("model", ["qwen2.5-vl-instruct", "llava-1.5-7b-hf", "gemma-3-4b-it"])
def test_short_run_against_a_live_server(tmp_path, model):
    if not (MODELS / model).is_dir():
        pytest.skip(f"../shared/models/{model} not present")
    # a cold server compiles its numba kernels on the first images (seconds on a fresh clone, a busy
    # box): admission's 1 s queue bound would answer a concurrent request 503, which is not what this checks
    with render_server(str(MODELS / model), max_queue_delay_ms=120_000) as url:
        rc = main(["bench", "render-mm", "render-mm-route", "--target", url, "--tokenizer", str(MODELS / model), "--max-requests", "4",
                   "--warmup", "1", "--concurrency", "2", "--quiet", "--out", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [w["workload"] for w in doc["workloads"]] == ["render-mm", "render-mm-route"]
    for workload in doc["workloads"]:
        (run,) = workload["runs"]
        assert run["ok"] == run["issued"] >= 4 and run["error_total"] == 0
        assert run["extra"]["images_total"] >= run["ok"]
    assert doc["workloads"][1]["params"]["mm_payload"] == "none"
