"""Host-side rescale + normalize, as transformers' torchvision backend does it, and vLLM's dtype cast.

Families without vLLM's ``mm_device_do_normalize`` (LLaVA, Gemma 3, MiniCPM-V) send float
pixels: transformers fuses rescale into normalize (``mean / rescale_factor``,
``std / rescale_factor`` in float32, ``TorchvisionBackend._fuse_mean_std_and_rescale_factor``),
then ``(x - mean) / std`` in float32 (``tvF.normalize``); vLLM casts floating tensors to the
model dtype (``InputProcessingContext._postprocess_output``). Float32 NumPy arithmetic is
IEEE-identical to PyTorch's CPU kernels here, so the bytes match.
"""

from __future__ import annotations

import numpy as np

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


def normalize_chw(rgb: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """uint8 ``[H, W, 3]`` → float32 ``[3, H, W]`` ``(x - mean) / std`` (per channel, float32 arithmetic)."""
    chw = rgb.transpose(2, 0, 1).astype(np.float32)
    chw -= mean[:, None, None]
    chw /= std[:, None, None]
    return chw
