"""After a turn: the workspace's changed paths (``git status``: modified, added, deleted, untracked, and both sides
of a rename) against the path claims of the workspace's repo. A path another agent holds exclusively becomes a
``warning`` event (code ``claimed_path``) in the run's journal, naming the path, the holder, their pattern and
reason. A dispatched run holds no claims of its own, so every exclusive holder is another agent.

The workspace's repo, as claims name it: ``git config muster.repo`` in the workspace, else the last part of the
``origin`` remote's URL (without ``.git``), else the name of the work tree's top directory. A workspace that is no
git work tree is not checked. The claims are asked through a ``ClaimsLookup`` the service composes from the mesh
(this capability imports no other); a failed check is logged and never changes the run's outcome.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio

from muster_dispatch import AgentEvent

log = logging.getLogger("muster.dispatch.claims")

CHECK_SECONDS = 20.0
MAX_CHECKED_PATHS = 4096


@dataclass(frozen=True, slots=True)
class HeldPath:
    path: str
    holder: str
    pattern: str
    reason: str | None


class ClaimsLookup(Protocol):
    async def __call__(self, repo: str, paths: Sequence[str]) -> list[HeldPath]:
        """The paths among ``paths`` some agent holds exclusively in ``repo``."""
        ...


class Recorder(Protocol):
    def record(self, source: str, scope: dict[str, Any], event: dict[str, Any]) -> object: ...


async def _git(cwd: Path, *args: str) -> str | None:
    done = await anyio.run_process(["git", "-C", str(cwd), *args], check=False)
    return done.stdout.decode(errors="surrogateescape") if done.returncode == 0 else None


def parse_status(out: str) -> list[str]:
    """The paths of ``git status --porcelain=v1 -z``: a rename or copy entry is followed by its source path."""
    fields = out.split("\0")
    paths: list[str] = []
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        paths.append(entry[3:])
        if entry[0] in "RC" or entry[1] in "RC":
            paths.append(fields[i])
            i += 1
    return sorted(set(paths))


async def workspace_repo(root: Path) -> str:
    named = (await _git(root, "config", "--get", "muster.repo") or "").strip()
    if named:
        return named
    origin = (await _git(root, "config", "--get", "remote.origin.url") or "").strip().rstrip("/")
    if origin:
        last = origin.replace(":", "/").rsplit("/", 1)[-1]
        return last.removesuffix(".git") or root.name
    return root.name


def in_work_tree(workspace: Path) -> bool:
    """Whether git could find a repository from here: a ``.git`` (directory, or file of a linked work tree) in the
    workspace or a directory above it, as git's own discovery looks. A few ``stat`` calls, where asking git is a
    process started and waited for after every turn, most of a short run's cost when the workspace is none."""
    if "GIT_DIR" in os.environ:  # git is told where the repository is: only git can say
        return True
    # Strings, not ``Path``: a ``Path`` made and joined for each directory up to the root cost more than the stats.
    directory = os.fspath(workspace)
    while True:
        if os.path.exists(os.path.join(directory, ".git")):
            return True
        parent = os.path.dirname(directory)
        if parent == directory:
            return False
        directory = parent


async def changed_paths(workspace: Path) -> tuple[Path, list[str]] | None:
    """The work tree's top and its changed paths (relative to that top); None outside a git work tree."""
    if not in_work_tree(workspace):
        return None
    top = await _git(workspace, "rev-parse", "--show-toplevel")
    if top is None:
        return None
    root = Path(top.strip())
    status = await _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    return (root, parse_status(status)) if status is not None else None


def warning(held: HeldPath) -> AgentEvent:
    reason = held.reason or "no reason given"
    text = (
        f"{held.path} is changed in the workspace but is claimed exclusively by agent {held.holder!r} "
        f"(pattern {held.pattern!r}): {reason}"
    )
    return AgentEvent("warning", text=text, code="claimed_path", data={"path": held.path, "holder": held.holder})


async def warn_of_claims(lookup: ClaimsLookup, workspace: Path, journal: Recorder, scope: Mapping[str, object]) -> int:
    """Record a warning for each changed path another agent holds; how many were recorded."""
    if not in_work_tree(workspace):  # no repository, nothing to check: no deadline armed for it (every run pays it)
        return 0
    try:
        with anyio.fail_after(CHECK_SECONDS):
            found = await changed_paths(workspace)
            if found is None or not found[1]:
                return 0
            root, paths = found
            held = await lookup(await workspace_repo(root), paths[:MAX_CHECKED_PATHS])
    except Exception:  # advisory: a check that could not run never changes the run
        log.exception("the claims of workspace %s were not checked", workspace)
        return 0
    for each in held:
        journal.record("claims", dict(scope), warning(each).to_dict())
    return len(held)


__all__ = [
    "ClaimsLookup",
    "HeldPath",
    "changed_paths",
    "in_work_tree",
    "parse_status",
    "warn_of_claims",
    "workspace_repo",
]
