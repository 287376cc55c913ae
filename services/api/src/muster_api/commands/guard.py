"""``muster guard``: a git ``pre-commit`` hook refusing a commit that touches a path another agent holds exclusively
(staged paths, both sides of a rename), naming the holder. ``MUSTER_GUARD=warn`` only warns. ``muster guard
install`` chains an existing pre-commit hook (run first, its refusal kept) rather than replacing it.

The guard acts as ``--as`` or ``MUSTER_AGENT_ID`` (that agent's own claims never stop it), in the repo ``--repo``,
``MUSTER_REPO`` or the one that agent checked in with. A claim is advisory: if the service cannot be asked, the
commit goes ahead with a note on stderr.
"""

from __future__ import annotations

import argparse
import os
import stat
import subprocess
import sys
from pathlib import Path

from muster_api.commands.console.text import inert
from muster_client import MusterClient, MusterClientError

CHAINED = "pre-commit.before-muster"
MARK = "# muster guard"


def staged_paths(cwd: Path) -> list[str]:
    """Every path the staged commit touches: added, changed, deleted, and both sides of a rename or copy."""
    out = subprocess.run(
        ["git", "diff", "--cached", "--name-status", "-M", "-z"], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout
    fields = [f for f in out.split("\0") if f]
    paths: list[str] = []
    i = 0
    while i < len(fields):
        status = fields[i]
        width = 2 if status[:1] in "RC" else 1
        paths.extend(fields[i + 1 : i + 1 + width])
        i += 1 + width
    return sorted(set(paths))


def check(args: argparse.Namespace) -> int:
    warn_only = os.environ.get("MUSTER_GUARD", "").lower() == "warn"
    agent = args.as_agent or os.environ.get("MUSTER_AGENT_ID")
    repo = args.repo or os.environ.get("MUSTER_REPO")
    paths = staged_paths(Path.cwd())
    if not paths:
        return 0
    try:
        with MusterClient(args.url) as client:
            if repo is None and agent is not None:
                repo = client.agent(agent).repo
            if repo is None:
                raise MusterClientError("no repo: set MUSTER_REPO or check the agent in with one")
            found = client.check_paths(repo, paths[:256], as_agent=False).paths
    except MusterClientError as exc:
        sys.stderr.write(f"muster guard: claims not checked ({inert(str(exc))}); commit allowed\n")
        return 0
    held = [p for p in found if p.holder is not None and p.holder != agent]
    for p in held:
        sys.stderr.write(
            f"muster guard: {inert(p.path)} is claimed exclusively by {inert(p.holder or '')} "
            f"({inert(p.pattern or '')}): {inert(p.reason or 'no reason given')}\n"
        )
    if held and not warn_only:
        sys.stderr.write("muster guard: commit refused (MUSTER_GUARD=warn only warns)\n")
        return 1
    return 0


def _hooks_dir(cwd: Path) -> Path:
    out = subprocess.run(
        ["git", "rev-parse", "--git-path", "hooks"], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()
    return (cwd / out).resolve()


def install(args: argparse.Namespace) -> int:
    hooks = _hooks_dir(Path.cwd())
    hooks.mkdir(parents=True, exist_ok=True)
    hook = hooks / "pre-commit"
    if hook.exists() and MARK in hook.read_text(errors="replace"):
        print(f"{hook}: the muster guard is installed already")
        return 0
    if hook.exists():
        hook.rename(hooks / CHAINED)
    hook.write_text(
        "#!/bin/sh\n"
        f"{MARK}: refuses a commit touching another agent's exclusive claim (MUSTER_GUARD=warn only warns)\n"
        f'chained="$(dirname "$0")/{CHAINED}"\n'
        'if [ -x "$chained" ]; then "$chained" "$@" || exit $?; fi\n'
        "exec muster guard check\n"
    )
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    print(
        f"{hook}: the muster guard is installed"
        + (f" (the previous hook runs first: {CHAINED})" if (hooks / CHAINED).exists() else "")
    )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    guard = sub.add_parser("guard", help="a git pre-commit hook that enforces path claims")
    kinds = guard.add_subparsers(dest="guard_command", required=True)
    kinds.add_parser("install", help="install the pre-commit hook (an existing one is chained)").set_defaults(
        fn=install
    )
    p = kinds.add_parser("check", help="check the staged paths (what the hook runs)")
    p.add_argument("--as", dest="as_agent", metavar="AGENT_ID", help="default: MUSTER_AGENT_ID")
    p.add_argument("--repo", help="default: MUSTER_REPO, or the agent's checked-in repo")
    p.add_argument("--url", help="the service (default MUSTER_URL or http://127.0.0.1:8000)")
    p.set_defaults(fn=check)
