"""Gemini CLI through the API: listed with its pinned CLI, and the candidate a Claude quota falls back to (each
vendor's CLI against a fake server of its own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.dispatch.cli.support import RESET_EPOCH
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes import anthropic, gemini
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.gemini import FakeGemini, user_texts
from tests.dispatch.fakes.plans import Reply
from tests.runs.support import dispatch_app, dispatch_env, finished, read_sse, start
from tests.runs.test_cli_runs import claude

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


def gemini_entry(url: str) -> dict[str, Any]:
    variables = {"GOOGLE_GEMINI_BASE_URL": url, "GEMINI_API_KEY": "test-gemini-key", "MUSTER_GEMINI_MAX_ATTEMPTS": "2"}
    return {"kind": "cli", "harness": "gemini", "model": gemini.MODEL, "variables": variables}


async def test_a_claude_quota_falls_back_to_gemini(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    gemini_cli: Path,
    fake_anthropic: FakeAnthropic,
    fake_gemini: FakeGemini,
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    fake_anthropic.script.plan(anthropic.usage_limited(RESET_EPOCH))
    fake_gemini.script.plan(Reply(text="Gemini finished the job.", input_tokens=50, output_tokens=7))
    agents = {
        "claude": claude(fake_anthropic.url, subscription=True),
        "gemini": gemini_entry(fake_gemini.url),
        "team": {"kind": "fallback", "agents": ["claude", "gemini"]},
    }
    async with dispatch_app(db_url, tmp_path, agents) as client:
        listed = {a["name"]: a for a in (await client.get("/dispatch/agents")).json()["agents"]}
        assert (listed["gemini"]["installed"], listed["gemini"]["version"]) == (True, "0.61.0")
        assert listed["gemini"]["credentials"] == "key variable GEMINI_API_KEY"
        run = await finished(client, (await start(client, agent="team", prompt="Do the job", workspace="w"))["id"])
        types = [e["event"] for e in (await read_sse(client, run["id"])).events]

    assert run["status"] == "completed", run
    assert (run["selected"], run["text"]) == ("gemini", "Gemini finished the job.")
    assert [(a["agent"], a["status"]) for a in run["attempts"]] == [("claude", "failed"), ("gemini", "completed")]
    assert run["attempts"][0]["error"]["code"] == "quota"
    assert run["conversation"] and run["usage"]["output"] == 7
    assert "fallback" in types and "text_delta" in types
    (request,) = fake_gemini.script.model_requests()
    assert "Do the job" in user_texts(request)
