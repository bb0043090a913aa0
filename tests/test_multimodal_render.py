"""Images through a real render server on loopback, against vLLM 0.33's recorded answers.

The server runs the real Qwen2.5-VL tokenizer, chat template and processor; ``mm_hashes``
use the model id vLLM was started with (``--mm-hash-model-id``). Bad media must be a 400 in
the OpenAI error shape, never a 500, and a slow remote image must not hold up other requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import json
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from conftest import MODELS, fixture_module, render_server

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_mm"
sys.path.insert(0, str(FIXTURES))
import media as test_media  # noqa: E402
record = fixture_module("vllm_mm/record.py")
from test_multimodal_pipeline import assert_payload_equal  # noqa: E402
from test_multimodal_units import ANSWERS, require_media  # noqa: E402

QWEN_VL = MODELS / "qwen2.5-vl-instruct"
pytestmark = pytest.mark.skipif(not QWEN_VL.is_dir(), reason="../shared/models/qwen2.5-vl-instruct not present")
BY_NAME = {c["name"]: c for c in ANSWERS["cases"]}
RENDER = "/v1/chat/completions/render"
OK_CASES = [c for c in ANSWERS["cases"] if c["status"] == 200 and c.get("path", RENDER) == RENDER
            and not c["name"].startswith(("uuid_", "file_url"))]
BAD_CASES = [c for c in ANSWERS["cases"] if c["status"] != 200 and not c["name"].startswith("uuid_")]
FRONT_DOORS = [c for c in ANSWERS["cases"] if c.get("path", RENDER) != RENDER]


def vl_server(**config):
    # served under vLLM's model name too, so recorded bodies that name it are accepted
    return render_server(model=str(QWEN_VL), mm_hash_model_id=ANSWERS["model_id"],
                         served_model_name=(str(QWEN_VL), ANSWERS["model_id"]), **config)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    media_dir = tmp_path_factory.mktemp("media")
    with vl_server(allowed_local_media_path=str(media_dir)) as url:
        yield url, media_dir


def post(url: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(url + RENDER, json=body, timeout=120, **kw)


def image_body(url: str, text: str = "Describe.") -> dict:
    return {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                      {"type": "text", "text": text}]}]}


def assert_equal_to_vllm(ours: dict, vllm: dict) -> None:
    assert ours["token_ids"] == vllm["token_ids"]
    assert ours["features"]["mm_hashes"] == vllm["features"]["mm_hashes"]
    assert ours["features"]["mm_placeholders"] == vllm["features"]["mm_placeholders"]
    assert_payload_equal(ours["features"], vllm["features"])
    assert ours["sampling_params"]["max_tokens"] == vllm["sampling_params"]["max_tokens"]   # counts expanded ids
    assert ours["content_parts"] is None and list(ours["features"]) == list(vllm["features"])


@pytest.mark.parametrize("case", OK_CASES, ids=[c["name"] for c in OK_CASES])
def test_recorded_case(server, case):
    require_media(case)
    resp = post(server[0], record.resolve(case["request"]))
    assert resp.status_code == 200, resp.text
    assert_equal_to_vllm(resp.json(), case["answer"])


def test_answers_with_media_fit_vllms_generate_request_schema(server):
    """An image + video answer validates against vLLM 0.33's own GenerateRequest JSON Schema."""
    from test_vllm_corpus import schema_errors

    for name in ("image_and_video", "video_payload_none"):
        resp = post(server[0], record.resolve(BY_NAME[name]["request"]))
        assert resp.status_code == 200 and schema_errors("GenerateRequest", resp.json()) == []


@pytest.mark.parametrize("case", FRONT_DOORS, ids=[c["name"] for c in FRONT_DOORS])
def test_responses_and_messages_images_equal_vllm(server, case):
    """``input_image`` (Responses) and ``image`` blocks (Messages): the same ids, hashes and tensors as vLLM."""
    resp = httpx.post(server[0] + case["path"], json=record.resolve(case["request"]), timeout=120)
    assert resp.status_code == 200, resp.text
    ours, vllm = resp.json(), case["answer"]
    assert ours["token_ids"] == vllm["token_ids"]
    assert ours["features"]["mm_hashes"] == vllm["features"]["mm_hashes"]
    assert ours["features"]["mm_placeholders"] == vllm["features"]["mm_placeholders"]
    assert_payload_equal(ours["features"], vllm["features"])
    chat = BY_NAME["file_url_allowed"]["answer"]["features"]["mm_hashes"]   # the same 224² image sent to chat
    assert ours["features"]["mm_hashes"] == chat


@pytest.mark.parametrize("case", BAD_CASES, ids=[c["name"] for c in BAD_CASES])
def test_recorded_bad_media_is_a_400(server, case):
    resp = post(server[0], record.resolve(case["request"]))
    assert resp.status_code == case["status"] == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == 400 and error["type"] == "BadRequestError" and error["message"]


