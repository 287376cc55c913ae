"""What the dashboard stands on, over HTTP: the directory's ETag and 304, the unread backlog, the pages and their
local assets, and the API-key guard around them."""

from __future__ import annotations

import re

import pytest

from muster_mesh import FakeClock
from tests.mesh.support import auth, join, mesh_app

pytestmark = pytest.mark.anyio

LIST = "/mesh/agents?include_expired=true"


async def test_the_directory_answers_304_until_something_changes(db_url: str) -> None:
    clock = FakeClock()
    async with mesh_app(db_url, clock) as client:
        token = await join(client, "builder", status="writing")
        first = await client.get(LIST)
        tag = first.headers["etag"]
        assert tag.startswith('W/"') and first.headers["cache-control"] == "no-cache"

        clock.advance(30)  # only the ages move: they are not part of the tag
        again = await client.get(LIST, headers={"If-None-Match": tag})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag
        assert (await client.get(LIST, headers={"If-None-Match": f'"other", {tag}'})).status_code == 304
        assert (await client.get(LIST, headers={"If-None-Match": '"other"'})).status_code == 200

        renewed = await client.post(
            "/mesh/checkin", json={"agent_id": "builder", "status": "reviewing", "confirm": True}, headers=auth(token)
        )
        assert renewed.status_code == 200
        changed = await client.get(LIST, headers={"If-None-Match": tag})
        assert changed.status_code == 200 and changed.headers["etag"] != tag
        assert changed.json()["agents"][0]["status"] == "reviewing"

        # An expiry changes what the directory says (alive) even though no one called.
        tag = changed.headers["etag"]
        clock.advance(3600)
        expired = await client.get(LIST, headers={"If-None-Match": tag})
        assert expired.status_code == 200 and expired.json()["agents"][0]["alive"] is False


async def test_a_filtered_directory_has_its_own_tag(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        await join(client, "a", repo="one")
        await join(client, "b", repo="two")
        tag = (await client.get("/mesh/agents?repo=one")).headers["etag"]
        assert (await client.get("/mesh/agents?repo=one", headers={"If-None-Match": tag})).status_code == 304
        assert (await client.get("/mesh/agents?repo=two", headers={"If-None-Match": tag})).status_code == 200


async def test_backlog_counts_unread_messages_and_shows_nothing_else(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        sender = await join(client, "sender", repo="muster")
        reader = await join(client, "reader", repo="muster")
        for body in ("first secret", "second secret"):
            sent = await client.post(
                "/mesh/messages", json={"to": "reader", "body": body, "confirm": True}, headers=auth(sender)
            )
            assert sent.status_code == 200
        page = await client.get("/mesh/backlog")
        assert page.status_code == 200
        assert page.json() == {
            "agents": [{"agent_id": "reader", "unread": 2}, {"agent_id": "sender", "unread": 0}],
            "total": 2,
            "next_cursor": None,
        }
        assert "secret" not in page.text and sender not in page.text and reader not in page.text

        tag = page.headers["etag"]
        assert (await client.get("/mesh/backlog", headers={"If-None-Match": tag})).status_code == 304
        read = await client.get("/mesh/inbox?after=0", headers=auth(reader))
        acked = await client.post(
            "/mesh/inbox/ack", json={"cursor": read.json()["next_cursor"], "confirm": True}, headers=auth(reader)
        )
        assert acked.status_code == 200
        after = await client.get("/mesh/backlog", headers={"If-None-Match": tag})
        assert after.status_code == 200 and after.json()["total"] == 0

        one = await client.get("/mesh/backlog?limit=1")
        assert one.json()["next_cursor"] == "reader"
        assert (await client.get("/mesh/backlog?repo=elsewhere")).json()["agents"] == []
        refused = await client.get("/mesh/backlog?wait=1")
        assert refused.status_code == 422 and "wait" in refused.text


async def test_pages_and_assets_are_local(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        page = await client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "connect-src 'self'" in page.headers["content-security-policy"]
        docs = await client.get("/docs")
        assert docs.status_code == 200 and "validatorUrl" in docs.text
        for html in (page.text, docs.text):
            for url in re.findall(r'(?:src|href)="([^"#][^"]*)"', html):  # in-page links (#…) load nothing
                assert url.startswith("/"), url  # no asset from another host
                assert (await client.get(url)).status_code == 200, url
        assert (await client.get("/ui/swagger/LICENSE")).text.startswith("\n                                 Apache")
        assert (await client.get("/redoc")).status_code == 404


async def test_with_api_keys_the_pages_open_and_the_data_does_not(db_url: str) -> None:
    async with mesh_app(db_url, api_keys=["sekret-key"]) as client:
        for open_path in ("/", "/ui/dashboard.js", "/ui/swagger/swagger-ui.css"):
            assert (await client.get(open_path)).status_code == 200, open_path
            assert (await client.post(open_path)).status_code == 401, open_path  # reading only
        for closed in ("/mesh/agents", "/mesh/backlog", "/a2a/agents", "/docs", "/openapi.json"):
            assert (await client.get(closed)).status_code == 401, closed
            assert (await client.get(closed, headers={"X-API-Key": "sekret-key"})).status_code == 200, closed
