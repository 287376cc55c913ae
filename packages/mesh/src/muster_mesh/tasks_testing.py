"""The conformance checks of tasks, for every store that keeps them (run like ``muster_mesh.testing.CHECKS``:
``make(clock)`` yields a ``Mesh`` on a fresh store)."""

from __future__ import annotations

from typing import Any

import anyio

from muster_mesh.clock import FakeClock
from muster_mesh.errors import IdempotencyConflict, InvalidAddress
from muster_mesh.models import CheckoutRequest
from muster_mesh.tasks import (
    StaleClaim,
    TaskClaim,
    TaskDone,
    TaskFail,
    TaskLimits,
    TaskNotFound,
    TaskPost,
    TaskRelease,
    Tasks,
    TaskView,
)
from muster_mesh.testing import Check, MeshFactory, join, raises

TASK_CHECKS: dict[str, Check] = {}


def check(fn: Check) -> Check:
    TASK_CHECKS[fn.__name__] = fn
    return fn


async def posted(tasks: Tasks, token: str, title: str = "t", **fields: Any) -> TaskView:
    request = TaskPost.model_validate({"title": title, "body": "do it", "confirm": True, **fields})
    answer = await tasks.post(request, token=token)
    assert answer.task is not None
    return answer.task


async def claimed(tasks: Tasks, token: str, **filters: Any) -> TaskView | None:
    return (await tasks.claim(TaskClaim.model_validate({"confirm": True, **filters}), token=token)).task


