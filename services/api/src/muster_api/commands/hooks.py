"""``muster hook claude``: a Claude Code ``PreToolUse`` hook that refuses an edit of a path another agent holds
exclusively, naming the holder and their reason; ``muster hook install claude`` writes it into the project's
``.claude/settings.json``.

The hook acts as the agent the Claude Code session checked in as: ``--as`` or ``MUSTER_AGENT_ID`` (set it in the
settings' ``env``, as for ``muster mcp``); its repo is ``--repo``, ``MUSTER_REPO`` or the repo that agent checked in
with. A claim is advisory: when the service cannot be asked, the hook allows the edit and says so on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from muster_api.commands.console.text import inert
from muster_client import MusterClient, MusterClientError

EDITING_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})
MATCHER = "Edit|Write|MultiEdit|NotebookEdit"
COMMAND = "muster hook claude"


def _repo_root(start: Path) -> Path | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(start), "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 else None


def edited_path(event: dict[str, Any]) -> Path | None:
    """The absolute path an editing tool call would write, None for any other call."""
    if event.get("tool_name") not in EDITING_TOOLS:
        return None
    given = event.get("tool_input") or {}
    raw = given.get("file_path") or given.get("notebook_path")
    if not isinstance(raw, str) or not raw:
        return None
    path = Path(raw)
    return path if path.is_absolute() else Path(str(event.get("cwd") or os.getcwd())) / path


def deny(reason: str) -> None:
    answer = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }
    sys.stdout.write(json.dumps(answer) + "\n")


def _holder_of(client: MusterClient, agent: str | None, repo: str | None, relative: str) -> tuple[str, str] | None:
    if repo is None and agent is not None:
        repo = client.agent(agent).repo
    if repo is None:
        raise MusterClientError("no repo: set MUSTER_REPO or check the agent in with one")
    (found,) = client.check_paths(repo, [relative], as_agent=False).paths
    if found.holder is None or found.holder == agent:
        return None
    return found.holder, (
        f"{relative} is claimed exclusively by agent {found.holder!r} (pattern {found.pattern!r}, since "
        f"{found.since:%Y-%m-%d %H:%M} UTC): {found.reason or 'no reason given'}. Message {found.holder} on the mesh "
        "(agent_send) to ask for it, or work on something else."
    )


def claude(args: argparse.Namespace) -> int:
    try:
        event = json.loads(sys.stdin.read() or "{}")
    except json.JSONDecodeError:
        sys.stderr.write("muster hook: the hook's input is not JSON; allowing\n")
        return 0
    path = edited_path(event) if isinstance(event, dict) else None
    if path is None:
        return 0
    root = _repo_root(path.parent if path.parent.exists() else Path(str(event.get("cwd") or os.getcwd())))
    if root is None or not path.resolve().is_relative_to(root.resolve()):
        return 0
    relative = path.resolve().relative_to(root.resolve()).as_posix()
    agent = args.as_agent or os.environ.get("MUSTER_AGENT_ID")
    repo = args.repo or os.environ.get("MUSTER_REPO")
    try:
        with MusterClient(args.url) as client:
            held = _holder_of(client, agent, repo, relative)
    except MusterClientError as exc:
        sys.stderr.write(f"muster hook: claims not checked ({inert(str(exc))}); allowing the edit\n")
        return 0
    if held is not None:
        deny(held[1])
    return 0


def install_claude(args: argparse.Namespace) -> int:
    """Merge the hook into ``.claude/settings.json`` of the project (``--project``, default: the current directory);
    run again, it changes nothing."""
    settings_path = Path(args.project) / ".claude" / "settings.json"
    settings: dict[str, Any] = json.loads(settings_path.read_text()) if settings_path.exists() else {}
    before = json.dumps(settings, sort_keys=True)
    entries = settings.setdefault("hooks", {}).setdefault("PreToolUse", [])
    present = any(h.get("command") == COMMAND for e in entries for h in e.get("hooks", []))
    if not present:
        entries.append({"matcher": MATCHER, "hooks": [{"type": "command", "command": COMMAND}]})
    # Claude Code puts the settings' env in the environment of the session and of its hooks.
    identity = _identity(args)
    if identity:
        settings.setdefault("env", {}).update(identity)
    if json.dumps(settings, sort_keys=True) != before:
        settings_path.parent.mkdir(parents=True, exist_ok=True)
        settings_path.write_text(json.dumps(settings, indent=2) + "\n")
    print(f"{settings_path}: {'already has' if present else 'now has'} the muster PreToolUse hook")
    return 0


def _identity(args: argparse.Namespace) -> dict[str, str]:
    given = {"MUSTER_AGENT_ID": args.as_agent, "MUSTER_REPO": args.repo, "MUSTER_URL": args.url}
    return {k: v for k, v in given.items() if v}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hook = sub.add_parser("hook", help="coding-agent CLI hooks that enforce path claims")
    kinds = hook.add_subparsers(dest="hook_command", required=True)
    p = kinds.add_parser("claude", help="Claude Code PreToolUse hook: deny edits of paths other agents hold")
    p.add_argument("--as", dest="as_agent", metavar="AGENT_ID", help="default: MUSTER_AGENT_ID")
    p.add_argument("--repo", help="default: MUSTER_REPO, or the agent's checked-in repo")
    p.add_argument("--url", help="the service (default MUSTER_URL or http://127.0.0.1:8000)")
    p.set_defaults(fn=claude)
    install = kinds.add_parser("install", help="write a hook into a CLI's project settings")
    targets = install.add_subparsers(dest="target", required=True)
    p = targets.add_parser("claude", help="merge the hook into .claude/settings.json (idempotent)")
    p.add_argument("--project", default=".", help="the project's root (default: the current directory)")
    p.add_argument("--as", dest="as_agent", metavar="AGENT_ID", help="write MUSTER_AGENT_ID into the settings' env")
    p.add_argument("--repo", help="write MUSTER_REPO into the settings' env")
    p.add_argument("--url", help="write MUSTER_URL into the settings' env")
    p.set_defaults(fn=install_claude)
