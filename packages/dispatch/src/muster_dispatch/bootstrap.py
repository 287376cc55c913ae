"""Bootstrap: the pinned CLI of a harness, installed with npm into a cache directory when missing, version checked.

Cache: ``$MUSTER_CLI_CACHE`` or ``~/.cache/muster/cli``; each pin in ``<cache>/<name>-<version>`` (npm ``--prefix``).
Concurrent installs of one pin are serialised by a lock file.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from muster_dispatch.errors import DispatchError
from muster_dispatch.harness import Harness

INSTALL_TIMEOUT = 600.0
VERSION_TIMEOUT = 60.0

# Pins verified by this process: a turn must not pay a `--version` run each time.
_verified: dict[Path, Path] = {}


def known_harnesses() -> dict[str, Harness]:
    from muster_dispatch.harnesses.claude import claude_harness
    from muster_dispatch.harnesses.codex import codex_harness
    from muster_dispatch.harnesses.copilot import copilot_harness
    from muster_dispatch.harnesses.gemini import gemini_harness
    from muster_dispatch.harnesses.opencode import opencode_harness

    return {
        "claude": claude_harness(),
        "codex": codex_harness(),
        "opencode": opencode_harness(),
        "gemini": gemini_harness(),
        "copilot": copilot_harness(),
    }


def harness_status(*, cache_dir: Path | str | None = None) -> dict[str, CliStatus]:
    """Every harness this package has, by name, with whether its pinned CLI is installed (no process is run): the
    list a zero-config agent set or a health check reads."""
    return {name: cli_status(harness, cache_dir=cache_dir) for name, harness in known_harnesses().items()}


def default_cache_dir() -> Path:
    """``$MUSTER_CLI_CACHE`` or ``~/.cache/muster/cli``, absolute (the CLI runs in its workspace)."""
    configured = os.environ.get("MUSTER_CLI_CACHE")
    path = Path(configured).expanduser() if configured else Path.home() / ".cache" / "muster" / "cli"
    return path.absolute()


def ensure_cli(harness: Harness | str, *, cache_dir: Path | str | None = None) -> Path:
    """The path of the harness's CLI: its ``executable`` override, else the pinned npm package (installed if needed)."""
    if isinstance(harness, str):
        known = known_harnesses()
        if harness not in known:
            raise DispatchError(
                "configuration",
                f"unknown harness {harness!r}: known are {', '.join(sorted(known))}",
                {"field": "harness"},
            )
        harness = known[harness]
    if harness.executable:
        path = Path(harness.executable)
        found = shutil.which(str(path)) if not path.is_absolute() else str(path)
        if not found or not Path(found).exists():
            raise DispatchError("configuration", f"{harness.name}: executable {harness.executable} not found")
        return Path(found)
    spec = harness.bootstrap
    if spec is None:
        raise DispatchError("configuration", f"{harness.name}: no executable and no bootstrap pin")
    prefix = Path(cache_dir).absolute() if cache_dir is not None else default_cache_dir()
    prefix = prefix / f"{harness.name}-{spec.version}"
    binary = prefix / "node_modules" / ".bin" / spec.binary
    if _verified.get(prefix) == binary and binary.exists():
        return binary
    prefix.mkdir(parents=True, exist_ok=True)
    with (prefix / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        env = unpack_environment(harness, binary)
        if not binary.exists() or not _version_ok(binary, spec.version, env):
            _install(prefix, f"{spec.package}@{spec.version}")
            if not binary.exists():
                raise DispatchError("provider", f"npm installed {spec.package}@{spec.version} but not {spec.binary}")
            if not _version_ok(binary, spec.version, env):
                raise DispatchError("provider", f"{binary} does not report version {spec.version}")
    _verified[prefix] = binary
    return binary


def unpack_environment(harness: Harness, executable: Path | str) -> dict[str, str]:
    """The variable that keeps a self-unpacking pinned CLI's cache beside its install (``Bootstrap.unpack_variable``),
    or nothing: for an ``executable`` override the CLI keeps its own default."""
    spec = harness.bootstrap
    if harness.executable or spec is None or spec.unpack_variable is None:
        return {}
    # <prefix>/node_modules/.bin/<binary> -> <prefix>/unpacked
    return {spec.unpack_variable: str(Path(executable).absolute().parent.parent.parent / "unpacked")}


@dataclass(frozen=True, slots=True)
class CliStatus:
    """What is known of a harness's CLI without running it: installed at its pin, and which version."""

    installed: bool
    version: str | None
    path: Path | None


def cli_status(harness: Harness, *, cache_dir: Path | str | None = None) -> CliStatus:
    """Whether the pinned CLI is in the cache (an install only leaves it there once its version checked out)."""
    if harness.executable:
        found = shutil.which(harness.executable)
        return CliStatus(found is not None, None, Path(found) if found else None)
    spec = harness.bootstrap
    if spec is None:
        return CliStatus(False, None, None)
    prefix = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / f"{harness.name}-{spec.version}"
    binary = prefix / "node_modules" / ".bin" / spec.binary
    if not binary.exists():
        return CliStatus(False, None, None)
    return CliStatus(True, spec.version, binary)


def ready_cli(harness: Harness) -> Path | None:
    """The executable when no install or version check is needed (no blocking work), else None."""
    if harness.executable:
        if os.path.isabs(harness.executable) and os.access(harness.executable, os.X_OK):
            return Path(harness.executable)
        return ensure_cli(harness)
    spec = harness.bootstrap
    if spec is None:
        return None
    binary = _verified.get(default_cache_dir() / f"{harness.name}-{spec.version}")
    return binary if binary is not None and binary.exists() else None


def _install(prefix: Path, package: str) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise DispatchError("provider", "npm is not installed: cannot bootstrap the CLI")
    try:
        done = subprocess.run(
            [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error", package],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise DispatchError("provider", f"npm install {package} timed out", cause=exc) from exc
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise DispatchError("provider", f"npm install {package} failed: {tail}", {"exit_code": done.returncode})


def _version_ok(binary: Path, version: str, env: dict[str, str]) -> bool:
    try:
        done = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT,
            check=False,
            env={**os.environ, **env} if env else None,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and version in done.stdout
