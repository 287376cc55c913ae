"""Fixtures of the container sandbox tests: the image, Podman, and Docker's CLI against Podman's Docker-compatible
service, started here on a socket of its own.

Without podman, the docker CLI or the image the tests skip with the reason, unless ``MUSTER_REQUIRE_PODMAN=1`` (CI,
which installs podman and docker.io and builds the image first), where they fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from muster_dispatch import DockerProvider, PodmanProvider
from muster_dispatch.container_image import image_exists, image_tag
from muster_dispatch.sandbox import SandboxProvider

ProviderMaker = Callable[..., SandboxProvider]


def _unavailable(reason: str) -> None:
    if os.environ.get("MUSTER_REQUIRE_PODMAN", "") not in ("", "0"):
        pytest.fail(f"MUSTER_REQUIRE_PODMAN is set but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def podman_image() -> str:
    """The sandbox image, built beforehand by `muster sandbox image` (CI builds it before the tests)."""
    podman = shutil.which("podman")
    if podman is None:
        _unavailable("podman is not installed (apt-get install podman)")
        raise AssertionError  # unreachable: skip and fail raise
    if not image_exists(podman, image_tag()):
        _unavailable(f"the sandbox image {image_tag()} is missing (muster sandbox image)")
    return image_tag()


@pytest.fixture(scope="session")
def docker_host(podman_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``DOCKER_HOST`` of a Podman service started for the session (the docker CLI talks to it)."""
    if shutil.which("docker") is None:
        _unavailable("the docker CLI is not installed (apt-get install docker.io)")
    sock = tmp_path_factory.mktemp("podman-service") / "podman.sock"
    runtime = ["--runtime", "runc"] if shutil.which("runc") or Path("/usr/sbin/runc").exists() else []
    service = subprocess.Popen(
        ["podman", *runtime, "system", "service", "--time", "0", f"unix://{sock}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_socket(sock, service)
        yield f"unix://{sock}"
    finally:
        service.terminate()
        try:
            service.wait(10)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()


def _wait_for_socket(sock: Path, service: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if service.poll() is not None:
            pytest.fail(f"podman system service exited with {service.returncode}")
        with socket.socket(socket.AF_UNIX) as client:
            try:
                client.connect(str(sock))
            except OSError:
                time.sleep(0.05)
                continue
            return
    pytest.fail("podman system service did not listen within 30 s")


@pytest.fixture
def make_podman(podman_image: str) -> ProviderMaker:
    def make(root: Path, variables: dict[str, str] | None = None, **options: object) -> SandboxProvider:
        return PodmanProvider(root, variables=variables, **options)  # type: ignore[arg-type]

    return make


@pytest.fixture
def make_docker(docker_host: str) -> ProviderMaker:
    def make(root: Path, variables: dict[str, str] | None = None, **options: object) -> SandboxProvider:
        engine = {"DOCKER_HOST": docker_host}
        return DockerProvider(root, variables=variables, engine_variables=engine, **options)  # type: ignore[arg-type]

    return make


@pytest.fixture(params=["podman", "docker"])
def make_container(request: pytest.FixtureRequest) -> ProviderMaker:
    """Each container provider in turn."""
    maker: ProviderMaker = request.getfixturevalue(f"make_{request.param}")
    return maker
