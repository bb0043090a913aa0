"""Plain data for one processed multimodal item (an image or a video), family-independent."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Field:
    """One tensor of a processed item and how vLLM batches it.

    Attributes:
        data: the tensor (NumPy; uint8 pixels, int64 grids, float32 scalars), a list of
            floats that vLLM keeps as a plain list (Qwen3-VL's ``timestamps``), or a list of
            tensors of different shapes (vLLM's nested tensors: MiniCPM-V's slices).
        kind: vLLM's field class: ``"flat"`` (rows of a tensor concatenated across items,
            e.g. ``pixel_values``) or ``"batched"`` (one entry per item, e.g. ``image_grid_thw``).
        keep_on_cpu: vLLM's ``keep_on_cpu`` flag (the engine keeps it on the host).
        metadata: part of ``mm_metadata`` (what the engine needs without the pixels, e.g. the
            grid for M-RoPE positions).
        wire_dtype: dtype on the wire when it differs from ``data``'s (``"bfloat16"``).
    """

    data: np.ndarray | list
    kind: str
    keep_on_cpu: bool = False
    metadata: bool = False
    wire_dtype: str | None = None


@dataclass(frozen=True)
class ProcessedItem:
    """A processed media item: its tensors and what its placeholder token becomes in the prompt.

    ``replacement`` is the token ids that replace the one token the chat template wrote for the
    item (Gemma 3: ``\n\n<start_of_image>`` + 256 soft tokens + ``<end_of_image>\n\n``);
    None means ``num_tokens`` copies of that token (Qwen-VL, LLaVA).
    """

    modality: str
    fields: dict[str, Field]
    num_tokens: int
    replacement: tuple[int, ...] | None = None

    @property
    def nbytes(self) -> int:
        """Bytes held by the tensors (what the processor cache counts)."""
        return sum(_nbytes(f.data) for f in self.fields.values())


def _nbytes(data: np.ndarray | list) -> int:
    if isinstance(data, np.ndarray):
        return data.nbytes
    return sum(x.nbytes if isinstance(x, np.ndarray) else 8 for x in data)
