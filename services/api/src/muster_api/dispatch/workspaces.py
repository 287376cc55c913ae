"""Workspaces: names relative to ``MUSTER_WORKSPACES_ROOT``, confined to it, created when missing.

Each refusal names its rule: ``absolute`` (a path from the file-system root), ``parent`` (a ``..`` part), ``pattern``
(characters outside ``WORKSPACE_PATTERN``, empty or ``.`` parts), ``symlink_outside_root`` (an existing part is a
symlink whose target leaves the root).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from muster_api.dispatch.errors import WorkspaceRefusedError

WORKSPACE_PATTERN = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*$"
_PATTERN = re.compile(WORKSPACE_PATTERN)


def _refuse(rule: str, message: str) -> WorkspaceRefusedError:
    return WorkspaceRefusedError(f"workspace: {message}", field="workspace", rule=rule)


def check_name(name: str) -> list[str]:
    """The parts of a well-formed name; refuses what no file system state could make acceptable."""
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise _refuse("absolute", "an absolute path is refused: give a name relative to the workspaces root")
    parts = name.split("/")
    if ".." in parts:
        raise _refuse("parent", "'..' is refused: a workspace stays under the workspaces root")
    if not _PATTERN.match(name):
        raise _refuse("pattern", f"a workspace name matches {WORKSPACE_PATTERN}")
    return parts


def _within(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip(os.sep) + os.sep)


def _plain(base: str, parts: list[str]) -> tuple[int, bool]:
    """How many leading parts under ``base`` are directories and no symlinks, and whether the part after them is
    missing. Parts that are all plain directories are their own real path, inside the root: one ``lstat`` a part,
    where resolving the path walks every part of the root too."""
    path = base
    for index, part in enumerate(parts):
        path = os.path.join(path, part)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return index, True
        except OSError:
            return index, False
        if not stat.S_ISDIR(mode):
            return index, False
    return len(parts), False


def resolve_workspace(root: Path, name: str) -> Path:
    """The workspace directory (created when missing), after every confinement rule held. On strings, with the root
    made by the workspace's own ``makedirs``: every run resolves its workspace (the route, then the worker), and
    ``Path`` objects and a second ``mkdir`` cost more than the file system calls."""
    parts = check_name(name)
    base = os.path.realpath(root)
    target = os.path.join(base, *parts)
    plain, missing = _plain(base, parts)
    if plain == len(parts):
        return Path(target)
    # A missing part after plain directories: nothing there to lead outside the root. Otherwise a symlink (or a
    # file) is in the way: where does it lead?
    if not missing and not _within(os.path.realpath(target), base):
        raise _refuse("symlink_outside_root", "a symlink in the path leads outside the workspaces root")
    os.makedirs(target, exist_ok=True)
    if _plain(base, parts)[0] == len(parts):
        return Path(target)
    real = os.path.realpath(target)
    if not _within(real, base):  # a symlink swapped in while the directories were made
        raise _refuse("symlink_outside_root", "a symlink in the path leads outside the workspaces root")
    return Path(real)
