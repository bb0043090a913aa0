"""`ServeConfig`: the operator's choices for `render-service serve`, as one frozen value.

Flag names follow `vllm launch render` (wire brief §7) so operators can swap one for the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..multimodal.defaults import DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_PROCESSOR_CACHE_GB, HASH_ALGORITHMS, MediaLimits
from ..wire.limits import MAX_BATCH_PROMPT_LENGTH, MAX_BATCH_PROMPTS


@dataclass(frozen=True)
class ServeConfig:
    """Every `serve` flag (serve/flags.py: the table that fills it, each default taken from here).
    Defaults match vLLM 0.33 where vLLM has the flag."""

    model: str | None = None                       # HF dir, GGUF file or hub id; None = embedded SmolLM2
    served_model_name: tuple[str, ...] = ()
    host: str = ""                                 # all interfaces, as vLLM
    port: int = 8000
    chat_template: str | None = None               # file path or inline template
    max_model_len: int | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = False
    workers: int = 1
    api_key: tuple[str, ...] = ()
    trust_request_chat_template: bool = False
    default_chat_template_kwargs: dict = field(default_factory=dict)
    tokenizer_backend: str = "auto"                # auto | hf | fast (issue 6)
    content_special_tokens: str = "parse"          # parse (HF parity) | text (user text never becomes control tokens)
    max_body_bytes: int = 32 * 1024 * 1024
    max_logprobs: int = 20
    max_batch_prompts: int = MAX_BATCH_PROMPTS     # prompts in one completions request
    max_batch_prompt_length: int = MAX_BATCH_PROMPT_LENGTH  # their characters + token ids, all together
    exclude_tools_when_tool_choice_none: bool = False
    stream_state_secret: str | None = None         # HMAC key for derender stream_state; default derived from the model
    max_queue_delay_ms: int = 1000                 # a request that cannot start in time gets 503 + Retry-After
    body_read_timeout: float = 20.0                # a request body must arrive within this + 1 s per body_min_rate bytes
    body_min_rate: float = 500.0                   # bytes/s (http/connections.py: 408 past the deadline)
    timeout_keep_alive: int = 5                    # s without a complete request head before a connection closes
    max_connections: int = 1024                    # open connections per worker process; past it 503
    graceful_shutdown_timeout: int = 30            # s to drain in-flight requests after SIGTERM
    token_exact_history: bool = False              # chat turns with previous_turn extend it token for token (render.turns)
    # Media for vision-language models (issue 13; multimodal/settings.py makes the MultimodalConfig)
    allowed_local_media_path: str | None = None    # file:// URLs only beneath it (vLLM's flag)
    allow_remote_media: bool = False               # fetch http(s) URLs at all (vLLM always does)
    allowed_media_domains: tuple[str, ...] = ()    # only these hosts (vLLM's flag); implies remote fetches
    media_fetch_timeout: float = MediaLimits.fetch_timeout_s  # seconds per remote fetch (vLLM VLLM_IMAGE_FETCH_TIMEOUT)
    max_media_bytes: int = MediaLimits.max_bytes
    media_max_redirects: int = MediaLimits.max_redirects
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS  # vLLM VLLM_MAX_IMAGE_PIXELS
    limit_mm_per_prompt: dict = field(default_factory=dict)
    mm_processor_cache_gb: float = DEFAULT_PROCESSOR_CACHE_GB
    mm_hash_model_id: str | None = None            # default: `model` as given (what vLLM hashes)
    mm_hasher_algorithm: str = HASH_ALGORITHMS[0]
    # `vllm launch render` flags honoured here
    tokenizer: str | None = None                   # tokenizer/template dir when it differs from `model`
    generation_config: str = "auto"                # auto | vllm | folder with generation_config.json
    override_generation_config: dict = field(default_factory=dict)
    chat_template_content_format: str = "auto"     # auto | string | openai
    tool_parser_plugin: str | None = None          # Python file registering a tool-call format
    reasoning_parser_plugin: str | None = None     # Python file registering a reasoning format
    tool_strict_level: str | None = None           # auto | function | parameter (structural-tag floor)
    root_path: str = ""
    access_log: bool = True
    enable_log_requests: bool = False
    max_log_len: int | None = None
    enable_prompt_tokens_details: bool = False     # derender passes the engine's usage.prompt_tokens_details
    enable_request_id_headers: bool = False        # every response carries X-Request-Id
    anthropic_disabled_thinking_effort: str = "auto"  # reasoning_effort for Messages' thinking: disabled
    allowed_origins: tuple[str, ...] = ()          # CORS (vLLM's flags); none: no CORS headers
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)
    allow_credentials: bool = False
    ssl_keyfile: str | None = None                 # TLS as uvicorn serves it (serve/tls.py checks them)
    ssl_certfile: str | None = None
    ssl_ca_certs: str | None = None                # CA bundle client certificates must chain to
    ssl_cert_reqs: int = 0                         # ssl.CERT_NONE / CERT_OPTIONAL / CERT_REQUIRED
    ssl_ciphers: str | None = None
    otlp_traces_endpoint: str | None = None        # OTLP/HTTP collector for per-request traces (tracing.py)
    lora_modules: tuple[dict, ...] = ()            # {"name", "path", "base_model_name"}: names served as models
