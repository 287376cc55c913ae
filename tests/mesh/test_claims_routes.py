"""Path claims over REST on both databases: grant, conflict, preview, check, release, the ETag'd listing, the end at
lease expiry and at check-out, and bad patterns refused as problem+json naming the field and the rule."""

from __future__ import annotations

import httpx
import pytest

from muster_mesh import FakeClock
from muster_mesh.claims import CheckResult
from tests.mesh.support import auth, join, mesh_app
from tests.mesh.test_routes import problem

pytestmark = pytest.mark.anyio


async def claim(client: httpx.AsyncClient, token: str, *paths: str, **fields: object) -> httpx.Response:
    return await client.post(
        "/mesh/claims", json={"paths": list(paths), "confirm": True, **fields}, headers=auth(token)
    )


async def test_claim_conflict_check_release_over_rest(db_url: str) -> None:
    clock = FakeClock()
    async with mesh_app(db_url, clock) as client:
        a = await join(client, "a", repo="muster", ttl_seconds=60)
        b = await join(client, "b", repo="muster", ttl_seconds=3600)
        preview = await client.post("/mesh/claims", json={"paths": ["src/store/**"]}, headers=auth(a))
        assert preview.status_code == 200 and preview.json()["preview"] is True
        assert (await client.get("/mesh/claims")).json() == {"claims": []}
        r = await claim(client, a, "src/store/**", reason="moving the store")
        assert r.status_code == 200, r.text
        (granted,) = r.json()["granted"]
        assert (granted["holder"], granted["repo"], granted["exclusive"]) == ("a", "muster", True)
        again = await client.post(
            "/mesh/claims",
            json={"paths": ["x"], "confirm": True},
            headers={**auth(a), "Idempotency-Key": "k1"},
        )
        replay = await client.post(
            "/mesh/claims",
            json={"paths": ["x"], "confirm": True},
            headers={**auth(a), "Idempotency-Key": "k1"},
        )
        assert replay.headers.get("Idempotent-Replayed") == "true" and replay.json() == again.json()
        refused = await claim(client, b, "src/**/*.py")
        assert refused.json()["granted"] == []
        (conflict,) = refused.json()["conflicts"]
        assert (conflict["holder"], conflict["their_pattern"], conflict["reason"]) == (
            "a",
            "src/store/**",
            "moving the store",
        )
        checked = await client.post(
            "/mesh/claims/check", json={"repo": "muster", "paths": ["src/store/a.py", "src/b.py"]}, headers=auth(b)
        )
        assert [p["holder"] for p in checked.json()["paths"]] == ["a", None]
        listing = await client.get("/mesh/claims", params={"repo": "muster"})
        tag = listing.headers["ETag"]
        assert [c["pattern"] for c in listing.json()["claims"]] == ["src/store/**", "x"]
        assert (
            await client.get("/mesh/claims", params={"repo": "muster"}, headers={"If-None-Match": tag})
        ).status_code == 304
        released = await client.post("/mesh/claims/release", json={"paths": ["x"], "confirm": True}, headers=auth(a))
        assert [c["pattern"] for c in released.json()["released"]] == ["x"]
        changed = await client.get("/mesh/claims", params={"repo": "muster"}, headers={"If-None-Match": tag})
        assert changed.status_code == 200 and len(changed.json()["claims"]) == 1
        # The lease is the truth: a's claim ends when its lease does, and b's at its check-out.
        await claim(client, b, "docs/**")
        clock.advance(61)
        assert [c["holder"] for c in (await client.get("/mesh/claims")).json()["claims"]] == ["b"]
        await client.post("/mesh/checkout", json={"confirm": True}, headers=auth(b))
        assert (await client.get("/mesh/claims")).json() == {"claims": []}


@pytest.mark.parametrize(
    ("paths", "field", "rule"),
    [
        (["/etc/passwd"], "paths.0", "absolute"),
        (["ok", "../up"], "paths.1", "parent_reference"),
        ([""], "paths.0", "empty"),
        (["!src"], "paths.0", "negation"),
        ([], "paths", "too_short"),
        ([f"p{i}" for i in range(65)], "paths", "too_long"),
    ],
)
async def test_bad_patterns_are_problems_naming_field_and_rule(
    db_url: str, paths: list[str], field: str, rule: str
) -> None:
    async with mesh_app(db_url) as client:
        a = await join(client, "a", repo="muster")
        r = await claim(client, a, *paths)
        body = problem(r, 422)
        assert {"field": field, "rule": rule} in [{"field": e["field"], "rule": e["rule"]} for e in body["errors"]]


