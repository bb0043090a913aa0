"""Shared data and helpers for tests/test_parsers_*.py."""
