"""Harness presets for the real CLIs."""
