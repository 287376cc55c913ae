"""Input the models alone cannot refuse: bodies streamed past the limit, JSON objects that name a key twice."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import pytest

from muster_api.web.jsonbody import loads_strict
from tests.mesh.support import auth, join, mesh_app

pytestmark = pytest.mark.anyio

LIMIT = 1024 * 1024


async def _chunks(total: int, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    yield b'{"to": "b", "body": "'
    sent = 0
    while sent < total:
        yield b"x" * size
        sent += size
    yield b'", "confirm": true}'


async def test_a_chunked_body_over_the_limit_is_413(tmp_path: object) -> None:
    async with mesh_app(f"sqlite:///{tmp_path}/c.db") as client:
        token = await join(client, "a")
        await join(client, "b")
        r = await client.post(
            "/mesh/messages",
            content=_chunks(LIMIT + 1),
            headers={**auth(token), "content-type": "application/json"},
        )
        assert "content-length" not in r.request.headers, "the body must go chunked for this test to mean anything"
        assert r.status_code == 413, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert str(LIMIT) in r.json()["detail"]
        assert (await client.get("/mesh/inbox", headers=auth(token))).json()["messages"] == []


@pytest.mark.parametrize(
    ("path", "raw", "key"),
    [
        ("/mesh/checkin", b'{"agent_id": "c", "confirm": false, "confirm": true}', "confirm"),
        ("/mesh/messages", b'{"to": "b", "body": "x", "confirm": true, "to": "a"}', "to"),
        ("/mesh/inbox/ack", b'{"cursor": 0, "cursor": 0, "confirm": true}', "cursor"),
        ("/mesh/checkout", b'{"confirm": false, "confirm": true}', "confirm"),
        ("/a2a/tools/none/call", b'{"task": "x", "task": "y"}', "task"),
    ],
)
async def test_a_duplicate_key_is_refused_by_name(tmp_path: object, path: str, raw: bytes, key: str) -> None:
    async with mesh_app(f"sqlite:///{tmp_path}/d.db") as client:
        token = await join(client, "a")
        await join(client, "b")
        headers = {**auth(token), "content-type": "application/json"}
        r = await client.post(path, content=raw, headers=headers)
        assert r.status_code == 422, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert [(e["field"], e["rule"]) for e in r.json()["errors"]] == [(key, "duplicate_key")]
        # Nothing acted: no agent c, the inbox of b is empty, a is still checked in.
        assert (await client.get("/mesh/agents/c")).status_code == 404
        assert (await client.get("/mesh/inbox", headers=auth(token))).status_code == 200


async def test_a_nested_duplicate_key_is_refused_too(tmp_path: object) -> None:
    async with mesh_app(f"sqlite:///{tmp_path}/n.db") as client:
        raw = b'{"agent_id": "c", "caps": [{"a": 1, "a": 2}], "confirm": true}'
        r = await client.post("/mesh/checkin", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422
        assert r.json()["errors"][0]["rule"] == "duplicate_key"


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        ({"task": "nul\x00inside"}, "task", "string_pattern_mismatch"),
        ({"task": "x", "wait": "false"}, "wait", "bool_type"),
        ({"task": "x", "wait": 0}, "wait", "bool_type"),
    ],
)
async def test_an_a2a_task_is_checked_before_any_call(
    db_url: str, body: dict[str, object], field: str, rule: str
) -> None:
    async with mesh_app(db_url) as client:
        r = await client.post("/a2a/tools/anything/call", json=body)
        assert r.status_code == 422, r.text
        assert [(e["field"], e["rule"]) for e in r.json()["errors"]] == [(field, rule)]


@pytest.mark.parametrize(
    "data",
    [
        b'{"a": [1, {"b": "c"}]}',
        '{"a": "é"}'.encode("utf-16"),
        '{"a": "é"}'.encode("utf-32-le"),
        '\ufeff{"a": 1}'.encode(),
        b'"\\ud800"',
        b"\xff\xfe",
        b"{not json",
        b"  ",
    ],
)
def test_the_strict_parse_reads_bytes_as_json_loads_does(data: bytes) -> None:
    def outcome(parse: Callable[[bytes], object]) -> object:
        try:
            return parse(data)
        except ValueError as exc:
            return type(exc)

    assert outcome(loads_strict) == outcome(json.loads)
