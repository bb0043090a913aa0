"""Video containers (MP4, WebM, …) decoded and sampled as vLLM 0.33 does for Qwen2.5-VL.

vLLM's default loader (``multimodal/video.py`` ``VideoBackend`` + ``video_decoders/opencv.py``)
opens the bytes with OpenCV's stream-buffered FFmpeg backend, takes the frame count from the
container (checked against an end-of-stream seek), and samples frames as transformers'
``Qwen2VLVideoProcessor.sample_frames`` does at 2 fps (its ``qwen2_vl`` loader), converting
BGR → RGB. Its metadata ``{total_num_frames,
fps, duration, video_backend: "opencv", frames_indices, do_sample_frames}`` enters the hash.
When every frame was read (``do_sample_frames``) the processor samples again with the same
rule (a no-op then). The sampled fps sets ``second_per_grid_ts``.

OpenCV is optional (``pip install 'render-service[video]'``); the same OpenCV build as the
engine's gives the same frames. Without it a container video is a 400.
"""

from __future__ import annotations

import math
from io import BytesIO
from typing import Callable

import numpy as np

from ..errors import bad_request

TARGET_FPS = 2.0       # vLLM's qwen2_vl loader and transformers' sample_frames
MIN_FRAMES, MAX_FRAMES = 4, 768
MAX_DECODED_BYTES = 1 << 30   # sampled RGB frames held at once for one video (a 400 beyond)

try:
    import cv2
    import cv2.videoio_registry as _registry
except ImportError:   # optional dependency
    cv2 = None


def _stream_api() -> int | None:
    for backend in _registry.getStreamBufferedBackends():
        if not _registry.hasBackend(backend):
            continue
        if not _registry.isBackendBuiltIn(backend):
            _, abi, api = _registry.getStreamBufferedBackendPluginVersion(backend)
            if abi < 1 or (abi == 1 and api < 2):
                continue
        return backend
    return None


def _open(buf: BytesIO, param: str | None):
    # OpenCV's stream binding does not own ``buf``: the caller keeps it alive until release()
    cap = cv2.VideoCapture(buf, _stream_api(), [])
    if not cap.isOpened():
        raise bad_request("Failed to load video: could not open the video stream.", param)
    return cap


def _frame_count(data: bytes, cap, fps: float, param: str | None) -> int:
    total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    if total <= 0:   # streamed WebM/MKV, raw H.264: count by demuxing
        buf = BytesIO(data)
        demux = cv2.VideoCapture(buf, _stream_api(), [cv2.CAP_PROP_FORMAT, -1])
        while demux.grab():
            total += 1
        demux.release()
        if total == 0:
            raise bad_request("Failed to load video: no frames.", param)
        return total
    if cap.set(cv2.CAP_PROP_POS_AVI_RATIO, 1.0):   # an mp4 edit list can hide lead-in frames
        visible = int(cap.get(cv2.CAP_PROP_POS_FRAMES))
        at_end = not cap.grab()
        cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
        if at_end and 0 < visible < total - 1:
            total = visible
    return total