async def test_no_repo_and_unknown_fields_are_refused(db_url: str) -> None:
    async with mesh_app(db_url) as client:
        a = await join(client, "a")
        body = problem(await claim(client, a, "x"), 422)
        assert body["errors"][0]["field"] == "repo"
        assert (await claim(client, a, "x", repo="r")).status_code == 200
        body = problem(await claim(client, a, "x", repo="r", ttl=5), 422)
        assert body["errors"][0]["rule"] == "extra_forbidden"
        assert (await client.post("/mesh/claims", json={"paths": ["x"], "repo": "r"})).status_code == 401


async def test_check_names_only_other_live_exclusive_holders_and_renews_the_caller(db_url: str) -> None:
    clock = FakeClock()
    async with mesh_app(db_url, clock) as client:
        brief = await join(client, "brief", repo="r", ttl_seconds=60)
        await claim(client, brief, "gone/**")
        clock.advance(30)
        me = await join(client, "me", repo="r", ttl_seconds=60)
        other = await join(client, "other", repo="r", ttl_seconds=3600)
        sharer = await join(client, "sharer", repo="r", ttl_seconds=3600)
        await claim(client, me, "mine/**")
        await claim(client, other, "src/**", reason='say "why" — é')
        await claim(client, sharer, "shared/**", exclusive=False)
        await claim(client, other, "elsewhere/**", repo="r2")
        clock.advance(40)  # 70 s: brief's lease has ended; mine runs to 90 s unless the check renews it
        paths = ["mine/a", "src/é.py", "shared/x", "gone/y", "elsewhere/z", "free", 'say "x" \u2028.md', "src/b"]
        checked = await client.post("/mesh/claims/check", json={"repo": "r", "paths": paths}, headers=auth(me))
        assert checked.status_code == 200, checked.text
        answers = checked.json()["paths"]
        assert [(p["path"], p["holder"]) for p in answers] == [(p, "other" if p[:4] == "src/" else None) for p in paths]
        assert answers[1]["pattern"] == "src/**" and answers[1]["reason"] == 'say "why" — é'
        # The bytes are the models' own (the route encodes plain rows).
        assert checked.content == CheckResult.model_validate_json(checked.content).model_dump_json().encode()
        clock.advance(40)  # 110 s: alive only if the check renewed the lease at 70 s
        listed = (await client.get("/mesh/claims", params={"agent": "me"})).json()["claims"]
        assert [c["pattern"] for c in listed] == ["mine/**"]
        problem(
            await client.post("/mesh/claims/check", json={"repo": "r", "paths": ["a"]}, headers=auth("nope")),
            401,
            "invalid_token",
        )


async def test_a_check_meets_claims_made_through_another_instance_between_two_checks(db_url: str) -> None:
    """Each check matches the claims it reads (the paths' answers kept by a matcher are its patterns' own): a claim
    made through another instance, and the same pattern held by another agent once the first let it go, show in the
    next check of the same paths."""
    clock = FakeClock()
    async with mesh_app(db_url, clock) as one, mesh_app(db_url, clock) as two:
        me = await join(one, "me", repo="r", ttl_seconds=3600)
        first = await join(two, "first", repo="r", ttl_seconds=3600)
        second = await join(two, "second", repo="r", ttl_seconds=3600)
        await claim(two, first, "docs/**")
        paths = ["src/a.py", "docs/x.md", "src/b/c.py"]

        async def holders() -> list[str | None]:
            r = await one.post("/mesh/claims/check", json={"repo": "r", "paths": paths}, headers=auth(me))
            assert r.status_code == 200, r.text
            return [p["holder"] for p in r.json()["paths"]]

        assert await holders() == [None, "first", None]
        assert await holders() == [None, "first", None]
        await claim(two, first, "src/**")
        assert await holders() == ["first", "first", "first"]
        release = {"paths": ["src/**"], "confirm": True}
        assert (await two.post("/mesh/claims/release", json=release, headers=auth(first))).status_code == 200
        await claim(two, second, "src/**", reason="mine now")
        answers = (await one.post("/mesh/claims/check", json={"repo": "r", "paths": paths}, headers=auth(me))).json()
        assert [(p["holder"], p["reason"]) for p in answers["paths"]] == [
            ("second", "mine now"),
            ("first", None),
            ("second", "mine now"),
        ]
