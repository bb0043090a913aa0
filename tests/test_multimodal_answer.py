"""ASCII strings read in place (`multimodal.ascii_view`): a render answer with tensors written as
pieces (`multimodal.answer`), the same bytes as one ``orjson.dumps``, the kept base64 strings sent
in place and alive until the socket has them; data URLs decoded from the request's string."""

from __future__ import annotations

import contextlib
import gc
import socket
import sys
import time

import numpy as np
import orjson
import pybase64
import pytest

from render_service.errors import OpenAIError
from render_service.multimodal import ascii_view
from render_service.multimodal.answer import answer_pieces
from render_service.multimodal.ascii_view import ascii_bytes
from render_service.multimodal.media import MediaLimits, load_data_url

from test_multimodal_render import ANSWERS as VLLM_ANSWERS, BY_NAME, QWEN_VL, RENDER, post, record, vl_server


@contextlib.contextmanager
def hardened_vl_server(**config):
    """`vl_server` behind the protocol `serve` runs (`HardenedProtocol`: it offers PiecesResponse
    the transport's write buffer, `connections.BUFFER_EXTENSION`)."""
    from conftest import serve_app
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_app

    app, _, _ = build_app(ServeConfig(model=str(QWEN_VL), mm_hash_model_id=VLLM_ANSWERS["model_id"],
                                      served_model_name=(str(QWEN_VL), VLLM_ANSWERS["model_id"]), **config))
    with serve_app(app, http="render_service.http.connections:HardenedProtocol") as url:
        yield url


def _b64(n: int, seed: int) -> str:
    return pybase64.b64encode_as_string(np.random.default_rng(seed).integers(0, 256, n, np.uint8).tobytes())


ANSWERS = [
    {"request_id": "ü\"\\\n", "token_ids": [1, 2, 3], "features": None, "sampling_params": {"t": 0.5}},
    {"request_id": "a", "token_ids": list(range(300)), "token_offsets": None,
     "features": {"mm_hashes": {"image": ["h1", "h2"]}, "mm_placeholders": {"image": [{"offset": 1, "length": 4}]},
                  "kwargs_data": {"image": [_b64(3000, 1), _b64(7, 2)], "video": [None, _b64(100, 3)]},
                  "mm_metadata": {"image": [_b64(10, 4), None]}},
     "content_parts": None, "model": "m", "priority": 0},
    {"features": {"kwargs_data": {"image": [_b64(1, 5)]}}},
    {"features": {"kwargs_data": {}, "mm_metadata": None}, "x": []},
    {},
]


@pytest.mark.parametrize("out", ANSWERS)
def test_pieces_are_orjsons_bytes(out):
    assert b"".join(answer_pieces(out)) == orjson.dumps(out)


def test_each_kept_string_is_its_own_piece_and_not_copied():
    out = ANSWERS[1]
    strings = [s for items in out["features"]["kwargs_data"].values() for s in items if s is not None]
    pieces = answer_pieces(out)
    views = [p for p in pieces if isinstance(p, memoryview)]
    assert [bytes(v) for v in views] == [s.encode() for s in strings]
    assert len(pieces) == 2 * len(strings) + 1
    if not ascii_view._IN_PLACE:
        pytest.skip("this interpreter's str layout is not CPython's: pieces are copies")
    for view, text in zip(views, strings):   # the view's memory is the string's own characters
        assert np.asarray(view).__array_interface__["data"][0] == id(text) + sys.getsizeof("") - 1


def test_a_view_keeps_its_string_alive():
    text = _b64(1 << 20, 6)
    want = text.encode()
    view = ascii_bytes(text)
    del text
    gc.collect()
    _ = [_b64(1 << 20, k) for k in range(8)]   # reuse of freed memory would show in the view
    assert bytes(view) == want


def test_a_non_ascii_or_subclassed_string_is_encoded():
    class S(str):
        pass

    assert ascii_bytes(S("abc")) == b"abc" and isinstance(ascii_bytes(S("abc")), bytes)
    assert ascii_bytes("é") == "é".encode()


