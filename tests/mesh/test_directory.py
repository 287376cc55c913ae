"""A page of the directory as the service answers it: its JSON is its model's, byte for byte, and the fingerprint
of its ETag moves with what it says, not with the clock."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from muster_mesh.mesh import DirectoryPage
from muster_mesh.records import AgentRecord

NOW = datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)


def record(agent_id: str, **fields: Any) -> AgentRecord:
    values: dict[str, Any] = {
        "agent_id": agent_id,
        "token_hash": "h" * 64,
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
    record("c", caps=("merge", "deploy"), status='quotes " and \\ and ünïcødé ✓ and 𝄞'),
    # Whole seconds (no fraction in the text), and expired: alive false.
    record("d", last_seen_at=NOW.replace(microsecond=0) - timedelta(hours=2), expires_at=NOW - timedelta(hours=1)),
]


@pytest.mark.parametrize("next_cursor", [None, "d"])
def test_a_page_encodes_as_its_model_does(next_cursor: str | None) -> None:
    page = DirectoryPage(PAGE, NOW, next_cursor)
    assert page.json() == page.model().model_dump_json().encode()


def test_the_fingerprint_moves_with_what_the_page_says_not_with_the_clock() -> None:
    page = DirectoryPage(PAGE[:3], NOW, "c")
    later = DirectoryPage(PAGE[:3], NOW + timedelta(seconds=30), "c")
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
        moved = DirectoryPage([replace(PAGE[0], **change), *PAGE[1:3]], NOW, "c")
        assert moved.fingerprint() != page.fingerprint(), change
    assert DirectoryPage(PAGE[:3], NOW, None).fingerprint() != page.fingerprint()
    # Nothing stored changed, but the first agent's lease ended: alive is part of what the page says.
    expired = DirectoryPage(PAGE[:3], PAGE[0].expires_at, "c")
    assert expired.fingerprint() != page.fingerprint()
