"""The database-legs summary counts the ``db_url`` parameter a test ran with, never words in its id: a PostgreSQL
run required by CI must not be satisfied by a SQLite-only test whose id mentions "postgres"."""

from __future__ import annotations

import pytest

from tests.conftest import database_leg


def _report(nodeid: str, user_properties: list[tuple[str, object]]) -> pytest.TestReport:
    return pytest.TestReport(
        nodeid=nodeid,
        location=("x.py", 0, "t"),
        keywords={},
        outcome="passed",
        longrepr=None,
        when="call",
        user_properties=user_properties,
    )


@pytest.mark.parametrize(
    "nodeid",
    [
        "tests/api/test_settings.py::test_urls_are_normalised_to_async_drivers[postgresql://postgres@127.0.0.1/db-x]",
        "tests/api/test_settings.py::test_urls[postgres-1]",
        "tests/x.py::test_y[sqlite-postgres-]",
    ],
)
def test_an_id_naming_postgres_is_no_leg(nodeid: str) -> None:
    assert database_leg(_report(nodeid, [])) is None


def test_the_db_url_parameter_is_the_leg() -> None:
    assert database_leg(_report("tests/x.py::test_y[a]", [("db_leg", "postgres")])) == "postgres"


def test_a_db_url_test_is_marked_with_its_leg(db_url: str, request: pytest.FixtureRequest) -> None:
    # This very test takes db_url: its report must carry the leg (checked on the item's parameters).
    assert request.node.callspec.params["db_url"] in ("sqlite", "postgres")
