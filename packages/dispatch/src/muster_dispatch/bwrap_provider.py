"""``BwrapProvider``: every process of a run confined by bubblewrap.

New user, pid, ipc, uts and (unless egress is ``"open"``) net namespaces; the host's system paths (``/usr``,
``/etc``) read-only, the workspace and the private home read-write at their own paths, a private ``/tmp``, a new
``/proc`` and ``/dev``, ``--die-with-parent`` (the worker's exit ends the namespace), ``--new-session`` (no terminal
injection), every capability dropped. The environment is exactly the layered one: bubblewrap passes its own, which
the runner built. Nothing else of the host is visible: its ``$HOME``, ``/root``, other workspaces and homes,
Muster's database and config. The CLI's install directory is bound read-only.

The pid namespace makes the kill whole: its first process dies with bubblewrap, and the kernel kills every other
process of the namespace with it.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from muster_dispatch.errors import DispatchError
from muster_dispatch.harness import Command
from muster_dispatch.provider import LocalProvider, Sandbox

Network = Literal["none", "open"]
_SYSTEM = ("/usr", "/etc")
_MERGED = ("bin", "lib", "lib64", "sbin")  # symlinks into /usr on a merged-/usr system


class BwrapProvider(LocalProvider):
    kind = "bwrap"

    def __init__(
        self,
        root: Path | str,
        *,
        variables: Mapping[str, str] | None = None,
        network: Network = "none",
        read_only: Sequence[Path | str] = (),
        executable: str = "bwrap",
        host_home: Path | str | None = None,
    ) -> None:
        super().__init__(root, variables=variables, host_home=host_home)
        self.network = network
        self.read_only = tuple(Path(p) for p in read_only)
        self.executable = executable
        self._bwrap: str | None = None

    def sandbox(self, workspace: Path) -> Sandbox:
        self._bwrap = self._bwrap or _find(self.executable)
        return super().sandbox(workspace)

    def argv(self, command: Command, sandbox: Sandbox) -> list[str]:
        bwrap = self._bwrap or _find(self.executable)
        args = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        if self.network != "open":
            args.append("--unshare-net")
        args += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        for path in _SYSTEM:
            args += ["--ro-bind", path, path]
        for name in _MERGED:
            target = Path("/") / name
            if target.is_symlink():
                args += ["--symlink", str(target.readlink()), str(target)]
            elif target.is_dir():
                args += ["--ro-bind", str(target), str(target)]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]  # noqa: S108 (a tmpfs of the namespace's own)
        install = _install_root(command.program)
        for bound in (*self.read_only, *([install] if install is not None else [])):
            if bound.exists():
                args += ["--ro-bind", str(bound), str(bound)]
        args += ["--bind", str(sandbox.home), str(sandbox.home)]
        args += ["--bind", str(sandbox.workspace), str(sandbox.workspace)]
        args += ["--chdir", str(sandbox.workspace), "--", command.program, *command.args]
        return args


def _find(executable: str) -> str:
    found = shutil.which(executable)
    if found is None:
        raise DispatchError(
            "configuration",
            f"sandbox bwrap cannot start: {executable} not found; install bubblewrap (apt-get install bubblewrap)"
            ' or choose sandbox = "local"',
            {"field": "sandbox"},
        )
    return found


def _install_root(program: str) -> Path | None:
    """The directory a CLI is installed in: above ``node_modules`` for an npm install, else the program's own."""
    path = Path(program)
    if not path.is_absolute():
        found = shutil.which(program)
        if found is None:
            return None
        path = Path(found)
    for candidate in (path, path.resolve()):
        for parent in candidate.parents:
            if parent.name == "node_modules":
                return parent.parent
    if str(path).startswith(_SYSTEM):
        return None
    return path.parent


__all__ = ["BwrapProvider"]
