"""A fake host home holding a Claude Code OAuth login, a Codex ``auth.json`` with a stored API key and a Gemini CLI
``oauth_creds.json``: what ``claude`` → ``/login``, ``codex login --with-api-key`` and ``gemini`` → Login with Google
leave in a user's home. Every test runs with
``MUSTER_HOST_HOME`` pointing at one, so that no test ever reads the login of the person running the suite."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

CLAUDE_TOKEN = "sk-ant-oat01-fake-host-login-3f9a"
CLAUDE_REFRESH = "sk-ant-ort01-fake-host-refresh-3f9a"
CODEX_TOKEN = "sk-fake-host-codex-login-7c21"
GEMINI_TOKEN = "ya29.fake-host-gemini-login-5e80"
# What the user's ~/.claude.json holds besides the account: none of it may reach a private home.
PRIVATE_PROJECT = "/home/someone/secret-project"


@dataclass(frozen=True)
class HostHome:
    path: Path

    @property
    def claude_credentials(self) -> Path:
        return self.path / ".claude" / ".credentials.json"

    @property
    def claude_json(self) -> Path:
        return self.path / ".claude.json"

    @property
    def codex_auth(self) -> Path:
        return self.path / ".codex" / "auth.json"

    @property
    def gemini_oauth(self) -> Path:
        return self.path / ".gemini" / "oauth_creds.json"


def make_host_home(path: Path, *, claude: bool = True, codex: bool = True, gemini: bool = True) -> HostHome:
    home = HostHome(path)
    path.mkdir(parents=True, exist_ok=True)
    if claude:
        oauth = {
            "accessToken": CLAUDE_TOKEN,
            "refreshToken": CLAUDE_REFRESH,
            "expiresAt": 4102444800000,  # 2100: the CLI never refreshes it during a test
            "scopes": ["user:inference", "user:profile"],
            "subscriptionType": "pro",
        }
        _write(home.claude_credentials, {"claudeAiOauth": oauth})
        account = {"accountUuid": "00000000-0000-4000-8000-000000000001", "emailAddress": "user@example.com"}
        _write(
            home.claude_json,
            {
                "hasCompletedOnboarding": True,
                "oauthAccount": account,
                "userID": "fake-user",
                "projects": {PRIVATE_PROJECT: {"history": ["my private prompt"]}},
                "mcpServers": {"private": {"command": "do-not-copy"}},
            },
        )
    if codex:
        _write(home.codex_auth, {"OPENAI_API_KEY": CODEX_TOKEN, "tokens": None, "last_refresh": None})
    if gemini:  # what `gemini` → Login with Google leaves
        oauth = {"access_token": GEMINI_TOKEN, "token_type": "Bearer", "expiry_date": 4102444800000}
        _write(home.gemini_oauth, oauth)
    return home


def _write(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))
    os.chmod(path, 0o600)
