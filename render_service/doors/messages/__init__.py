"""The Anthropic Messages door."""
