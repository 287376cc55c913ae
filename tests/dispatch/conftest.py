"""Fixtures shared by the dispatch tests: the fake model servers, the real CLIs (installed once), a workspace.

The real CLIs are installed through the package's bootstrap (``ensure_cli``) into ``$MUSTER_CLI_CACHE`` (or the
bootstrap's default cache). When that is impossible the CLI tests skip with the reason, unless
``MUSTER_REQUIRE_CLIS=1`` (CI), where they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.gemini import FakeGemini
from tests.dispatch.fakes.openai import FakeOpenAI


@dataclass(frozen=True)
class InstalledClis:
    claude: Path
    codex: Path


def _required() -> bool:
    return os.environ.get("MUSTER_REQUIRE_CLIS", "") not in ("", "0")


@pytest.fixture(scope="session")
def installed_clis() -> InstalledClis:
    """The pinned Claude Code and Codex, installed once per session by the package's bootstrap."""
    from muster_dispatch import DispatchError, claude_harness, codex_harness, ensure_cli

    cache = os.environ.get("MUSTER_CLI_CACHE") or None
    try:
        claude = ensure_cli(claude_harness(), cache_dir=cache)
        codex = ensure_cli(codex_harness(), cache_dir=cache)
    except (DispatchError, OSError) as exc:
        if _required():
            pytest.fail(f"MUSTER_REQUIRE_CLIS is set but the CLIs could not be installed: {exc}")
        pytest.skip(f"the real CLIs could not be installed through the bootstrap (npm, network?): {exc}")
    return InstalledClis(Path(claude), Path(codex))


@pytest.fixture(scope="session")
def anthropic_server() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic()
    with fake.running():
        yield fake


@pytest.fixture(scope="session")
def openai_server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    with fake.running():
        yield fake


@pytest.fixture
def fake_anthropic(anthropic_server: FakeAnthropic) -> FakeAnthropic:
    """The Anthropic fake with an empty plan and an empty request log."""
    anthropic_server.script.reset()
    return anthropic_server


@pytest.fixture
def fake_openai(openai_server: FakeOpenAI) -> FakeOpenAI:
    """The OpenAI fake with an empty plan and an empty request log."""
    openai_server.script.reset()
    return openai_server


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty project directory the agent works in."""
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def opencode_cli() -> Path:
    """The pinned OpenCode, installed once per session by the package's bootstrap."""
    from muster_dispatch import DispatchError, ensure_cli, opencode_harness

    try:
        return Path(ensure_cli(opencode_harness(), cache_dir=os.environ.get("MUSTER_CLI_CACHE") or None))
    except (DispatchError, OSError) as exc:
        if _required():
            pytest.fail(f"MUSTER_REQUIRE_CLIS is set but OpenCode could not be installed: {exc}")
        pytest.skip(f"OpenCode could not be installed through the bootstrap (npm, network?): {exc}")


@pytest.fixture(scope="session")
def gemini_cli() -> Path:
    """The pinned Gemini CLI, installed once per session by the package's bootstrap."""
    from muster_dispatch import DispatchError, ensure_cli, gemini_harness

    try:
        return Path(ensure_cli(gemini_harness(), cache_dir=os.environ.get("MUSTER_CLI_CACHE") or None))
    except (DispatchError, OSError) as exc:
        if _required():
            pytest.fail(f"MUSTER_REQUIRE_CLIS is set but Gemini CLI could not be installed: {exc}")
        pytest.skip(f"Gemini CLI could not be installed through the bootstrap (npm, network?): {exc}")


@pytest.fixture(scope="session")
def gemini_server() -> Iterator[FakeGemini]:
    fake = FakeGemini()
    with fake.running():
        yield fake


@pytest.fixture
def fake_gemini(gemini_server: FakeGemini) -> FakeGemini:
    """The Gemini fake with an empty plan and an empty request log."""
    gemini_server.script.reset()
    return gemini_server


@pytest.fixture(scope="session")
def copilot_cli() -> Path:
    """The pinned GitHub Copilot CLI, installed once per session by the package's bootstrap."""
    from muster_dispatch import DispatchError, copilot_harness, ensure_cli

    try:
        return Path(ensure_cli(copilot_harness(), cache_dir=os.environ.get("MUSTER_CLI_CACHE") or None))
    except (DispatchError, OSError) as exc:
        if _required():
            pytest.fail(f"MUSTER_REQUIRE_CLIS is set but Copilot could not be installed: {exc}")
        pytest.skip(f"Copilot could not be installed through the bootstrap (npm, network?): {exc}")
