"""The local sandbox provider: the CLI runs as a subprocess in the workspace, with a PRIVATE home per sandbox.

Environment, lowest to highest: a minimal base (PATH, locale, TERM, HOME/TMPDIR in the private home), the harness
defaults and configuration, the provider variables, the workspace's variables file (``.muster/.env``, or
``.outpost/.env`` in a project that has only that one), the agent variables. A name the
provider and the agent both define is a ``configuration`` error. Variable values are never logged.

Each process starts its own process group, which a deadline or a cancel kills whole; its own session as well when
this process has a controlling terminal, so that the CLI and its tools never read or stop on that terminal. Without a
terminal a session adds nothing: ``setsid`` is skipped there because it costs a scheduler autogroup per process, a
few hundred microseconds of every turn on a busy Linux machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from muster_dispatch.errors import DispatchError
from muster_dispatch.harness import AgentConfiguration, Command
from muster_dispatch.host_login import default_host_home
from muster_dispatch.local_process import LocalProcess, spawn
from muster_dispatch.processes import RUN_VARIABLE

# The workspace's variables file: the first that exists. Projects set up with the second keep working unchanged.
DOTENV_PATHS = (Path(".muster") / ".env", Path(".outpost") / ".env")
_DOTENV_STRINGS = tuple(str(relative) for relative in DOTENV_PATHS)
_BASE_NAMES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "SHELL")


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A workspace and its private home, as the host sees them; ``agent_workspace``/``agent_home``: where the agent
    sees them (the same paths unless a container mounts them elsewhere)."""

    id: str
    workspace: Path
    home: Path

    @property
    def agent_workspace(self) -> Path:
        return self.workspace

    @property
    def agent_home(self) -> Path:
        return self.home

    @property
    def tmp(self) -> str:
        return os.path.join(self.home, "tmp")

    def variables(self) -> dict[str, str]:
        """The variables of the workspace's variables file; empty when there is none. Read on every turn, so with
        string paths and one stat per candidate (pathlib and a missing-file exception cost ten times more)."""
        workspace = str(self.workspace)
        for relative in _DOTENV_STRINGS:
            candidate = os.path.join(workspace, relative)
            if os.path.isfile(candidate):
                return read_dotenv(candidate)
        return {}


