"""The conformance checks of path claims, for every store that keeps them (run like ``muster_mesh.testing.CHECKS``:
``make(clock)`` yields a ``Mesh`` on a fresh store)."""

from __future__ import annotations

from muster_mesh.claims import CheckRequest, ClaimRequest, ClaimResult, Claims, ReleaseRequest
from muster_mesh.clock import FakeClock
from muster_mesh.errors import IdempotencyConflict
from muster_mesh.models import CheckinRequest, CheckoutRequest
from muster_mesh.testing import Check, MeshFactory, join, raises

CLAIM_CHECKS: dict[str, Check] = {}


def check(fn: Check) -> Check:
    CLAIM_CHECKS[fn.__name__] = fn
    return fn


async def claimed(claims: Claims, token: str, *paths: str, exclusive: bool = True, **fields: object) -> ClaimResult:
    request = ClaimRequest.model_validate({"paths": list(paths), "exclusive": exclusive, "confirm": True, **fields})
    return await claims.claim(request, token=token)


async def holders(claims: Claims, repo: str, *paths: str, token: str | None = None) -> list[str | None]:
    answer = await claims.check(CheckRequest(repo=repo, paths=list(paths)), token=token)
    return [p.holder for p in answer.paths]


@check
async def exclusive_claims_conflict_and_name_the_holder(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        claims = Claims(mesh)
        a = await join(mesh, "a", repo="r")
        b = await join(mesh, "b", repo="r")
        first = await claimed(claims, a, "src/store/**", reason="refactoring the store")
        assert [g.pattern for g in first.granted] == ["src/store/**"] and not first.conflicts
        second = await claimed(claims, b, "src/**/*.py", "docs/x.md")
        assert [g.pattern for g in second.granted] == ["docs/x.md"]
        (conflict,) = second.conflicts
        assert (conflict.pattern, conflict.holder, conflict.their_pattern) == ("src/**/*.py", "a", "src/store/**")
        assert conflict.reason == "refactoring the store"
        assert await holders(claims, "r", "src/store/x.py", "src/app.py", "docs/x.md", token=b) == ["a", None, None]
        assert await holders(claims, "r", "src/store/x.py", "src/app.py", "docs/x.md") == ["a", None, "b"]
        # The caller's own claims are not in its way; another repo is another namespace.
        assert await holders(claims, "r", "src/store/x.py", token=a) == [None]
        assert await holders(claims, "other", "src/store/x.py") == [None]


@check
async def shared_claims_coexist_and_conflict_with_exclusive_ones(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        claims = Claims(mesh)
        ta = await join(mesh, "a2", repo="r")
        tb = await join(mesh, "b2", repo="r")
        tc = await join(mesh, "c2", repo="r")
        assert (await claimed(claims, ta, "schema.sql", exclusive=False)).granted
        assert (await claimed(claims, tb, "*.sql", exclusive=False)).granted
        refused = await claimed(claims, tc, "schema.sql")
        assert not refused.granted and {x.holder for x in refused.conflicts} == {"a2", "b2"}
        # Only exclusive holders are named by a check.
        assert await holders(claims, "r", "schema.sql") == [None]


@check
async def preview_changes_nothing_and_release_ends_claims(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        claims = Claims(mesh)
        a = await join(mesh, "a", repo="r")
        preview = await claims.claim(ClaimRequest(paths=["x/**"]), token=a)
        assert preview.preview and [g.pattern for g in preview.granted] == ["x/**"]
        assert (await claims.list()).claims == []
        await claimed(claims, a, "x/**", "y.md")
        kept = await claims.release(ReleaseRequest(paths=["y.md"]), token=a)
        assert kept.preview and len((await claims.list()).claims) == 2
        gone = await claims.release(ReleaseRequest(paths=["y.md"], confirm=True), token=a)
        assert [c.pattern for c in gone.released] == ["y.md"]
        assert [c.pattern for c in (await claims.list(agent="a")).claims] == ["x/**"]
        await claims.release(ReleaseRequest(confirm=True), token=a)
        assert (await claims.list()).claims == []


@check
async def claims_end_with_the_lease_and_at_checkout(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        claims = Claims(mesh)
        a = await join(mesh, "a", repo="r", ttl_seconds=60)
        b = await join(mesh, "b", repo="r", ttl_seconds=600)
        await claimed(claims, a, "a/**")
        await claimed(claims, b, "b/**")
        clock.advance(61)
        assert [c.holder for c in (await claims.list()).claims] == ["b"]
        assert await holders(claims, "r", "a/x", "b/x") == [None, "b"]
        # A new session on the expired agent_id does not bring the old claims back.
        await join(mesh, "a", repo="r")
        assert [c.holder for c in (await claims.list()).claims] == ["b"]
        await mesh.checkout(CheckoutRequest(confirm=True), token=b)
        assert (await claims.list()).claims == []


@check
async def a_check_renews_the_callers_lease(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        claims = Claims(mesh)
        a = await join(mesh, "a", repo="r", ttl_seconds=60)
        b = await join(mesh, "b", repo="r", ttl_seconds=600)
        await claimed(claims, a, "a/**")
        # Two checks: the first of a session may take the slower path, the second the one a session's calls take.
        for _ in range(2):
            clock.advance(40)
            assert await holders(claims, "r", "b/x", token=a) == [None]
        # 80 s after the check-in: the lease of 60 s lives on from the last check, and ends 60 s after it.
        assert await holders(claims, "r", "a/x", token=b) == ["a"]
        clock.advance(61)
        assert await holders(claims, "r", "a/x", token=b) == [None]


@check
async def a_takeover_keeps_the_claims(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        claims = Claims(mesh)
        a = await join(mesh, "a", repo="r")
        await claimed(claims, a, "a/**", reason="mine")
        taken = await mesh.checkin(CheckinRequest(agent_id="a", takeover=True, confirm=True))
        assert getattr(taken, "token", None)
        assert await holders(claims, "r", "a/x") == ["a"]


@check
async def claiming_again_replaces_and_idempotency_replays(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        claims = Claims(mesh)
        a = await join(mesh, "a", repo="r")
        request = ClaimRequest(paths=["a/**"], reason="one", confirm=True)
        first = await claims.claim(request, token=a, idempotency_key="k1")
        again = await claims.claim(request, token=a, idempotency_key="k1")
        assert again.replayed and again.granted == first.granted
        await raises(
            IdempotencyConflict, claims.claim(ClaimRequest(paths=["b"], confirm=True), token=a, idempotency_key="k1")
        )
        renewed = await claimed(claims, a, "a/**", reason="two", exclusive=False)
        assert renewed.granted[0].id == first.granted[0].id
        (only,) = (await claims.list()).claims
        assert (only.reason, only.exclusive) == ("two", False)
