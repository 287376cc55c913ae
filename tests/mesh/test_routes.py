"""The mesh over REST, on both databases: the tool contract, problem+json for every refusal, long-poll."""

from __future__ import annotations

import anyio
import httpx
import pytest

from muster_mesh.testing import ManualClock
from tests.mesh.support import auth, join, mesh_app

pytestmark = pytest.mark.anyio


def problem(r: httpx.Response, status: int, code: str | None = None) -> dict[str, object]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body: dict[str, object] = r.json()
    if code is not None:
        assert body["code"] == code, body
    return body


async def test_checkin_list_send_read_ack(db_url: str) -> None:
    clock = ManualClock()
    async with mesh_app(db_url, clock) as client:
        preview = await client.post("/mesh/checkin", json={"agent_id": "qa", "role": "ping"})
        assert preview.status_code == 200
        assert preview.json()["preview"] is True and preview.json()["token"] is None
        assert preview.json()["ttl_seconds"] == 900 and preview.json()["action"] == "create"
        assert (await client.get("/mesh/agents")).json()["agents"] == []

        qa = await join(client, "qa", role="reviewer", repo="muster", caps=["merge"], status="reviewing #12")
        builder = await join(client, "builder", role="builder", repo="muster")
        clock.advance(90)
        listing = (await client.get("/mesh/agents", headers=auth(builder))).json()["agents"]
        by_id = {a["agent_id"]: a for a in listing}
        assert by_id["qa"]["status"] == "reviewing #12"
        assert by_id["qa"]["heartbeat_age_seconds"] == 90 and by_id["qa"]["status_age_seconds"] == 90
        assert by_id["builder"]["heartbeat_age_seconds"] == 0, "listing with a token renewed the caller"

        sent = await client.post(
            "/mesh/messages",
            json={"to": {"role": "reviewer"}, "body": "PR ready", "confirm": True},
            headers=auth(builder),
        )
        assert sent.status_code == 200 and sent.json()["stored"] == 1 and sent.json()["recipients"] == ["qa"]

        page = (await client.get("/mesh/inbox", headers=auth(qa))).json()
        assert [(m["seq"], m["sender"], m["body"]) for m in page["messages"]] == [(1, "builder", "PR ready")]
        assert page["next_cursor"] == 1 and page["has_more"] is False and page["unread"] == 1
        acked = await client.post("/mesh/inbox/ack", json={"cursor": 1, "confirm": True}, headers=auth(qa))
        assert acked.json()["cursor"] == 1 and acked.json()["unread"] == 0
        assert (await client.get("/mesh/inbox", headers=auth(qa))).json()["messages"] == []
        assert len((await client.get("/mesh/inbox?after=0", headers=auth(qa))).json()["messages"]) == 1


async def test_refusals_are_problems_with_codes(db_url: str) -> None:
    clock = ManualClock()
    async with mesh_app(db_url, clock) as client:
        alice = await join(client, "alice", ttl_seconds=7200)
        await join(client, "gone", ttl_seconds=60)
        problem(await client.get("/mesh/inbox"), 401, "token_required")
        problem(await client.get("/mesh/inbox", headers=auth("mst_forged")), 401, "invalid_token")
        problem(await client.get("/mesh/inbox", headers={"Authorization": "Basic abc"}), 422, "invalid_request")
        taken = problem(await client.post("/mesh/checkin", json={"agent_id": "alice", "confirm": True}), 409)
        assert taken["code"] == "agent_id_in_use" and "expires_at" in taken
        send = {"to": {"agent": "nobody"}, "body": "hi", "confirm": True}
        problem(await client.post("/mesh/messages", json=send, headers=auth(alice)), 404, "recipient_not_found")
        clock.advance(61)
        send["to"] = {"agent": "gone"}
        expired = problem(await client.post("/mesh/messages", json=send, headers=auth(alice)), 409, "recipient_expired")
        assert "gone" in str(expired["detail"])
        big = {"to": {"agent": "alice"}, "body": "x" * (64 * 1024 + 1), "confirm": True}
        too_large = problem(
            await client.post("/mesh/messages", json=big, headers=auth(alice)), 413, "message_too_large"
        )
        assert too_large["limit"] == 64 * 1024
        beyond = {"cursor": 5, "confirm": True}
        problem(await client.post("/mesh/inbox/ack", json=beyond, headers=auth(alice)), 422, "invalid_cursor")
        clock.advance(7200)
        problem(await client.get("/mesh/inbox", headers=auth(alice)), 401, "lease_expired")


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        ({"agent_id": "a", "ttl_seconds": 59}, "ttl_seconds", "greater_than_equal"),
        ({"agent_id": "a", "ttl_seconds": 86401}, "ttl_seconds", "less_than_equal"),
        ({"agent_id": "a", "status": "x" * 281}, "status", "string_too_long"),
        ({"agent_id": "a", "status": "two\nlines"}, "status", "string_pattern_mismatch"),
        ({"agent_id": "has space"}, "agent_id", "string_pattern_mismatch"),
        ({"role": "builder"}, "agent_id", "missing"),
        # The pane id is local to the agent's machine: the backend refuses to even receive it.
        ({"agent_id": "a", "herdr_pane": "%3"}, "herdr_pane", "extra_forbidden"),
    ],
)
async def test_checkin_validation_names_field_and_rule(
    tmp_path: object, body: dict[str, object], field: str, rule: str
) -> None:
    async with mesh_app(f"sqlite:///{tmp_path}/v.db") as client:
        r = await client.post("/mesh/checkin", json=body)
    errors = problem(r, 422)["errors"]
    assert isinstance(errors, list)
    assert {(e["field"], e["rule"]) for e in errors} == {(field, rule)}


