"""Every answer model of ``muster_client`` reads what the service's own OpenAPI schema says it answers.

For each pair (client model, service schema): the same field names; a field the client requires is one the service
always sends; every value the service may send (its types, enum and const values, nested models) is one the client
accepts. A client ``Literal`` narrower than the service's enum fails here, not in a user's listing.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from muster_api.app import create_app
from muster_client import claims, models

# client model -> the service's schema of the same answer
PAIRS: dict[type[models.Answer], str] = {
    models.AgentView: "AgentView",
    models.CheckinPreview: "CheckinPreview",
    models.CheckinRecord: "CheckinRecord",
    models.AgentList: "AgentList",
    models.Backlog: "Backlog",
    models.BacklogPage: "BacklogList",
    models.SendPreview: "SendPreview",
    models.SendResult: "SendResult",
    models.InboxMessage: "InboxMessage",
    models.InboxPage: "InboxPage",
    models.AckPreview: "AckPreview",
    models.AckResult: "AckResult",
    models.CheckoutPreview: "CheckoutPreview",
    models.CheckoutResult: "CheckoutResult",
    models.A2ATool: "ToolInfo",
    models.A2AAgent: "AgentStatus",
    models.A2ACollision: "Collision",
    models.A2AAgents: "muster_api__a2a__routes__AgentsOut",
    models.A2AToolResult: "ToolResult",
    models.A2ACall: "CallRecord",
    models.DispatchAgent: "AgentOut",
    models.DispatchAgents: "muster_api__dispatch__models__AgentsOut",
    models.DispatchMember: "MemberOut",
    models.DispatchMembers: "MembersOut",
    models.Run: "Run",
    models.RunPage: "RunPage",
    models.MessageReceipts: "MessageReceipts",
    models.Receipt: "Receipt",
    models.SearchHit: "SearchHit",
    models.SearchPage: "SearchPage",
    models.LastMessage: "LastMessage",
    models.ThreadSummary: "ThreadSummary",
    models.ThreadPage: "ThreadPage",
    models.ThreadMessage: "ThreadMessage",
    models.ThreadMessages: "ThreadMessages",
    claims.ClaimView: "ClaimView",
    claims.ClaimConflict: "ClaimConflict",
    claims.ClaimResult: "ClaimResult",
    claims.ReleaseResult: "ReleaseResult",
    claims.PathHolder: "PathHolder",
    claims.CheckResult: "CheckResult",
    claims.ClaimList: "ClaimList",
    claims.TaskView: "TaskView",
    claims.TaskAnswer: "TaskAnswer",
    claims.TaskList: "TaskList",
}
# Answers whose body the schema does not describe, and why.
UNDESCRIBED = {
    models.A2ACallResult: "a tool call answers 200 with the result or 202 with the call: the route declares no model",
    models.Ready: "/readyz answers 200 or 503 with the same body: the route declares no model",
    models.RunEvent: "an event of the SSE stream, not a JSON body",
}
# Set from a response header, never read from a body.
FROM_HEADERS = {"replayed"}

Schema = dict[str, Any]


@pytest.fixture(scope="module")
def service_schemas() -> dict[str, Schema]:
    schemas: dict[str, Schema] = create_app().openapi()["components"]["schemas"]
    return schemas


def _ref(schema: Schema) -> str:
    return str(schema["$ref"]).rsplit("/", 1)[-1]


def _alternatives(schema: Schema) -> list[Schema]:
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return [alt for part in schema[key] for alt in _alternatives(part)]
    if isinstance(schema.get("type"), list):
        return [{**schema, "type": t} for t in schema["type"]]
    return [schema]


def _values(schema: Schema) -> set[Any] | None:
    """The values an alternative is limited to (None: any of its type)."""
    if "const" in schema:
        return {schema["const"]}
    return set(schema["enum"]) if "enum" in schema else None


def _one_accepts(client: Schema, service: Schema, path: str) -> str | None:
    """Why this client alternative refuses the service's one (None: it accepts it)."""
    if not client or (client == {"additionalProperties": True, "type": "object"} and service.get("type") == "object"):
        return None
    if "$ref" in client or "$ref" in service:
        if "$ref" not in client or "$ref" not in service:
            return f"{path}: a nested model on one side only ({client} / {service})"
        paired = {m.__name__: name for m, name in PAIRS.items()}.get(_ref(client))
        return None if paired == _ref(service) else f"{path}: {_ref(client)} is not paired with {_ref(service)}"
    kind, theirs = client.get("type"), service.get("type")
    if kind != theirs and not (kind == "number" and theirs == "integer"):
        return f"{path}: the client reads {kind}, the service sends {theirs}"
    if client.get("format") and client.get("format") != service.get("format"):
        return f"{path}: the client requires format {client['format']}, the service promises {service.get('format')}"
    mine, sent = _values(client), _values(service)
    if mine is not None and (sent is None or not sent <= mine):
        may = sorted(sent, key=str) if sent else f"any {theirs}"
        return f"{path}: the client takes {sorted(mine, key=str)}, the service may send {may}"
    if kind == "array":
        return _accepts(client.get("items", {}), service.get("items", {}), path + "[]")
    return None


def _accepts(client: Schema, service: Schema, path: str) -> str | None:
    for sent in _alternatives(service):
        reasons = [_one_accepts(mine, sent, path) for mine in _alternatives(client)]
        if all(reasons):
            return next(r for r in reasons if r)
    return None


def drift(model: type[models.Answer], service: Schema) -> list[str]:
    client = model.model_json_schema(by_alias=True, mode="validation")
    mine = {k: v for k, v in client["properties"].items() if k not in FROM_HEADERS}
    theirs: dict[str, Schema] = service["properties"]
    problems = [f"{name}: the service never sends it" for name in sorted(set(mine) - set(theirs))]
    problems += [f"{name}: the client does not read it" for name in sorted(set(theirs) - set(mine))]
    always = set(service.get("required", []))
    problems += [
        f"{name}: required by the client, optional in the service"
        for name in sorted(set(client.get("required", [])) - always)
    ]
    for name in sorted(set(mine) & set(theirs)):
        reason = _accepts(mine[name], theirs[name], name)
        if reason:
            problems.append(reason)
    return problems


def test_every_answer_model_is_paired_or_says_why_not() -> None:
    answers = {
        cls
        for module in (models, claims)
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, models.Answer) and cls is not models.Answer
    }
    assert answers == set(PAIRS) | set(UNDESCRIBED)


@pytest.mark.parametrize("model", list(PAIRS), ids=lambda m: m.__name__)
def test_the_client_model_reads_what_the_service_answers(
    model: type[models.Answer], service_schemas: dict[str, Schema]
) -> None:
    assert drift(model, service_schemas[PAIRS[model]]) == []


def test_a_literal_narrower_than_the_services_enum_is_drift(service_schemas: dict[str, Schema]) -> None:
    from typing import Literal

    class Narrow(models.A2AAgent):
        status: Literal["ok", "error"]  # type: ignore[assignment]

    assert drift(Narrow, service_schemas["AgentStatus"]) == [
        "status: the client takes ['error', 'ok'], the service may send ['degraded', 'error', 'ok']"
    ]
