"""Fixtures every test folder shares: the anyio backend and the two databases."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import PostgresServer, migrated_sqlite, sqlite_copy
from tests.support.logins import HostHome, make_host_home

# A suite started as a background job of a non-interactive shell (as CI runners often start it) has SIGINT ignored,
# and every process it starts inherits that. The tests that press Ctrl-C in a `muster` process need it at its default,
# as a terminal gives it: a handler of ours is reset to the default in every child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def session_host_home(tmp_path_factory: pytest.TempPathFactory) -> HostHome:
    return make_host_home(tmp_path_factory.mktemp("host-home"))


@pytest.fixture(autouse=True)
def host_home(session_host_home: HostHome, monkeypatch: pytest.MonkeyPatch) -> HostHome:
    """Every test reads CLI logins from a fake host home, never from the home of whoever runs the suite."""
    monkeypatch.setenv("MUSTER_HOST_HOME", str(session_host_home.path))
    return session_host_home


def _require(var: str) -> bool:
    return os.environ.get(var, "") not in ("", "0")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    url = os.environ.get("MUSTER_TEST_POSTGRES_URL")
    if not url:
        if _require("MUSTER_REQUIRE_POSTGRES"):
            pytest.fail(
                "MUSTER_REQUIRE_POSTGRES is set but MUSTER_TEST_POSTGRES_URL is not: the PostgreSQL leg must run"
            )
        pytest.skip("PostgreSQL leg: set MUSTER_TEST_POSTGRES_URL (e.g. postgresql://postgres@127.0.0.1:5432/postgres)")
    server = PostgresServer(url)
    yield server
    server.drop_all()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return migrated_sqlite(tmp_path_factory.mktemp("template") / "muster.db")


LEGS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=LEGS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of its own per test, at the migration head with no rows: a copy of the session's template (a new
    SQLite file), or a PostgreSQL database (a copy of the template, or one an earlier test left, emptied)."""
    if request.param == "sqlite":
        yield sqlite_copy(request.getfixturevalue("sqlite_template"), tmp_path / "muster.db")
        return
    yield request.getfixturevalue("pg_db_url")


@pytest.fixture
def pg_db_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A PostgreSQL database of its own at the migration head, for a test of PostgreSQL alone."""
    url = postgres_server.create(migrated=True)
    try:
        yield url
    finally:
        postgres_server.release(url)


@pytest.fixture(params=LEGS)
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database the migration chain never ran on."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'muster.db'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    url = server.create()
    try:
        yield url
    finally:
        server.drop(url)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A real coding-agent CLI, a real browser or a real container is slow by nature: such tests count as ``slow``
    (``make test-fast`` leaves them out) without each saying so."""
    for item in items:
        if any(item.get_closest_marker(name) for name in ("cli", "browser", "container")):
            item.add_marker(pytest.mark.slow)


DB_LEG = "db_leg"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Mark the report of a test that ran on a ``db_url`` leg with that leg (read by the summary below): the
    parameter itself, not a test id that happens to contain "postgres"."""
    report: pytest.TestReport = yield
    callspec = getattr(item, "callspec", None)
    for fixture in ("db_url", "empty_db_url"):
        if callspec is not None and fixture in callspec.params:
            report.user_properties.append((DB_LEG, callspec.params[fixture]))
    return report


def database_leg(report: pytest.TestReport) -> str | None:
    """The ``db_url`` leg a test ran on, None for a test that did not take the fixture."""
    leg = dict(report.user_properties).get(DB_LEG)
    return leg if isinstance(leg, str) else None


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    """Say how many tests passed on each database, and fail a run that was required to use PostgreSQL but did not."""
    legs = {"sqlite": 0, "postgres": 0}
    for report in terminalreporter.stats.get("passed", []):
        leg = database_leg(report)
        if leg in legs:
            legs[leg] += 1
    terminalreporter.write_line(f"database legs: sqlite {legs['sqlite']} passed, postgres {legs['postgres']} passed")
    others = {"browser": 0, "cli": 0, "container": 0}
    for report in terminalreporter.stats.get("passed", []):
        for marker in others:
            others[marker] += marker in report.keywords
    terminalreporter.write_line(
        f"other legs: real Chromium {others['browser']} passed, real coding-agent CLIs {others['cli']} passed,"
        f" real containers {others['container']} passed"
    )
    if _require("MUSTER_REQUIRE_POSTGRES") and legs["postgres"] == 0 and terminalreporter.stats.get("passed"):
        terminalreporter.write_line("MUSTER_REQUIRE_POSTGRES: no test passed on PostgreSQL", red=True)
        terminalreporter._session.exitstatus = pytest.ExitCode.TESTS_FAILED  # type: ignore[attr-defined]
