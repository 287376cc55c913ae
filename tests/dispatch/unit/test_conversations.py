"""Conversation stores and the JSONL journal: the package's conformance suites on the package's implementations."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from muster_dispatch import DirectoryConversationStore, Journal, JournalSink, MemoryConversationStore
from muster_dispatch.testing import CONVERSATION_CHECKS, JOURNAL_CHECKS, JournalOpener

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def memory_store() -> AsyncIterator[MemoryConversationStore]:
    yield MemoryConversationStore()


@pytest.mark.parametrize("name", sorted(CONVERSATION_CHECKS))
async def test_memory_store(name: str) -> None:
    await CONVERSATION_CHECKS[name](memory_store)


@pytest.mark.parametrize("name", sorted(CONVERSATION_CHECKS))
async def test_directory_store(name: str, tmp_path: Path) -> None:
    counter = itertools.count()

    @asynccontextmanager
    async def make() -> AsyncIterator[DirectoryConversationStore]:
        yield DirectoryConversationStore(tmp_path / str(next(counter)))

    await CONVERSATION_CHECKS[name](make)


@pytest.mark.parametrize("name", sorted(JOURNAL_CHECKS))
async def test_jsonl_journal(name: str, tmp_path: Path) -> None:
    counter = itertools.count()

    @asynccontextmanager
    async def make() -> AsyncIterator[JournalOpener]:
        root = tmp_path / str(next(counter))

        async def open_journal(key: str) -> JournalSink:
            return Journal(root / f"{key}.jsonl")

        yield open_journal

    await JOURNAL_CHECKS[name](make)


async def test_directory_store_survives_a_new_instance(tmp_path: Path) -> None:
    await DirectoryConversationStore(tmp_path).capture("codex", "t-1", {".codex/sessions/r.jsonl": b"x"})
    assert await DirectoryConversationStore(tmp_path).restore("codex", "t-1") == {".codex/sessions/r.jsonl": b"x"}


async def test_directory_capture_leaves_no_stale_file_on_disk(tmp_path: Path) -> None:
    store = DirectoryConversationStore(tmp_path)
    await store.capture("claude", "c", {"a/old.jsonl": b"1", "b.jsonl": b"2"})
    await store.capture("claude", "c", {"b.jsonl": b"3"})
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["claude/c/b.jsonl"]
