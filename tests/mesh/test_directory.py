"""A page of the directory as the service answers it: its JSON is what its agents' models encode to, byte for byte
(on each database, from the rows the database renders), and the fingerprint of its ETag moves with what it says, not
with the clock."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from muster_mesh import AgentList, FakeClock
from muster_mesh.directory import DirectoryPage, shown_row
from muster_mesh.mesh import view
from muster_mesh.records import AgentRecord, DirectoryQuery
from tests.mesh.test_conformance_sql import sql_factory

NOW = datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)


def record(agent_id: str, **fields: Any) -> AgentRecord:
    values: dict[str, Any] = {
        "agent_id": agent_id,
        "token_hash": agent_id.ljust(64, "h"),
        "role": "builder",
        "repo": "muster",
        "caps": ("merge",),
        "status": "working",
        "ttl_seconds": 3600,
        "last_seen_at": NOW - timedelta(seconds=30),
        "status_since": NOW - timedelta(minutes=5),
        "expires_at": NOW + timedelta(seconds=3570),
        **fields,
    }
    return AgentRecord(**values)


PAGE = [
    record("a"),
    record("b", role=None, repo=None, caps=(), status=""),
    record("c", caps=("merge", "deploy"), status='quotes " and \\ and ünïcødé ✓ and 𝄞, a tab\t, a \x01 and a line\n'),
    # Whole seconds (no fraction in the text), and expired: alive false.
    record("d", last_seen_at=NOW.replace(microsecond=0) - timedelta(hours=2), expires_at=NOW - timedelta(hours=1)),
    # A fraction with leading zeros; a status set in the future of the clock (a negative age).
    record("e", last_seen_at=NOW.replace(microsecond=100), status_since=NOW + timedelta(microseconds=7)),
]


def page_of(agents: list[AgentRecord], now: datetime, next_cursor: str | None) -> DirectoryPage:
    return DirectoryPage([shown_row(a) for a in agents], now, next_cursor)


def expected(agents: list[AgentRecord], now: datetime, next_cursor: str | None) -> bytes:
    """The page as its models encode it, built the long way: a view of each whole record."""
    return AgentList(agents=[view(a, now) for a in agents], next_cursor=next_cursor).model_dump_json().encode()


@pytest.mark.parametrize("next_cursor", [None, "d"])
def test_a_page_encodes_as_its_model_does(next_cursor: str | None) -> None:
    page = page_of(PAGE, NOW, next_cursor)
    assert page.json() == expected(PAGE, NOW, next_cursor)
    assert page.model().model_dump_json().encode() == page.json()


@pytest.mark.anyio
async def test_a_page_read_from_the_database_is_its_records_views_byte_for_byte(db_url: str) -> None:
    # The page's rows are rendered by the database (the datetimes' JSON text, their microseconds): the same bytes
    # as the views of the whole records, read back and parsed the long way.
    async with sql_factory(db_url)(FakeClock(NOW)) as mesh:
        async with mesh.store.transaction() as tx:
            for agent in PAGE:
                assert await tx.create_agent(agent)
            stored = [await tx.get_agent(a.agent_id) for a in PAGE]
        assert stored == PAGE, "stored and read back as given"
        everyone = await mesh.directory(DirectoryQuery(include_expired=True, limit=4))
        assert everyone.json() == expected(PAGE[:4], NOW, "d")
        rest = await mesh.directory(DirectoryQuery(include_expired=True, cursor="d"))
        assert rest.json() == expected(PAGE[4:], NOW, None)
        live = await mesh.directory()
        assert live.json() == expected([a for a in PAGE if a.live_at(NOW)], NOW, None)
        assert (
            await mesh.list_agents(DirectoryQuery(include_expired=True, limit=4))
        ).model_dump_json().encode() == everyone.json()


def test_the_fingerprint_moves_with_what_the_page_says_not_with_the_clock() -> None:
    page = page_of(PAGE[:3], NOW, "c")
    later = page_of(PAGE[:3], NOW + timedelta(seconds=30), "c")
    assert later.fingerprint() == page.fingerprint()
    assert json.loads(later.json()) != json.loads(page.json()), "the ages moved"

    changes: list[dict[str, Any]] = [
        {"agent_id": "z"},
        {"role": "reviewer"},
        {"repo": "other"},
        {"caps": ()},
        {"status": "idle"},
        {"status_since": NOW},
        {"last_seen_at": NOW},
        {"expires_at": NOW + timedelta(hours=2)},
        {"ttl_seconds": 900},
    ]
    for change in changes:
        moved = page_of([replace(PAGE[0], **change), *PAGE[1:3]], NOW, "c")
        assert moved.fingerprint() != page.fingerprint(), change
    assert page_of(PAGE[:3], NOW, None).fingerprint() != page.fingerprint()
    # Nothing stored changed, but the first agent's lease ended: alive is part of what the page says.
    expired = page_of(PAGE[:3], PAGE[0].expires_at, "c")
    assert expired.fingerprint() != page.fingerprint()
