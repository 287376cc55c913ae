"""Move a harness's native session files between a private home and a ConversationStore."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from muster_dispatch.errors import DispatchError
from muster_dispatch.provider import Sandbox
from muster_dispatch.usage import Usage

if TYPE_CHECKING:
    from muster_dispatch.agents import CliAgent


def session_files(agent: CliAgent, sandbox: Sandbox, conversation: str) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for pattern in agent.harness.session_globs(conversation):
        for path in sorted(sandbox.home.glob(pattern)):
            if path.is_file():
                found[str(path.relative_to(sandbox.home))] = path.read_bytes()
    return found


def conversation_usage(agent: CliAgent, sandbox: Sandbox, conversation: str) -> Usage | None:
    """The usage recorded so far in the conversation's session files (None when unknown)."""
    reader = agent.harness.transcript_usage
    if reader is None:
        return None
    files = session_files(agent, sandbox, conversation)
    if not files:
        return None
    text = "\n".join(content.decode("utf-8", "replace") for content in files.values())
    return reader(text)


def prompt_recorded(agent: CliAgent, sandbox: Sandbox, conversation: str, prompt: str) -> bool | None:
    """Whether the session already holds ``prompt`` (None: nothing to resume yet, no session file or only empty
    ones: Codex creates its rollout file before it writes the first line, and refuses to resume an empty one)."""
    files = session_files(agent, sandbox, conversation)
    log = agent.harness.session_log
    if log is not None:
        files = {rel: content for rel, content in files.items() if rel == log(conversation)}
    if not any(files.values()):
        return None
    needles = {json.dumps(prompt)[1:-1].encode(), json.dumps(prompt, ensure_ascii=False)[1:-1].encode()}
    return any(needle in content for content in files.values() for needle in needles)


def fork_conversation(agent: CliAgent, sandbox: Sandbox, conversation: str) -> str:
    """A native fork through the harness's ``fork`` hook: writes the child's session files, returns the child id."""
    fork = agent.harness.fork
    if fork is None:
        raise DispatchError("session", f"{agent.harness.name} forks through its command line, not a hook")
    files = session_files(agent, sandbox, conversation)
    if not files:
        raise DispatchError(
            "session", f"conversation {conversation} not found: cannot fork it", {"field": "conversation"}
        )
    child, written = fork(conversation, files)
    for rel, content in written.items():
        target = sandbox.home / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return child


async def capture_conversation(agent: CliAgent, sandbox: Sandbox, conversation: str) -> bool:
    """Store the conversation's session files; False when the CLI wrote none."""
    if agent.storage is None:
        return False
    files = session_files(agent, sandbox, conversation)
    if not files:
        return False
    await agent.storage.capture(agent.harness.name, conversation, files)
    return True


async def restore_conversation(agent: CliAgent, sandbox: Sandbox, conversation: str) -> bool:
    """Cold resume: write the stored session into this home unless the home already has it (warm)."""
    if agent.storage is None or session_files(agent, sandbox, conversation):
        return False
    files = await agent.storage.restore(agent.harness.name, conversation)
    if not files:
        return False
    for rel, content in files.items():
        target = sandbox.home / agent.harness.restore_path(conversation, rel, sandbox.workspace)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return True
