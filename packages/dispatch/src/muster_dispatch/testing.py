"""Conformance suite for ConversationStore implementations (the package's and the service's SQL one).

Call ``check_conversation_store(make_store)`` from a test; ``make_store()`` returns a fresh, empty store.
"""

from __future__ import annotations

from collections.abc import Callable

from muster_dispatch.conversations import ConversationStore
from muster_dispatch.errors import DispatchError


def check_conversation_store(make_store: Callable[[], ConversationStore]) -> None:
    store = make_store()
    assert store.restore("claude", "missing") is None, "an unknown conversation restores as None"

    files = {".claude/projects/-w/abc.jsonl": b'{"a": 1}\n', "x/y.bin": bytes(range(256))}
    store.capture("claude", "abc", files)
    assert store.restore("claude", "abc") == files, "restore returns exactly the captured files"
    assert store.restore("codex", "abc") is None, "conversations are per harness"

    store.capture("claude", "abc", {".claude/projects/-w/abc.jsonl": b"newer\n"})
    restored = store.restore("claude", "abc")
    assert restored is not None and restored[".claude/projects/-w/abc.jsonl"] == b"newer\n", "a capture replaces"

    for bad_id in ("../etc", "a/b", ""):
        try:
            store.capture("claude", bad_id, files)
        except DispatchError as exc:
            if exc.code != "session":
                raise AssertionError(f"expected code 'session', got {exc.code!r}") from exc
        else:
            raise AssertionError(f"conversation id {bad_id!r} must be refused")
    for bad_path in ("/etc/passwd", "../outside"):
        try:
            store.capture("claude", "ok", {bad_path: b"x"})
        except DispatchError as exc:
            if exc.code != "session":
                raise AssertionError(f"expected code 'session', got {exc.code!r}") from exc
        else:
            raise AssertionError(f"file path {bad_path!r} must be refused")
