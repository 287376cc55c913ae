"""Fake model servers (Anthropic Messages, OpenAI Responses) that the real CLIs talk to in the dispatch tests."""
