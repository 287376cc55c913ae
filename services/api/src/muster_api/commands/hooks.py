"""``muster hook claude``: a Claude Code ``PreToolUse`` hook that refuses an edit of a path another agent holds
exclusively, naming the holder and their reason; ``muster hook install claude`` writes it into the project's
``.claude/settings.json``. ``muster hook codex`` (``apply_patch``) and ``muster hook gemini`` (Gemini CLI's
``BeforeTool`` on ``write_file`` and ``replace``) do the same for those CLIs.

The hook acts as the agent the Claude Code session checked in as: ``--as`` or ``MUSTER_AGENT_ID`` (set it in the
settings' ``env``, as for ``muster mcp``); its repo is ``--repo``, ``MUSTER_REPO`` or the repo that agent checked in
with. A claim is advisory: when the service cannot be asked, the hook allows the edit and says so on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
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


def edited_path(event: dict[str, Any], tools: frozenset[str] = EDITING_TOOLS) -> Path | None:
    """The absolute path an editing tool call (one of ``tools``) would write, None for any other call."""
    if event.get("tool_name") not in tools:
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


def _held(client: MusterClient, agent: str | None, repo: str | None, relative: list[str]) -> list[str]:
    """A sentence for each of the paths another agent holds exclusively."""
    if repo is None and agent is not None:
        repo = client.agent(agent).repo
    if repo is None:
        raise MusterClientError("no repo: set MUSTER_REPO or check the agent in with one")
    found = client.check_paths(repo, relative, as_agent=False).paths
    return [
        f"{p.path} is claimed exclusively by agent {p.holder!r} (pattern {p.pattern!r}, since "
        f"{p.since:%Y-%m-%d %H:%M} UTC): {p.reason or 'no reason given'}."
        for p in found
        if p.holder is not None and p.holder != agent and p.since is not None
    ]


def _relative(paths: list[Path], cwd: Path) -> list[str]:
    """The paths inside the git work tree they are in, relative to its top; the others are no claim's business."""
    root = _repo_root(cwd)
    if root is None:
        return []
    top = root.resolve()
    inside = [p.resolve() for p in paths]
    return sorted({p.relative_to(top).as_posix() for p in inside if p.is_relative_to(top) and p != top})


def refusal(args: argparse.Namespace, paths: list[Path], cwd: Path) -> str | None:
    """Why the edit of ``paths`` is refused (None: allowed). A claim is advisory: when the service cannot be asked
    the edit is allowed, with a note on stderr."""
    relative = _relative(paths, cwd)
    if not relative:
        return None
    agent = args.as_agent or os.environ.get("MUSTER_AGENT_ID")
    repo = args.repo or os.environ.get("MUSTER_REPO")
    try:
        with MusterClient(args.url) as client:
            held = _held(client, agent, repo, relative[:256])
    except MusterClientError as exc:
        sys.stderr.write(f"muster hook: claims not checked ({inert(str(exc))}); allowing the edit\n")
        return None
    if not held:
        return None
    holders = " ".join(held)
    return f"{holders} Message the holder on the mesh (agent_send) to ask for it, or work on something else."


def _event() -> dict[str, Any] | None:
    try:
        event = json.loads(sys.stdin.read() or "{}")
    except json.JSONDecodeError:
        sys.stderr.write("muster hook: the hook's input is not JSON; allowing\n")
        return None
    return event if isinstance(event, dict) else None


def _cwd(event: dict[str, Any]) -> Path:
    return Path(str(event.get("cwd") or os.getcwd()))


def claude(args: argparse.Namespace) -> int:
    event = _event()
    path = edited_path(event) if event is not None else None
    if event is None or path is None:
        return 0
    reason = refusal(args, [path], path.parent if path.parent.exists() else _cwd(event))
    if reason is not None:
        deny(reason)
    return 0


PATCH_HEADER = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): (.+)$", re.MULTILINE)


def patch_paths(patch: str) -> list[str]:
    """The files an ``apply_patch`` input touches: added, updated, deleted, and a move's target."""
    return [m.group(1).strip() for m in PATCH_HEADER.finditer(patch)]


