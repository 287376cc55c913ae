"""The OpenAPI document states the rules the API enforces (schemathesis then holds the API to it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from muster_api.app import create_app
from muster_api.settings import Settings


def _schema(tmp_path: Path) -> dict[str, Any]:
    schema: dict[str, Any] = create_app(Settings(database_url=f"sqlite:///{tmp_path}/o.db")).openapi()
    return schema


def test_send_states_exactly_one_address(tmp_path: Path) -> None:
    send = _schema(tmp_path)["components"]["schemas"]["SendRequest"]
    assert [option["required"] for option in send["oneOf"]] == [["to"], ["role"], ["repo"], ["cap"]]


def test_header_and_query_parameters_are_never_nullable(tmp_path: Path) -> None:
    for path, item in _schema(tmp_path)["paths"].items():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                assert {"type": "null"} not in parameter["schema"].get("anyOf", []), (path, parameter["name"])
    stream = _schema(tmp_path)["paths"]["/mesh/inbox/stream"]["get"]
    (last_event_id,) = [p for p in stream["parameters"] if p["name"] == "Last-Event-ID"]
    assert last_event_id["schema"] == {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}


def test_every_operation_documents_its_problems(tmp_path: Path) -> None:
    for path, item in _schema(tmp_path)["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert {"401", "403", "422", "503"} <= set(responses), (method, path)
            if "requestBody" in operation:
                assert "413" in responses, (method, path)
            for status, response in responses.items():
                if status.startswith(("4", "5")):
                    assert "application/problem+json" in response["content"], (method, path, status)
            assert "Retry-After" in responses["503"]["headers"]
    send = _schema(tmp_path)["paths"]["/mesh/messages"]["post"]["responses"]
    assert {"404", "409", "413", "429"} <= set(send)
