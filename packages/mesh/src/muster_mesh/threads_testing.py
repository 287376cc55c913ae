"""The conformance suite every ``ThreadStore`` must pass, driven through ``MeshThreads`` on a fresh mesh.

As ``muster_mesh.testing``: each check is ``async def check(make)``, where ``make(clock)`` yields a ``MeshThreads``
over a new, empty store with that clock; a runner parametrises over ``THREAD_CHECKS``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any

from muster_mesh.clock import FakeClock
from muster_mesh.errors import InvalidRequest, ThreadNotFound, TokenRequired
from muster_mesh.testing import join, raises, sent
from muster_mesh.threads import PREVIEW_CHARS, MeshThreads

ThreadsFactory = Callable[[FakeClock], AbstractAsyncContextManager[MeshThreads]]
ThreadCheck = Callable[[ThreadsFactory], Coroutine[Any, Any, None]]
THREAD_CHECKS: dict[str, ThreadCheck] = {}


def check(fn: ThreadCheck) -> ThreadCheck:
    THREAD_CHECKS[fn.__name__] = fn
    return fn


async def listed(threads: MeshThreads, token: str | None = None, **kw: Any) -> list[str]:
    page = await threads.threads(token=token, overseer=token is None, **kw)
    return [t.thread_id for t in page.threads]


@check
async def an_agent_lists_the_threads_it_is_in_and_the_overseer_all(make: ThreadsFactory) -> None:
    clock = FakeClock()
    async with make(clock) as threads:
        mesh = threads.mesh
        a, b, c = [await join(mesh, n) for n in ("alice", "bob", "carol")]
        await sent(mesh, a, "plan the release", to="bob", thread_id="rel")
        clock.advance(1)
        await sent(mesh, b, "agreed, tonight", to="alice", thread_id="rel")
        clock.advance(1)
        await sent(mesh, c, "lunch?", to="bob", thread_id="food")
        assert await listed(threads, a) == ["rel"]
        assert await listed(threads, b) == ["food", "rel"], "the latest last message first"
        assert await listed(threads, c) == ["food"]
        assert await listed(threads) == ["food", "rel"]
        assert await listed(threads, None, agent="carol") == ["food"]
        page = await threads.threads(token=b)
        rel = page.threads[1]
        assert (rel.participants, rel.messages) == (["alice", "bob"], 2)
        assert (rel.last_message.sender, rel.last_message.preview) == ("bob", "agreed, tonight")
        assert rel.last_message.truncated is False


@check
async def a_message_without_a_thread_is_one_and_a_reply_joins_it(make: ThreadsFactory) -> None:
    clock = FakeClock()
    async with make(clock) as threads:
        mesh = threads.mesh
        a, b = [await join(mesh, n) for n in ("alice", "bob")]
        first = (await sent(mesh, a, "a question", to="bob")).message_id or ""
        clock.advance(1)
        reply = (await sent(mesh, b, "an answer", to="alice", thread_id=first)).message_id or ""
        assert await listed(threads, b) == [first]
        shown = await threads.thread(first, token=a)
        assert [(m.message_id, m.sender, m.to, m.thread_id) for m in shown.messages] == [
            (first, "alice", ["bob"], None),
            (reply, "bob", ["alice"], first),
        ]


@check
async def a_thread_shows_only_what_the_caller_may_see(make: ThreadsFactory) -> None:
    clock = FakeClock()
    async with make(clock) as threads:
        mesh = threads.mesh
        a, b, c = [await join(mesh, n) for n in ("alice", "bob", "carol")]
        await sent(mesh, a, "to bob", to="bob", thread_id="t")
        clock.advance(1)
        await sent(mesh, b, "to carol", to="carol", thread_id="t")
        assert [m.body for m in (await threads.thread("t", token=a)).messages] == ["to bob"]
        assert [m.body for m in (await threads.thread("t", token=b)).messages] == ["to bob", "to carol"]
        assert [m.body for m in (await threads.thread("t", token=c)).messages] == ["to carol"]
        assert [m.body for m in (await threads.thread("t", token=None, overseer=True)).messages] == [
            "to bob",
            "to carol",
        ]
        summary = (await threads.threads(token=c)).threads[0]
        assert (summary.participants, summary.messages) == (["bob", "carol"], 1)
        d = await join(mesh, "dave")
        await raises(ThreadNotFound, threads.thread("t", token=d))
        await raises(ThreadNotFound, threads.thread("nowhere", token=None, overseer=True))


@check
async def a_fan_out_lists_every_recipient(make: ThreadsFactory) -> None:
    async with make(FakeClock()) as threads:
        mesh = threads.mesh
        a = await join(mesh, "alice")
        b = await join(mesh, "bob", role="reviewer")
        await join(mesh, "carol", role="reviewer")
        await sent(mesh, a, "please review", role="reviewer", thread_id="pr-7")
        [message] = (await threads.thread("pr-7", token=b)).messages
        assert message.to == ["bob", "carol"]
        assert (await threads.threads(token=b)).threads[0].participants == ["alice", "bob", "carol"]


@check
async def pages_cover_every_thread_and_message_once(make: ThreadsFactory) -> None:
    clock = FakeClock()
    async with make(clock) as threads:
        mesh = threads.mesh
        a = await join(mesh, "alice")
        await join(mesh, "bob")
        for i in range(5):
            clock.advance(1)
            await sent(mesh, a, f"note {i}", to="bob", thread_id=f"t{i}")
            await sent(mesh, a, f"more {i}", to="bob", thread_id="long")
        seen: list[str] = []
        cursor = None
        for _ in range(3):
            page = await threads.threads(token=a, limit=2, cursor=cursor)
            seen += [t.thread_id for t in page.threads]
            cursor = page.next_cursor
        assert cursor is None
        assert seen == ["long", "t4", "t3", "t2", "t1", "t0"]
        first = await threads.thread("long", token=a, limit=3)
        assert first.next_cursor is not None
        rest = await threads.thread("long", token=a, limit=3, cursor=first.next_cursor)
        assert rest.next_cursor is None
        assert [m.body for m in first.messages + rest.messages] == [f"more {i}" for i in range(5)]


@check
async def a_long_last_message_is_previewed(make: ThreadsFactory) -> None:
    async with make(FakeClock()) as threads:
        mesh = threads.mesh
        a = await join(mesh, "alice")
        await join(mesh, "bob")
        await sent(mesh, a, "é" * (PREVIEW_CHARS + 50), to="bob", thread_id="long")
        last = (await threads.threads(token=a)).threads[0].last_message
        assert (last.preview, last.truncated) == ("é" * PREVIEW_CHARS, True)


@check
async def bad_cursors_agents_without_overseer_and_missing_tokens_are_refused(make: ThreadsFactory) -> None:
    async with make(FakeClock()) as threads:
        a = await join(threads.mesh, "alice")
        error = await raises(InvalidRequest, threads.threads(token=None, overseer=True, cursor="minus one"))
        assert error.extra["errors"][0]["field"] == "cursor"
        error = await raises(InvalidRequest, threads.threads(token=a, agent="bob"))
        assert error.extra["errors"][0]["field"] == "agent"
        await raises(TokenRequired, threads.threads(token=None))
        await raises(TokenRequired, threads.thread("t", token=None))
