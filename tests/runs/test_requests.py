"""Bad input of every field of a run request, workspace confinement, idempotency, one run per workspace, pages."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.runs.support import dispatch_app, dispatch_env, finished, start

pytestmark = pytest.mark.anyio

GOOD: dict[str, Any] = {"agent": "fast", "prompt": "p", "workspace": "w"}
ID = "0" * 32

BAD_FIELDS: list[tuple[dict[str, Any], str]] = [
    ({"agent": ""}, "agent"),
    ({"agent": "../x"}, "agent"),
    ({"agent": 5}, "agent"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": "x" * 200_001}, "prompt"),
    ({"workspace": ""}, "workspace"),
    ({"workspace": "w" * 256}, "workspace"),
    ({"deadline_s": 0}, "deadline_s"),
    ({"deadline_s": -1}, "deadline_s"),
    ({"deadline_s": 10**9}, "deadline_s"),
    ({"deadline_s": "soon"}, "deadline_s"),
    ({"live_input": "maybe"}, "live_input"),
    ({"idempotency_key": ""}, "idempotency_key"),
    ({"idempotency_key": "k" * 201}, "idempotency_key"),
    ({"idempotency_key": "has space"}, "idempotency_key"),
    ({"continuation": {"run_id": "nope"}}, "continuation.run_id"),
    ({"continuation": {"conversation": "../x"}}, "continuation.conversation"),
    ({"continuation": {}}, "continuation"),
    ({"continuation": {"run_id": ID, "conversation": "c"}}, "continuation"),
    ({"continuation": {"conversation": "c", "fork": "yes"}}, "continuation.fork"),
    ({"continuation": {"conversation": "c", "extra": 1}}, "continuation.extra"),
    ({"replay_of": "nope"}, "replay_of"),
    ({"divergence": "fail"}, "body"),
    ({"unknown": 1}, "unknown"),
]


@pytest.mark.parametrize(("change", "field"), BAD_FIELDS, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD_FIELDS)])
async def test_bad_fields_are_refused_naming_the_field(
    change: dict[str, Any], field: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch_env(monkeypatch, tmp_path, workers=0)
    async with dispatch_app(f"sqlite:///{tmp_path / 'm.db'}", tmp_path) as client:
        response = await client.post("/dispatch/runs", json={**GOOD, **change})
        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert field in [e["field"] for e in response.json()["errors"]], response.json()
        assert (await client.get("/dispatch/runs")).json()["runs"] == []


async def test_missing_fields_and_bad_queries(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dispatch_env(monkeypatch, tmp_path, workers=0)
    async with dispatch_app(db_url, tmp_path) as client:
        response = await client.post("/dispatch/runs", json={"agent": "fast"})
        assert response.status_code == 422 and "prompt, workspace required" in response.text
        for query in ("status=done", "limit=0", "limit=201", "cursor=xyz"):
            assert (await client.get(f"/dispatch/runs?{query}")).status_code == 422, query
        assert (await client.get("/dispatch/runs/not-an-id")).status_code == 422
        response = await client.get(f"/dispatch/runs/{ID}")
        assert response.status_code == 404 and response.json()["errors"][0]["field"] == "run_id"
        assert (await client.get(f"/dispatch/runs/{ID}/events")).status_code == 404
        assert (await client.post(f"/dispatch/runs/{ID}/cancel")).status_code == 404
        assert (await client.post(f"/dispatch/runs/{ID}/steer", json={"text": ""})).status_code == 422
        assert (await client.post(f"/dispatch/runs/{ID}/steer", json={"text": "x", "y": 1})).status_code == 422
        assert (await client.post(f"/dispatch/runs/{ID}/steer", json={"text": "x"})).status_code == 404
        response = await client.get(f"/dispatch/runs/{ID}/events", headers={"Last-Event-ID": "abc"})
        assert response.status_code == 422
        twice = b'{"agent": "fast", "agent": "hold", "prompt": "p", "workspace": "w"}'
        response = await client.post("/dispatch/runs", content=twice, headers={"content-type": "application/json"})
        assert response.status_code == 422 and response.json()["errors"][0]["rule"] == "duplicate_key"
        response = await client.post("/dispatch/runs", content=b"\xff", headers={"content-type": "application/json"})
        assert response.status_code == 422


async def test_unknown_and_broken_agents(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dispatch_env(monkeypatch, tmp_path, workers=0)
    agents = {"bad": {"kind": "custom", "entrypoint": "tests.runs.nowhere:fn"}}
    async with dispatch_app(db_url, tmp_path, agents) as client:
        response = await client.post("/dispatch/runs", json={**GOOD, "agent": "nobody"})
        assert response.status_code == 404 and response.json()["errors"][0]["field"] == "agent"
        response = await client.post("/dispatch/runs", json={**GOOD, "agent": "bad"})
        assert response.status_code == 422
        assert response.json()["code"] == "configuration" and "does not import" in response.json()["detail"]


@pytest.mark.parametrize(
    ("workspace", "rule"),
    [
        ("/etc", "absolute"),
        ("\\\\server\\share", "absolute"),
        ("../outside", "parent"),
        ("a/../../b", "parent"),
        ("a//b", "pattern"),
        ("./a", "pattern"),
        ("a b", "pattern"),
        (".hidden", "pattern"),
        ("link/inside", "symlink_outside_root"),
        ("link", "symlink_outside_root"),
    ],
)
async def test_workspace_confinement(
    workspace: str, rule: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = dispatch_env(monkeypatch, tmp_path, workers=0)
    root.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "link")
    async with dispatch_app(f"sqlite:///{tmp_path / 'm.db'}", tmp_path) as client:
        response = await client.post("/dispatch/runs", json={**GOOD, "workspace": workspace})
        assert response.status_code == 422, response.text
        assert response.json()["errors"] == [{"field": "workspace", "rule": rule, "message": response.json()["detail"]}]
    assert list(outside.iterdir()) == []


async def test_a_symlink_inside_the_root_is_fine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = dispatch_env(monkeypatch, tmp_path, workers=0)
    (root / "real").mkdir(parents=True)
    os.symlink(root / "real", root / "alias")
    async with dispatch_app(f"sqlite:///{tmp_path / 'm.db'}", tmp_path) as client:
        await start(client, **{**GOOD, "workspace": "alias/sub"})
    assert (root / "real" / "sub").is_dir()


async def test_one_active_run_per_workspace(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The choice: a second run on a workspace where one is queued or running is refused (409), not queued."""
    dispatch_env(monkeypatch, tmp_path, workers=1)
    async with dispatch_app(db_url, tmp_path) as client:
        first = await start(client, agent="hold", prompt="gate", workspace="shared")
        response = await client.post("/dispatch/runs", json={**GOOD, "workspace": "shared"})
        assert response.status_code == 409, response.text
        assert response.json()["errors"][0]["rule"] == "one_active_run" and first["id"] in response.json()["detail"]
        await start(client, **{**GOOD, "workspace": "other"})  # another workspace is free
        (tmp_path / "workspaces" / "shared" / "gate").touch()
        assert (await finished(client, first["id"]))["status"] == "completed"
        second = await start(client, **{**GOOD, "workspace": "shared"})  # free again once the first is over
        assert (await finished(client, second["id"]))["status"] == "completed"


