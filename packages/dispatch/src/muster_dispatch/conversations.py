"""Conversation stores: keep a turn's native session files so a conversation can resume in a NEW private home.

A store holds files by (harness, conversation id) as ``{path relative to the home: bytes}``; the runner finds the
files with the harness's ``session_globs`` after each turn and writes them back (``restore_path``) before a cold
resume.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from muster_dispatch.errors import DispatchError

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


class ConversationStore(Protocol):
    def capture(self, harness: str, conversation: str, files: Mapping[str, bytes]) -> None: ...

    def restore(self, harness: str, conversation: str) -> dict[str, bytes] | None: ...


def _check(harness: str, conversation: str) -> None:
    if not _SAFE.match(harness) or not _SAFE.match(conversation):
        raise DispatchError("session", f"invalid conversation id {conversation!r}", {"field": "conversation"})


def _relative(path: str) -> Path:
    rel = Path(path)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise DispatchError("session", f"session file path must stay under the home: {path!r}")
    return rel


class MemoryConversationStore:
    def __init__(self) -> None:
        self._files: dict[tuple[str, str], dict[str, bytes]] = {}

    def capture(self, harness: str, conversation: str, files: Mapping[str, bytes]) -> None:
        _check(harness, conversation)
        self._files[(harness, conversation)] = {str(_relative(k)): v for k, v in files.items()}

    def restore(self, harness: str, conversation: str) -> dict[str, bytes] | None:
        _check(harness, conversation)
        found = self._files.get((harness, conversation))
        return dict(found) if found is not None else None


class DirectoryConversationStore:
    """Files under ``root/<harness>/<conversation>/<path relative to the home>``."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def capture(self, harness: str, conversation: str, files: Mapping[str, bytes]) -> None:
        _check(harness, conversation)
        base = self.root / harness / conversation
        for path, content in files.items():
            target = base / _relative(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".tmp")
            tmp.write_bytes(content)
            tmp.replace(target)  # a reader never sees half a session file

    def restore(self, harness: str, conversation: str) -> dict[str, bytes] | None:
        _check(harness, conversation)
        base = self.root / harness / conversation
        if not base.is_dir():
            return None
        return {
            str(p.relative_to(base)): p.read_bytes()
            for p in sorted(base.rglob("*"))
            if p.is_file() and not p.name.endswith(".tmp")
        }
