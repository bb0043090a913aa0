"""The OpenAI Responses door."""