@check
async def the_highest_priority_oldest_task_goes_to_one_claimer(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        tasks = Tasks(mesh)
        boss = await join(mesh, "boss")
        w1 = await join(mesh, "w1", role="builder")
        w2 = await join(mesh, "w2", role="builder")
        qa = await join(mesh, "qa", role="reviewer")
        low = await posted(tasks, boss, "low", role="builder", priority=1)
        clock.advance(1)
        older = await posted(tasks, boss, "older", role="builder", priority=5)
        clock.advance(1)
        newer = await posted(tasks, boss, "newer", role="builder", priority=5)
        got = await claimed(tasks, w1)
        assert got is not None and (got.id, got.token, got.holder, got.state) == (older.id, 1, "w1", "claimed")
        assert [t.id for t in [await claimed(tasks, w2), await claimed(tasks, w1)] if t] == [newer.id, low.id]
        assert await claimed(tasks, w2) is None
        assert await claimed(tasks, qa) is None  # nothing is addressed to a reviewer


@check
async def a_task_is_addressed_by_agent_role_repo_or_cap_and_filters_narrow(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        tasks = Tasks(mesh)
        boss = await join(mesh, "boss")
        w = await join(mesh, "w", role="builder", repo="r", caps=["deploy", "sql"])
        direct = await posted(tasks, boss, "direct", to="w")
        by_repo = await posted(tasks, boss, "repo", repo="r")
        by_cap = await posted(tasks, boss, "cap", cap="sql")
        await posted(tasks, boss, "elsewhere", repo="other")
        await posted(tasks, boss, "to another", to="boss")
        await raises(
            InvalidAddress, tasks.post(TaskPost(title="x", body="y", to="w", role="r", confirm=True), token=boss)
        )
        got = await claimed(tasks, w, cap="sql")
        assert got is not None and got.id == by_cap.id
        assert await claimed(tasks, w, cap="sql") is None
        got = await claimed(tasks, w, repo="r")
        assert got is not None and got.id == by_repo.id
        got = await claimed(tasks, w)
        assert got is not None and got.id == direct.id
        assert await claimed(tasks, w) is None


@check
async def a_preview_claims_nothing_and_a_posts_preview_stores_nothing(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        tasks = Tasks(mesh)
        boss = await join(mesh, "boss")
        w = await join(mesh, "w", role="builder")
        preview = await tasks.post(TaskPost(title="x", body="y", role="builder"), token=boss)
        assert preview.preview and preview.task is not None and (await tasks.list()).tasks == []
        task = await posted(tasks, boss, role="builder")
        answer = await tasks.claim(TaskClaim(), token=w)
        assert answer.preview and answer.task is None
        assert (await tasks.get(task.id)).state == "open"


@check
async def only_the_current_token_finishes_and_the_poster_hears(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        tasks = Tasks(mesh)
        boss = await join(mesh, "boss")
        w1 = await join(mesh, "w1", role="builder")
        w2 = await join(mesh, "w2", role="builder")
        one = await posted(tasks, boss, "one", role="builder")
        clock.advance(1)
        two = await posted(tasks, boss, "two", role="builder")
        assert await claimed(tasks, w1) is not None and await claimed(tasks, w2) is not None
        await raises(StaleClaim, tasks.finish(one.id, TaskDone(token=1, confirm=True), token=w2))
        await raises(StaleClaim, tasks.finish(one.id, TaskDone(token=2, confirm=True), token=w1))
        await raises(TaskNotFound, tasks.finish("0" * 32, TaskDone(token=1, confirm=True), token=w1))
        preview = await tasks.finish(one.id, TaskDone(token=1, result="shipped"), token=w1)
        assert preview.preview and (await tasks.get(one.id)).state == "claimed"
        done = await tasks.finish(one.id, TaskDone(token=1, result="shipped", confirm=True), token=w1)
        assert done.task is not None and (done.task.state, done.task.result) == ("done", "shipped")
        await raises(StaleClaim, tasks.finish(one.id, TaskDone(token=1, confirm=True), token=w1))
        failed = await tasks.finish(two.id, TaskFail(token=1, reason="no disk", confirm=True), token=w2)
        assert failed.task is not None and (failed.task.state, failed.task.reason) == ("failed", "no disk")
        inbox = (await mesh.read_inbox(token=boss)).messages
        assert [(m.sender, m.thread_id) for m in inbox] == [
            ("w1", f"task:{one.id}"),
            ("w2", f"task:{two.id}"),
            ("w1", f"task:{one.id}"),
            ("w2", f"task:{two.id}"),
        ]
        assert "shipped" in inbox[2].body and "no disk" in inbox[3].body
        assert [e.kind for e in (await tasks.get(one.id)).history] == ["posted", "claimed", "done"]
        assert [t.id for t in (await tasks.list(state="done")).tasks] == [one.id]
        assert [t.id for t in (await tasks.list(role="builder")).tasks] == [one.id, two.id]


@check
async def a_release_reopens_the_task_and_gives_the_attempt_back(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        tasks = Tasks(mesh)
        boss = await join(mesh, "boss")
        w1 = await join(mesh, "w1", role="builder")
        w2 = await join(mesh, "w2", role="builder")
        task = await posted(tasks, boss, role="builder")
        assert await claimed(tasks, w1) is not None
        released = await tasks.finish(task.id, TaskRelease(token=1, confirm=True), token=w1)
        assert released.task is not None and (released.task.state, released.task.holder) == ("open", None)
        again = await claimed(tasks, w2)
        assert again is not None and (again.token, again.attempts) == (2, 1)
        await raises(StaleClaim, tasks.finish(task.id, TaskDone(token=1, confirm=True), token=w1))


@check
async def a_lapsed_holders_task_is_claimed_again_with_a_higher_token(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        tasks = Tasks(mesh, TaskLimits(max_attempts=2))
        boss = await join(mesh, "boss", ttl_seconds=86400)
        task = await posted(tasks, boss, "flaky", cap="deploy")
        short = await join(mesh, "short", caps=["deploy"], ttl_seconds=60)
        assert (await claimed(tasks, short)) is not None
        clock.advance(61)
        shown = await tasks.get(task.id)
        assert (shown.state, shown.attempts) == ("open", 1)
        other = await join(mesh, "other", caps=["deploy"], ttl_seconds=60)
        second = await claimed(tasks, other)
        assert second is not None and (second.id, second.token) == (task.id, 2)
        short = await join(mesh, "short", caps=["deploy"], ttl_seconds=60)
        await raises(StaleClaim, tasks.finish(task.id, TaskDone(token=1, confirm=True), token=short))
        clock.advance(61)
        assert [t.state for t in (await tasks.list(state="failed")).tasks] == ["failed"]
        third = await join(mesh, "third", caps=["deploy"])
        assert await claimed(tasks, third) is None  # two holders lost: the cap
        failed = await tasks.get(task.id)
        assert failed.state == "failed" and failed.reason is not None and "attempts cap" in failed.reason


@check
async def checkout_gives_the_task_back(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        tasks = Tasks(mesh)
        boss = await join(mesh, "boss")
        a = await join(mesh, "a", repo="r")
        b = await join(mesh, "b", repo="r")
        task = await posted(tasks, boss, repo="r")
        assert await claimed(tasks, a) is not None
        await mesh.checkout(CheckoutRequest(confirm=True), token=a)
        again = await claimed(tasks, b)
        assert again is not None and (again.id, again.token) == (task.id, 2)


@check
async def posting_replays_under_its_idempotency_key(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        tasks = Tasks(mesh)
        boss = await join(mesh, "boss")
        request = TaskPost(title="once", body="b", to="boss", confirm=True)
        first = await tasks.post(request, token=boss, idempotency_key="k")
        again = await tasks.post(request, token=boss, idempotency_key="k")
        assert again.replayed and again.task is not None and first.task is not None
        assert again.task.id == first.task.id and len((await tasks.list()).tasks) == 1
        other = TaskPost(title="twice", body="b", to="boss", confirm=True)
        await raises(IdempotencyConflict, tasks.post(other, token=boss, idempotency_key="k"))


@check
async def concurrent_claimers_each_get_a_different_task(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        tasks = Tasks(mesh)
        boss = await join(mesh, "boss")
        posted_ids = {(await posted(tasks, boss, f"t{i}", role="builder")).id for i in range(12)}
        tokens = [await join(mesh, f"w{i}", role="builder") for i in range(16)]
        got: list[str | None] = []

        async def take(token: str) -> None:
            task = await claimed(tasks, token)
            got.append(task.id if task else None)

        async with anyio.create_task_group() as tg:
            for token in tokens:
                tg.start_soon(take, token)
        ids = [g for g in got if g is not None]
        assert sorted(ids) == sorted(posted_ids) and got.count(None) == 4