class LocalProvider:
    kind = "local"

    def __init__(
        self, root: Path | str, *, variables: Mapping[str, str] | None = None, host_home: Path | str | None = None
    ) -> None:
        # Absolute once: a CLI runs in the workspace, where a relative home would point elsewhere.
        self.root = Path(root).absolute()
        self.variables: dict[str, str] = dict(variables or {})
        # Where the user's own CLI logins are read from (``host_login``).
        self.host_home = Path(host_home).absolute() if host_home is not None else default_host_home()
        self._configured: dict[tuple[str, str], AgentConfiguration] = {}
        self._sandboxes: dict[str, Sandbox] = {}

    def sandbox(self, workspace: Path) -> Sandbox:
        """One sandbox per workspace: its private home persists across turns of this provider (warm resume)."""
        cached = self._sandboxes.get(str(workspace))
        if cached is not None and os.path.isdir(cached.tmp) and os.path.isdir(cached.workspace):
            return cached  # the common case costs two stat calls, not a resolve and a mkdir
        resolved = Path(workspace).resolve()
        if not resolved.is_dir():
            raise DispatchError("workspace", f"workspace {resolved} is not a directory", {"field": "workspace"})
        key = hashlib.sha256(str(resolved).encode()).hexdigest()[:16]
        home = self.root / key / "home"
        (home / "tmp").mkdir(parents=True, exist_ok=True)
        sandbox = Sandbox(key, resolved, home)
        self._sandboxes[str(workspace)] = sandbox
        return sandbox

    def configure(self, sandbox: Sandbox, agent: str, configuration: AgentConfiguration) -> None:
        """Write the agent's configuration into the private home, once per sandbox and agent (again if it changed)."""
        if self._configured.get((sandbox.id, agent)) == configuration:
            return
        for rel, content in configuration.files.items():
            target = _under(sandbox.home, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.suffix == ".json" and target.exists():
                content = _merge_json(target.read_text(encoding="utf-8"), content)
            target.write_text(content, encoding="utf-8")
        for host, rel in configuration.host_files.items():
            target = _under(sandbox.home, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(host, target)
        for rel, content in configuration.private_files.items():
            write_private(_under(sandbox.home, rel), content)
        self._configured[(sandbox.id, agent)] = configuration

    def environment(
        self,
        sandbox: Sandbox,
        *,
        harness: Mapping[str, str] | None = None,
        agent: Mapping[str, str] | None = None,
        dotenv: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """The process environment; ``dotenv``: the workspace's variables file when the caller already read it."""
        harness = harness or {}
        agent = agent or {}
        conflicts = sorted(set(self.variables) & set(agent))
        if conflicts:
            raise DispatchError(
                "configuration",
                f"variables defined by both the sandbox provider and the agent: {', '.join(conflicts)}",
                {"variables": conflicts},
            )
        env: dict[str, str] = {}
        get = os.environ.get
        for name in _BASE_NAMES:
            value = get(name)
            if value is not None:
                env[name] = value
        env.setdefault("PATH", os.defpath)
        env.setdefault("LANG", "C.UTF-8")
        env["TERM"] = "dumb"
        home = str(sandbox.home)
        env["HOME"] = home
        env["TMPDIR"] = sandbox.tmp
        for name, value in harness.items():
            env[name] = f"{home}/{value[2:]}" if value.startswith("~/") else value
        env.update(self.variables)
        env.update(sandbox.variables() if dotenv is None else dotenv)
        env.update(agent)
        return env

    async def start(self, command: Command, sandbox: Sandbox, env: Mapping[str, str]) -> LocalProcess:
        return await self.spawn(self.argv(command, sandbox), command, sandbox, env)

    async def spawn(self, argv: list[str], command: Command, sandbox: Sandbox, env: Mapping[str, str]) -> LocalProcess:
        """Start ``argv`` (``command`` as the sandbox runs it) and write the command's stdin."""
        marker = secrets.token_hex(8)
        return await launch(command, argv, sandbox.workspace, {**env, RUN_VARIABLE: marker}, marker)

    def argv(self, command: Command, sandbox: Sandbox) -> list[str]:
        """The command line that runs ``command`` in the sandbox (on the host: the command itself)."""
        return [command.program, *command.args]

    async def upload(self, sandbox: Sandbox, files: Mapping[str, bytes]) -> None:
        """Write files into the private home (paths relative to it, never leaving it)."""
        for rel, content in files.items():
            target = _under(sandbox.home, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)

    async def download(self, sandbox: Sandbox, paths: list[str]) -> dict[str, bytes]:
        """The files of the private home at ``paths`` that exist."""
        found: dict[str, bytes] = {}
        for rel in paths:
            target = _under(sandbox.home, rel)
            if target.is_file():
                found[rel] = target.read_bytes()
        return found

    async def release(self) -> None:
        """Forget the sandboxes (their homes stay on disk for a later warm resume)."""
        self._sandboxes.clear()
        self._configured.clear()


async def launch(
    command: Command,
    argv: list[str],
    cwd: Path,
    env: Mapping[str, str],
    marker: str,
    kind: type[LocalProcess] = LocalProcess,
) -> LocalProcess:
    """Start ``argv`` (which runs ``command``) as a ``kind`` and hand it the command's standard input."""
    try:
        handle = await spawn(
            argv,
            cwd=cwd,
            env=env,
            stdin=command.stdin is not None,
            new_session=has_terminal(),
            marker=marker,
            kind=kind,
        )
    except OSError as exc:
        raise DispatchError("process", f"cannot start {command.program}: {exc.strerror or exc}", cause=exc) from exc
    if command.stdin is not None:
        # If the process died at once, its exit code and stderr tell why.
        with contextlib.suppress(DispatchError, ConnectionError):
            await handle.write(command.stdin)
        if not command.keep_stdin:
            handle.close_stdin()
    return handle


def has_terminal() -> bool:
    """Whether this process has a controlling terminal (asked on every start: a daemon may have left its own)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)  # a serial line must not block
    except OSError:
        return False
    os.close(fd)
    return True


def local_provider(
    root: Path | str, *, variables: Mapping[str, str] | None = None, host_home: Path | str | None = None
) -> LocalProvider:
    return LocalProvider(root, variables=variables, host_home=host_home)


def _under(home: Path, rel: str) -> Path:
    path = Path(rel)
    if path.is_absolute() or ".." in path.parts:
        raise DispatchError("configuration", f"configuration file must stay under the home: {rel!r}")
    return home / path


def write_private(target: Path, content: str) -> None:
    """``content`` in ``target``, readable by its owner only from its creation, replaced atomically."""
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(content)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def _merge_json(existing: str, new: str) -> str:
    try:
        old = json.loads(existing)
        update = json.loads(new)
    except ValueError:
        return new
    if isinstance(old, dict) and isinstance(update, dict):
        return json.dumps({**old, **update})
    return new


def read_dotenv(path: Path | str) -> dict[str, str]:
    """``NAME=value`` lines (``export`` prefix, quotes, comments); a missing file is empty."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise DispatchError("workspace", f"cannot read {path.name}: {exc.strerror}", cause=exc) from exc
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[7:].lstrip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name.replace("_", "a").isalnum() or name[0].isdigit():
            where = f"{path.parent.name}/{path.name}"
            raise DispatchError("workspace", f"{where} line {number}: expected NAME=value", {"line": number})
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        out[name] = value
    return out
