"""The handlers of the claim and task tools of ``muster mcp``: arguments checked by the mesh's own request models
before anything is sent, answers in words an agent acts on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from muster_api.mcp.claim_tools import CHECK, CLAIM, RELEASE, TASK_CLAIM, TASK_POST, TASK_UPDATE
from muster_api.mcp.session import AgentSession
from muster_client import claims as cl
from muster_mesh.claims import CheckRequest, ClaimRequest, ReleaseRequest
from muster_mesh.tasks import TaskClaim, TaskPost


def _claim_lines(result: cl.ClaimResult) -> str:
    head = "Preview, nothing stored: " if result.preview else ""
    lines = [f"{head}{len(result.granted)} granted: {', '.join(g.pattern for g in result.granted) or 'none'}."]
    for c in result.conflicts:
        lines.append(
            f"- {c.pattern}: held by {c.holder} ({c.their_pattern}) since {c.since:%H:%M} UTC: "
            f"{c.reason or 'no reason'}"
        )
    if result.preview:
        lines.append("Call claim_paths again with confirm: true to hold them.")
    return "\n".join(lines)


async def claim_paths(session: AgentSession, arguments: dict[str, Any]) -> str:
    args = ClaimRequest.model_validate(arguments)
    session.require()
    result = await session.client.call(
        cl.claim_paths(
            args.paths,
            exclusive=args.exclusive,
            reason=args.reason,
            repo=args.repo,
            confirm=args.confirm,
            idempotency_key=None,
        )
    )
    return _claim_lines(result)


async def release_paths(session: AgentSession, arguments: dict[str, Any]) -> str:
    args = ReleaseRequest.model_validate(arguments)
    session.require()
    result = await session.client.call(
        cl.release_paths(ids=args.ids, paths=args.paths, repo=args.repo, confirm=args.confirm)
    )
    names = ", ".join(c.pattern for c in result.released) or "nothing"
    return f"Preview, nothing released: would release {names}." if result.preview else f"Released: {names}."


async def check_paths(session: AgentSession, arguments: dict[str, Any]) -> str:
    args = CheckRequest.model_validate(arguments)
    session.require()
    result = await session.client.call(cl.check_paths(args.repo, args.paths, as_agent=True))
    return "\n".join(
        f"- {p.path}: free"
        if p.holder is None
        else f"- {p.path}: held by {p.holder} ({p.pattern}): {p.reason or 'no reason'}"
        for p in result.paths
    )


def _task_line(answer: cl.TaskAnswer, verb: str) -> str:
    if answer.task is None:
        return "No task is open for you." if not answer.preview else "Preview: call again with confirm: true."
    t = answer.task
    head = "Preview, nothing changed: " if answer.preview else ""
    return f"{head}{verb} task {t.id} {t.title!r} (state {t.state}, token {t.token}, from {t.poster}):\n{t.body}"


async def task_post(session: AgentSession, arguments: dict[str, Any]) -> str:
    args = TaskPost.model_validate(arguments)
    session.require()
    answer = await session.client.call(
        cl.task_post(
            args.title,
            args.body,
            to=args.to,
            role=args.role,
            repo=args.repo,
            cap=args.cap,
            priority=args.priority,
            confirm=args.confirm,
        )
    )
    return _task_line(answer, "posted")


async def task_claim(session: AgentSession, arguments: dict[str, Any]) -> str:
    args = TaskClaim.model_validate(arguments)
    session.require()
    answer = await session.client.call(
        cl.task_claim(role=args.role, repo=args.repo, cap=args.cap, confirm=args.confirm)
    )
    return _task_line(answer, "claimed")


async def task_update(session: AgentSession, arguments: dict[str, Any]) -> str:
    action = arguments.get("action")
    if action not in ("done", "fail", "release") or not isinstance(arguments.get("task_id"), str):
        return "task_update needs task_id and action: done, fail or release."
    token = arguments.get("token")
    if not isinstance(token, int) or isinstance(token, bool):
        return "task_update needs the integer token task_claim answered."
    session.require()
    text = arguments.get("text")
    answer = await session.client.call(
        cl.task_update(
            arguments["task_id"],
            action,
            token=token,
            text=text if isinstance(text, str) else None,
            confirm=arguments.get("confirm") is True,
        )
    )
    return _task_line(answer, {"done": "finished", "fail": "failed", "release": "released"}[action])


HANDLERS: dict[str, Callable[[AgentSession, dict[str, Any]], Awaitable[str]]] = {
    CLAIM: claim_paths,
    RELEASE: release_paths,
    CHECK: check_paths,
    TASK_POST: task_post,
    TASK_CLAIM: task_claim,
    TASK_UPDATE: task_update,
}
