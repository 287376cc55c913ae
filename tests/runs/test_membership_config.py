"""The ``mesh`` option of a dispatch agent, the roster status a run's events give, and the bound identity file."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster_api.dispatch.config import parse_dispatch_agents
from muster_api.dispatch.membership import service_url, status_of
from muster_api.errors import ConfigurationError
from muster_api.mcp.bound import BoundIdentity

CUSTOM = {"kind": "custom", "entrypoint": "tests.runs.agents:fast"}


def test_mesh_defaults_and_explicit_fields() -> None:
    agents = parse_dispatch_agents(
        {
            "dispatch_agents": {
                "plain": CUSTOM,
                "member": {**CUSTOM, "mesh": True},
                "named": {**CUSTOM, "mesh": {"agent_id": "rev-1", "role": "reviewer", "repo": "shop", "caps": ["ci"]}},
            }
        }
    )
    plain, member, named = (agents.definitions[n] for n in ("plain", "member", "named"))
    assert plain.membership is None and plain.mesh_agent_id() is None
    assert member.membership is not None and member.mesh_agent_id() == "member"
    assert (member.membership.role, member.membership.repo, member.membership.caps) == ("builder", None, [])
    assert named.membership is not None and named.mesh_agent_id() == "rev-1"
    assert (named.membership.role, named.membership.repo, named.membership.caps) == ("reviewer", "shop", ["ci"])


@pytest.mark.parametrize(
    ("mesh", "rule"),
    [
        ({"agent_id": "no spaces allowed"}, "mesh.agent_id"),
        ({"role": ""}, "mesh.role"),
        ({"colour": "blue"}, "mesh.colour"),
        ("yes", "mesh"),
    ],
)
def test_a_wrong_mesh_option_isolates_the_agent_and_names_the_field(mesh: object, rule: str) -> None:
    agents = parse_dispatch_agents({"dispatch_agents": {"bad": {**CUSTOM, "mesh": mesh}, "good": CUSTOM}})
    bad = agents.definitions["bad"]
    assert bad.error is not None and rule in bad.error and bad.membership is None
    assert agents.definitions["good"].error is None


def test_a_member_named_beyond_the_agent_id_rule_must_give_one() -> None:
    long = "a" * 100
    agents = parse_dispatch_agents({"dispatch_agents": {long: {**CUSTOM, "mesh": True}}})
    assert "mesh.agent_id" in (agents.definitions[long].error or "")
    named = parse_dispatch_agents({"dispatch_agents": {long: {**CUSTOM, "mesh": {"agent_id": "short"}}}})
    assert named.definitions[long].error is None


@pytest.mark.parametrize(
    ("event", "status"),
    [
        ({"type": "tool", "name": "Edit", "input": {"file_path": "src/store.py"}}, "running: editing src/store.py"),
        ({"type": "tool", "name": "shell", "input": {"command": ["bash", "-lc", "ls"]}}, "running: shell bash -lc ls"),
        ({"type": "tool_result", "id": "x"}, "waiting for the model"),
        ({"type": "quota", "reset_at": "2026-12-02T14:05:00+00:00"}, "quota until 14:05"),
        ({"type": "usage"}, None),
    ],
)
def test_a_runs_events_say_what_it_is_doing(event: dict[str, object], status: str | None) -> None:
    assert status_of(event) == status


def test_the_service_url_for_mcp_servers() -> None:
    assert service_url(None, "0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert service_url(None, "::1", 9000) == "http://[::1]:9000"
    assert service_url("https://muster.example/", "127.0.0.1", 8000) == "https://muster.example"


def test_a_bound_identity_file_must_be_private(tmp_path: Path) -> None:
    path = tmp_path / "identity.json"
    path.write_text(BoundIdentity("http://127.0.0.1:1", "coder", "secret-token").dumps())
    path.chmod(0o644)
    with pytest.raises(ConfigurationError, match="readable by others"):
        BoundIdentity.load(path)
    path.chmod(0o600)
    loaded = BoundIdentity.load(path)
    assert (loaded.agent_id, loaded.token) == ("coder", "secret-token")
    assert "secret-token" not in repr(loaded)


def test_wake_and_serve_tasks_keep_the_agent_on_the_mesh_in_the_served_role() -> None:
    agents = parse_dispatch_agents(
        {
            "dispatch_agents": {
                "sleeper": {**CUSTOM, "wake": True, "wake_interval": 5},
                "pool": {**CUSTOM, "serve_tasks": {"role": "reviewer", "repo": "shop", "max_parallel": 2}},
                "once": CUSTOM,
            }
        }
    )
    sleeper, pool, once = (agents.definitions[n] for n in ("sleeper", "pool", "once"))
    assert sleeper.kept and sleeper.wakes and sleeper.wake_interval == 5 and sleeper.membership is not None
    assert pool.kept and not pool.wakes and pool.serves is not None and pool.serves.max_parallel == 2
    assert pool.membership is not None and (pool.membership.role, pool.membership.repo) == ("reviewer", "shop")
    assert not once.kept and once.membership is None
    wrong = parse_dispatch_agents({"dispatch_agents": {"bad": {**CUSTOM, "serve_tasks": {"max_parallel": 0}}}})
    error = wrong.definitions["bad"].error or ""
    assert "serve_tasks.role" in error and "serve_tasks.max_parallel" in error
