"""Conversation stores: keep a turn's native session files so a conversation can resume in a NEW private home.

A store holds one snapshot per (harness, conversation id): ``{path relative to the home: bytes}``. The runner finds
the files with the harness's ``session_globs`` after each turn and writes them back (``restore_path``) before a cold
resume. The protocol is async: the service keeps snapshots in its database, where every call is a round trip.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import anyio

from muster_dispatch.errors import DispatchError

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


class ConversationStore(Protocol):
    async def capture(self, harness: str, conversation: str, files: Mapping[str, bytes]) -> None:
        """Store ``files`` as the conversation's whole snapshot: files of an earlier capture are gone."""
        ...

    async def restore(self, harness: str, conversation: str) -> dict[str, bytes] | None:
        """The last captured snapshot, or None when the conversation was never captured."""
        ...


def check_key(harness: str, conversation: str) -> None:
    """Refuse ids that are not plain names (they become directory names and database keys)."""
    if not _SAFE.match(harness) or not _SAFE.match(conversation):
        raise DispatchError("session", f"invalid conversation id {conversation!r}", {"field": "conversation"})


def relative_path(path: str) -> str:
    """A session file's path relative to the home, refused when it would leave the home."""
    rel = Path(path)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise DispatchError("session", f"session file path must stay under the home: {path!r}")
    return str(rel)


def checked_snapshot(harness: str, conversation: str, files: Mapping[str, bytes]) -> dict[str, bytes]:
    """The snapshot to store, with every key and path checked before anything is written."""
    check_key(harness, conversation)
    return {relative_path(k): bytes(v) for k, v in files.items()}


class MemoryConversationStore:
    def __init__(self) -> None:
        self._files: dict[tuple[str, str], dict[str, bytes]] = {}

    async def capture(self, harness: str, conversation: str, files: Mapping[str, bytes]) -> None:
        self._files[(harness, conversation)] = checked_snapshot(harness, conversation, files)

    async def restore(self, harness: str, conversation: str) -> dict[str, bytes] | None:
        check_key(harness, conversation)
        found = self._files.get((harness, conversation))
        return dict(found) if found is not None else None


class DirectoryConversationStore:
    """Files under ``root/<harness>/<conversation>/<path relative to the home>``.

    A capture writes the snapshot into a fresh sibling directory, then swaps it in with renames: a reader sees the
    old snapshot or the new one, never a mix, and files of the old one that the new one lacks are gone.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    async def capture(self, harness: str, conversation: str, files: Mapping[str, bytes]) -> None:
        snapshot = checked_snapshot(harness, conversation, files)
        await anyio.to_thread.run_sync(self._write, harness, conversation, snapshot)

    async def restore(self, harness: str, conversation: str) -> dict[str, bytes] | None:
        check_key(harness, conversation)
        return await anyio.to_thread.run_sync(self._read, harness, conversation)

    def _write(self, harness: str, conversation: str, snapshot: dict[str, bytes]) -> None:
        base = self.root / harness / conversation
        staging = base.with_name(f".{conversation}.{uuid.uuid4().hex}.new")
        for rel, content in snapshot.items():
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        staging.mkdir(parents=True, exist_ok=True)  # an empty snapshot is a snapshot too
        retired = base.with_name(f".{conversation}.{uuid.uuid4().hex}.old")
        if base.exists():
            base.rename(retired)
        staging.rename(base)
        shutil.rmtree(retired, ignore_errors=True)

    def _read(self, harness: str, conversation: str) -> dict[str, bytes] | None:
        base = self.root / harness / conversation
        if not base.is_dir():
            return None
        return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}
