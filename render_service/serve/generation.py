"""The generation defaults sampling starts from (``--generation-config``,
``--override-generation-config``), as vLLM 0.33 picks them."""

from __future__ import annotations

import json
from pathlib import Path

GENERATION_CONFIG_KEYS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p", "max_new_tokens")


def generation_config(model_config: dict, config) -> dict:
    """The generation defaults for sampling: the model's (``auto``), none (``vllm``) or a folder's
    ``generation_config.json``, with ``--override-generation-config`` on top (vLLM's rule)."""
    if config.generation_config == "auto":
        base = dict(model_config)
    elif config.generation_config == "vllm":
        base = {k: v for k, v in model_config.items() if k not in GENERATION_CONFIG_KEYS}
    else:
        path = Path(config.generation_config) / "generation_config.json"
        base = {**model_config, **(json.loads(path.read_text()) if path.is_file() else {})}
    return {**base, **(config.override_generation_config or {})}
