"""``GET /mesh/search`` in-process on both databases: the shapes, who may see what (the overseer's view under
``MUSTER_API_KEYS``, on a keyless loopback service, never on an open bind without keys), bad input, and the index
swept with the rows by retention."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from muster_api.db.engine import create_engine
from muster_api.settings import Settings
from muster_mesh import FakeClock
from tests.mesh.support import auth, join, mesh_app
from tests.mesh.test_routes import problem
from tests.support.databases import sqlite_copy

pytestmark = pytest.mark.anyio


async def send(client: httpx.AsyncClient, token: str, body: str, **to: Any) -> str:
    r = await client.post("/mesh/messages", json={"body": body, "confirm": True, **to}, headers=auth(token))
    assert r.status_code == 200, r.text
    message_id: str = r.json()["message_id"]
    return message_id


async def test_search_shapes_visibility_and_paging(db_url: str) -> None:
    async with mesh_app(db_url, FakeClock()) as client:
        a, b, c = [await join(client, n) for n in ("alice", "bob", "carol")]
        mine = await send(client, a, "the <b>canary</b> is red", to="bob", thread_id="rel-1")
        theirs = await send(client, a, "canary for carol", to="carol")
        r = await client.get("/mesh/search", params={"q": "canary red"}, headers=auth(b))
        assert r.status_code == 200, r.text
        page = r.json()
        assert set(page) == {"hits", "next_cursor"} and page["next_cursor"] is None
        [hit] = page["hits"]
        assert set(hit) == {"message_id", "from", "thread_id", "sent_at", "snippet", "score"}
        assert (hit["message_id"], hit["from"], hit["thread_id"]) == (mine, "alice", "rel-1")
        assert "«canary»" in hit["snippet"] and "«red»" in hit["snippet"]
        assert (await client.get("/mesh/search", params={"q": "carol"}, headers=auth(b))).json()["hits"] == []
        assert len((await client.get("/mesh/search", params={"q": "canary"}, headers=auth(c))).json()["hits"]) == 1
        every = (await client.get("/mesh/search", params={"q": "canary", "view": "all"})).json()
        assert len(every["hits"]) == 2, "a keyless loopback service opens the overseer's view"
        first = (await client.get("/mesh/search", params={"q": "canary", "limit": 1}, headers=auth(a))).json()
        assert first["next_cursor"] == "1"
        second = await client.get(
            "/mesh/search", params={"q": "canary", "limit": 1, "cursor": first["next_cursor"]}, headers=auth(a)
        )
        assert second.json()["next_cursor"] is None
        assert {first["hits"][0]["message_id"], second.json()["hits"][0]["message_id"]} == {mine, theirs}


async def test_search_refuses_bad_input_by_name(db_url: str) -> None:
    async with mesh_app(db_url, FakeClock()) as client:
        a = await join(client, "alice")
        problem(await client.get("/mesh/search", params={"q": "x"}), 401, "token_required")
        for params, field in (
            ({"q": "?!"}, "q"),
            ({"q": "x" * 201}, "q"),
            ({"q": "x", "limit": 0}, "limit"),
            ({"q": "x", "view": "everyone"}, "view"),
            ({"q": "x", "cursor": "-1"}, "cursor"),
            ({"q": "x", "page": 2}, "page"),
        ):
            body = problem(await client.get("/mesh/search", params=params, headers=auth(a)), 422)
            assert field in {e["field"].split(".")[-1] for e in body["errors"]}, (params, body)
        body = problem(await client.get("/mesh/search", headers=auth(a)), 422)
        assert "q" in {e["field"].split(".")[-1] for e in body["errors"]}


async def test_overseer_view_needs_a_key_or_a_loopback_service(db_url: str) -> None:
    async with mesh_app(db_url, FakeClock(), allow_open_bind=True) as client:
        problem(await client.get("/mesh/search", params={"q": "x", "view": "all"}), 403, "overseer_only")
    async with mesh_app(db_url, FakeClock(), api_keys=["k-123456789012345678901234"]) as client:
        key = {"X-API-Key": "k-123456789012345678901234"}
        assert (await client.get("/mesh/search", params={"q": "x", "view": "all"})).status_code == 401
        assert (await client.get("/mesh/search", params={"q": "x", "view": "all"}, headers=key)).status_code == 200


@pytest.mark.parametrize("searched_first", [False, True], ids=["queued", "indexed"])
async def test_retention_sweeps_the_index_itself(db_url: str, searched_first: bool) -> None:
    # On SQLite a message reaches the index when a search (or the store's checkpointer) takes the queue: a message
    # swept before that leaves the queue, one swept after leaves the index; either way FTS5's check holds.
    clock = FakeClock()
    async with mesh_app(db_url, clock) as client:
        a = await join(client, "alice", ttl_seconds=86400)
        b = await join(client, "bob", ttl_seconds=86400)
        for i in range(3):
            await send(client, a, f"note {i} about the sweep", to="bob")
        if searched_first:
            found = await client.get("/mesh/search", params={"q": "sweep", "view": "all"})
            assert len(found.json()["hits"]) == 3
        r = await client.post("/mesh/inbox/ack", json={"cursor": 3, "confirm": True}, headers=auth(b))
        assert r.status_code == 200, r.text
        for _ in range(9):
            clock.advance(80_000)
            for token in (a, b):
                await client.get("/mesh/inbox", headers=auth(token))
        mesh = client._transport.app.state.mesh  # type: ignore[attr-defined]
        assert (await mesh.sweep()).messages == 3
        assert (await client.get("/mesh/search", params={"q": "sweep", "view": "all"})).json()["hits"] == []
    engine = create_engine(Settings(database_url=db_url).database_url)
    try:
        async with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                # FTS5's own check: the index holds exactly the rows of its content table.
                await conn.execute(text("INSERT INTO mesh_messages_fts(mesh_messages_fts) VALUES ('integrity-check')"))
                docs = (await conn.execute(text("SELECT count(*) FROM mesh_messages_fts_docsize"))).scalar_one()
            else:
                docs = (await conn.execute(text("SELECT count(search_doc) FROM mesh_messages"))).scalar_one()
        assert docs == 0
    finally:
        await engine.dispose()


async def test_a_send_on_sqlite_queues_its_message_and_the_next_search_indexes_it(
    sqlite_template: Path, tmp_path: Path
) -> None:
    # FTS5 writes a segment per commit: a send only queues its message's rowid, and the index takes the queue in
    # one transaction before a search answers, so the search still finds every message sent before it.
    db_url = sqlite_copy(sqlite_template, tmp_path / "muster.db")
    async with mesh_app(db_url, FakeClock()) as client:
        a = await join(client, "alice")
        await join(client, "bob")
        first = await send(client, a, "a queued heron", to="bob")
        assert await _counts(db_url) == (1, 0)
        r = await client.get("/mesh/search", params={"q": "heron", "view": "all"})
        assert [h["message_id"] for h in r.json()["hits"]] == [first]
        assert await _counts(db_url) == (0, 1)
        second = await send(client, a, "another heron", to="bob")
        r = await client.get("/mesh/search", params={"q": "heron", "view": "all"})
        assert {h["message_id"] for h in r.json()["hits"]} == {first, second}
        assert await _counts(db_url) == (0, 2)


async def _counts(db_url: str) -> tuple[int, int]:
    """Messages queued for the SQLite index, and messages in it."""
    engine = create_engine(Settings(database_url=db_url).database_url)
    try:
        async with engine.connect() as conn:
            queued = (await conn.execute(text("SELECT count(*) FROM mesh_messages_fts_pending"))).scalar_one()
            indexed = (await conn.execute(text("SELECT count(*) FROM mesh_messages_fts_docsize"))).scalar_one()
        return int(queued), int(indexed)
    finally:
        await engine.dispose()