def decode_container(data: bytes, max_pixels: int, param: str | None = None,
                     indices: Callable[[int, float], list[int]] | None = None) -> tuple[np.ndarray, dict]:
    """Encoded video bytes → ``(frames [T, H, W, 3] uint8 RGB, the loader's metadata)`` as vLLM's loader.

    ``indices(total, fps)`` picks the frames (the family's loader): `qwen2_vl_indices` by
    default, `qwen3_vl_indices` for Qwen3-VL.

    Raises:
        OpenAIError: 400 without OpenCV, for an unreadable stream, too many pixels per frame,
        or no frame decoded.
    """
    if cv2 is None:
        raise bad_request("Video files need OpenCV on this server (pip install 'render-service[video]'); "
                          "data:video/jpeg frame sequences work without it.", param)
    buf = BytesIO(data)
    cap = _open(buf, param)
    try:
        width, height = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        if max_pixels > 0 and width * height > max_pixels:
            raise bad_request(f"Video frames of {width}x{height} exceed the maximum of {max_pixels} pixels.", param)
        fps = cap.get(cv2.CAP_PROP_FPS)
        total = _frame_count(data, cap, fps, param)
        duration = total / fps if fps > 0 else 0
        if fps <= 0:
            raise bad_request("Video sampling needs a known frame rate; the container reports none.", param)
        wanted_set = set((indices or qwen2_vl_indices)(total, fps))
        if len(wanted_set) * width * height * 3 > MAX_DECODED_BYTES:
            raise bad_request(f"Video too large: {len(wanted_set)} sampled frames of {width}x{height} exceed "
                              f"{MAX_DECODED_BYTES >> 20} MiB decoded.", param)
        frames = np.empty((len(wanted_set), height, width, 3), np.uint8)
        valid: list[int] = []
        for idx in range(max(wanted_set) + 1):
            if not cap.grab():
                continue
            if idx in wanted_set:
                ok, frame = cap.retrieve()
                if ok:
                    frames[len(valid)] = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
                    valid.append(idx)
    finally:
        cap.release()
        del buf
    if not valid:
        raise bad_request("Failed to load video: no frame could be decoded.", param)
    metadata = {"total_num_frames": total, "fps": fps, "duration": duration, "video_backend": "opencv",
                "frames_indices": valid, "do_sample_frames": len(valid) == total}
    return frames[: len(valid)], metadata


def qwen2_vl_indices(total: int, fps: float, temporal_patch: int = 2) -> list[int]:
    """Frame indices vLLM's ``qwen2_vl`` loader (= transformers' ``sample_frames``) takes.

    ``total / fps · 2`` frames, clamped to [4, 768] and the clip, floored to a multiple of the
    temporal patch; indices ``torch.arange(0, total, total / n).int()`` (double step, float32
    values, truncated), the tail clamped to the last frame.
    """
    max_frames = math.floor(min(MAX_FRAMES, total) / temporal_patch) * temporal_patch
    n = min(max(total / fps * min(TARGET_FPS, 30), MIN_FRAMES), max_frames, total)
    n = math.floor(n / temporal_patch) * temporal_patch
    if n <= 0:
        return [0]
    step = total / n
    indices = (np.arange(math.ceil(total / step)) * step).astype(np.float32).astype(np.int64)
    return np.minimum(indices, total - 1).tolist()


def qwen3_vl_indices(total: int, fps: float, target_fps: float = TARGET_FPS) -> list[int]:
    """Frame indices vLLM's ``qwen3_vl`` loader (= transformers' ``Qwen3VLVideoProcessor.sample_frames``) takes.

    ``int(total / fps · 2)`` frames clamped to [4, 768] and the clip, at
    ``linspace(0, total - 1, n).round()`` (NumPy's round half to even).
    """
    n = min(max(int(total / fps * min(target_fps, 30)), MIN_FRAMES), MAX_FRAMES, total)
    return np.linspace(0, total - 1, n).round().astype(int).tolist()


def sample_for_processor(frames: np.ndarray, metadata: dict, temporal_patch: int) -> tuple[np.ndarray, float]:
    """The frames the processor uses and their sampled fps (``len(indices) / total · fps``, what
    ``second_per_grid_ts`` divides the temporal patch by).

    transformers samples again only when the loader read every frame (``do_sample_frames``);
    with the same rule as the loader that keeps them all. Frame sequences (``fps`` 1.0, every
    frame) are used as sent.
    """
    total, fps = metadata["total_num_frames"], metadata["fps"]
    if metadata["do_sample_frames"] and metadata["video_backend"] == "opencv":
        indices = qwen2_vl_indices(total, fps, temporal_patch)
        return frames[indices], len(indices) / total * fps
    return frames, len(metadata["frames_indices"]) / total * fps
