"""Capacity bench for the render tier: ``render-service bench`` (see ``bench/README.md``).

Layout, one job per module:

| module | job |
|---|---|
| `bench.cli` | the ``bench`` subcommand: flags, orchestration, exit codes |
| `bench.targets` | loopback check, ``--spawn``ed servers, server CPU meters, preflight |
| `bench.tokens` | the local tokenizer (exact-length text, token-id outputs) |
| `bench.corpus` | realistic text: real source code, agent system prompt, tools, reasoning |
| `bench.workloads` | the five workloads as sans-IO session generators |
| `bench.loadgen` | closed/open loop load over httpx with exact error accounting |
| `bench.stats` | percentiles, per-run summaries, ratios, SLO capacity |
| `bench.report` | the stdout table and ``results.json`` |
| `bench.plots` | PNG figures (matplotlib, Agg) |

``bench_tokenize.py`` and ``bench_stream_derender.py`` are stand-alone scripts of their own.
"""
