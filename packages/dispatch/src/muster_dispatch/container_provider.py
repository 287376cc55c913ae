"""``PodmanProvider`` and ``DockerProvider``: every run in a container of its own.

One container per run (``run --rm``), not one per workspace kept between turns: the container IS the run, so a kill
removes it and everything in it, no state of one turn outlives it but what is in the mounted workspace and home, and
a turn pays one container start (a few hundred ms), about what an ``exec`` into a kept container costs anyway.

Each container: no network of its own (``--network none``), a read-only root, every capability dropped,
``no-new-privileges``, an init as pid 1, the caller's uid. The workspace and the private home are mounted read-write
at their own paths, the CLI's install directory read-only (the image holds Node, not the CLIs: ``container_image``).
The environment is exactly the layered one: values pass by name through the engine CLI's own environment (not on its
command line, where ``ps`` shows them), and the variables the engine adds by itself are unset before the program
starts.

Egress (``muster_dispatch.egress``), as in bubblewrap: ``"model"`` (the default) gives each run an allow-list proxy of
its own on the host, its socket directory mounted read-only at ``/run/muster-egress``, the bridge (the image's Python)
in front of the command, the proxy variables in the environment and the host's CA bundle mounted read-only;
``"none"`` leaves only the container's loopback; ``"open"`` shares the host's network (``--network host``).

Stopping: a kill signals the run's processes (found by the run's marker) and removes the container (``rm -f``). The
engine CLI gets SIGTERM when the worker dies (``setpriv --pdeathsig``), which it passes to the container; a container
left by a worker killed outright is removed by the next provider on the machine (its name carries its worker's pid
and start time).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import secrets
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from muster_dispatch.bwrap_provider import _install_root as install_root
from muster_dispatch.container_image import Engine, image_exists, image_tag, missing_image
from muster_dispatch.egress import (
    SANDBOX_SOCKET_DIR,
    SOCKET_NAME,
    Egress,
    EgressProxy,
    Endpoint,
    bridge_argv,
    proxy_variables,
    refused_event,
)
from muster_dispatch.errors import DispatchError
from muster_dispatch.harness import Command
from muster_dispatch.local_process import LocalProcess
from muster_dispatch.processes import RUN_VARIABLE
from muster_dispatch.provider import LocalProvider, Sandbox, launch

# Variables the engine CLI itself reads: passed into the container by value, the CLI keeping the host's own.
_ENGINE_NAMES = frozenset(
    {
        "HOME",
        "PATH",
        "TMPDIR",
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "DOCKER_HOST",
        "DOCKER_CONFIG",
        "DOCKER_CONTEXT",
        "CONTAINER_HOST",
        "CONTAINER_CONNECTION",
        "CONTAINERS_CONF",
        "CONTAINERS_STORAGE_CONF",
    }
)
_ADDED_BY_ENGINE = ("HOSTNAME", "container")
_ENGINE_FIX = {
    "podman": "check `podman info`",
    "docker": "start dockerd, or set DOCKER_HOST to a Docker-compatible service (podman system service)",
}
_NAME_PREFIX = "muster-sbx-"
_NOFILE, _NPROC = 1 << 20, 32768
# The image's own directories: a program found there runs from the image, never mounted over it.
_SYSTEM = frozenset({"/bin", "/sbin", "/lib", "/lib64", "/usr/bin", "/usr/sbin"})
_PYTHON = "/usr/bin/python3"  # the image's, which runs the egress bridge
_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


class ContainerProcess(LocalProcess):
    """A run's engine CLI; killing it also removes its container."""

    remove_argv: list[str]
    engine_env: dict[str, str]

    async def kill(self, grace: float = 1.0) -> None:
        await super().kill(grace)
        await self.remove()

    def kill_now(self) -> None:
        super().kill_now()
        # Not awaited: this runs while being cancelled; a thread reaps the engine CLI.
        with contextlib.suppress(OSError):
            remover = subprocess.Popen(
                self.remove_argv, env=self.engine_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            threading.Thread(target=remover.wait, name="muster-container-remove", daemon=True).start()

    async def remove(self) -> None:
        remover = await asyncio.create_subprocess_exec(
            *self.remove_argv, env=self.engine_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        await remover.wait()


class ContainerProvider(LocalProvider):
    """What Podman and Docker share; ``engine_variables``: for the engine CLI only (``DOCKER_HOST``, …)."""

    kind: str = "container"
    engine: Engine = "podman"

    def __init__(
        self,
        root: Path | str,
        *,
        variables: Mapping[str, str] | None = None,
        image: str | None = None,
        egress: Egress | str | Sequence[str] = "model",
        read_only: Sequence[Path | str] = (),
        executable: str | None = None,
        engine_variables: Mapping[str, str] | None = None,
        engine_options: Sequence[str] | None = None,
        host_home: Path | str | None = None,
    ) -> None:
        super().__init__(root, variables=variables, host_home=host_home)
        self.image = image or image_tag()
        self.egress = Egress.parse(egress)
        if self.egress.proxied:
            self.variables.update(proxy_variables())
        self.read_only = tuple(Path(p) for p in read_only)
        self.executable = executable or self.engine
        engine_env = {name: value for name, value in os.environ.items() if name in _ENGINE_NAMES}
        self.engine_env = {**engine_env, **(engine_variables or {})}
        self.engine_options = list(engine_options if engine_options is not None else self.default_engine_options())
        self._cli: str | None = None
        self._ca_bundle = _CA_BUNDLE if _CA_BUNDLE.is_file() else None

    def sandbox(self, workspace: Path) -> Sandbox:
        if self._cli is None:
            cli = self.check()
            remove_orphans(cli, self.engine_env)
            self._cli = cli
        return super().sandbox(workspace)

    def check(self) -> str:
        """The engine CLI, once it and the image are there; else a one-line ``configuration`` error naming the fix."""
        cli = self._find()
        if not image_exists(cli, self.image, self.engine_env):
            unreachable = self._unreachable(cli)
            if unreachable is not None:
                raise DispatchError("configuration", unreachable, {"field": "sandbox"})
            raise missing_image(self.engine, self.image)
        return cli

    def _unreachable(self, cli: str) -> str | None:
        """Why the engine cannot answer at all (no daemon, no service), asked only once an image was not found."""
        done = subprocess.run([cli, "version"], capture_output=True, text=True, env=self.engine_env, check=False)
        if done.returncode == 0:
            return None
        why = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        fix = _ENGINE_FIX[self.engine]
        return f"sandbox {self.kind} cannot start: {self.executable} cannot reach its engine ({why}); {fix}"

    async def start(self, command: Command, sandbox: Sandbox, env: Mapping[str, str]) -> LocalProcess:
        self.sandbox(sandbox.workspace)
        program = [command.program, *command.args]
        if not self.egress.proxied:
            return await self._run(command, sandbox, env, program, ())
        allowed = self.egress.allowed(command.endpoints)
        held: list[Endpoint] = []  # refused before the process exists (it cannot, but nothing may be lost)
        proxy = EgressProxy(allowed, held.append)
        await proxy.open(self.root / sandbox.id / "egress" / secrets.token_hex(6))
        assert proxy.directory is not None
        try:
            inner = bridge_argv(_PYTHON, f"{SANDBOX_SOCKET_DIR}/{SOCKET_NAME}", allowed, program)
            mounts = [(proxy.directory, Path(SANDBOX_SOCKET_DIR))]
            if self._ca_bundle is not None:  # the host's trust store, its own CAs included, for TLS through egress
                mounts.append((self._ca_bundle, self._ca_bundle))
            process = await self._run(command, sandbox, env, inner, mounts)
        except BaseException:
            proxy.close()
            raise
        for endpoint in held:
            process.notices.put(refused_event(endpoint))
        proxy.on_refused = lambda endpoint: process.notices.put(refused_event(endpoint))
        process.on_close.append(proxy.close)
        return process

    async def _run(
        self,
        command: Command,
        sandbox: Sandbox,
        env: Mapping[str, str],
        program: list[str],
        mounts: Sequence[tuple[Path, Path]],
    ) -> LocalProcess:
        """``program`` in a new container; ``mounts``: more (host, container) paths mounted read-only."""
        marker = secrets.token_hex(8)
        inner = {**env, RUN_VARIABLE: marker}
        name = f"{_NAME_PREFIX}{os.getpid()}-{_start_time(os.getpid())}-{marker}"
        assert self._cli is not None
        argv = [*_pdeathsig(), self._cli, *self.engine_options, "run", *self.run_options(command, sandbox, inner)]
        for host, inside in mounts:
            argv += ["--volume", f"{host}:{inside}:ro"]
        argv += ["--name", name, self.image, *_unset_added(inner), *program]
        cli_env = {**{k: v for k, v in inner.items() if k not in _ENGINE_NAMES}, **self.engine_env}
        handle = await launch(command, argv, sandbox.workspace, cli_env, marker, kind=ContainerProcess)
        assert isinstance(handle, ContainerProcess)
        handle.remove_argv = [self._cli, *self.engine_options, *self.remove_options(), name]
        handle.engine_env = self.engine_env
        return handle

    def default_engine_options(self) -> list[str]:
        """Options of the engine CLI itself, before its subcommand."""
        return []

    def remove_options(self) -> list[str]:
        return ["rm", "-f"]

    def run_options(self, command: Command, sandbox: Sandbox, env: Mapping[str, str]) -> list[str]:
        """Every flag of ``run``, before the image (podman reads a flag after it as the program's)."""
        network = "host" if self.egress.mode == "open" else "none"
        options = ["--rm", "--init", "--network", network, "--read-only", "--cap-drop", "ALL"]
        options += ["--security-opt", "no-new-privileges", "--user", f"{os.getuid()}:{os.getgid()}"]
        options += [
            f"--ulimit=nofile={_limit(resource.RLIMIT_NOFILE, _NOFILE)}",
            f"--ulimit=nproc={_limit(resource.RLIMIT_NPROC, _NPROC)}",
        ]
        options += ["--tmpfs", "/tmp", "--tmpfs", "/run"]  # noqa: S108 (the container's own tmpfs)
        if command.stdin is not None:
            options.append("--interactive")
        install = install_root(command.program)
        if install is not None and str(install) in _SYSTEM:
            install = None
        for path in (*self.read_only, *([install] if install is not None else [])):
            if path.exists():
                options += ["--volume", f"{path}:{path}:ro"]
        for place in (sandbox.home, sandbox.workspace):
            options += ["--volume", f"{place}:{place}:rw"]
        options += ["--workdir", str(sandbox.workspace)]
        for name, value in env.items():
            options += ["--env", f"{name}={value}" if name in _ENGINE_NAMES else name]
        return options

    def _find(self) -> str:
        found = shutil.which(self.executable)
        if found is None:
            package = "podman" if self.engine == "podman" else "docker.io"
            raise DispatchError(
                "configuration",
                f"sandbox {self.kind} cannot start: {self.executable} not found;"
                f" install it (apt-get install {package})",
                {"field": "sandbox"},
            )
        return found


class PodmanProvider(ContainerProvider):
    kind = "podman"
    engine: Engine = "podman"

    def default_engine_options(self) -> list[str]:
        # As root on a host with cgroups in hybrid mode only runc starts containers; crun refuses.
        return ["--runtime", "runc"] if _which_runc() else []

    def remove_options(self) -> list[str]:
        return ["rm", "--force", "--ignore", "--time", "0"]

    def run_options(self, command: Command, sandbox: Sandbox, env: Mapping[str, str]) -> list[str]:
        # Podman passes the host's proxy variables in unless told not to; the layered environment has its own.
        return [*super().run_options(command, sandbox, env), "--http-proxy=false"]


class DockerProvider(ContainerProvider):
    """Docker's CLI against a Docker daemon or Podman's Docker-compatible service (``DOCKER_HOST`` in
    ``engine_variables`` or the worker's environment)."""

    kind = "docker"
    engine: Engine = "docker"


def container_problem(kind: str) -> str | None:
    """Why the ``podman`` or ``docker`` sandbox cannot start here (one line naming the fix); None when it can."""
    provider = PodmanProvider if kind == "podman" else DockerProvider
    try:
        provider(Path(".")).check()  # its homes are made only by a sandbox() call
    except DispatchError as exc:
        return exc.message
    return None


def remove_orphans(cli: str, env: Mapping[str, str]) -> list[str]:
    """Remove the containers of workers that no longer run; returns their names."""
    listed = subprocess.run(
        [cli, "ps", "--all", "--filter", f"name={_NAME_PREFIX}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        env=dict(env),
        check=False,
    )
    orphans = []
    for name in listed.stdout.split():
        parts = name.removeprefix(_NAME_PREFIX).split("-")
        if len(parts) == 3 and parts[0].isdigit() and _start_time(int(parts[0])) != parts[1]:
            orphans.append(name)
    if orphans:
        subprocess.run([cli, "rm", "-f", *orphans], capture_output=True, env=dict(env), check=False)
    return orphans


def _start_time(pid: int) -> str:
    """When ``pid`` started (clock ticks since boot), so a reused pid is told from its first owner; "" if gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return ""
    return data[data.rfind(b")") + 2 :].split()[19].decode()


def _unset_added(env: Mapping[str, str]) -> list[str]:
    """``env -u`` of each variable the engine adds by itself that the layered environment does not have."""
    argv = ["/usr/bin/env"]
    for name in _ADDED_BY_ENGINE:
        if name not in env:
            argv += ["-u", name]
    return argv


def _limit(which: int, ceiling: int) -> str:
    """This process's own limit, at most ``ceiling``: the runtime cannot raise a limit (no CAP_SYS_RESOURCE in a
    nested container), and runc refused an nproc above 32768 as root here while podman's own hard limit was higher."""
    soft, hard = (
        ceiling if value == resource.RLIM_INFINITY else min(value, ceiling) for value in resource.getrlimit(which)
    )
    return f"{soft}:{hard}"


def _pdeathsig() -> list[str]:
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []


def _which_runc() -> bool:
    return shutil.which("runc") is not None or Path("/usr/sbin/runc").exists()


__all__ = [
    "ContainerProcess",
    "ContainerProvider",
    "DockerProvider",
    "PodmanProvider",
    "container_problem",
    "remove_orphans",
]