def test_file_url_under_the_allowed_path(server):
    url, media_dir = server
    (media_dir / "rgb_224.png").write_bytes(test_media.IMAGES["rgb_224"][0]())
    resp = post(url, image_body(f"file://{media_dir}/rgb_224.png"))
    assert resp.status_code == 200, resp.text
    vllm = BY_NAME["file_url_allowed"]["answer"]
    assert resp.json()["features"]["mm_hashes"] == vllm["features"]["mm_hashes"]
    assert resp.json()["token_ids"] == vllm["token_ids"]


def test_uuid_parts_on_a_fresh_server():
    with vl_server() as url:
        for name in ("uuid_only_unknown", "uuid_with_data", "uuid_only_cached"):
            case = BY_NAME[name]
            resp = post(url, record.resolve(case["request"]))
            assert resp.status_code == case["status"], (name, resp.text)
            if case["status"] == 200:
                assert_equal_to_vllm(resp.json(), case["answer"])
            else:
                assert resp.json()["error"]["message"] == case["answer"]["error"]["message"]


def test_limits_are_400s():
    tiny = test_media.image_url("tiny_10x10")
    with vl_server(limit_mm_per_prompt={"image": 2}, max_media_bytes=50_000, max_image_pixels=1_000_000) as url:
        three = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": tiny}}] * 3}]}
        bodies = {
            "too many images": three,
            "oversize": image_body(test_media.image_url("rgb_224")),                  # 97 KB > 50 KB
            "too many pixels": image_body(test_media.data_url(test_media.png(1200, 1000, 0), "image/png")),
            "remote off": image_body("http://127.0.0.1:9/a.png"),
            "file:// off": image_body("file:///etc/hostname"),
            # vLLM expands the typed pad instead of the image's and leaves the image's pad single: we refuse
            "pad token typed with an image": {"messages": [{"role": "user", "content": [
                {"type": "text", "text": "<|image_pad|>"}, {"type": "image_url", "image_url": {"url": tiny}}]}]},
            "image url not a string": {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": 5}}]}]},
            "image part without url": {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "mm_payload bad": {**image_body(tiny), "mm_payload": "pixels"},
            "undecodable mp4": {"messages": [{"role": "user", "content": [
                {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAAIGZ0eXBpc29t"}}]}]},
            "video frames of two sizes": {"messages": [{"role": "user", "content": [{"type": "video_url", "video_url": {
                "url": test_media.video_url(1) + "," + test_media.video_url(1, 56, 56).split(",", 1)[1]}}]}]},
        }
        for what, body in bodies.items():
            resp = post(url, body)
            assert resp.status_code == 400, (what, resp.text)
            assert resp.json()["error"]["code"] == 400, what
        assert post(url, image_body(tiny)).status_code == 200
        # without media the prompt passes through with features null, as vLLM answers it
        text_only = post(url, {"messages": [{"role": "user", "content": "<|vision_start|><|image_pad|><|vision_end|>"}]})
        assert text_only.status_code == 200 and text_only.json()["features"] is None


def test_text_only_model_refuses_images():
    with render_server(model=str(MODELS / "qwen2.5-instruct")) as url:
        resp = post(url, image_body(test_media.image_url("tiny_10x10")))
        assert resp.status_code == 400 and "image" in resp.json()["error"]["message"]


class _MediaHandler(http.server.BaseHTTPRequestHandler):
    """/img: a PNG; /slow: waits for the test's release event first; /big: more bytes than allowed;
    /loop: redirects to itself."""

    png = test_media.png(64, 64, 1)
    arrived = threading.Event()
    release = threading.Event()

    def do_GET(self):  # noqa: N802
        if self.path == "/slow":
            type(self).arrived.set()
            type(self).release.wait(30)
        if self.path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.end_headers()
            return
        body = b"\0" * 3_000_000 if self.path == "/big" else self.png
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        if self.path != "/big":
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.fixture()
def media_host():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _MediaHandler)
    srv.daemon_threads = True
    _MediaHandler.arrived.clear()
    _MediaHandler.release.clear()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    _MediaHandler.release.set()
    srv.shutdown()


def test_remote_fetch_limits(media_host):
    with vl_server(allow_remote_media=True, max_media_bytes=1_000_000, media_max_redirects=2) as url:
        ok = post(url, image_body(f"{media_host}/img"))
        assert ok.status_code == 200, ok.text
        assert ok.json()["features"]["mm_hashes"] == BY_NAME["single_rgb_64"]["answer"]["features"]["mm_hashes"]
        for path in ("/big", "/loop", "/missing-host"):
            target = "http://127.0.0.1:9/x.png" if path == "/missing-host" else f"{media_host}{path}"
            resp = post(url, image_body(target))
            assert resp.status_code == 400, (path, resp.text)


def test_allowed_media_domains(media_host):
    """Only the listed hostnames are fetched (giving them enables fetching, as in vLLM)."""
    with vl_server(allowed_media_domains=("127.0.0.1",)) as url:
        assert post(url, image_body(f"{media_host}/img")).status_code == 200
        other = media_host.replace("127.0.0.1", "localhost")
        resp = post(url, image_body(f"{other}/img"))
        assert resp.status_code == 400 and "allowed domains" in resp.json()["error"]["message"]


def test_slow_remote_image_does_not_stall_other_requests(media_host):
    """A request whose image URL hangs is pending while other image requests are answered."""
    fast_body = image_body(test_media.image_url("rgb_224"))

    async def scenario(url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            slow = asyncio.ensure_future(client.post(RENDER, json=image_body(f"{media_host}/slow")))
            while not _MediaHandler.arrived.is_set():
                await asyncio.sleep(0.01)
            for _ in range(3):
                resp = await client.post(RENDER, json=fast_body)
                assert resp.status_code == 200
            assert not slow.done()                       # still waiting on its image...
            _MediaHandler.release.set()
            assert (await slow).status_code == 200      # ...and answered once the image arrives

    with vl_server(allow_remote_media=True, media_fetch_timeout=60) as url:
        asyncio.run(scenario(url))


def test_fetch_timeout_is_a_400(media_host):
    with vl_server(allow_remote_media=True, media_fetch_timeout=0.5) as url:
        start = time.monotonic()
        resp = post(url, image_body(f"{media_host}/slow"))
        assert resp.status_code == 400 and "longer than" in resp.json()["error"]["message"]
        assert time.monotonic() - start < 25   # bounded by the fetch timeout, not the 30 s the host would hang


def test_pixels_are_equal_to_vllm_for_720p(server):
    """The largest recorded image end to end: 4,784 patches of 1,176 uint8 values, byte for byte."""
    case = BY_NAME["single_rgb_1280x720"]
    resp = post(server[0], record.resolve(case["request"]))
    from render_service.multimodal.serde import decode_item

    dtype, shape, raw, _ = decode_item(resp.json()["features"]["kwargs_data"]["image"][0])["pixel_values"]
    want = case["answer"]["features"]["kwargs_data"]["image"][0]["fields"]["pixel_values"]
    assert (dtype, shape) == ("uint8", [4784, 1176])
    assert hashlib.sha256(raw).hexdigest() == want["sha256"]


@pytest.mark.parametrize("name", ["jpeg_640x480/cut95", "exif_rot6_160x120/cut_last2", "progressive_320x200/ff256@50",
                                  "png_224/cut80", "png_224/noise64@40"])
@pytest.mark.parametrize("payload", ["none", "tensors"])
def test_broken_image_with_a_valid_header(server, name, payload):
    """A truncated or overwritten image is a 400 exactly when vLLM 0.33's loader refuses it,
    on the count-only path (``mm_payload: "none"``) as on the full one."""
    import broken

    vllm = json.loads((FIXTURES / "broken_answers.json").read_text())[name]
    data = broken.variants()[name]
    mime = "image/png" if name.startswith("png") else "image/jpeg"
    resp = post(server[0], {**image_body(test_media.data_url(data, mime)), "mm_payload": payload})
    assert resp.status_code == (200 if vllm["ok"] else 400), resp.text
    if not vllm["ok"]:
        assert "Failed to load image" in resp.json()["error"]["message"]


def _cache_figures(url: str) -> dict[str, float]:
    """The processor cache's series from ``/metrics`` (``render_mm_processor_cache_*``)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    out = {}
    for line in text.splitlines():
        if line.startswith("render_mm_processor_cache_"):
            name, value = line.rsplit(" ", 1)
            out[name.removeprefix("render_mm_processor_cache_").removesuffix("_total")] = float(value)
    return out


def test_a_repeated_image_is_spliced_from_the_cache_byte_for_byte():
    """The same image twice: the second answer is the first byte for byte (and vLLM's tensors), its
    payload spliced from the kept encoding (/metrics: one encode, one reuse, one hit)."""
    case = BY_NAME["single_jpeg_640x480"]
    body = {**record.resolve(case["request"]), "request_id": "same"}   # else the answers' ids differ
    with vl_server() as url:
        before = _cache_figures(url)
        first, second = post(url, body), post(url, body)
        after = _cache_figures(url)
    assert first.status_code == second.status_code == 200, first.text
    assert second.content == first.content
    assert_equal_to_vllm(second.json(), case["answer"])
    assert before["encoded"] == before["reused"] == before["hits"] == 0
    assert after["encoded"] == 1 and after["reused"] == 1 and after["hits"] == 1
    assert after["entries"] == 1 and 0 < after["bytes"] <= after["capacity_bytes"]


def test_the_processor_cache_stays_within_its_bound():
    """``--mm-processor-cache-gb`` bounds what is kept: with room for about one encoded 640x480
    image, a second image evicts the first, and the first is then processed and encoded again —
    with the same answer."""
    one, other = BY_NAME["single_jpeg_640x480"], BY_NAME["single_rgb_224"]
    body = {**record.resolve(one["request"]), "request_id": "same"}
    with vl_server(mm_processor_cache_gb=2.6e6 / (1 << 30)) as url:
        first = post(url, body)
        post(url, record.resolve(other["request"]))
        figures = _cache_figures(url)
        again = post(url, body)
        final = _cache_figures(url)
    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    assert figures["evictions"] >= 1 and figures["bytes"] <= figures["capacity_bytes"] == int(2.6e6)
    assert final["encoded"] == 3 and final["reused"] == 0 and final["bytes"] <= final["capacity_bytes"]