def test_data_urls_decode_from_the_requests_string():
    """The payload is read in place; what it decodes to, and what is refused, is as before."""
    data = np.random.default_rng(7).integers(0, 256, 30001, np.uint8).tobytes()
    url = orjson.loads(orjson.dumps("data:image/png;base64," + pybase64.b64encode(data).decode()))   # as a body parses
    loaded = load_data_url(url, MediaLimits())
    assert loaded.data == data and type(loaded.data) is bytes and loaded.media_type == "image/png"
    assert load_data_url("data:;base64,QUJD", MediaLimits()).data == b"ABC"
    for bad in ("data:image/png;base64,QUJ", "data:image/png;base64,QU JD", "data:image/png;base64,QUJDé",
                "data:image/png;base64,QUJD\n", "data:image/png,QUJD", "data:image/png;base64"):
        with pytest.raises(OpenAIError) as err:
            load_data_url(bad, MediaLimits())
        assert err.value.status == 400, bad
    with pytest.raises(OpenAIError):
        load_data_url("data:image/png;base64," + "QUJD" * 10, MediaLimits(max_bytes=20))


@pytest.mark.skipif(not QWEN_VL.is_dir(), reason="../shared/models/qwen2.5-vl-instruct not present")
@pytest.mark.parametrize("serving", [vl_server, hardened_vl_server], ids=["uvicorn", "hardened"])
def test_a_slow_reader_gets_the_whole_answer_when_nothing_else_keeps_it(serving):
    """No processor cache (nothing keeps the strings but the answer), a client that reads a
    720p answer slowly through a small receive buffer: the bytes equal a fast read's and
    Content-Length, and the server answers other requests meanwhile."""
    case = BY_NAME["single_jpeg_640x480"]
    body = orjson.dumps({**record.resolve(case["request"]), "request_id": "same"})
    with serving(mm_processor_cache_gb=0) as url:
        fast = post(url, orjson.loads(body))
        assert fast.status_code == 200, fast.text
        host, port = url.removeprefix("http://").split(":")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        sock.connect((host, int(port)))
        sock.sendall(b"POST " + RENDER.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        time.sleep(1.0)   # the server has sent what the socket takes and holds the rest
        other = post(url, orjson.loads(body))   # (its own strings: the first answer's are only in flight)
        received = bytearray()
        while b"\r\n\r\n" not in received:
            received += sock.recv(4096)
        head, _, rest = bytes(received).partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        received = bytearray(rest)
        while len(received) < length:
            chunk = sock.recv(65536)
            assert chunk, "connection closed early"
            received += chunk
            gc.collect()
        sock.close()
    assert head.startswith(b"HTTP/1.1 200")
    assert bytes(received) == fast.content == other.content
    assert length == len(fast.content)


def test_answers_in_pieces_keep_a_connection_usable():
    """A multi-piece answer (five images: the transport queues every piece, then its write limit
    is restored with megabytes still queued) and then a small and a text answer on the same
    keep-alive connection: each is whole and equal to the same request's answer on a fresh one
    (served by `HardenedProtocol`, which offers the write buffer)."""
    import httpx

    many = {**record.resolve(BY_NAME["five_images"]["request"]), "request_id": "same"}
    one = {**record.resolve(BY_NAME["single_rgb_64"]["request"]), "request_id": "same"}
    text = {"messages": [{"role": "user", "content": "hi"}], "request_id": "same"}
    with hardened_vl_server() as url:
        with httpx.Client(base_url=url, timeout=60) as client:   # one connection, kept alive
            answers = [client.post(RENDER, json=body) for body in (many, one, text, many)]
        fresh = [post(url, body) for body in (many, one, text)]
    assert [a.status_code for a in answers] == [200] * 4, answers[0].text
    assert [a.content for a in answers] == [f.content for f in fresh] + [fresh[0].content]
    assert len(answers[0].json()["features"]["kwargs_data"]["image"]) == 5
