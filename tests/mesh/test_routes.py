"""The REST API of the mesh, in-process (lifespan running) on both databases with a fake clock."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import httpx
import pytest

from muster_mesh import FakeClock
from tests.mesh.support import AGENT_FIELDS, MESSAGE_FIELDS, auth, join, mesh_app

pytestmark = pytest.mark.anyio


def problem(r: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = r.json()
    if code is not None:
        assert body["code"] == code, body
    return body


async def test_checkin_list_send_read_ack_shapes(db_url: str) -> None:
    clock = FakeClock()
    async with mesh_app(db_url, clock) as client:
        preview = await client.post("/mesh/checkin", json={"agent_id": "qa", "role": "ping"})
        assert preview.status_code == 200
        assert set(preview.json()) == {"preview", "action", "agent"}
        assert preview.json()["preview"] is True and preview.json()["action"] == "create"
        assert set(preview.json()["agent"]) == AGENT_FIELDS and preview.json()["agent"]["ttl_seconds"] == 900
        assert (await client.get("/mesh/agents")).json() == {"agents": [], "next_cursor": None}

        first = await client.post(
            "/mesh/checkin",
            json={
                "agent_id": "qa",
                "role": "reviewer",
                "repo": "muster",
                "caps": ["merge"],
                "status": "reviewing #12",
                "confirm": True,
            },
        )
        assert set(first.json()) == AGENT_FIELDS | {"token"}
        qa = first.json()["token"]
        renewed = await client.post("/mesh/checkin", json={"agent_id": "qa", "confirm": True}, headers=auth(qa))
        assert set(renewed.json()) == AGENT_FIELDS, "the token is given once"
        builder = await join(client, "builder", role="builder", repo="muster")
        clock.advance(90)
        listing = (await client.get("/mesh/agents", headers=auth(builder))).json()
        assert set(listing) == {"agents", "next_cursor"} and listing["next_cursor"] is None
        by_id = {a["agent_id"]: a for a in listing["agents"]}
        assert all(set(a) == AGENT_FIELDS for a in listing["agents"])
        assert by_id["qa"]["status"] == "reviewing #12" and by_id["qa"]["caps"] == ["merge"]
        assert by_id["qa"]["heartbeat_age_seconds"] == 90 and by_id["qa"]["status_age_seconds"] == 90
        assert by_id["qa"]["alive"] is True and by_id["qa"]["ttl_seconds"] == 3600
        assert by_id["builder"]["heartbeat_age_seconds"] == 0, "listing with a token renewed the caller"
        one = await client.get("/mesh/agents/qa")
        assert one.json() == {**by_id["qa"]}
        problem(await client.get("/mesh/agents/nobody"), 404, "agent_not_found")

        sent = await client.post(
            "/mesh/messages",
            json={"role": "reviewer", "body": "PR ready", "thread_id": "pr-12", "confirm": True},
            headers=auth(builder),
        )
        assert sent.status_code == 200 and set(sent.json()) == {"message_id", "recipients", "stored", "followed"}
        assert sent.json()["stored"] == 1 and sent.json()["recipients"] == ["qa"]

        page = (await client.get("/mesh/inbox", headers=auth(qa))).json()
        assert set(page) == {"messages", "next_cursor", "has_more"}
        (message,) = page["messages"]
        assert set(message) == MESSAGE_FIELDS
        assert (message["seq"], message["from"], message["body"], message["thread_id"]) == (
            1,
            "builder",
            "PR ready",
            "pr-12",
        )
        assert message["message_id"] == sent.json()["message_id"]
        assert page["next_cursor"] == 1 and page["has_more"] is False
        acked = await client.post("/mesh/inbox/ack", json={"cursor": 1, "confirm": True}, headers=auth(qa))
        assert acked.json() == {"cursor": 1, "unread": 0}
        assert (await client.get("/mesh/inbox", headers=auth(qa))).json()["messages"] == []
        assert len((await client.get("/mesh/inbox?after=0", headers=auth(qa))).json()["messages"]) == 1


async def test_previews_change_nothing(db_url: str) -> None:
    clock = FakeClock()
    async with mesh_app(db_url, clock) as client:
        alice = await join(client, "alice", status="idle")
        bob = await join(client, "bob", role="qa")
        await client.post("/mesh/messages", json={"to": "bob", "body": "real", "confirm": True}, headers=auth(alice))
        clock.advance(30)

        async def roster() -> Any:
            # Without a token: reading the roster renews nobody.
            return (await client.get("/mesh/agents?include_expired=true")).json()

        previews: list[tuple[str, dict[str, Any], str | None, dict[str, Any]]] = [
            ("/mesh/checkin", {"agent_id": "alice", "status": "busy"}, alice, {"action": "renew"}),
            ("/mesh/checkin", {"agent_id": "carol", "role": "qa"}, None, {"action": "create"}),
            ("/mesh/checkin", {"agent_id": "bob", "takeover": True}, None, {"action": "takeover"}),
            ("/mesh/messages", {"role": "qa", "body": "x"}, alice, {"recipients": ["bob"]}),
            ("/mesh/messages", {"to": "bob", "body": "x"}, alice, {"recipients": ["bob"]}),
            ("/mesh/inbox/ack", {"cursor": 1}, bob, {"action": "ack", "cursor": 1}),
            ("/mesh/checkout", {}, bob, {"action": "checkout"}),
        ]
        for path, body, token, expected in previews:
            before = await roster()  # taken before EACH preview: any one that changed something is caught
            r = await client.post(path, json=body, headers=auth(token) if token else {})
            assert r.status_code == 200 and r.json()["preview"] is True, (path, body, r.text)
            assert expected.items() <= r.json().items(), (path, body, r.json())
            assert await roster() == before, f"the preview {path} {body} changed the roster"
        assert (await client.get("/mesh/agents/carol")).status_code == 404, "a create preview recorded nothing"
        page = (await client.get("/mesh/inbox", headers=auth(bob))).json()
        assert [m["body"] for m in page["messages"]] == ["real"], "nothing sent, cursor unmoved"


async def test_credentials_401_and_403(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        alice = await join(client, "alice")
        bob = await join(client, "bob")
        calls = [
            ("GET", "/mesh/inbox", None),
            ("GET", "/mesh/inbox/stream", None),
            ("POST", "/mesh/messages", {"to": "bob", "body": "x", "confirm": True}),
            ("POST", "/mesh/inbox/ack", {"cursor": 0, "confirm": True}),
            ("POST", "/mesh/checkout", {"confirm": True}),
        ]
        for method, path, body in calls:
            problem(await client.request(method, path, json=body), 401, "token_required")
            problem(await client.request(method, path, json=body, headers=auth("mst_forged")), 401, "invalid_token")
            basic = {"Authorization": "Basic YTpi"}
            problem(await client.request(method, path, json=body, headers=basic), 401, "invalid_token")
        problem(await client.get("/mesh/agents", headers=auth("mst_forged")), 401, "invalid_token")
        taken = problem(await client.post("/mesh/checkin", json={"agent_id": "alice", "confirm": True}), 401)
        assert taken["code"] == "agent_id_in_use" and "expires_at" in taken
        stolen = await client.post("/mesh/checkin", json={"agent_id": "alice", "confirm": True}, headers=auth(bob))
        problem(stolen, 403, "not_the_holder")
        assert (await client.get("/mesh/inbox", headers=auth(alice))).status_code == 200, "alice is untouched"


async def test_api_keys_guard_the_whole_api(db_url: str) -> None:
    async with mesh_app(db_url, api_keys=["k-team"]) as client:
        key = {"X-API-Key": "k-team"}
        problem(await client.post("/mesh/checkin", json={"agent_id": "a", "confirm": True}), 401)
        problem(await client.get("/mesh/agents", headers={"X-API-Key": "wrong"}), 403)
        r = await client.post("/mesh/checkin", json={"agent_id": "a", "confirm": True}, headers=key)
        token = r.json()["token"]
        problem(await client.get("/mesh/inbox", headers=key), 401, "token_required")
        assert (await client.get("/mesh/inbox", headers={**key, **auth(token)})).status_code == 200


async def test_token_isolation(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        alice = await join(client, "alice")
        bob = await join(client, "bob")
        carol = await join(client, "carol")
        for body in ("one", "two"):
            msg = {"to": "alice", "body": f"for alice {body}", "confirm": True}
            assert (await client.post("/mesh/messages", json=msg, headers=auth(carol))).status_code == 200
        # Bob's token only ever reads and acks bob's inbox: there is no way to name another inbox.
        for query in ("", "?after=0"):
            assert (await client.get(f"/mesh/inbox{query}", headers=auth(bob))).json()["messages"] == []
        problem(await client.get("/mesh/inbox?after=1", headers=auth(bob)), 422, "invalid_cursor")
        problem(await client.get("/mesh/inbox?agent_id=alice", headers=auth(bob)), 422)
        problem(await client.post("/mesh/inbox/ack", json={"cursor": 2, "confirm": True}, headers=auth(bob)), 422)
        extra = {"cursor": 0, "confirm": True, "agent_id": "alice"}
        problem(await client.post("/mesh/inbox/ack", json=extra, headers=auth(bob)), 422)
        problem(
            await client.post("/mesh/checkout", json={"confirm": True, "agent_id": "alice"}, headers=auth(bob)), 422
        )
        page = (await client.get("/mesh/inbox", headers=auth(alice))).json()
        assert [m["body"] for m in page["messages"]] == ["for alice one", "for alice two"]
        assert all(m["from"] == "carol" for m in page["messages"]), "the sender comes from the token"
        # Tokens never appear in listings.
        text = (await client.get("/mesh/agents?include_expired=true")).text + (
            await client.get("/mesh/agents/alice")
        ).text
        assert all(t not in text for t in (alice, bob, carol))
        assert "token" not in text


async def test_expiry_with_the_fake_clock(db_url: str) -> None:
    clock = FakeClock()
    async with mesh_app(db_url, clock) as client:
        alice = await join(client, "alice", ttl_seconds=7200)
        gone = await join(client, "gone", ttl_seconds=60, role="qa")
        clock.advance(61)
        assert [a["agent_id"] for a in (await client.get("/mesh/agents")).json()["agents"]] == ["alice"]
        everyone = (await client.get("/mesh/agents?include_expired=true")).json()["agents"]
        assert [(a["agent_id"], a["alive"]) for a in everyone] == [("alice", True), ("gone", False)]
        assert (await client.get("/mesh/agents/gone")).json()["alive"] is False
        send = {"to": "gone", "body": "hi", "confirm": True}
        expired = problem(await client.post("/mesh/messages", json=send, headers=auth(alice)), 409, "recipient_expired")
        assert "gone" in expired["detail"]
        shown = (await client.get("/mesh/agents/gone")).json()
        assert (expired["last_seen_at"], expired["wake_possible"]) == (
            shown["last_seen_at"].replace("Z", "+00:00"),
            False,
        )
        assert expired["lease_ended_at"] == shown["expires_at"].replace("Z", "+00:00")
        assert (await client.get("/mesh/inbox", headers=auth(alice))).json()["messages"] == [], "nothing stored"
        fan = await client.post(
            "/mesh/messages", json={"role": "qa", "body": "x", "confirm": True}, headers=auth(alice)
        )
        assert fan.json() == {"message_id": None, "recipients": [], "stored": 0, "followed": []}
        problem(await client.get("/mesh/inbox", headers=auth(gone)), 401, "lease_expired")
        nobody = {"to": "nobody", "body": "hi", "confirm": True}
        problem(await client.post("/mesh/messages", json=nobody, headers=auth(alice)), 404, "recipient_not_found")
        # Claimed anew: a new token and a fresh, empty inbox.
        fresh = await join(client, "gone")
        assert fresh != gone
        assert (await client.get("/mesh/inbox?after=0", headers=auth(fresh))).json()["messages"] == []


async def test_no_backlog(db_url: str) -> None:
    clock = FakeClock()
    async with mesh_app(db_url, clock) as client:
        alice = await join(client, "alice", ttl_seconds=7200)
        await join(client, "bob", ttl_seconds=60)
        msg = {"to": "bob", "body": "before", "confirm": True}
        await client.post("/mesh/messages", json=msg, headers=auth(alice))
        clock.advance(61)
        bob = await join(client, "bob")
        for query in ("", "?after=0"):
            assert (await client.get(f"/mesh/inbox{query}", headers=auth(bob))).json()["messages"] == []
        await client.post("/mesh/messages", json={**msg, "body": "after"}, headers=auth(alice))
        page = (await client.get("/mesh/inbox?after=0", headers=auth(bob))).json()
        assert [(m["seq"], m["body"]) for m in page["messages"]] == [(2, "after")]


async def test_checkout(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        alice = await join(client, "alice")
        bob = await join(client, "bob")
        out = await client.post("/mesh/checkout", json={"confirm": True}, headers=auth(bob))
        assert out.status_code == 200 and out.json()["agent"]["alive"] is False
        assert [a["agent_id"] for a in (await client.get("/mesh/agents")).json()["agents"]] == ["alice"]
        problem(await client.get("/mesh/inbox", headers=auth(bob)), 401, "lease_expired")
        msg = {"to": "bob", "body": "x", "confirm": True}
        problem(await client.post("/mesh/messages", json=msg, headers=auth(alice)), 409, "recipient_expired")


async def test_idempotency(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        alice = await join(client, "alice")
        bob = await join(client, "bob")
        msg = {"to": "bob", "body": "once", "confirm": True}
        headers = {**auth(alice), "Idempotency-Key": "retry-1"}
        first = await client.post("/mesh/messages", json=msg, headers=headers)
        assert "idempotent-replayed" not in first.headers
        again = await client.post("/mesh/messages", json={**msg, "idempotency_key": "retry-1"}, headers=auth(alice))
        assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
        assert len((await client.get("/mesh/inbox", headers=auth(bob))).json()["messages"]) == 1
        changed = await client.post("/mesh/messages", json={**msg, "body": "other"}, headers=headers)
        problem(changed, 409, "idempotency_conflict")
        mismatch = {**msg, "idempotency_key": "retry-2"}
        problem(await client.post("/mesh/messages", json=mismatch, headers=headers), 422, "invalid_request")

        checkin = {"agent_id": "carol", "role": "qa", "confirm": True}
        made = await client.post("/mesh/checkin", json=checkin, headers={"Idempotency-Key": "c-1"})
        assert made.json()["token"]
        # The token was given once and only its hash is kept: the retry is told so, and how to get another.
        retried = problem(
            await client.post("/mesh/checkin", json=checkin, headers={"Idempotency-Key": "c-1"}),
            409,
            "token_given_once",
        )
        assert "takeover: true" in retried["detail"] and made.json()["token"] not in str(retried)
        # A renewal (with the token) made no token: its retry replays the record.
        renew = {"agent_id": "carol", "status": "renewed", "confirm": True}
        key = {**auth(made.json()["token"]), "Idempotency-Key": "c-2"}
        first = await client.post("/mesh/checkin", json=renew, headers=key)
        replay = await client.post("/mesh/checkin", json=renew, headers=key)
        assert replay.headers["idempotent-replayed"] == "true" and replay.json() == first.json()
        other = await client.post("/mesh/checkin", json={**checkin, "role": "x"}, headers={"Idempotency-Key": "c-1"})
        problem(other, 409, "idempotency_conflict")
        ack = {"cursor": 1, "confirm": True}
        key = {**auth(bob), "Idempotency-Key": "a-1"}
        assert (await client.post("/mesh/inbox/ack", json=ack, headers=key)).json() == {"cursor": 1, "unread": 0}
        assert (await client.post("/mesh/inbox/ack", json=ack, headers=key)).headers["idempotent-replayed"] == "true"


async def test_long_poll_answers_when_a_message_arrives(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        alice = await join(client, "alice")
        bob = await join(client, "bob")
        empty = await client.get("/mesh/inbox?wait_seconds=0.2", headers=auth(bob))
        assert empty.status_code == 200 and empty.json() == {"messages": [], "next_cursor": 0, "has_more": False}
        answers: list[httpx.Response] = []

        async def poll() -> None:
            answers.append(await client.get("/mesh/inbox?wait_seconds=30", headers=auth(bob)))

        mesh = client._transport.app.state.mesh  # type: ignore[attr-defined]
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll)
                while mesh.notifier.waiting == 0:
                    await anyio.sleep(0.01)
                msg = {"to": "bob", "body": "ping", "confirm": True}
                assert (await client.post("/mesh/messages", json=msg, headers=auth(alice))).json()["stored"] == 1
        assert [m["body"] for m in answers[0].json()["messages"]] == ["ping"]


BIG = "x" * (64 * 1024 + 1)
CHECKIN_CASES: list[tuple[dict[str, Any], int, str, str]] = [
    ({"role": "builder"}, 422, "agent_id", "missing"),
    ({"agent_id": "has space"}, 422, "agent_id", "string_pattern_mismatch"),
    ({"agent_id": "a" * 65}, 422, "agent_id", "string_pattern_mismatch"),
    ({"agent_id": 7}, 422, "agent_id", "string_type"),
    ({"agent_id": "a", "role": "bad role"}, 422, "role", "string_pattern_mismatch"),
    ({"agent_id": "a", "repo": ""}, 422, "repo", "string_too_short"),
    ({"agent_id": "a", "repo": "r" * 201}, 422, "repo", "string_too_long"),
    ({"agent_id": "a", "repo": "bad\x07"}, 422, "repo", "string_pattern_mismatch"),
    ({"agent_id": "a", "caps": "merge"}, 422, "caps", "list_type"),
    ({"agent_id": "a", "caps": [f"c{i}" for i in range(33)]}, 422, "caps", "too_long"),
    ({"agent_id": "a", "caps": ["ok", "no spaces"]}, 422, "caps.1", "string_pattern_mismatch"),
    ({"agent_id": "a", "status": "x" * 281}, 422, "status", "string_too_long"),
    ({"agent_id": "a", "status": "two\nlines"}, 422, "status", "string_pattern_mismatch"),
    ({"agent_id": "a", "ttl_seconds": 59}, 422, "ttl_seconds", "greater_than_equal"),
    ({"agent_id": "a", "ttl_seconds": 86401}, 422, "ttl_seconds", "less_than_equal"),
    ({"agent_id": "a", "ttl_seconds": 1.5}, 422, "ttl_seconds", "int_from_float"),
    ({"agent_id": "a", "confirm": "maybe"}, 422, "confirm", "bool_type"),
    ({"agent_id": "a", "confirm": "true"}, 422, "confirm", "bool_type"),
    ({"agent_id": "a", "confirm": 1}, 422, "confirm", "bool_type"),
    ({"agent_id": "a", "status": "red \x1b[31m"}, 422, "status", "string_pattern_mismatch"),
    ({"agent_id": "a", "status": "nul\x00"}, 422, "status", "string_pattern_mismatch"),
    ({"agent_id": "a", "status": "tab\there"}, 422, "status", "string_pattern_mismatch"),
    ({"agent_id": "a", "status": "c1 \x9b"}, 422, "status", "string_pattern_mismatch"),
    ({"agent_id": "a", "status": "evil\u202egnp.exe"}, 422, "status", "string_pattern_mismatch"),
    ({"agent_id": "a", "repo": "c1\x85"}, 422, "repo", "string_pattern_mismatch"),
    ({"agent_id": "a", "repo": "r\u202eo"}, 422, "repo", "string_pattern_mismatch"),
    ({"agent_id": "a", "repo": "r\u2066o"}, 422, "repo", "string_pattern_mismatch"),
    ({"agent_id": "a\u202e"}, 422, "agent_id", "string_pattern_mismatch"),
    ({"agent_id": "a", "role": "r\x00"}, 422, "role", "string_pattern_mismatch"),
    ({"agent_id": "a", "caps": ["c\x1b"]}, 422, "caps.0", "string_pattern_mismatch"),
    # The pane id is local to the agent's machine: the backend refuses to even receive it.
    ({"agent_id": "a", "herdr_pane": "%3"}, 422, "herdr_pane", "extra_forbidden"),
    ({"agent_id": "a", "idempotency_key": "k"}, 422, "idempotency_key", "extra_forbidden"),
]
SEND_CASES: list[tuple[dict[str, Any], int, str, str]] = [
    ({"body": "x"}, 422, "to", "exactly_one_address"),
    ({"to": "b", "role": "qa", "body": "x"}, 422, "to", "exactly_one_address"),
    ({"to": "bad id", "body": "x"}, 422, "to", "string_pattern_mismatch"),
    ({"role": "bad role", "body": "x"}, 422, "role", "string_pattern_mismatch"),
    ({"repo": "", "body": "x"}, 422, "repo", "string_too_short"),
    ({"cap": "a b", "body": "x"}, 422, "cap", "string_pattern_mismatch"),
    ({"to": "b"}, 422, "body", "missing"),
    ({"to": "b", "body": ""}, 422, "body", "string_too_short"),
    ({"to": "b", "body": 5}, 422, "body", "string_type"),
    ({"to": "b", "body": BIG}, 413, "body", "message_too_large"),
    ({"to": "b", "body": "x", "thread_id": "t" * 129}, 422, "thread_id", "string_too_long"),
    ({"to": "b", "body": "x", "idempotency_key": "k k"}, 422, "idempotency_key", "string_pattern_mismatch"),
    ({"to": "b", "body": "x", "confirm": "yes please"}, 422, "confirm", "bool_type"),
    ({"to": "b", "body": "x", "confirm": "yes"}, 422, "confirm", "bool_type"),
    ({"to": "b", "body": "x", "confirm": 1}, 422, "confirm", "bool_type"),
    ({"to": "b", "body": "nul\x00here", "confirm": True}, 422, "body", "string_pattern_mismatch"),
    ({"to": "b", "body": "x", "thread_id": "t\x00"}, 422, "thread_id", "string_pattern_mismatch"),
    ({"to": "b", "body": "x", "thread_id": "t\u202e"}, 422, "thread_id", "string_pattern_mismatch"),
    ({"repo": "r\x9b", "body": "x"}, 422, "repo", "string_pattern_mismatch"),
    ({"to": "b", "body": "x", "subject": "s"}, 422, "subject", "extra_forbidden"),
    ({"to": "b", "body": "x", "from": "alice"}, 422, "from", "extra_forbidden"),
]
ACK_CASES: list[tuple[dict[str, Any], int, str, str]] = [
    ({}, 422, "cursor", "missing"),
    ({"cursor": -1}, 422, "cursor", "greater_than_equal"),
    ({"cursor": "last"}, 422, "cursor", "int_parsing"),
    ({"cursor": 99, "confirm": True}, 422, "cursor", "invalid_cursor"),
    ({"cursor": 0, "confirm": "perhaps"}, 422, "confirm", "bool_type"),
    ({"cursor": 0, "confirm": 1}, 422, "confirm", "bool_type"),
    ({"cursor": 2**63, "confirm": True}, 422, "cursor", "less_than_equal"),
    ({"cursor": 0, "extra": 1}, 422, "extra", "extra_forbidden"),
]
# Only JSON true checks an agent out: a string or a number that reads as yes is refused, and nothing changes.
CHECKOUT_CASES: list[tuple[dict[str, Any], int, str, str]] = [
    ({"confirm": "yes"}, 422, "confirm", "bool_type"),
    ({"confirm": "true"}, 422, "confirm", "bool_type"),
    ({"confirm": 1}, 422, "confirm", "bool_type"),
    ({"confirm": 1.0}, 422, "confirm", "bool_type"),
]
QUERY_CASES: list[tuple[str, str, str]] = [
    ("/mesh/inbox?after=-1", "after", "greater_than_equal"),
    ("/mesh/inbox?after=x", "after", "int_parsing"),
    ("/mesh/inbox?after=9223372036854775808", "after", "less_than_equal"),
    ("/mesh/inbox?after=99999999999999999999999999", "after", "less_than_equal"),
    ("/mesh/inbox?after=9223372036854775807", "after", "invalid_cursor"),
    ("/mesh/inbox?after=1", "after", "invalid_cursor"),
    ("/mesh/inbox/stream?after=9223372036854775808", "after", "less_than_equal"),
    ("/mesh/inbox?limit=0", "limit", "greater_than_equal"),
    ("/mesh/inbox?limit=501", "limit", "less_than_equal"),
    ("/mesh/inbox?wait_seconds=61", "wait_seconds", "less_than_equal"),
    ("/mesh/inbox?wait_seconds=-1", "wait_seconds", "greater_than_equal"),
    ("/mesh/inbox?wait=30", "wait", "extra_forbidden"),
    ("/mesh/agents?limit=0", "limit", "greater_than_equal"),
    ("/mesh/agents?limit=501", "limit", "less_than_equal"),
    ("/mesh/agents?cursor=bad%20id", "cursor", "string_pattern_mismatch"),
    ("/mesh/agents?role=bad%20role", "role", "string_pattern_mismatch"),
    ("/mesh/agents?cap=a%20b", "cap", "string_pattern_mismatch"),
    ("/mesh/agents?include_expired=perhaps", "include_expired", "bool_parsing"),
    ("/mesh/agents?status=x", "status", "extra_forbidden"),
    ("/mesh/agents/bad%20id", "agent_id", "string_pattern_mismatch"),
]


def rule_of(body: dict[str, Any]) -> set[tuple[str, str]]:
    if "errors" in body:
        return {(e["field"], e["rule"]) for e in body["errors"]}
    return {(body.get("field", "?"), body["code"])}


async def test_bad_input_of_every_field_names_field_and_rule(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        token = await join(client, "alice")
        await join(client, "b")
        for cases, path in (
            (CHECKIN_CASES, "/mesh/checkin"),
            (SEND_CASES, "/mesh/messages"),
            (ACK_CASES, "/mesh/inbox/ack"),
            (CHECKOUT_CASES, "/mesh/checkout"),
        ):
            for body, status, field, rule in cases:
                r = await client.post(path, json=body, headers=auth(token) if path != "/mesh/checkin" else {})
                assert rule_of(problem(r, status)) == {(field, rule)}, (path, body, r.text)
        for url, field, rule in QUERY_CASES:
            r = await client.get(url, headers=auth(token))
            assert rule_of(problem(r, 422)) == {(field, rule)}, (url, r.text)
        problem(await client.post("/mesh/checkout", json={"confirm": True, "x": 1}, headers=auth(token)), 422)
        problem(await client.post("/mesh/messages", content=b"{not json", headers=auth(token)), 422)
        # Nothing above was stored.
        assert (await client.get("/mesh/inbox?after=0", headers=auth(token))).json()["messages"] == []
        assert [a["agent_id"] for a in (await client.get("/mesh/agents")).json()["agents"]] == ["alice", "b"]


async def test_tokens_never_reach_the_log(tmp_path: object, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="muster")
    async with mesh_app(f"sqlite:///{tmp_path}/l.db") as client:
        token = await join(client, "alice")
        await client.get("/mesh/inbox", headers=auth(token))
        await client.get("/mesh/inbox", headers=auth(token + "x"))
        await client.post("/mesh/checkin", json={"agent_id": "alice", "confirm": True}, headers=auth(token))
    assert caplog.records, "the access log should have written lines"
    assert all(token not in r.getMessage() for r in caplog.records)


async def test_a_message_to_oneself_is_delivered(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        alice = await join(client, "alice")
        for key in (None, "self-1"):
            headers = auth(alice) if key is None else {**auth(alice), "Idempotency-Key": key}
            note = {"to": "alice", "body": f"note to self {key}", "confirm": True}
            sent = await client.post("/mesh/messages", json=note, headers=headers)
            assert sent.status_code == 200, sent.text
            assert sent.json()["recipients"] == ["alice"] and sent.json()["stored"] == 1
        preview = await client.post("/mesh/messages", json={"to": "alice", "body": "x"}, headers=auth(alice))
        assert preview.json() == {"preview": True, "action": "send", "recipients": ["alice"]}
        page = (await client.get("/mesh/inbox", headers=auth(alice))).json()
        assert [(m["seq"], m["from"], m["body"]) for m in page["messages"]] == [
            (1, "alice", "note to self None"),
            (2, "alice", "note to self self-1"),
        ]


async def test_bodies_keep_newlines_and_tabs(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        alice = await join(client, "alice")
        await join(client, "bob")
        text = "line one\n\tindented\r\nwindows line é ✓"
        sent = await client.post(
            "/mesh/messages", json={"to": "alice", "body": text, "confirm": True}, headers=auth(alice)
        )
        assert sent.status_code == 200
        (message,) = (await client.get("/mesh/inbox", headers=auth(alice))).json()["messages"]
        assert message["body"] == text


async def test_a_read_cursor_beyond_the_inbox_is_refused(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        alice = await join(client, "alice")
        bob = await join(client, "bob")
        await client.post("/mesh/messages", json={"to": "bob", "body": "one", "confirm": True}, headers=auth(alice))
        assert len((await client.get("/mesh/inbox?after=0", headers=auth(bob))).json()["messages"]) == 1
        assert (await client.get("/mesh/inbox?after=1", headers=auth(bob))).json()["messages"] == []
        beyond = problem(await client.get("/mesh/inbox?after=2", headers=auth(bob)), 422, "invalid_cursor")
        assert (beyond["field"], beyond["cursor"], beyond["last_seq"]) == ("after", 2, 1)
        problem(await client.get("/mesh/inbox?after=2&wait_seconds=1", headers=auth(bob)), 422, "invalid_cursor")
        problem(await client.get("/mesh/inbox/stream", headers={**auth(bob), "Last-Event-ID": "5"}), 422)
        bad = await client.get("/mesh/inbox/stream", headers={**auth(bob), "Last-Event-ID": "9223372036854775808"})
        assert rule_of(problem(bad, 422)) == {("Last-Event-ID", "int_parsing")}


async def test_fan_out_is_rate_limited_per_sender(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_MESH_FANOUT_PER_MINUTE", "3")
    clock = FakeClock()
    async with mesh_app(db_url, clock) as client:
        runaway = await join(client, "runaway")
        calm = await join(client, "calm")
        qa = await join(client, "qa", role="qa")
        fan = {"role": "qa", "body": "x", "confirm": True}
        for _ in range(3):
            assert (await client.post("/mesh/messages", json=fan, headers=auth(runaway))).status_code == 200
        # Previews and direct messages do not count and are not limited.
        preview = await client.post("/mesh/messages", json={"role": "qa", "body": "x"}, headers=auth(runaway))
        assert preview.status_code == 200
        direct = {"to": "qa", "body": "x", "confirm": True}
        assert (await client.post("/mesh/messages", json=direct, headers=auth(runaway))).status_code == 200
        limited = await client.post("/mesh/messages", json=fan, headers=auth(runaway))
        body = problem(limited, 429, "rate_limited")
        assert limited.headers["retry-after"] == "20" and body["per_minute"] == 3
        assert (await client.post("/mesh/messages", json=fan, headers=auth(calm))).status_code == 200, "per sender"
        clock.advance(20)
        assert (await client.post("/mesh/messages", json=fan, headers=auth(runaway))).status_code == 200
        problem(await client.post("/mesh/messages", json=fan, headers=auth(runaway)), 429, "rate_limited")
        stored = (await client.get("/mesh/inbox?limit=500", headers=auth(qa))).json()["messages"]
        assert [m["from"] for m in stored] == ["runaway"] * 4 + ["calm", "runaway"], "refused sends stored nothing"


async def test_a_lost_token_is_taken_over(db_url: str) -> None:
    clock = FakeClock()
    async with mesh_app(db_url, clock) as client:
        lost = await join(client, "alice", role="builder", status="building")
        bob = await join(client, "bob")
        await client.post("/mesh/messages", json={"to": "alice", "body": "unread", "confirm": True}, headers=auth(bob))
        taken = problem(await client.post("/mesh/checkin", json={"agent_id": "alice", "confirm": True}), 401)
        assert taken["code"] == "agent_id_in_use" and "takeover: true" in taken["detail"]
        problem(await client.post("/mesh/checkin", json={"agent_id": "alice", "takeover": "yes", "confirm": True}), 422)
        before = (await client.get("/mesh/agents")).json()
        preview = await client.post("/mesh/checkin", json={"agent_id": "alice", "takeover": True})
        assert preview.json()["preview"] is True and preview.json()["action"] == "takeover"
        assert (await client.get("/mesh/agents")).json() == before, "the preview took nothing over"
        assert (await client.get("/mesh/inbox", headers=auth(lost))).status_code == 200, "the old token still works"
        stolen = {"agent_id": "alice", "takeover": True, "confirm": True}
        problem(await client.post("/mesh/checkin", json=stolen, headers=auth(bob)), 403, "not_the_holder")

        clock.advance(10)
        took = await client.post("/mesh/checkin", json={"agent_id": "alice", "takeover": True, "confirm": True})
        assert took.status_code == 200, took.text
        fresh = took.json()["token"]
        assert fresh and fresh != lost
        assert (took.json()["role"], took.json()["status"]) == ("builder", "building"), "unset fields carry over"
        page = (await client.get("/mesh/inbox", headers=auth(fresh))).json()
        assert [m["body"] for m in page["messages"]] == ["unread"], "the inbox carries over"

        old_calls = [
            ("GET", "/mesh/inbox", None),
            ("GET", "/mesh/agents", None),
            ("POST", "/mesh/messages", {"to": "bob", "body": "x", "confirm": True}),
            ("POST", "/mesh/messages", {"to": "alice", "body": "x", "confirm": True}),
            ("POST", "/mesh/messages", {"role": "none", "body": "x", "confirm": True}),
            ("POST", "/mesh/inbox/ack", {"cursor": 0, "confirm": True}),
            ("POST", "/mesh/checkin", {"agent_id": "alice", "confirm": True}),
            ("POST", "/mesh/checkout", {"confirm": True}),
        ]
        for method, path, body in old_calls:
            r = await client.request(method, path, json=body, headers=auth(lost))
            gone = problem(r, 401, "superseded")
            assert gone["agent_id"] == "alice" and gone["superseded_at"], (method, path)
        assert (await client.get("/mesh/inbox", headers=auth(fresh))).status_code == 200
        assert (await client.get("/mesh/inbox", headers=auth(bob))).json()["messages"] == [], "nothing was sent"


async def test_receipts_for_the_sender_and_recipients_only(db_url: str) -> None:
    clock = FakeClock()
    async with mesh_app(db_url, clock) as client:
        alice = await join(client, "alice")
        bob = await join(client, "bob", role="rev")
        carol = await join(client, "carol", role="rev")
        eve = await join(client, "eve")
        sent = await client.post(
            "/mesh/messages", json={"role": "rev", "body": "look", "confirm": True}, headers=auth(alice)
        )
        message_id = sent.json()["message_id"]
        clock.advance(3)
        assert (await client.get("/mesh/inbox", headers=auth(bob))).json()["messages"][0]["message_id"] == message_id
        shown = await client.get(f"/mesh/messages/{message_id}", headers=auth(alice))
        assert shown.status_code == 200, shown.text
        body = shown.json()
        assert set(body) == {"message_id", "from", "thread_id", "sent_at", "receipts"} and body["from"] == "alice"
        by_agent = {r["agent_id"]: r for r in body["receipts"]}
        assert set(by_agent) == {"bob", "carol"}
        assert set(by_agent["bob"]) == {"agent_id", "stored_at", "woken_at", "read_at", "acknowledged_at"}
        assert by_agent["bob"]["stored_at"] == body["sent_at"] and by_agent["bob"]["read_at"] is not None
        assert by_agent["carol"]["read_at"] is None
        own = (await client.get(f"/mesh/messages/{message_id}", headers=auth(carol))).json()
        assert [r["agent_id"] for r in own["receipts"]] == ["carol"], "a recipient sees its own receipt"
        # Anyone else: the very answer an unknown id gets, but for the id itself.
        hidden = problem(await client.get(f"/mesh/messages/{message_id}", headers=auth(eve)), 404, "message_not_found")
        unknown = problem(await client.get(f"/mesh/messages/{'f' * 32}", headers=auth(eve)), 404, "message_not_found")
        assert hidden.keys() == unknown.keys()
        assert {k: v for k, v in hidden.items() if "message" not in k and k != "detail" and k != "instance"} == {
            k: v for k, v in unknown.items() if "message" not in k and k != "detail" and k != "instance"
        }
        problem(await client.get(f"/mesh/messages/{message_id}"), 401, "token_required")
        bad = problem(await client.get("/mesh/messages/not-an-id", headers=auth(alice)), 422)
        assert "message_id" in str(bad)
