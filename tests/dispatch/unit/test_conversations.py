"""Conversation stores: the conformance suite on both package implementations."""

from __future__ import annotations

from pathlib import Path

from muster_dispatch import DirectoryConversationStore, MemoryConversationStore
from muster_dispatch.testing import check_conversation_store


def test_memory_store_conforms() -> None:
    check_conversation_store(MemoryConversationStore)


def test_directory_store_conforms(tmp_path: Path) -> None:
    counter = iter(range(100))
    check_conversation_store(lambda: DirectoryConversationStore(tmp_path / str(next(counter))))


def test_directory_store_survives_a_new_instance(tmp_path: Path) -> None:
    DirectoryConversationStore(tmp_path).capture("codex", "t-1", {".codex/sessions/r.jsonl": b"x"})
    assert DirectoryConversationStore(tmp_path).restore("codex", "t-1") == {".codex/sessions/r.jsonl": b"x"}
