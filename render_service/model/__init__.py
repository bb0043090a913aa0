"""What is loaded once per model: the bundle and its loaders, chat templates, the sanitizer.

- ``bundle.py``    `ModelBundle` + `load_model()`: HF tokenizer dir | GGUF file | hub id
- ``gguf.py``      GGUF metadata -> `tokenizers.Tokenizer` + chat template (llama.cpp pre-types)
- ``templates.py`` chat templates with Hugging Face semantics (sandboxed jinja2)
- ``sanitize.py``  opt-in: control-token text in messages stays text (--content-special-tokens text)
"""

from .bundle import ModelBundle, ModelLoadError, load_model

__all__ = ["ModelBundle", "ModelLoadError", "load_model"]