async def test_idempotency_key_replays_and_conflicts(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch_env(monkeypatch, tmp_path, workers=0)
    async with dispatch_app(db_url, tmp_path) as client:
        first = await start(client, **GOOD, idempotency_key="k-1")
        again = await start(client, **GOOD, idempotency_key="k-1")
        assert again["id"] == first["id"]
        response = await client.post("/dispatch/runs", json={**GOOD, "prompt": "other", "idempotency_key": "k-1"})
        assert response.status_code == 409 and response.json()["errors"][0]["field"] == "idempotency_key"
        assert len((await client.get("/dispatch/runs")).json()["runs"]) == 1


async def test_list_filters_and_cursor_pages_newest_first(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch_env(monkeypatch, tmp_path, workers=0)
    async with dispatch_app(db_url, tmp_path) as client:
        ids = [(await start(client, **{**GOOD, "workspace": f"w{i}"}))["id"] for i in range(5)]
        hold = await start(client, agent="hold", prompt="g", workspace="h")
        page = (await client.get("/dispatch/runs?limit=2&agent=fast")).json()
        assert [r["id"] for r in page["runs"]] == ids[::-1][:2]
        seen = [r["id"] for r in page["runs"]]
        while page["next_cursor"]:
            page = (await client.get(f"/dispatch/runs?limit=2&agent=fast&cursor={page['next_cursor']}")).json()
            seen += [r["id"] for r in page["runs"]]
        assert seen == ids[::-1]
        assert [r["id"] for r in (await client.get("/dispatch/runs?agent=hold")).json()["runs"]] == [hold["id"]]
        assert len((await client.get("/dispatch/runs?status=queued")).json()["runs"]) == 6
        assert (await client.get("/dispatch/runs?status=completed")).json()["runs"] == []
