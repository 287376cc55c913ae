from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from muster_api.db.url import normalise_database_url, redact, sqlite_path
from muster_api.errors import ConfigurationError
from muster_api.settings import Settings
from muster_dispatch.bootstrap import default_cache_dir


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("sqlite:///var/m.db", "sqlite+aiosqlite:///var/m.db"),
        ("sqlite:////abs/m.db", "sqlite+aiosqlite:////abs/m.db"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("postgresql://postgres@127.0.0.1/db", "postgresql+asyncpg://postgres@127.0.0.1/db"),
        ("postgres://u:p@h:5433/db", "postgresql+asyncpg://u:p@h:5433/db"),
        ("postgresql+asyncpg://h/db", "postgresql+asyncpg://h/db"),
    ],
)
def test_urls_are_normalised_to_async_drivers(given: str, expected: str) -> None:
    assert normalise_database_url(given) == expected


@pytest.mark.parametrize("bad", ["mysql://h/db", "postgresql+psycopg2://h/db", "nonsense", "sqlite://"])
def test_unsupported_urls_are_refused_by_name(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        normalise_database_url(bad)


PATH_VARIABLES = ("MUSTER_DATABASE_URL", "MUSTER_CONFIG", "MUSTER_HOST_HOME", "MUSTER_WORKSPACES_ROOT")


def test_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("MUSTER_HOST", "MUSTER_PORT", "MUSTER_DISPATCH_HOMES", *PATH_VARIABLES):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    s = Settings()
    assert s.database_url == f"sqlite+aiosqlite:///{tmp_path}/var/muster.db"
    assert (s.host, s.port) == ("127.0.0.1", 8000)
    assert sqlite_path(s.database_url) == tmp_path / "var" / "muster.db"


def test_every_path_setting_is_absolute_against_the_start_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("MUSTER_DISPATCH_HOMES", *PATH_VARIABLES):
        monkeypatch.delenv(var, raising=False)
    defaults = Settings()
    assert defaults.dispatch.homes == tmp_path / "var" / "dispatch" / "homes"
    assert defaults.dispatch.workspaces_root == tmp_path / "var" / "workspaces"
    assert defaults.config == tmp_path / "muster.toml"
    assert defaults.host_home == Path.home()
    monkeypatch.setenv("MUSTER_DISPATCH_HOMES", "h")
    monkeypatch.setenv("MUSTER_WORKSPACES_ROOT", "w")
    monkeypatch.setenv("MUSTER_CONFIG", "conf/m.toml")
    monkeypatch.setenv("MUSTER_HOST_HOME", "fake-home")
    monkeypatch.setenv("MUSTER_DATABASE_URL", "sqlite:///db/m.db?mode=rwc")
    named = Settings()
    assert named.dispatch.homes == tmp_path / "h"
    assert named.dispatch.workspaces_root == tmp_path / "w"
    assert named.config == tmp_path / "conf" / "m.toml"
    assert named.host_home == tmp_path / "fake-home"
    assert named.database_url == f"sqlite+aiosqlite:///{tmp_path}/db/m.db?mode=rwc"
    monkeypatch.chdir("/")  # read once: a later change of directory moves nothing
    assert named.dispatch.homes == tmp_path / "h"


def test_the_cli_cache_is_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUSTER_CLI_CACHE", "cache")
    assert default_cache_dir() == tmp_path / "cache"


def test_environment_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_DATABASE_URL", "postgres://postgres@127.0.0.1/x")
    monkeypatch.setenv("MUSTER_PORT", "9001")
    s = Settings()
    assert s.database_url == "postgresql+asyncpg://postgres@127.0.0.1/x"
    assert s.port == 9001


def test_bad_port_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_PORT", "70000")
    with pytest.raises(ValidationError, match="port"):
        Settings()


def test_redact_hides_password() -> None:
    assert redact("postgresql+asyncpg://u:secret@h/db") == "postgresql+asyncpg://u:***@h/db"
    assert "secret" not in redact("postgres://admin:secret@h:5432/db")


@pytest.mark.parametrize("keys", [[""], ["   "], ["ok", ""], ["\t"], [" padded"], ["padded\n"]])
def test_empty_or_padded_keys_are_refused(keys: list[str]) -> None:
    with pytest.raises(ValidationError, match="api_keys"):
        Settings(api_keys=keys)  # type: ignore[arg-type]


@pytest.mark.parametrize("level", ["verbose", "trace", ""])
def test_unknown_log_levels_are_refused(level: str) -> None:
    with pytest.raises(ValidationError, match="log_level"):
        Settings(log_level=level)  # type: ignore[arg-type]


def test_log_levels_are_case_insensitive() -> None:
    assert Settings(log_level="debug").log_level == "DEBUG"  # type: ignore[arg-type]