def codex(args: argparse.Namespace) -> int:
    """Codex's PreToolUse hook: its ``apply_patch`` names the files it writes (``tool_input.command`` holds the
    patch); a shell command's files cannot be known before it runs, so it is left to the git guard and the run's
    post-turn check."""
    event = _event()
    if event is None or event.get("tool_name") != "apply_patch":
        return 0
    patch = (event.get("tool_input") or {}).get("command")
    if not isinstance(patch, str):
        return 0
    cwd = _cwd(event)
    reason = refusal(args, [cwd / p for p in patch_paths(patch)], cwd)
    if reason is not None:
        deny(reason)
    return 0


# Gemini CLI's tools that write a file, both naming it in ``file_path`` (relative to the project root or absolute);
# its matcher is a regular expression over the tool's name.
GEMINI_EDITING_TOOLS = frozenset({"write_file", "replace"})
GEMINI_MATCHER = "^(write_file|replace)$"
GEMINI_COMMAND = "muster hook gemini"
GEMINI_HOOK_NAME = "muster-claims"


def gemini(args: argparse.Namespace) -> int:
    """Gemini CLI's BeforeTool hook. Its deny is ``{"decision": "deny", "reason": …}`` on stdout with exit 0; the
    model gets "Tool execution blocked: <reason>" as the tool's error and the turn goes on. An allowed edit prints
    nothing, so a note on stderr (the service unreachable) is what Gemini CLI shows the user."""
    event = _event()
    path = edited_path(event, GEMINI_EDITING_TOOLS) if event is not None else None
    if event is None or path is None:
        return 0
    reason = refusal(args, [path], path.parent if path.parent.exists() else _cwd(event))
    if reason is not None:
        sys.stdout.write(json.dumps({"decision": "deny", "reason": reason}) + "\n")
    return 0


def _settings(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def _write_if_changed(path: Path, settings: dict[str, Any], before: str) -> bool:
    if json.dumps(settings, sort_keys=True) == before:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2) + "\n")
    return True


def install_gemini(args: argparse.Namespace) -> int:
    """Merge the hook into ``.gemini/settings.json`` of the project (``--project``, default: the current directory);
    run again, it changes nothing. Gemini CLI adds a hook entry's own ``env`` to the hook's environment, so the
    agent's identity goes there (merged, as into Claude Code's settings ``env``)."""
    path = Path(args.project) / ".gemini" / "settings.json"
    settings = _settings(path)
    before = json.dumps(settings, sort_keys=True)
    entries = settings.setdefault("hooks", {}).setdefault("BeforeTool", [])
    ours = [h for e in entries for h in e.get("hooks", []) if h.get("command") == GEMINI_COMMAND]
    if not ours:
        hook: dict[str, Any] = {"name": GEMINI_HOOK_NAME, "type": "command", "command": GEMINI_COMMAND}
        entries.append({"matcher": GEMINI_MATCHER, "hooks": [hook]})
        ours = [hook]
    identity = _identity(args)
    for hook in ours if identity else []:
        hook.setdefault("env", {}).update(identity)
    changed = _write_if_changed(path, settings, before)
    print(f"{path}: {'now has' if changed else 'already has'} the muster BeforeTool hook")
    return 0


def install_claude(args: argparse.Namespace) -> int:
    """Merge the hook into ``.claude/settings.json`` of the project (``--project``, default: the current directory);
    run again, it changes nothing."""
    settings_path = Path(args.project) / ".claude" / "settings.json"
    settings = _settings(settings_path)
    before = json.dumps(settings, sort_keys=True)
    entries = settings.setdefault("hooks", {}).setdefault("PreToolUse", [])
    present = any(h.get("command") == COMMAND for e in entries for h in e.get("hooks", []))
    if not present:
        entries.append({"matcher": MATCHER, "hooks": [{"type": "command", "command": COMMAND}]})
    # Claude Code puts the settings' env in the environment of the session and of its hooks.
    identity = _identity(args)
    if identity:
        settings.setdefault("env", {}).update(identity)
    _write_if_changed(settings_path, settings, before)
    print(f"{settings_path}: {'already has' if present else 'now has'} the muster PreToolUse hook")
    return 0


