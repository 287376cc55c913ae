"""The user's own CLI login, copied from the host home into an agent's private home for one turn, and a login the CLI
refreshed during the turn written back.

A harness says WHICH files make its login (``HostLogin``, pure data, in its credential plan); this module does the
disk work. The host home is ``MUSTER_HOST_HOME`` when set (tests point it at a fake one), else the user's home.

- Copied fresh at the start of every turn: the private copy is mode 0600 and the private home 0700. A file of which
  only some keys may leave the host (``keys``: Claude Code's ``~/.claude.json`` holds projects, history and MCP
  servers beside the account) is read as a JSON object and only those keys are merged into the private file.
- Nothing of a login's content reaches a message, a log or a journal: errors name the file and the fix, never a
  value.
- Write-back: where refresh tokens rotate, a CLI that refreshed its login in the private copy has invalidated the
  host's. When the host file is byte for byte what was copied, the private copy replaces it atomically (a temporary
  file in the same directory, renamed) with the host file's mode; when the host changed meanwhile (the user logged in
  again, another turn wrote back first), the host's stays. Filtered files are never written back.
- Only files are read: the macOS keychain, where Claude Code keeps its login on a Mac, is never read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muster_dispatch.errors import DispatchError

HOST_HOME_VARIABLE = "MUSTER_HOST_HOME"
FILE_MODE = 0o600
HOME_MODE = 0o700


@dataclass(frozen=True, slots=True)
class LoginFile:
    """One file of a login: ``host`` relative to the host home, ``home`` relative to the private home."""

    host: str
    home: str
    required: bool = True
    keys: tuple[str, ...] | None = None  # copy only these top-level keys of a JSON object (never written back)


@dataclass(frozen=True, slots=True)
class HostLogin:
    """The files of a CLI's login on the host, and the one line that tells a person how to log in."""

    files: tuple[LoginFile, ...]
    fix: str


@dataclass(frozen=True, slots=True)
class CopiedFile:
    host: Path
    private: Path
    host_digest: str  # the host file when it was copied
    private_digest: str  # the private copy as written
    write_back: bool


@dataclass(frozen=True, slots=True)
class CopiedLogin:
    files: tuple[CopiedFile, ...]


def default_host_home() -> Path:
    """``MUSTER_HOST_HOME`` or the user's home, absolute."""
    configured = os.environ.get(HOST_HOME_VARIABLE)
    return Path(configured).expanduser().absolute() if configured else Path.home().absolute()


def login_source(login: HostLogin, host_home: Path) -> str | None:
    """Where the login would come from (``host login ~/.claude/.credentials.json``), None when a required file is
    missing. Never reads a file's content."""
    for file in login.files:
        if file.required and not (host_home / file.host).is_file():
            return None
    required = [file.host for file in login.files if file.required]
    return "host login " + ", ".join(f"~/{path}" for path in required)


def missing_files(login: HostLogin, host_home: Path) -> list[str]:
    return [f"~/{file.host}" for file in login.files if file.required and not (host_home / file.host).is_file()]


def copy_login(login: HostLogin, home: Path, host_home: Path) -> CopiedLogin:
    """Copy the login into the private home (0600 files in a 0700 home). A missing required file is a
    ``configuration`` error naming the file and the fix, raised before anything is copied."""
    missing = missing_files(login, host_home)
    if missing:
        raise DispatchError(
            "configuration",
            f"no login found: {', '.join(missing)} does not exist under {host_home}; {login.fix}",
            {"field": "credentials", "missing": missing},
        )
    _private_dir(home)
    copied: list[CopiedFile] = []
    for file in login.files:
        source = host_home / file.host
        try:
            data = source.read_bytes()
        except FileNotFoundError:
            continue  # an optional file (a required one was checked above)
        except OSError as exc:
            raise DispatchError(
                "configuration", f"cannot read ~/{file.host}: {exc.strerror}", {"field": "credentials"}
            ) from None
        target = home / file.home
        _private_dir(target.parent, stop=home)
        content = data if file.keys is None else _filtered(data, file, target)
        _write_private(target, content)
        copied.append(CopiedFile(source, target, _digest(data), _digest(content), file.keys is None))
    return CopiedLogin(tuple(copied))


def write_back(copied: CopiedLogin) -> list[Path]:
    """Host files replaced by a refreshed private copy (only where the host file is unchanged since it was copied)."""
    written: list[Path] = []
    for file in copied.files:
        if not file.write_back:
            continue
        try:
            fresh = file.private.read_bytes()
            current = file.host.read_bytes()
        except OSError:
            continue
        if _digest(fresh) == file.private_digest or _digest(current) != file.host_digest:
            continue
        _replace_atomically(file.host, fresh)
        written.append(file.host)
    return written


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _filtered(data: bytes, file: LoginFile, target: Path) -> bytes:
    """Only ``file.keys`` of the host's JSON object, merged over the private file (the harness may have written it)."""
    try:
        host: Any = json.loads(data)
    except ValueError:
        raise DispatchError("configuration", f"~/{file.host} is not valid JSON", {"field": "credentials"}) from None
    if not isinstance(host, dict):
        raise DispatchError("configuration", f"~/{file.host} is not a JSON object", {"field": "credentials"})
    private: Any = {}
    with contextlib.suppress(OSError, ValueError):
        private = json.loads(target.read_bytes())
    if not isinstance(private, dict):
        private = {}
    private.update({key: host[key] for key in file.keys or () if key in host})
    return json.dumps(private).encode()


def _private_dir(path: Path, *, stop: Path | None = None) -> None:
    path.mkdir(parents=True, exist_ok=True)
    current = path
    while True:
        os.chmod(current, HOME_MODE)
        if stop is None or current == stop or current.parent == current:
            return
        current = current.parent


def _write_private(target: Path, content: bytes) -> None:
    """Written through a new 0600 file: the content never sits in a file anyone else may read."""
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=".login-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        os.chmod(name, FILE_MODE)
        os.replace(name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise


def _replace_atomically(host: Path, content: bytes) -> None:
    mode = stat.S_IMODE(host.stat().st_mode)
    fd, name = tempfile.mkstemp(dir=host.parent, prefix=f".{host.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(name, mode)
        os.replace(name, host)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
