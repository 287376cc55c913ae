"""The conformance suite every ``SearchStore`` must pass, driven through ``MeshSearch`` on a fresh mesh.

As ``muster_mesh.testing``: each check is ``async def check(make)``, where ``make(clock)`` yields a ``MeshSearch``
over a new, empty store with that clock; a runner parametrises over ``SEARCH_CHECKS``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any

from muster_mesh.clock import FakeClock
from muster_mesh.errors import InvalidRequest, TokenRequired
from muster_mesh.search import MARK_CLOSE, MARK_OPEN, MeshSearch
from muster_mesh.testing import acked, join, raises, send, sent

SearchFactory = Callable[[FakeClock], AbstractAsyncContextManager[MeshSearch]]
SearchCheck = Callable[[SearchFactory], Coroutine[Any, Any, None]]
SEARCH_CHECKS: dict[str, SearchCheck] = {}


def check(fn: SearchCheck) -> SearchCheck:
    SEARCH_CHECKS[fn.__name__] = fn
    return fn


async def bodies(search: MeshSearch, q: str, token: str | None = None, **kw: Any) -> list[str]:
    """The ids of the hits, best first."""
    page = await search.search(q, token=token, overseer=token is None, **kw)
    return [h.message_id for h in page.hits]


@check
async def an_agent_finds_its_inbox_and_what_it_sent_and_nothing_else(make: SearchFactory) -> None:
    async with make(FakeClock()) as search:
        mesh = search.mesh
        a, b, c = [await join(mesh, n) for n in ("alice", "bob", "carol")]
        to_bob = (await sent(mesh, a, "deploy the canary tonight", to="bob")).message_id or ""
        to_carol = (await sent(mesh, a, "roll the canary back", to="carol")).message_id or ""
        await send(mesh, c, "unrelated words", to="bob")
        assert await bodies(search, "canary", b) == [to_bob]
        assert sorted(await bodies(search, "canary", a)) == sorted([to_bob, to_carol])
        assert await bodies(search, "canary", c) == [to_carol]
        assert sorted(await bodies(search, "canary")) == sorted([to_bob, to_carol])
        assert await bodies(search, "unrelated", a) == []


@check
async def a_fan_out_is_found_by_each_recipient(make: SearchFactory) -> None:
    async with make(FakeClock()) as search:
        mesh = search.mesh
        a = await join(mesh, "alice")
        b = await join(mesh, "bob", role="reviewer")
        c = await join(mesh, "carol", role="reviewer")
        mid = (await sent(mesh, a, "please review the migration", role="reviewer")).message_id or ""
        assert await bodies(search, "migration", b) == [mid]
        assert await bodies(search, "migration", c) == [mid]


@check
async def every_word_must_match_in_any_order_and_case(make: SearchFactory) -> None:
    async with make(FakeClock()) as search:
        mesh = search.mesh
        a = await join(mesh, "alice")
        await join(mesh, "bob")
        mid = (await sent(mesh, a, "Deploy the Canary tonight", to="bob")).message_id or ""
        assert await bodies(search, "TONIGHT canary") == [mid]
        assert await bodies(search, "canary missing") == []


@check
async def punctuation_separates_words_and_letters_beyond_ascii_count(make: SearchFactory) -> None:
    async with make(FakeClock()) as search:
        mesh = search.mesh
        a = await join(mesh, "alice")
        await join(mesh, "bob")
        path = (await sent(mesh, a, "see muster_api/mesh/routes.py now", to="bob")).message_id or ""
        song = (await sent(mesh, a, "la canción está lista", to="bob")).message_id or ""
        assert await bodies(search, "mesh routes") == [path]
        assert await bodies(search, "routes.py") == [path]
        assert await bodies(search, "canción") == [song]


@check
async def more_mentions_rank_higher_and_snippets_mark_the_words(make: SearchFactory) -> None:
    async with make(FakeClock()) as search:
        mesh = search.mesh
        a = await join(mesh, "alice")
        await join(mesh, "bob")
        once = (
            await sent(mesh, a, "one flaky mention among many other words of a longer note", to="bob")
        ).message_id or ""
        often = (await sent(mesh, a, "flaky flaky flaky", to="bob")).message_id or ""
        page = await search.search("flaky", token=None, overseer=True)
        assert [h.message_id for h in page.hits] == [often, once]
        assert page.hits[0].score > page.hits[1].score
        assert f"{MARK_OPEN}flaky{MARK_CLOSE}" in page.hits[1].snippet
        assert page.hits[1].sender == "alice"


@check
async def pages_cover_every_hit_once(make: SearchFactory) -> None:
    clock = FakeClock()
    async with make(clock) as search:
        mesh = search.mesh
        a = await join(mesh, "alice")
        await join(mesh, "bob")
        sent_ids = []
        for i in range(5):
            clock.advance(1)
            sent_ids.append((await sent(mesh, a, f"build {i} is green", to="bob")).message_id or "")
        seen: list[str] = []
        cursor = None
        for _ in range(3):
            page = await search.search("green", token=a, limit=2, cursor=cursor)
            seen += [h.message_id for h in page.hits]
            cursor = page.next_cursor
        assert cursor is None
        assert sorted(seen) == sorted(sent_ids) and len(seen) == 5
        # Equal scores: the newest first.
        assert seen == list(reversed(sent_ids))


@check
async def retention_sweeps_the_index_with_the_rows(make: SearchFactory) -> None:
    clock = FakeClock()
    async with make(clock) as search:
        mesh = search.mesh
        a = await join(mesh, "alice", ttl_seconds=86400)
        b = await join(mesh, "bob", ttl_seconds=86400)
        await send(mesh, a, "spent message", to="bob")
        await acked(mesh, b, 1)
        waited = 0.0
        while waited <= mesh.limits.read_retention.total_seconds() + 120:
            clock.advance(80_000)
            waited += 80_000
            await mesh.unread(token=a)
            await mesh.unread(token=b)
        assert (await mesh.sweep()).messages == 1
        assert await bodies(search, "spent") == []
        await send(mesh, a, "fresh message", to="bob")
        assert len(await bodies(search, "message")) == 1


@check
async def bad_queries_and_missing_tokens_are_refused(make: SearchFactory) -> None:
    async with make(FakeClock()) as search:
        for q in ("", "!!! ??", "x" * 201, " ".join(f"w{i}" for i in range(17))):
            error = await raises(InvalidRequest, search.search(q, token=None, overseer=True))
            assert error.extra["errors"][0]["field"] == "q"
        await raises(InvalidRequest, search.search("ok", token=None, overseer=True, cursor="minus one"))
        await raises(TokenRequired, search.search("ok", token=None))