async def test_address_must_name_one_kind(tmp_path: object) -> None:
    async with mesh_app(f"sqlite:///{tmp_path}/a.db") as client:
        token = await join(client, "alice")
        for to in ({}, {"agent": "b", "role": "qa"}):
            r = await client.post("/mesh/messages", json={"to": to, "body": "x"}, headers=auth(token))
            errors = problem(r, 422)["errors"]
            assert isinstance(errors, list) and errors[0]["field"] == "to"


async def test_idempotency_key_header_and_body(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        alice = await join(client, "alice")
        bob = await join(client, "bob")
        msg = {"to": {"agent": "bob"}, "body": "once", "confirm": True}
        headers = {**auth(alice), "Idempotency-Key": "retry-1"}
        first = (await client.post("/mesh/messages", json=msg, headers=headers)).json()
        again = (
            await client.post("/mesh/messages", json={**msg, "idempotency_key": "retry-1"}, headers=auth(alice))
        ).json()
        assert again["replayed"] is True and again["message_id"] == first["message_id"]
        assert len((await client.get("/mesh/inbox", headers=auth(bob))).json()["messages"]) == 1
        problem(
            await client.post("/mesh/messages", json={**msg, "body": "other"}, headers=headers),
            409,
            "idempotency_conflict",
        )
        mismatch = {**msg, "idempotency_key": "retry-2"}
        problem(await client.post("/mesh/messages", json=mismatch, headers=headers), 422, "invalid_request")


async def test_long_poll_answers_when_a_message_arrives(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        alice = await join(client, "alice")
        bob = await join(client, "bob")
        empty = await client.get("/mesh/inbox?wait=0.2", headers=auth(bob))
        assert empty.status_code == 200 and empty.json()["messages"] == []
        answers: list[httpx.Response] = []

        async def poll() -> None:
            answers.append(await client.get("/mesh/inbox?wait=30", headers=auth(bob)))

        mesh = client._transport.app.state.mesh  # type: ignore[attr-defined]
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll)
                while mesh.notifier.waiting == 0:
                    await anyio.sleep(0.01)
                msg = {"to": {"agent": "bob"}, "body": "ping", "confirm": True}
                assert (await client.post("/mesh/messages", json=msg, headers=auth(alice))).json()["stored"] == 1
        assert [m["body"] for m in answers[0].json()["messages"]] == ["ping"]


async def test_tokens_never_reach_the_log(tmp_path: object, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="muster")
    async with mesh_app(f"sqlite:///{tmp_path}/l.db") as client:
        token = await join(client, "alice")
        await client.get("/mesh/inbox", headers=auth(token))
        await client.get("/mesh/inbox", headers=auth(token + "x"))
    assert caplog.records, "the access log should have written lines"
    assert all(token not in r.getMessage() for r in caplog.records)
