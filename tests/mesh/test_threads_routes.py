"""``GET /mesh/threads`` and ``GET /mesh/threads/{id}`` in-process on both databases: the shapes, who may see what
(the overseer's view open exactly where search's is), and bad input refused by name."""

from __future__ import annotations

import httpx
import pytest

from muster_mesh import FakeClock
from tests.mesh.support import auth, join, mesh_app
from tests.mesh.test_routes import problem
from tests.mesh.test_search_routes import send

pytestmark = pytest.mark.anyio

KEY = "k-123456789012345678901234"


async def threads(client: httpx.AsyncClient, token: str | None = None, **params: str) -> list[str]:
    r = await client.get("/mesh/threads", params=params, headers=auth(token) if token else {})
    assert r.status_code == 200, r.text
    return [t["thread_id"] for t in r.json()["threads"]]


async def test_threads_shapes_and_visibility(db_url: str) -> None:
    clock = FakeClock()
    async with mesh_app(db_url, clock) as client:
        a, b, c = [await join(client, n) for n in ("alice", "bob", "carol")]
        first = await send(client, a, "ship it?", to="bob", thread_id="rel-1")
        clock.advance(1)
        reply = await send(client, b, "<script>alert(1)</script> yes", to="alice", thread_id="rel-1")
        clock.advance(1)
        lone = await send(client, c, "hello bob", to="bob")
        r = await client.get("/mesh/threads", headers=auth(b))
        page = r.json()
        assert set(page) == {"threads", "next_cursor"} and page["next_cursor"] is None
        assert [t["thread_id"] for t in page["threads"]] == [lone, "rel-1"]
        rel = page["threads"][1]
        assert set(rel) == {"thread_id", "participants", "messages", "last_message"}
        assert rel["participants"] == ["alice", "bob"] and rel["messages"] == 2
        assert set(rel["last_message"]) == {"message_id", "from", "preview", "truncated", "sent_at"}
        assert (rel["last_message"]["message_id"], rel["last_message"]["from"]) == (reply, "bob")
        assert await threads(client, a) == ["rel-1"]
        assert await threads(client, view="all") == [lone, "rel-1"], "a keyless loopback service opens the view"
        assert await threads(client, view="all", agent="carol") == [lone]
        r = await client.get("/mesh/threads/rel-1", headers=auth(a))
        shown = r.json()
        assert set(shown) == {"thread_id", "messages", "next_cursor"}
        assert [(m["message_id"], m["from"], m["to"]) for m in shown["messages"]] == [
            (first, "alice", ["bob"]),
            (reply, "bob", ["alice"]),
        ]
        assert set(shown["messages"][0]) == {"message_id", "from", "to", "body", "thread_id", "sent_at"}
        problem(await client.get("/mesh/threads/rel-1", headers=auth(c)), 404, "thread_not_found")
        r = await client.get("/mesh/threads/rel-1", params={"view": "all", "agent": "carol"})
        problem(r, 404, "thread_not_found")
        assert (await client.get("/mesh/threads/rel-1", params={"view": "all"})).status_code == 200
        # A thread id is any printable ASCII: a slash in it, sent encoded, still names the one thread.
        await send(client, a, "odd name", to="bob", thread_id="team/a<b>")
        r = await client.get("/mesh/threads/team%2Fa%3Cb%3E", headers=auth(b))
        assert r.status_code == 200 and r.json()["thread_id"] == "team/a<b>", r.text


async def test_threads_refuse_bad_input_by_name(db_url: str) -> None:
    async with mesh_app(db_url, FakeClock()) as client:
        a = await join(client, "alice")
        problem(await client.get("/mesh/threads"), 401, "token_required")
        problem(await client.get("/mesh/threads/t"), 401, "token_required")
        for path, params, field in (
            ("/mesh/threads", {"limit": 0}, "limit"),
            ("/mesh/threads", {"view": "everyone"}, "view"),
            ("/mesh/threads", {"cursor": "-1"}, "cursor"),
            ("/mesh/threads", {"agent": "bob"}, "agent"),
            ("/mesh/threads", {"view": "all", "agent": "no spaces"}, "agent"),
            ("/mesh/threads", {"page": 2}, "page"),
            ("/mesh/threads/t", {"limit": 101}, "limit"),
            ("/mesh/threads/" + "x" * 129, {}, "thread_id"),
        ):
            body = problem(await client.get(path, params=params, headers=auth(a)), 422)
            assert field in {e["field"].split(".")[-1] for e in body["errors"]}, (params, body)


async def test_overseer_threads_need_a_key_or_a_loopback_service(db_url: str) -> None:
    async with mesh_app(db_url, FakeClock(), allow_open_bind=True) as client:
        problem(await client.get("/mesh/threads", params={"view": "all"}), 403, "overseer_only")
        problem(await client.get("/mesh/threads/t", params={"view": "all"}), 403, "overseer_only")
    async with mesh_app(db_url, FakeClock(), api_keys=[KEY]) as client:
        assert (await client.get("/mesh/threads", params={"view": "all"})).status_code == 401
        r = await client.get("/mesh/threads", params={"view": "all"}, headers={"X-API-Key": KEY})
        assert r.status_code == 200 and r.json()["threads"] == []
