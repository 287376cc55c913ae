"""``BwrapProvider``: every process of a run confined by bubblewrap.

New user, pid, ipc, uts and (unless egress is ``"open"``) net namespaces; the host's system paths (``/usr``,
``/etc``) read-only, the workspace and the private home read-write at their own paths, a private ``/tmp``, a new
``/proc`` and ``/dev``, ``--die-with-parent`` (the worker's exit ends the namespace), ``--new-session`` (no terminal
injection), every capability dropped. The environment is exactly the layered one: bubblewrap passes its own, which
the runner built. Nothing else of the host is visible: its ``$HOME``, ``/root``, other workspaces and homes,
Muster's database and config. The CLI's install directory is bound read-only.

Egress (``muster_dispatch.egress``): ``"model"`` (the default) gives each process an allow-list proxy of its own,
its socket directory bound read-only at ``/run/muster-egress``, the bridge in front of the command, and the proxy
variables in the environment; ``"none"`` leaves only the sandbox's loopback; ``"open"`` shares the host's network.

The pid namespace makes the kill whole: its first process dies with bubblewrap, and the kernel kills every other
process of the namespace with it (the bridge included).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from muster_dispatch.egress import (
    SANDBOX_SOCKET_DIR,
    SOCKET_NAME,
    Egress,
    EgressProxy,
    Endpoint,
    bridge_argv,
    bridge_python,
    proxy_variables,
    refused_event,
)
from muster_dispatch.errors import DispatchError
from muster_dispatch.harness import Command
from muster_dispatch.local_process import LocalProcess
from muster_dispatch.provider import LocalProvider, Sandbox

_SYSTEM = ("/usr", "/etc")
_MERGED = ("bin", "lib", "lib64", "sbin")  # symlinks into /usr on a merged-/usr system


class BwrapProvider(LocalProvider):
    kind = "bwrap"

    def __init__(
        self,
        root: Path | str,
        *,
        variables: Mapping[str, str] | None = None,
        egress: Egress | str | Sequence[str] = "model",
        read_only: Sequence[Path | str] = (),
        executable: str = "bwrap",
        host_home: Path | str | None = None,
    ) -> None:
        super().__init__(root, variables=variables, host_home=host_home)
        self.egress = Egress.parse(egress)
        self.read_only = tuple(Path(p) for p in read_only)
        self.executable = executable
        self._bwrap: str | None = None
        self._python: tuple[str, tuple[Path, ...]] | None = None
        if self.egress.proxied:
            self.variables.update(proxy_variables())

    def sandbox(self, workspace: Path) -> Sandbox:
        if self._bwrap is None:  # once per provider: a sandbox that cannot start fails the run before anything runs
            problem = bwrap_problem(self.executable)
            if problem is not None:
                raise DispatchError("configuration", problem, {"field": "sandbox"})
            self._bwrap = find_bwrap(self.executable)
        return super().sandbox(workspace)

    def argv(self, command: Command, sandbox: Sandbox) -> list[str]:
        return [*self._confine(sandbox, command, ()), command.program, *command.args]

    async def start(self, command: Command, sandbox: Sandbox, env: Mapping[str, str]) -> LocalProcess:
        if not self.egress.proxied:
            return await super().start(command, sandbox, env)
        allowed = self.egress.allowed(command.endpoints)
        held: list[Endpoint] = []  # refused before the process exists (it cannot, but nothing may be lost)
        proxy = EgressProxy(allowed, held.append)
        await proxy.open(self.root / sandbox.id / "egress" / secrets.token_hex(6))
        assert proxy.directory is not None
        try:
            python, python_binds = self._python = self._python or bridge_python()
            inner = bridge_argv(
                python, f"{SANDBOX_SOCKET_DIR}/{SOCKET_NAME}", allowed, [command.program, *command.args]
            )
            binds = ((proxy.directory, Path(SANDBOX_SOCKET_DIR)), *((p, p) for p in python_binds))
            process = await self.spawn([*self._confine(sandbox, command, binds), *inner], command, sandbox, env)
        except BaseException:
            proxy.close()
            raise
        for endpoint in held:
            process.notices.put(refused_event(endpoint))
        proxy.on_refused = lambda endpoint: process.notices.put(refused_event(endpoint))
        process.on_close.append(proxy.close)
        return process

    def _confine(self, sandbox: Sandbox, command: Command, binds: Sequence[tuple[Path, Path]]) -> list[str]:
        """bubblewrap's arguments up to ``--``; ``binds``: more (host, sandbox) paths bound read-only."""
        bwrap = self._bwrap or find_bwrap(self.executable)
        args = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        if self.egress.mode != "open":
            args.append("--unshare-net")
        args += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", *_system()]
        args += ["--tmpfs", "/tmp"]  # noqa: S108 (a tmpfs of the namespace's own)
        install = _install_root(command.program)
        extra = (Path(path) for path in command.read_only)
        for bound in (*self.read_only, *([install] if install is not None else []), *extra):
            if bound.exists():
                args += ["--ro-bind", str(bound), str(bound)]
        for host, inside in binds:
            args += ["--ro-bind", str(host), str(inside)]
        args += ["--bind", str(sandbox.home), str(sandbox.home)]
        args += ["--bind", str(sandbox.workspace), str(sandbox.workspace)]
        return [*args, "--chdir", str(sandbox.workspace), "--"]


def _system() -> list[str]:
    """The host's system paths, read-only, and a new ``/proc`` and ``/dev``."""
    args: list[str] = []
    for path in _SYSTEM:
        args += ["--ro-bind", path, path]
    for name in _MERGED:
        target = Path("/") / name
        if target.is_symlink():
            args += ["--symlink", str(target.readlink()), str(target)]
        elif target.is_dir():
            args += ["--ro-bind", str(target), str(target)]
    return [*args, "--proc", "/proc", "--dev", "/dev"]


def find_bwrap(executable: str = "bwrap") -> str:
    """The bubblewrap executable; a ``configuration`` error naming the fix when there is none."""
    found = shutil.which(executable)
    if found is None:
        raise DispatchError(
            "configuration",
            f"sandbox bwrap cannot start: {executable} not found; install bubblewrap (apt-get install bubblewrap)"
            ' or choose sandbox = "local"',
            {"field": "sandbox"},
        )
    return found


_PROBE = ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--die-with-parent")


def bwrap_problem(executable: str = "bwrap") -> str | None:
    """Why bubblewrap cannot confine a process here, in one line naming the fix; None when it can (it is asked to
    start ``true`` in the namespaces a run gets)."""
    try:
        bwrap = find_bwrap(executable)
    except DispatchError as exc:
        return exc.message
    argv = [bwrap, *_PROBE, *_system(), "--", "/usr/bin/true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sandbox bwrap cannot start: {exc}"
    if done.returncode == 0:
        return None
    said = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return (
        f"sandbox bwrap cannot start: {said[-1] if said else f'exit code {done.returncode}'}; enable unprivileged"
        " user namespaces (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0) or choose"
        ' sandbox = "local"'
    )


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


__all__ = ["BwrapProvider", "bwrap_problem", "find_bwrap"]
