"""Schemathesis against the live service (uvicorn on a loopback port) on both databases, with and without a session
token: every operation, positive and negative examples, every check schemathesis has (``--checks all``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS, load_all_checks

from muster_api.app import create_app
from muster_api.settings import Settings
from tests.support.live import live_server

MAX_EXAMPLES = 12
API_KEY = "k-schemathesis"
# A schema can say what input is well formed, not what the database holds: a cursor beyond this inbox's last message
# (422 invalid_cursor) or a body whose UTF-8 bytes pass the mesh's bound (413) is valid by the schema and still
# refused. 5xx stays out of every expectation.
POSITIVE_STATUSES = ["2xx", "401", "403", "404", "409", "413", "422", "429"]
# Streams never end: their first answer is covered by tests/mesh/test_stream.py.
STREAMS = ("/mesh/inbox/stream",)


@dataclass
class Live:
    base_url: str


@pytest.fixture
def live(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Live]:
    """The app served by uvicorn on a loopback port, in a thread of this process (real HTTP, real lifespan)."""
    # Long-polls answer at once: an example must not wait a minute for a message.
    monkeypatch.setenv("MUSTER_MESH_MAX_WAIT_SECONDS", "0.05")
    (tmp_path / "muster.toml").write_text("", encoding="utf-8")
    keys = [API_KEY] if request.node.callspec.params.get("caller") == "api-key" else []
    app = create_app(
        Settings(database_url=db_url, config=tmp_path / "muster.toml", log_level="WARNING", api_keys=keys)  # type: ignore[arg-type]
    )
    with live_server(app) as base_url:
        yield Live(base_url)


def _all_checks() -> list[Any]:
    load_all_checks()
    return list(CHECKS.get_all())


def _config() -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "checks": {"positive_data_acceptance": {"expected-statuses": POSITIVE_STATUSES}},
        }
    )


def _run(operation: Any, base_url: str, headers: dict[str, str], mode: GenerationMode) -> None:
    checks = _all_checks()

    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    @hypothesis.settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def examples(case: schemathesis.Case) -> None:
        sent = {**(case.headers or {}), **headers}
        response = case.call(base_url=base_url, headers=sent, timeout=15)
        try:
            case.validate_response(response, checks=checks, headers=sent)
        except BaseException as exc:
            exc.add_note(f"{case.operation.label} ({mode.name.lower()}): {case.as_curl_command(headers=sent)}")
            raise

    examples()


@pytest.mark.slow
@pytest.mark.parametrize("caller", ["anonymous", "bearer", "api-key"])
def test_every_operation_holds_to_its_schema(live: Live, caller: str) -> None:
    """``api-key``: the service has keys and every example carries one, with a session token too."""
    headers: dict[str, str] = {"X-API-Key": API_KEY} if caller == "api-key" else {}
    if caller != "anonymous":
        checkin = httpx.post(
            f"{live.base_url}/mesh/checkin",
            json={"agent_id": "fuzzer", "confirm": True, "ttl_seconds": 86400},
            headers=headers,
        )
        headers["Authorization"] = f"Bearer {checkin.json()['token']}"
    schema = schemathesis.openapi.from_url(f"{live.base_url}/openapi.json", config=_config(), headers=headers)
    tested: list[str] = []
    negative: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path in STREAMS:
            continue
        _run(operation, live.base_url, headers, GenerationMode.POSITIVE)
        tested.append(operation.label)
        try:
            _run(operation, live.base_url, headers, GenerationMode.NEGATIVE)
        except hypothesis.errors.Unsatisfiable:
            continue  # no input can be invalid (no parameters, or only free strings in the path)
        negative.append(operation.label)
    assert {"POST /mesh/messages", "GET /mesh/inbox", "POST /mesh/checkin"} <= set(tested) & set(negative)
