"""Conformance suites for the storage the service implements (``ConversationStore``, ``JournalSink``) and for every
``SandboxProvider``.

The mesh suite's shape, without a test framework: each check is ``async def check(make)``, registered by name in
``CONVERSATION_CHECKS`` or ``JOURNAL_CHECKS``; a test runner parametrises over the names.

- Conversation stores: ``make()`` is an async context manager yielding a new, empty store.
- Journals: ``make()`` is an async context manager yielding ``open(name)``, an async function returning the journal
  called ``name`` in one shared storage (a file per name, rows per run): opening a name again after ``flush``
  reads back what was recorded.
- Sandbox providers: ``make(root, variables)`` returns a new provider keeping its homes under ``root``, with those
  provider variables; each check gets it and a scratch directory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from muster_dispatch.conversations import ConversationStore
from muster_dispatch.errors import DispatchError
from muster_dispatch.harness import Command
from muster_dispatch.journal import JournalSink
from muster_dispatch.local_process import LocalProcess
from muster_dispatch.processes import descendants
from muster_dispatch.replay import recorded_turns
from muster_dispatch.sandbox import SandboxProvider

StoreFactory = Callable[[], AbstractAsyncContextManager[ConversationStore]]
JournalOpener = Callable[[str], Awaitable[JournalSink]]
JournalFactory = Callable[[], AbstractAsyncContextManager[JournalOpener]]

CONVERSATION_CHECKS: dict[str, Callable[[StoreFactory], Coroutine[Any, Any, None]]] = {}
ProviderFactory = Callable[[Path, dict[str, str]], SandboxProvider]
PROVIDER_CHECKS: dict[str, Callable[[ProviderFactory, Path], Coroutine[Any, Any, None]]] = {}
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


# -- sandbox providers --------------------------------------------------------------------------------------------


def provider_check(
    fn: Callable[[ProviderFactory, Path], Coroutine[Any, Any, None]],
) -> Callable[[ProviderFactory, Path], Coroutine[Any, Any, None]]:
    PROVIDER_CHECKS[fn.__name__] = fn
    return fn


async def _run(provider: SandboxProvider, workspace: Path, env: dict[str, str], *argv: str) -> tuple[int, list[str]]:
    sandbox = provider.sandbox(workspace)
    process = await provider.start(Command(argv[0], argv[1:]), sandbox, env)
    lines: list[str] = []
    process.stdout.consume(lambda raw: lines.append(raw.decode().rstrip("\n")))
    process.stderr.consume(lambda raw: None)
    try:
        await process.stdout.closed
        return await process.wait(), lines
    finally:
        process.close()


def _workspace(scratch: Path, name: str = "ws") -> Path:
    path = scratch / name
    path.mkdir(parents=True, exist_ok=True)
    return path


@provider_check
async def the_environment_is_exactly_the_layered_one(make: ProviderFactory, scratch: Path) -> None:
    provider = make(scratch / "homes", {"PROVIDER_ONLY": "p", "SHARED": "provider"})
    sandbox = provider.sandbox(_workspace(scratch))
    env = provider.environment(
        sandbox, harness={"SHARED": "harness", "AT_HOME": "~/x"}, agent={"AGENT_ONLY": "a"}, dotenv={"SHARED": "dot"}
    )
    assert env["SHARED"] == "dot" and env["PROVIDER_ONLY"] == "p" and env["AGENT_ONLY"] == "a"
    assert env["HOME"] == str(sandbox.agent_home) and env["AT_HOME"] == f"{sandbox.agent_home}/x"
    code, lines = await _run(provider, sandbox.workspace, env, "/usr/bin/env")
    assert code == 0
    seen = dict(line.split("=", 1) for line in lines if "=" in line)
    seen.pop("MUSTER_RUN_ID", None)
    if seen.get("PWD") == str(sandbox.agent_workspace):  # a sandbox that changes directory for the process says so
        del seen["PWD"]
    assert seen == env, f"the process saw {sorted(set(seen) ^ set(env))} beyond the layered environment"


@provider_check
async def a_name_of_both_provider_and_agent_is_a_configuration_error(make: ProviderFactory, scratch: Path) -> None:
    provider = make(scratch / "homes", {"SHARED": "provider"})
    sandbox = provider.sandbox(_workspace(scratch))
    error = _error_of(lambda: provider.environment(sandbox, agent={"SHARED": "agent"}))
    assert error is not None, "a variable of both the provider and the agent must be refused"
    assert error.code == "configuration" and error.details["variables"] == ["SHARED"]


@provider_check
async def each_workspace_has_its_private_home(make: ProviderFactory, scratch: Path) -> None:
    provider = make(scratch / "homes", {})
    first, second = provider.sandbox(_workspace(scratch, "a")), provider.sandbox(_workspace(scratch, "b"))
    assert first.home != second.home
    env = provider.environment(first)
    code, _ = await _run(provider, first.workspace, env, "/bin/sh", "-c", 'echo kept > "$HOME/mark"')
    assert code == 0 and (first.home / "mark").read_text() == "kept\n"
    again = provider.sandbox(first.workspace)
    assert again.home == first.home and not (second.home / "mark").exists()


@provider_check
async def files_go_in_and_come_out(make: ProviderFactory, scratch: Path) -> None:
    provider = make(scratch / "homes", {})
    sandbox = provider.sandbox(_workspace(scratch))
    await provider.upload(sandbox, {"in/note.txt": b"hello"})
    env = provider.environment(sandbox)
    script = 'cat "$HOME/in/note.txt" > "$HOME/out.txt"; echo done > made-here'
    code, _ = await _run(provider, sandbox.workspace, env, "/bin/sh", "-c", script)
    assert code == 0
    assert await provider.download(sandbox, ["out.txt", "missing"]) == {"out.txt": b"hello"}
    assert (sandbox.workspace / "made-here").read_text() == "done\n"
    try:
        await provider.upload(sandbox, {"../escape": b"x"})
        code_seen = None
    except DispatchError as exc:
        code_seen = exc.code
    assert code_seen == "configuration", "a file leaving the home must be refused"


@provider_check
async def a_kill_leaves_no_process(make: ProviderFactory, scratch: Path) -> None:
    """Children in their own session too (the CLIs run shell tools with setsid)."""
    provider = make(scratch / "homes", {})
    sandbox = provider.sandbox(_workspace(scratch))
    env = provider.environment(sandbox)
    script = "sleep 300 & setsid sleep 301 & echo started; wait"
    process: LocalProcess = await provider.start(Command("/bin/sh", ("-c", script)), sandbox, env)
    started: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def first_line(raw: bytes) -> None:
        if not started.done():
            started.set_result(None)

    process.stdout.consume(first_line)
    process.stderr.consume(lambda raw: None)
    try:
        await asyncio.wait_for(started, 30)
        tree = descendants(process.pid, process.marker)
        assert len(tree) >= 2, "the sleeps must be running before the kill"
        await process.kill(grace=0.5)
        assert process.returncode is not None
        left = await _survivors(tree)
        assert not left, f"processes left after the kill: {left}"
        assert not descendants(process.pid, process.marker)
    finally:
        process.close()
    await provider.release()


async def _survivors(tree: set[int], patience: float = 5.0) -> list[int]:
    """The processes of ``tree`` still alive once a SIGKILL had time to land (delivery is asynchronous)."""
    deadline = asyncio.get_running_loop().time() + patience
    while True:
        left = [pid for pid in tree if not _zombie(pid)]
        if not left or asyncio.get_running_loop().time() > deadline:
            return left
        await asyncio.sleep(0.02)


def _error_of(call: Callable[[], object]) -> DispatchError | None:
    try:
        call()
    except DispatchError as exc:
        return exc
    return None


def _zombie(pid: int) -> bool:
    """Gone, or dead and waiting to be reaped."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return data[data.rfind(b")") + 2 : data.rfind(b")") + 3] == b"Z"
