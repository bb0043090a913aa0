"""Media defaults that the ``serve`` flags name, kept free of imports: ``render-service serve
--help`` and a flag error answer without loading Pillow, NumPy or numba."""

DEFAULT_MAX_IMAGE_PIXELS = 178_956_970   # vLLM's VLLM_MAX_IMAGE_PIXELS
HASH_ALGORITHMS = ("blake3", "sha256", "sha512")  # --mm-hasher-algorithm choices, vLLM's
DEFAULT_LIMIT_PER_PROMPT = {"image": 32, "video": 4}
