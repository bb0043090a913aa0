"""Observability that every layer may use: OpenTelemetry traces (`tracing`)."""
