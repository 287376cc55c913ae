"""The service started the way a user starts it (``muster serve`` in a checkout, no path variable) runs an agent
with ``sandbox = "podman"`` in a container: a real Codex run, scripted by the fake model to read a secret of the
user's home and to reach another server on the host's loopback, is stopped at both (the refusal is a warning of the
run's journal), reaches its model through the egress proxy and completes; doctor says the sandbox can start."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.dispatch.cli.support import CODEX_MODEL
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.sandbox.conftest import podman_image
from tests.dispatch.sandbox.support import other_port
from tests.runs.processes import MUSTER
from tests.runs.test_defaults import desk
from tests.runs.test_sandbox_defaults import probe_through_the_service

pytestmark = [pytest.mark.cli, pytest.mark.container]

__all__ = ["desk", "other_port", "podman_image"]  # fixtures, used by name

CONFIG = """
[dispatch_agents.codex]
kind = "cli"
harness = "codex"
model = "%s"
sandbox = "podman"
variables = { OPENAI_BASE_URL = "${OPENAI_BASE_URL}", MUSTER_CODEX_SANDBOX = "danger-full-access" }
"""


def test_a_podman_agent_runs_in_a_container_with_egress_to_its_model_only(
    podman_image: str, desk: tuple[Path, dict[str, str]], tmp_path: Path, fake_openai: FakeOpenAI, other_port: int
) -> None:
    probe_through_the_service(CONFIG % CODEX_MODEL, "podman", desk, tmp_path, fake_openai, other_port)
    checkout, env = desk
    doctor = subprocess.run(
        [str(MUSTER), "doctor", "--json"], env=env, cwd=checkout, capture_output=True, text=True, timeout=120
    )
    rows = {row["check"]: row for row in json.loads(doctor.stdout)["rows"]}
    assert rows["dispatch codex sandbox"]["ok"], rows["dispatch codex sandbox"]
