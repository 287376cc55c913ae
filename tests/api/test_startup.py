"""`muster serve` and `muster migrate` refuse what cannot work in one line naming it and what to do, exit code 2,
never a traceback. Run as real subprocesses, as an operator would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from muster_api.settings import Settings
from tests.support.databases import PostgresServer
from tests.support.net import free_port

# Every test runs `muster` as a process (a cold interpreter each).
pytestmark = pytest.mark.slow


def muster(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")}
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-m", "muster_api.commands.cli", *argv],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def refused(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith("muster: ")
    for needle in needles:
        assert needle in line, line
    return line


@pytest.mark.parametrize(
    ("env", "needles"),
    [
        ({"MUSTER_API_KEYS": "secret"}, ("MUSTER_API_KEYS", "JSON")),
        ({"MUSTER_API_KEYS": '[""]'}, ("MUSTER_API_KEYS", "empty")),
        ({"MUSTER_API_KEYS": '["  "]'}, ("MUSTER_API_KEYS", "empty")),
        ({"MUSTER_API_KEYS": '["k-ok", " padded"]'}, ("MUSTER_API_KEYS", "whitespace")),
        ({"MUSTER_PORT": "70000"}, ("MUSTER_PORT", "65535")),
        ({"MUSTER_LOG_LEVEL": "verbose"}, ("MUSTER_LOG_LEVEL", "'DEBUG'")),
        ({"MUSTER_DATABASE_URL": "mysql://h/db"}, ("MUSTER_DATABASE_URL", "mysql")),
        ({"MUSTER_HOST": "0.0.0.0"}, ("0.0.0.0", "MUSTER_API_KEYS", "MUSTER_ALLOW_OPEN_BIND")),
        ({"MUSTER_MESH_MAX_WAIT_SECONDS": "100"}, ("MUSTER_MESH_MAX_WAIT_SECONDS", "60")),
        ({"MUSTER_MESH_FANOUT_PER_MINUTE": "none"}, ("MUSTER_MESH_FANOUT_PER_MINUTE", "integer")),
    ],
)
def test_bad_settings_are_one_line(env: dict[str, str], needles: tuple[str, ...], tmp_path: object) -> None:
    line = refused(muster("serve", **{"MUSTER_DATABASE_URL": f"sqlite:///{tmp_path}/s.db", **env}), *needles)
    if "MUSTER_API_KEYS" in env:
        assert "secret" not in line and "padded" not in line, "a key's value is never repeated"


def test_a_missing_or_broken_config_file_is_one_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/c.db"
    missing = tmp_path / "absent.toml"
    refused(muster("serve", MUSTER_DATABASE_URL=db, MUSTER_CONFIG=str(missing)), "MUSTER_CONFIG", "does not exist")
    broken = tmp_path / "broken.toml"
    broken.write_text("[agents\n", encoding="utf-8")
    refused(muster("serve", MUSTER_DATABASE_URL=db, MUSTER_CONFIG=str(broken)), "MUSTER_CONFIG", "invalid TOML")


def test_an_unreachable_postgresql_is_one_line() -> None:
    port = free_port()
    url = f"postgresql://postgres@127.0.0.1:{port}/muster"
    for command in ("serve", "migrate"):
        refused(muster(command, MUSTER_DATABASE_URL=url), f"127.0.0.1:{port}", "unreachable", "MUSTER_DATABASE_URL")


@pytest.mark.postgres
def test_a_missing_database_says_how_to_create_it(postgres_server: PostgresServer) -> None:
    url = postgres_server.url_for("muster_never_created")
    for command in ("serve", "migrate"):
        refused(muster(command, MUSTER_DATABASE_URL=url), "muster_never_created", "createdb", "does not exist")


def test_an_unmigrated_database_without_migrate_on_startup_says_run_migrate(empty_db_url: str) -> None:
    line = refused(
        muster("serve", MUSTER_DATABASE_URL=empty_db_url, MUSTER_MIGRATE_ON_STARTUP="false"),
        "never migrated",
        "`muster migrate`",
    )
    assert "MUSTER_MIGRATE_ON_STARTUP" in line
    migrated = muster("migrate", MUSTER_DATABASE_URL=empty_db_url)
    assert migrated.returncode == 0, migrated.stderr
    assert "database at revision" in migrated.stdout


def test_open_bind_is_allowed_with_keys_or_by_the_setting() -> None:
    from muster_api.commands.startup import check_bind

    check_bind(Settings(api_keys=["k"]), "0.0.0.0")  # type: ignore[list-item]
    check_bind(Settings(allow_open_bind=True), "0.0.0.0")
    for loopback in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        check_bind(Settings(), loopback)
