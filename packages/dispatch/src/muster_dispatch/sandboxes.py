"""The sandboxes an agent can be given by name (``sandbox = "bwrap"`` in a service's configuration): each name's
provider factory, whether it can start here, and the default.

``SANDBOXES[name](root, egress=…, host_home=…)`` builds a provider keeping its private homes under ``root``. A name
whose provider is not part of this build answers a ``configuration`` error saying so. ``local`` shares the host's
network and files: it enforces no egress, so it accepts only ``"open"`` (or nothing) as egress.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

from muster_dispatch.bwrap_provider import BwrapProvider, bwrap_problem
from muster_dispatch.egress import Egress
from muster_dispatch.errors import DispatchError
from muster_dispatch.provider import LocalProvider
from muster_dispatch.sandbox import SandboxProvider

SandboxName = Literal["bwrap", "podman", "docker", "local"]
SANDBOX_NAMES: tuple[str, ...] = ("bwrap", "podman", "docker", "local")


class SandboxFactory(Protocol):
    def __call__(self, root: Path, *, egress: Egress, host_home: Path | None) -> SandboxProvider: ...


def default_sandbox() -> SandboxName:
    """bubblewrap on Linux; elsewhere the host (no namespaces to confine a process in)."""
    return "bwrap" if sys.platform.startswith("linux") else "local"


def check_egress(sandbox: str, egress: Egress) -> None:
    """Refuse an egress the sandbox cannot enforce (``configuration``)."""
    if sandbox == "local" and egress != Egress() and egress.mode != "open":
        raise DispatchError(
            "configuration",
            f'egress = "{egress.describe()}" needs a sandbox: sandbox = "local" shares the host\'s network',
            {"field": "egress"},
        )


def _local(root: Path, *, egress: Egress, host_home: Path | None) -> SandboxProvider:
    return LocalProvider(root, host_home=host_home)


def _bwrap(root: Path, *, egress: Egress, host_home: Path | None) -> SandboxProvider:
    return BwrapProvider(root, egress=egress, host_home=host_home)


def _not_built(name: str) -> SandboxFactory:
    def factory(root: Path, *, egress: Egress, host_home: Path | None) -> SandboxProvider:
        raise DispatchError("configuration", not_built(name), {"field": "sandbox"})

    return factory


def not_built(name: str) -> str:
    return f'sandbox {name} is not available in this version of Muster; choose sandbox = "bwrap" or "local"'


SANDBOXES: dict[str, SandboxFactory] = {
    "bwrap": _bwrap,
    "local": _local,
    "podman": _not_built("podman"),
    "docker": _not_built("docker"),
}

# Why a sandbox cannot start here (one line naming the fix), None when it can; asked by ``muster doctor``.
PROBLEMS: dict[str, Callable[[], str | None]] = {
    "bwrap": bwrap_problem,
    "local": lambda: None,
    "podman": lambda: not_built("podman"),
    "docker": lambda: not_built("docker"),
}


def sandbox_problem(name: str) -> str | None:
    problem = PROBLEMS.get(name)
    return problem() if problem is not None else f"unknown sandbox {name!r}"


__all__ = [
    "SANDBOXES",
    "SANDBOX_NAMES",
    "SandboxFactory",
    "SandboxName",
    "check_egress",
    "default_sandbox",
    "sandbox_problem",
]
