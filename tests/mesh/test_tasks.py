"""Tasks with one owner over REST on both databases: post, claim with a fencing token, done / fail / release with a
stale token refused, the end of the holder's lease (reclaimed with a higher token, the old one refused), the
attempts cap, the poster's messages and the history; and 50 concurrent claimers across two server processes."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from muster_api.settings import MeshSettings
from muster_mesh import FakeClock
from tests.mesh.support import auth, join, mesh_app, server_process
from tests.mesh.test_routes import problem

pytestmark = pytest.mark.anyio


async def post(client: httpx.AsyncClient, token: str, title: str = "t", **fields: Any) -> dict[str, Any]:
    body = {"title": title, "body": "do it", "confirm": True, **fields}
    r = await client.post("/mesh/tasks", json=body, headers=auth(token))
    assert r.status_code == 200, r.text
    task: dict[str, Any] = r.json()["task"]
    return task


async def claim(client: httpx.AsyncClient, token: str, **filters: Any) -> dict[str, Any] | None:
    r = await client.post("/mesh/tasks/claim", json={"confirm": True, **filters}, headers=auth(token))
    assert r.status_code == 200, r.text
    task: dict[str, Any] | None = r.json()["task"]
    return task


async def test_claim_fence_finish_and_the_posters_messages(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        boss = await join(client, "boss")
        w1 = await join(client, "w1", role="builder")
        w2 = await join(client, "w2", role="builder")
        await join(client, "qa", role="reviewer")
        low = await post(client, boss, "low", role="builder", priority=1)
        high = await post(client, boss, "high", role="builder", priority=5)
        assert (
            await client.post("/mesh/tasks", json={"title": "x", "body": "y", "to": "w1"}, headers=auth(boss))
        ).json()["preview"]
        got = await claim(client, w1)
        assert got is not None and got["id"] == high["id"] and got["token"] == 1 and got["holder"] == "w1"
        second = await claim(client, w2)
        assert second is not None and second["id"] == low["id"]
        assert await claim(client, w2) is None  # nothing else is addressed to a builder
        # Another agent's token, or a wrong one, is stale.
        stale = await client.post(
            f"/mesh/tasks/{high['id']}/done", json={"token": 1, "confirm": True}, headers=auth(w2)
        )
        problem(stale, 409, "stale_claim")
        wrong = await client.post(
            f"/mesh/tasks/{high['id']}/done", json={"token": 2, "confirm": True}, headers=auth(w1)
        )
        problem(wrong, 409, "stale_claim")
        done = await client.post(
            f"/mesh/tasks/{high['id']}/done", json={"token": 1, "result": "shipped", "confirm": True}, headers=auth(w1)
        )
        assert done.json()["task"]["state"] == "done"
        failed = await client.post(
            f"/mesh/tasks/{low['id']}/fail", json={"token": 1, "reason": "no disk", "confirm": True}, headers=auth(w2)
        )
        assert failed.json()["task"]["state"] == "failed"
        inbox = (await client.get("/mesh/inbox", headers=auth(boss))).json()["messages"]
        assert [(m["from"], m["thread_id"]) for m in inbox] == [
            ("w1", f"task:{high['id']}"),
            ("w2", f"task:{low['id']}"),
            ("w1", f"task:{high['id']}"),
            ("w2", f"task:{low['id']}"),
        ]
        assert "shipped" in inbox[2]["body"] and "no disk" in inbox[3]["body"]
        detail = (await client.get(f"/mesh/tasks/{high['id']}")).json()
        assert [e["kind"] for e in detail["history"]] == ["posted", "claimed", "done"]
        listed = (await client.get("/mesh/tasks", params={"state": "done"})).json()["tasks"]
        assert [t["id"] for t in listed] == [high["id"]]
        problem(await client.get(f"/mesh/tasks/{'0' * 32}"), 404, "task_not_found")


async def test_lease_end_reclaims_with_a_higher_token_and_the_cap_fails_it(db_url: str) -> None:
    clock = FakeClock()
    async with mesh_app(db_url, clock, mesh=MeshSettings(task_max_attempts=2)) as client:
        boss = await join(client, "boss", ttl_seconds=86400)
        task = await post(client, boss, "flaky", cap="deploy")
        short = await join(client, "short", caps=["deploy"], ttl_seconds=60)
        first = await claim(client, short)
        assert first is not None and first["token"] == 1
        clock.advance(61)
        listed = (await client.get(f"/mesh/tasks/{task['id']}")).json()
        assert (listed["state"], listed["attempts"]) == ("open", 1)
        other = await join(client, "other", caps=["deploy"], ttl_seconds=60)
        second = await claim(client, other)
        assert second is not None and second["id"] == task["id"] and second["token"] == 2
        # The first holder, back with a new session, cannot finish with its old token.
        short = await join(client, "short", caps=["deploy"], ttl_seconds=60)
        old = await client.post(
            f"/mesh/tasks/{task['id']}/done", json={"token": 1, "confirm": True}, headers=auth(short)
        )
        problem(old, 409, "stale_claim")
        clock.advance(61)
        third = await join(client, "third", caps=["deploy"])
        assert await claim(client, third) is None  # two holders lost: the cap
        shown = (await client.get(f"/mesh/tasks/{task['id']}")).json()
        assert shown["state"] == "failed" and "attempts cap" in shown["reason"]


async def test_checkout_gives_the_task_back(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        boss = await join(client, "boss")
        a = await join(client, "a", repo="r")
        b = await join(client, "b", repo="r")
        task = await post(client, boss, repo="r")
        assert (await claim(client, a)) is not None
        await client.post("/mesh/checkout", json={"confirm": True}, headers=auth(a))
        again = await claim(client, b)
        assert again is not None and again["id"] == task["id"] and again["token"] == 2


async def poster_heard(client: httpx.AsyncClient, token: str, task_id: str) -> bool:
    r = await client.get("/mesh/inbox", params={"limit": 100}, headers=auth(token))
    assert r.status_code == 200, r.text
    return any(m["thread_id"] == f"task:{task_id}" for m in r.json()["messages"])


async def test_fifty_claimers_across_two_server_processes(db_url: str) -> None:
    """Each task has exactly one owner: none lost, none given twice (PostgreSQL: SKIP LOCKED between instances;
    SQLite: the write lock between processes). The poster's message is in its inbox when each claim answers, and
    the fifty take the sequences 1 to 50, one each (on PostgreSQL the two instances deliver them in shared
    statements, each waiting for the other's)."""
    with server_process(db_url) as one, server_process(db_url) as two:
        limits = httpx.Limits(max_connections=64)
        async with (
            httpx.AsyncClient(base_url=one.base_url, timeout=60, limits=limits) as c1,
            httpx.AsyncClient(base_url=two.base_url, timeout=60, limits=limits) as c2,
        ):
            boss = await join(c1, "boss")
            posted = {(await post(c1, boss, f"t{i}", role="worker"))["id"] for i in range(50)}
            tokens = [await join(c1 if i % 2 else c2, f"w{i}", role="worker") for i in range(50)]
            got: dict[str, str | None] = {}

            heard: dict[str, bool] = {}

            async def take(i: int) -> None:
                task = await claim(c1 if i % 2 else c2, tokens[i])
                got[f"w{i}"] = task["id"] if task else None
                if task is not None:
                    heard[task["id"]] = await poster_heard(c2 if i % 2 else c1, boss, task["id"])

            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(take, i)
            inbox = (await c1.get("/mesh/inbox", params={"limit": 100}, headers=auth(boss))).json()["messages"]
    owned = [t for t in got.values() if t is not None]
    assert len(owned) == 50 and set(owned) == posted  # every claimer got one, and no task twice
    assert heard == dict.fromkeys(posted, True)
    assert [m["seq"] for m in inbox] == list(range(1, 51))
    assert sorted(m["thread_id"] for m in inbox) == sorted(f"task:{t}" for t in posted)
