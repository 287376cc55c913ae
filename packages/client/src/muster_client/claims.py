"""Path claims and tasks: the service's answers as models (members as the service's OpenAPI schema names them) and
the calls that ask for them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from muster_client.calls import Call, given, model
from muster_client.models import Answer


class ClaimView(Answer):
    id: str
    repo: str
    holder: str
    pattern: str
    exclusive: bool
    reason: str | None = None
    since: datetime


class ClaimConflict(Answer):
    pattern: str
    holder: str
    their_pattern: str
    exclusive: bool
    reason: str | None = None
    since: datetime


class ClaimResult(Answer):
    preview: bool
    granted: list[ClaimView]
    conflicts: list[ClaimConflict]
    replayed: bool = False


class ReleaseResult(Answer):
    preview: bool
    released: list[ClaimView]
    replayed: bool = False


class PathHolder(Answer):
    path: str
    holder: str | None = None
    pattern: str | None = None
    reason: str | None = None
    since: datetime | None = None


class CheckResult(Answer):
    paths: list[PathHolder]


class ClaimList(Answer):
    claims: list[ClaimView]


TaskAction = Literal["done", "fail", "release"]


class TaskView(Answer):
    id: str
    title: str
    body: str
    poster: str
    to: str | None = None
    role: str | None = None
    repo: str | None = None
    cap: str | None = None
    priority: int
    state: Literal["open", "claimed", "done", "failed"]
    holder: str | None = None
    token: int
    attempts: int
    result: str | None = None
    reason: str | None = None
    created_at: datetime
    updated_at: datetime


class TaskAnswer(Answer):
    preview: bool
    task: TaskView | None = None
    replayed: bool = False


class TaskList(Answer):
    tasks: list[TaskView] = Field(default_factory=list)


def claim_paths(
    paths: list[str],
    *,
    exclusive: bool,
    reason: str | None,
    repo: str | None,
    confirm: bool,
    idempotency_key: str | None,
) -> Call[ClaimResult]:
    body = {**given(reason=reason, repo=repo), "paths": paths, "exclusive": exclusive, "confirm": confirm}
    return Call("POST", "/mesh/claims", model(ClaimResult), body=body, idempotency_key=idempotency_key, as_agent=True)


def release_paths(
    *, ids: list[str] | None, paths: list[str] | None, repo: str | None, confirm: bool
) -> Call[ReleaseResult]:
    body = {**given(ids=ids, paths=paths, repo=repo), "confirm": confirm}
    return Call("POST", "/mesh/claims/release", model(ReleaseResult), body=body, as_agent=True)


def check_paths(repo: str, paths: list[str], *, as_agent: bool) -> Call[CheckResult]:
    body = {"repo": repo, "paths": paths}
    return Call("POST", "/mesh/claims/check", model(CheckResult), body=body, as_agent=as_agent)


def claims(*, repo: str | None, agent: str | None) -> Call[ClaimList]:
    return Call("GET", "/mesh/claims", model(ClaimList), params=given(repo=repo, agent=agent))


def task_post(
    title: str,
    body: str,
    *,
    to: str | None,
    role: str | None,
    repo: str | None,
    cap: str | None,
    priority: int,
    confirm: bool,
) -> Call[TaskAnswer]:
    fields = {**given(to=to, role=role, repo=repo, cap=cap), "title": title, "body": body, "priority": priority}
    return Call("POST", "/mesh/tasks", model(TaskAnswer), body={**fields, "confirm": confirm}, as_agent=True)


def task_claim(*, role: str | None, repo: str | None, cap: str | None, confirm: bool) -> Call[TaskAnswer]:
    body = {**given(role=role, repo=repo, cap=cap), "confirm": confirm}
    return Call("POST", "/mesh/tasks/claim", model(TaskAnswer), body=body, as_agent=True)


def task_update(task_id: str, action: TaskAction, *, token: int, text: str | None, confirm: bool) -> Call[TaskAnswer]:
    body: dict[str, object] = {"token": token, "confirm": confirm}
    if action == "done" and text is not None:
        body["result"] = text
    if action == "fail":
        body["reason"] = text or "failed"
    return Call("POST", f"/mesh/tasks/{task_id}/{action}", model(TaskAnswer), body=body, as_agent=True)


def tasks(*, state: str | None, role: str | None) -> Call[TaskList]:
    return Call("GET", "/mesh/tasks", model(TaskList), params=given(state=state, role=role))
