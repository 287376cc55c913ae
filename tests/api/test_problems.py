from __future__ import annotations

import logging

import pytest
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import text

from muster_api.app import create_app
from muster_api.errors import NotReadyError
from muster_api.settings import Settings
from tests.support.app import running

pytestmark = pytest.mark.anyio


class Probe(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=5)
    count: int = Field(ge=1)


def _app(tmp_path: object, **settings: object):  # type: ignore[no-untyped-def]
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/p.db", **settings))  # type: ignore[arg-type]
    probe = APIRouter()

    @probe.post("/probe")
    async def post_probe(body: Probe) -> dict[str, str]:
        return {"ok": body.name}

    @probe.get("/not-ready")
    async def not_ready() -> None:
        raise NotReadyError("warming up")

    @probe.get("/boom")
    async def boom() -> None:
        raise RuntimeError("secret-token-in-a-message")

    @probe.get("/bad-sql")
    async def bad_sql(request: Request) -> None:
        async with request.app.state.runtime.engine.connect() as conn:
            await conn.execute(text("SELECT no_such_column FROM no_such_table WHERE x = :p"), {"p": "secret-param"})

    app.include_router(probe)
    return app


async def test_validation_errors_name_field_and_rule(tmp_path: object) -> None:
    async with running(_app(tmp_path)) as client:
        r = await client.post("/probe", json={"name": "toolong", "count": 0, "extra": 1})
    assert r.status_code == 422
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["status"] == 422 and body["title"] in ("Unprocessable Entity", "Unprocessable Content")
    rules = {(e["field"], e["rule"]) for e in body["errors"]}
    assert rules == {
        ("name", "string_too_long"),
        ("count", "greater_than_equal"),
        ("extra", "extra_forbidden"),
    }


async def test_malformed_json_is_422_not_500(tmp_path: object) -> None:
    async with running(_app(tmp_path)) as client:
        r = await client.post("/probe", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["errors"][0]["rule"] == "json_invalid"


async def test_unknown_route_and_mapped_error(tmp_path: object) -> None:
    async with running(_app(tmp_path)) as client:
        missing = await client.get("/nope")
        mapped = await client.get("/not-ready")
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
    assert mapped.status_code == 503 and mapped.json()["detail"] == "warming up"


async def test_body_over_limit_is_413(tmp_path: object) -> None:
    async with running(_app(tmp_path)) as client:
        r = await client.post("/probe", content=b"x" * (1024 * 1024 + 1), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert r.headers["content-type"] == "application/problem+json"


async def test_api_key_guard(tmp_path: object) -> None:
    async with running(_app(tmp_path, api_keys=["k-one", "k-two"])) as client:
        for method in ("GET", "HEAD"):
            for path in ("/healthz", "/readyz"):
                assert (await client.request(method, path)).status_code == 200, (method, path)
        # The API's description is part of the API: it needs a key too.
        for path in ("/docs", "/openapi.json", "/mesh/agents"):
            assert (await client.get(path)).status_code == 401, path
            assert (await client.get(path, headers={"X-API-Key": "k-one"})).status_code == 200, path
        # Open paths are open to reading only.
        assert (await client.post("/healthz")).status_code == 401
        assert (await client.post("/probe", json={"name": "a", "count": 1})).status_code == 401
        wrong = await client.post("/probe", json={"name": "a", "count": 1}, headers={"X-API-Key": "nope"})
        assert wrong.status_code == 403
        ok = await client.post("/probe", json={"name": "a", "count": 1}, headers={"X-API-Key": "k-two"})
        assert ok.status_code == 200


async def test_secrets_never_logged(tmp_path: object, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="muster")
    async with running(_app(tmp_path, api_keys=["sekrit-key-123"])) as client:
        await client.post("/probe", json={"name": "a", "count": 1}, headers={"X-API-Key": "sekrit-key-123"})
    assert any("path=/probe status=200" in r.getMessage() for r in caplog.records)
    assert all("sekrit-key-123" not in r.getMessage() for r in caplog.records)


async def test_head_healthz_and_readyz_answer_without_a_body(tmp_path: object) -> None:
    async with running(_app(tmp_path)) as client:
        for path in ("/healthz", "/readyz"):
            r = await client.head(path)
            assert r.status_code == 200 and r.content == b"", path


@pytest.mark.parametrize(("path", "secret"), [("/boom", "secret-token-in-a-message"), ("/bad-sql", "secret-param")])
async def test_a_500_is_one_log_line_with_the_id_the_answer_carries(
    tmp_path: object, caplog: pytest.LogCaptureFixture, path: str, secret: str
) -> None:
    caplog.set_level("DEBUG")
    async with running(_app(tmp_path)) as client:
        caplog.clear()
        r = await client.get(path)
    assert r.status_code == 500 and r.headers["content-type"] == "application/problem+json"
    error_id = r.json()["error_id"]
    assert error_id in r.json()["detail"] and secret not in r.text
    errors = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert len(errors) == 1, [rec.getMessage() for rec in errors]
    (line,) = errors
    assert error_id in line.getMessage() and line.exc_info is None and "\n" not in line.getMessage()
    assert all(secret not in rec.getMessage() for rec in caplog.records), [
        (rec.name, rec.getMessage()) for rec in caplog.records if secret in rec.getMessage()
    ]
    assert all(secret not in (rec.exc_text or "") for rec in caplog.records)


async def test_the_access_log_has_the_status_of_every_answer(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    """The key guard's, the body limit's and the last resort's answers are logged with their status, as any other."""
    caplog.set_level("INFO", logger="muster.access")
    key = {"X-API-Key": "k"}
    async with running(_app(tmp_path, api_keys=["k"])) as client:
        assert (await client.get("/boom")).status_code == 401
        assert (await client.get("/boom", headers={"X-API-Key": "no"})).status_code == 403
        assert (await client.post("/probe", content=b"x" * (2 << 20), headers=key)).status_code == 413
        assert (await client.get("/boom", headers=key)).status_code == 500
        assert (await client.get("/healthz")).status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "muster.access"]
    statuses = [line.split(" status=")[1].split()[0] for line in lines]
    assert statuses == ["401", "403", "413", "500", "200"], lines