def _identity(args: argparse.Namespace) -> dict[str, str]:
    given = {"MUSTER_AGENT_ID": args.as_agent, "MUSTER_REPO": args.repo, "MUSTER_URL": args.url}
    return {k: v for k, v in given.items() if v}


CODEX_COMMAND = "muster hook codex"


def install_codex(args: argparse.Namespace) -> int:
    """Merge the hook into Codex's ``hooks.json`` (in ``--codex-home``, default ``$CODEX_HOME`` or ``~/.codex``).
    Codex has no settings ``env``, so the agent's identity goes on the hook's command line; run again, it replaces
    that command and adds nothing."""
    home = Path(args.codex_home or os.environ.get("CODEX_HOME") or Path.home() / ".codex")
    path = home / "hooks.json"
    config: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    entries = config.setdefault("hooks", {}).setdefault("PreToolUse", [])
    flags = [f"--{k}={v}" for k, v in (("as", args.as_agent), ("repo", args.repo), ("url", args.url)) if v]
    command = shlex.join([*CODEX_COMMAND.split(), *flags])
    ours = [h for e in entries for h in e.get("hooks", []) if str(h.get("command", "")).startswith(CODEX_COMMAND)]
    for hook in ours:
        hook["command"] = command
    if not ours:
        entries.append({"matcher": "apply_patch", "hooks": [{"type": "command", "command": command}]})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    print(f"{path}: {'updated' if ours else 'now has'} the muster PreToolUse hook (Codex asks you to trust it once)")
    return 0


RUNNER_HELP = (
    "default: MUSTER_AGENT_ID",
    "default: MUSTER_REPO, or the agent's checked-in repo",
    "the service (default MUSTER_URL or http://127.0.0.1:8000)",
)


def _identity_flags(p: argparse.ArgumentParser, helps: tuple[str, str, str]) -> None:
    p.add_argument("--as", dest="as_agent", metavar="AGENT_ID", help=helps[0])
    p.add_argument("--repo", help=helps[1])
    p.add_argument("--url", help=helps[2])


def _install_help(where: str) -> tuple[str, str, str]:
    return (f"{where} MUSTER_AGENT_ID", f"{where} MUSTER_REPO", f"{where} MUSTER_URL")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hook = sub.add_parser("hook", help="coding-agent CLI hooks that enforce path claims")
    kinds = hook.add_subparsers(dest="hook_command", required=True)
    p = kinds.add_parser("claude", help="Claude Code PreToolUse hook: deny edits of paths other agents hold")
    _identity_flags(p, RUNNER_HELP)
    p.set_defaults(fn=claude)
    p = kinds.add_parser("codex", help="Codex PreToolUse hook: deny an apply_patch of paths other agents hold")
    _identity_flags(p, RUNNER_HELP)
    p.set_defaults(fn=codex)
    p = kinds.add_parser("gemini", help="Gemini CLI BeforeTool hook: deny a write_file/replace of paths others hold")
    _identity_flags(p, RUNNER_HELP)
    p.set_defaults(fn=gemini)
    install = kinds.add_parser("install", help="write a hook into a CLI's settings")
    targets = install.add_subparsers(dest="target", required=True)
    p = targets.add_parser("claude", help="merge the hook into .claude/settings.json (idempotent)")
    p.add_argument("--project", default=".", help="the project's root (default: the current directory)")
    _identity_flags(p, _install_help("write into the settings' env:"))
    p.set_defaults(fn=install_claude)
    p = targets.add_parser("codex", help="merge the hook into Codex's hooks.json (idempotent)")
    p.add_argument("--codex-home", help="default: CODEX_HOME, or ~/.codex")
    _identity_flags(p, _install_help("put on the hook's command line:"))
    p.set_defaults(fn=install_codex)
    p = targets.add_parser("gemini", help="merge the hook into .gemini/settings.json (idempotent)")
    p.add_argument("--project", default=".", help="the project's root (default: the current directory)")
    _identity_flags(p, _install_help("write into the hook's env:"))
    p.set_defaults(fn=install_gemini)
