"""The database out of reach under a running service: 503 problems with Retry-After and a stable code (never a
500), readiness 503, liveness 200, and recovery without a restart with nothing an answered call stored lost."""

from __future__ import annotations

import anyio
import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.mesh.support import auth, join, mesh_app
from tests.support.databases import PostgresServer
from tests.support.proxy import cuttable_proxy

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


def unavailable(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["code"] == "database_unavailable"
    assert int(r.headers["retry-after"]) >= 1


async def test_postgresql_out_of_reach_is_503_and_recovers(
    postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = await anyio.to_thread.run_sync(postgres_server.create)
    real = make_url(url)
    async with cuttable_proxy(real.host or "127.0.0.1", real.port or 5432) as proxy:
        through = real.set(port=proxy.port).render_as_string(hide_password=False)
        async with mesh_app(through) as client:
            alice = await join(client, "alice")
            bob = await join(client, "bob")
            note = {"to": "bob", "body": "before the outage", "confirm": True}
            assert (await client.post("/mesh/messages", json=note, headers=auth(alice))).status_code == 200

            proxy.cut()
            caplog.clear()
            for _ in range(3):  # pooled connections die first, then new ones are refused: both are 503s
                unavailable(await client.post("/mesh/messages", json=note, headers=auth(alice)))
                unavailable(await client.get("/mesh/inbox", headers=auth(bob)))
                unavailable(await client.get("/mesh/agents"))
            ready = await client.get("/readyz")
            unavailable(ready)
            assert (await client.get("/healthz")).status_code == 200
            errors = [r for r in caplog.records if r.levelname == "ERROR"]
            assert errors == [], "an outage is not a bug: no error lines"
            assert all("\n" not in r.getMessage() and r.exc_info is None for r in caplog.records)

            await proxy.restore()
            with anyio.fail_after(20):
                while (await client.get("/readyz")).status_code != 200:
                    await anyio.sleep(0.1)
            after = {"to": "bob", "body": "after the outage", "confirm": True}
            with anyio.fail_after(20):  # connections pooled before the cut may fail once each, as 503s
                while (r := await client.post("/mesh/messages", json=after, headers=auth(alice))).status_code != 200:
                    unavailable(r)
            page = (await client.get("/mesh/inbox", headers=auth(bob))).json()
            assert [m["body"] for m in page["messages"]] == ["before the outage", "after the outage"]
