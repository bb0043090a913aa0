"""render-service: the CPU hop of disaggregated LLM serving (render, derender, drive, bench)."""

__version__ = "0.1.0"
