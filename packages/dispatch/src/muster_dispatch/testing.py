"""Conformance suites for the storage the service implements: ``ConversationStore`` and ``JournalSink``.

The mesh suite's shape, without a test framework: each check is ``async def check(make)``, registered by name in
``CONVERSATION_CHECKS`` or ``JOURNAL_CHECKS``; a test runner parametrises over the names.

- Conversation stores: ``make()`` is an async context manager yielding a new, empty store.
- Journals: ``make()`` is an async context manager yielding ``open(name)``, an async function returning the journal
  called ``name`` in one shared storage (a file per name, rows per run): opening a name again after ``flush``
  reads back what was recorded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any

from muster_dispatch.conversations import ConversationStore
from muster_dispatch.errors import DispatchError
from muster_dispatch.journal import JournalSink
from muster_dispatch.replay import recorded_turns

StoreFactory = Callable[[], AbstractAsyncContextManager[ConversationStore]]
JournalOpener = Callable[[str], Awaitable[JournalSink]]
JournalFactory = Callable[[], AbstractAsyncContextManager[JournalOpener]]

CONVERSATION_CHECKS: dict[str, Callable[[StoreFactory], Coroutine[Any, Any, None]]] = {}
JOURNAL_CHECKS: dict[str, Callable[[JournalFactory], Coroutine[Any, Any, None]]] = {}

SESSION = ".claude/projects/-w/abc.jsonl"
FILES = {SESSION: b'{"a": 1}\n', "x/y.bin": bytes(range(256))}


def conversation_check(
    fn: Callable[[StoreFactory], Coroutine[Any, Any, None]],
) -> Callable[[StoreFactory], Coroutine[Any, Any, None]]:
    CONVERSATION_CHECKS[fn.__name__] = fn
    return fn


def journal_check(
    fn: Callable[[JournalFactory], Coroutine[Any, Any, None]],
) -> Callable[[JournalFactory], Coroutine[Any, Any, None]]:
    JOURNAL_CHECKS[fn.__name__] = fn
    return fn


async def _refused(call: Awaitable[object], what: str) -> None:
    try:
        await call
    except DispatchError as exc:
        code = exc.code
    else:
        raise AssertionError(f"{what} must be refused")
    if code != "session":
        raise AssertionError(f"{what}: expected code 'session', got {code!r}")


# -- conversation stores ------------------------------------------------------------------------------------------


@conversation_check
async def an_unknown_conversation_restores_as_none(make: StoreFactory) -> None:
    async with make() as store:
        assert await store.restore("claude", "missing") is None


@conversation_check
async def restore_returns_exactly_the_captured_files(make: StoreFactory) -> None:
    async with make() as store:
        await store.capture("claude", "abc", FILES)
        assert await store.restore("claude", "abc") == FILES


@conversation_check
async def conversations_are_per_harness(make: StoreFactory) -> None:
    async with make() as store:
        await store.capture("claude", "abc", FILES)
        assert await store.restore("codex", "abc") is None
        await store.capture("codex", "abc", {"r.jsonl": b"codex"})
        assert await store.restore("claude", "abc") == FILES


@conversation_check
async def a_capture_replaces(make: StoreFactory) -> None:
    """The whole snapshot: a file of the earlier capture that the later one lacks is gone."""
    async with make() as store:
        await store.capture("claude", "abc", FILES)
        await store.capture("claude", "abc", {SESSION: b"newer\n"})
        assert await store.restore("claude", "abc") == {SESSION: b"newer\n"}


@conversation_check
async def an_empty_capture_is_a_snapshot(make: StoreFactory) -> None:
    async with make() as store:
        await store.capture("claude", "abc", FILES)
        await store.capture("claude", "abc", {})
        assert await store.restore("claude", "abc") == {}


@conversation_check
async def unsafe_conversation_ids_are_refused(make: StoreFactory) -> None:
    async with make() as store:
        for bad_id in ("../etc", "a/b", "", ".hidden", "x" * 201):
            await _refused(store.capture("claude", bad_id, FILES), f"conversation id {bad_id!r}")
            await _refused(store.restore("claude", bad_id), f"restoring conversation id {bad_id!r}")


@conversation_check
async def paths_leaving_the_home_are_refused_and_store_nothing(make: StoreFactory) -> None:
    async with make() as store:
        for bad_path in ("/etc/passwd", "../outside", "a/../../b"):
            await _refused(store.capture("claude", "ok", {"fine.txt": b"x", bad_path: b"x"}), f"path {bad_path!r}")
        assert await store.restore("claude", "ok") is None


# -- journals -----------------------------------------------------------------------------------------------------

SCOPE = {"dispatch": "d1", "agent": "fast"}


@journal_check
async def sequences_start_at_one_and_follow_each_other(make: JournalFactory) -> None:
    async with make() as open_journal:
        journal = await open_journal("run-1")
        seqs = [journal.record("harness", SCOPE, {"type": "text", "text": str(i)}).seq for i in range(5)]
        assert seqs == [1, 2, 3, 4, 5]


@journal_check
async def observations_keep_order_source_scope_and_event(make: JournalFactory) -> None:
    async with make() as open_journal:
        journal = await open_journal("run-1")
        events: list[dict[str, Any]] = [
            {"type": "turn.input", "prompt": "p"},
            {"type": "text", "text": "é ✓", "data": {"n": [1, None]}},
        ]
        journal.record("harness", SCOPE, events[0])
        journal.record("agent", SCOPE, events[1])
        seen = journal.observations()
        assert [o.event for o in seen] == events
        assert [o.source for o in seen] == ["harness", "agent"]
        assert all(o.scope == SCOPE and o.at for o in seen)


@journal_check
async def flushed_observations_survive_reopening(make: JournalFactory) -> None:
    async with make() as open_journal:
        journal = await open_journal("run-1")
        for i in range(3):
            journal.record("harness", SCOPE, {"type": "text", "text": str(i)})
        await journal.flush()
        again = await open_journal("run-1")
        assert [o.to_dict() for o in again.observations()] == [o.to_dict() for o in journal.observations()]
        assert again.record("harness", SCOPE, {"type": "text", "text": "next"}).seq == 4


@journal_check
async def journals_do_not_mix(make: JournalFactory) -> None:
    async with make() as open_journal:
        first, second = await open_journal("run-1"), await open_journal("run-2")
        first.record("harness", SCOPE, {"type": "text", "text": "one"})
        assert second.record("harness", SCOPE, {"type": "text", "text": "two"}).seq == 1
        await first.flush()
        await second.flush()
        assert [o.event["text"] for o in (await open_journal("run-2")).observations()] == ["two"]


@journal_check
async def a_flush_with_nothing_new_is_harmless(make: JournalFactory) -> None:
    async with make() as open_journal:
        journal = await open_journal("run-1")
        await journal.flush()
        journal.record("harness", SCOPE, {"type": "text", "text": "x"})
        await journal.flush()
        await journal.flush()
        assert len((await open_journal("run-1")).observations()) == 1


@journal_check
async def a_replay_reads_the_recorded_turn_back(make: JournalFactory) -> None:
    async with make() as open_journal:
        journal = await open_journal("run-1")
        journal.record("harness", SCOPE, {"type": "turn.input", "agent": "fast", "prompt": "hi", "live_input": False})
        journal.record("harness", SCOPE, {"type": "text", "text": "hello"})
        result = {"status": "completed", "text": "hello", "usage": {}, "attempts": []}
        journal.record("harness", SCOPE, {"type": "turn.result", "result": result})
        await journal.flush()
        turns, source = recorded_turns(await open_journal("run-1"))
        assert source == "harness" and len(turns) == 1
        assert turns[0].prompt == "hi" and [e.text for e in turns[0].events] == ["hello"]
        assert turns[0].result is not None and turns[0].result.text == "hello"
