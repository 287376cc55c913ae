"""The sandbox provider conformance suite, run on every provider with real processes (bwrap: real namespaces;
podman and docker: real containers)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from muster_dispatch import BwrapProvider, DispatchError, LocalProvider
from muster_dispatch.sandbox import SandboxProvider
from muster_dispatch.testing import PROVIDER_CHECKS, ProviderFactory
from tests.dispatch.sandbox.conftest import ProviderMaker

pytestmark = pytest.mark.anyio


def _local(root: Path, variables: dict[str, str]) -> SandboxProvider:
    return LocalProvider(root, variables=variables)


def _bwrap(root: Path, variables: dict[str, str]) -> SandboxProvider:
    return BwrapProvider(root, variables=variables)


FACTORIES: dict[str, ProviderFactory] = {"local": _local, "bwrap": _bwrap}


@pytest.mark.parametrize("check", sorted(PROVIDER_CHECKS))
@pytest.mark.parametrize("kind", sorted(FACTORIES))
async def test_provider_conformance(kind: str, check: str, tmp_path: Path) -> None:
    if kind == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    await PROVIDER_CHECKS[check](FACTORIES[kind], tmp_path)


@pytest.mark.container
@pytest.mark.parametrize("check", sorted(PROVIDER_CHECKS))
async def test_container_provider_conformance(check: str, make_container: ProviderMaker, tmp_path: Path) -> None:
    await PROVIDER_CHECKS[check](make_container, tmp_path)


async def test_a_missing_bwrap_is_a_one_line_configuration_error(tmp_path: Path) -> None:
    provider = BwrapProvider(tmp_path / "homes", executable="muster-no-such-bwrap")
    (tmp_path / "ws").mkdir()
    with pytest.raises(DispatchError) as caught:
        provider.sandbox(tmp_path / "ws")
    assert caught.value.code == "configuration"
    assert "\n" not in caught.value.message and "apt-get install bubblewrap" in caught.value.message
