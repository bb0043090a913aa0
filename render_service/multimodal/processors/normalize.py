"""Host-side rescale + normalize, as transformers' torchvision backend does it, and vLLM's dtype cast.

Families without vLLM's ``mm_device_do_normalize`` (LLaVA, Gemma 3, MiniCPM-V) send float
pixels: transformers fuses rescale into normalize (``mean / rescale_factor``,
``std / rescale_factor`` in float32, ``TorchvisionBackend._fuse_mean_std_and_rescale_factor``),
then ``(x - mean) / std`` in float32 (``tvF.normalize``); vLLM casts floating tensors to the
model dtype (``InputProcessingContext._postprocess_output``). Float32 NumPy arithmetic is
IEEE-identical to PyTorch's CPU kernels here, so the bytes match.

An output value depends only on its channel and its uint8 input, so `NormalizeTable` computes
the 3 × 256 results once, already in the wire dtype, and a frame is three gathers: the same
bytes as normalizing then casting every pixel, at a fraction of the cost (a 896² frame in
bfloat16: ~3 ms instead of ~90).
"""

from __future__ import annotations

import numpy as np

from ..jit import compile_kernel
from ..serde import bfloat16_bits

# vLLM's dtype for a model on the CPU platform (x86/aarch64 support bfloat16, float16,
# float32; "auto" keeps the config's dtype and turns float32 into the preferred bfloat16).
_CONFIG_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16", "float32": "bfloat16",
                  "float": "bfloat16"}


def model_dtype(config: dict) -> str:
    """The wire dtype of float tensors for ``config.json`` (``torch_dtype`` / ``dtype``; text_config's as fallback)."""
    text = config.get("text_config") or {}
    name = config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype") or text.get("dtype") or "float32"
    return _CONFIG_DTYPES.get(str(name).removeprefix("torch."), "bfloat16")


def fused_mean_std(mean: list[float], std: list[float], rescale_factor: float) -> tuple[np.ndarray, np.ndarray]:
    """``(mean / rescale_factor, std / rescale_factor)`` as float32, computed as transformers does."""
    inv = np.float32(1.0 / rescale_factor)
    return np.asarray(mean, np.float32) * inv, np.asarray(std, np.float32) * inv


class NormalizeTable:
    """``(x - mean) / std`` of every uint8 ``x`` per channel, in the wire dtype.

    ``dtype`` ``"float16"`` gives float16 values; ``"bfloat16"`` gives uint16 bit patterns
    (a `Field` with ``wire_dtype="bfloat16"`` sends them as they are).
    """

    def __init__(self, mean: list[float], std: list[float], rescale_factor: float, dtype: str):
        m, s = fused_mean_std(mean, std, rescale_factor)
        values = (np.arange(256, dtype=np.float32)[None, :] - m[:, None]) / s[:, None]   # [3, 256] float32
        self.dtype = dtype
        # 16-bit results are gathered as uint16 bit patterns (numba has no float16 arrays)
        if dtype == "bfloat16":
            self.table, self._view = bfloat16_bits(values), None
        elif dtype == "float16":
            self.table, self._view = values.astype(np.float16).view(np.uint16), np.float16
        else:
            self.table, self._view = values, None

    def chw(self, rgb: np.ndarray) -> np.ndarray:
        """uint8 ``[H, W, 3]`` → ``[3, H, W]`` normalized values in the wire dtype."""
        out = np.empty((3,) + rgb.shape[:2], self.table.dtype)
        if _gather_kernel is not None:
            _gather_kernel(np.ascontiguousarray(rgb), self.table, out)
        else:
            for c in range(3):
                np.take(self.table[c], rgb[:, :, c], out=out[c])
        return out if self._view is None else out.view(self._view)


def _gather_loop(rgb, table, out):   # pragma: no cover - runs compiled
    """``out[c, y, x] = table[c, rgb[y, x, c]]`` in one pass over the image."""
    for y in range(rgb.shape[0]):
        for x in range(rgb.shape[1]):
            for c in range(3):
                out[c, y, x] = table[c, rgb[y, x, c]]
    return out


_gather_kernel = compile_kernel(_gather_loop)   # None without numba: the NumPy gathers
