"""A ``harness = "gemini"`` entry of ``dispatch_agents``: its permission_mode is Gemini CLI's approval mode, and a
wrong one isolates the entry with the rule."""

from __future__ import annotations

from muster_api.dispatch.config import harness_of, parse_dispatch_agents
from muster_dispatch import AgentInput


def test_gemini_entry_and_its_approval_mode() -> None:
    block = {
        "g": {"kind": "cli", "harness": "gemini", "model": "gemini-2.5-pro", "variables": {"GEMINI_API_KEY": "k"}},
        "careful": {"kind": "cli", "harness": "gemini", "permission_mode": "auto_edit"},
        "wrong": {"kind": "cli", "harness": "gemini", "permission_mode": "everything"},
    }
    agents = parse_dispatch_agents({"dispatch_agents": block}, env={})
    g = agents.definitions["g"]
    assert g.error is None and g.harness == "gemini" and g.model == "gemini-2.5-pro"
    careful = agents.definitions["careful"]
    assert careful.error is None
    args = harness_of(careful.entry).request(AgentInput("hi")).args  # type: ignore[arg-type]
    assert args[args.index("--approval-mode") + 1] == "auto_edit"
    assert "approval_mode must be one of" in (agents.definitions["wrong"].error or "")
