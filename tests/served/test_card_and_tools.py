"""A served agent as other A2A clients meet it: the card, ``muster_a2a``'s tools against a live Muster (a follow-up
in the same context resumes the conversation, a timeout cancels the run), the refusals, a quota failure, the key."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from muster_a2a import remote_agent
from tests.served.support import RESET_AT, fetch_card, live_muster, muster_process, run_of, served_settings

# Slow: a live service and A2A clients over HTTP.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CARD_FIELDS = {
    "name",
    "description",
    "version",
    "skills",
    "supportedInterfaces",
    "capabilities",
    "defaultInputModes",
    "defaultOutputModes",
}


def _rpc(url: str, method: str, params: dict[str, object], **headers: str) -> dict[str, object]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    document: dict[str, object] = httpx.post(url, json=body, headers={"A2A-Version": "1.0", **headers}).json()
    return document


def _message(text: str | None = None, **extra: object) -> dict[str, object]:
    parts: list[dict[str, object]] = [{"text": text}] if text is not None else [{"url": "https://example.com/a.png"}]
    return {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": parts, **extra}}


async def test_the_card_declares_protocol_1_0_interfaces_only(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with live_muster(served_settings(db_url, tmp_path, monkeypatch)) as base:
        card = fetch_card(base)
        assert set(card) == CARD_FIELDS
        assert card["capabilities"] == {"streaming": True, "pushNotifications": False}
        assert card["supportedInterfaces"] == [
            {"url": f"{base}/a2a/serve/echo", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": f"{base}/a2a/serve/echo/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        ]
        assert card["defaultInputModes"] == card["defaultOutputModes"] == ["text/plain"]
        assert card["skills"] == [{"id": "echo", "name": "Echo", "description": "echoes", "tags": ["test"]}]
        assert fetch_card(base, "waiter")["skills"][0]["id"] == "turn"  # type: ignore[index]
        # An agent without `a2a` in its entry, and a name nobody defined, are not served.
        for name in ("hidden", "nobody"):
            answer = httpx.get(f"{base}/a2a/serve/{name}/.well-known/agent-card.json")
            assert answer.status_code == 404 and name in answer.json()["detail"]
        # The JSON-RPC endpoint answers with and without the trailing slash.
        for url in (f"{base}/a2a/serve/echo", f"{base}/a2a/serve/echo/"):
            answer = _rpc(url, "SendMessage", _message("slash"))
            assert answer["result"]["task"]["artifacts"][0]["parts"][0]["text"] == "echo: slash"  # type: ignore[index]


async def test_muster_a2a_tools_resume_by_context_and_cancel_on_timeout(db_url: str, tmp_path: Path) -> None:
    with muster_process(db_url, tmp_path) as base:
        echo = await remote_agent(f"{base}/a2a/serve/echo", allow_http=True)
        assert echo.error is None, echo.error
        [tool] = echo.tools
        first = await tool.call("hello")
        assert (first.text, first.metadata["state"]) == ("echo: hello", "completed")
        conversation = run_of(base, first.metadata["task_id"])["conversation"]
        follow_up = await tool.call("again", context_id=first.metadata["context_id"])
        assert follow_up.text == f"echo: again [resumed {conversation}]"

        waiter = await remote_agent(f"{base}/a2a/serve/waiter", allow_http=True, timeout=1500)
        timed_out = await waiter.tools[0].call("wait")
        assert timed_out.is_error and "timed out" in timed_out.text
        assert run_of(base, timed_out.metadata["task_id"])["status"] == "cancelled"


async def test_refusals_and_a_quota_failure_say_what_happened(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with live_muster(served_settings(db_url, tmp_path, monkeypatch)) as base:
        url = f"{base}/a2a/serve/echo"
        refused = _rpc(url, "SendMessage", _message())
        assert "parts[0] is url" in refused["error"]["message"]  # type: ignore[index]
        unknown = _rpc(url, "GetTask", {"id": "0" * 32})
        assert unknown["error"]["code"] == -32001  # type: ignore[index]
        done = _rpc(url, "SendMessage", _message("once"))["result"]["task"]  # type: ignore[index]
        again = _rpc(url, "SendMessage", _message("twice", taskId=done["id"]))
        assert "takes no further message" in again["error"]["message"]  # type: ignore[index]
        not_cancelable = _rpc(url, "CancelTask", {"id": done["id"]})
        assert not_cancelable["error"]["code"] == -32002  # type: ignore[index]
        finished = _rpc(url, "SubscribeToTask", {"id": done["id"]})
        assert finished["error"]["code"] == -32004 and "terminal" in finished["error"]["message"]  # type: ignore[index]
        for params, words in (({"pageSize": 0}, "page size"), ({"pageToken": "not-ours"}, "pageToken")):
            listed = _rpc(url, "ListTasks", params)
            assert listed["error"]["code"] == -32602 and words in listed["error"]["message"], listed  # type: ignore[index]
        bad_context = _rpc(url, "SendMessage", _message("x", contextId="../etc"))
        assert "contextId" in bad_context["error"]["message"]  # type: ignore[index]

        # A2A errors reach the client as the SDK writes them (never rewritten as the service's problem+json).
        version = httpx.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
            headers={"A2A-Version": "9.9"},
        ).json()
        assert version["error"]["code"] == -32009
        assert version["error"]["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"
        missing = httpx.get(f"{url}/rest/tasks/{'0' * 32}", headers={"A2A-Version": "1.0"})
        assert missing.status_code == 404 and missing.headers["content-type"] == "application/json"
        assert missing.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
        # Media types: a JSON-RPC body not declared JSON is ContentTypeNotSupportedError; REST answers are JSON.
        wrong = httpx.post(url, content=b"{}", headers={"Content-Type": "text/plain", "A2A-Version": "1.0"}).json()
        assert wrong["error"]["code"] == -32005
        rest = httpx.post(f"{url}/rest/message:send", json=_message("rest"), headers={"A2A-Version": "1.0"})
        assert rest.headers["content-type"] == "application/json"
        assert rest.json()["task"]["artifacts"][0]["parts"][0]["text"] == "echo: rest"

        limited = _rpc(f"{base}/a2a/serve/limited", "SendMessage", _message("go"))["result"]["task"]  # type: ignore[index]
        assert limited["status"]["state"] == "TASK_STATE_FAILED"
        said = limited["status"]["message"]["parts"][0]["text"]
        assert said.startswith("quota:") and RESET_AT.isoformat() in said


async def test_api_keys_guard_the_served_agents(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = served_settings(db_url, tmp_path, monkeypatch, api_keys=["k-served"])
    with live_muster(settings) as base:
        url = f"{base}/a2a/serve/echo"
        assert httpx.get(f"{url}/.well-known/agent-card.json").status_code == 401
        assert httpx.post(url, json={}).status_code == 401
        answer = _rpc(url, "SendMessage", _message("keyed"), **{"X-API-Key": "k-served"})
        assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"  # type: ignore[index]
        agent = await remote_agent(url, allow_http=True, headers={"X-API-Key": "k-served"})
        assert agent.error is None and (await agent.tools[0].call("hi")).text == "echo: hi"


async def test_a_setting_makes_the_cards_public_and_only_them(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUSTER_A2A_SERVE_PUBLIC_CARDS", "true")
    settings = served_settings(db_url, tmp_path, monkeypatch, api_keys=["k-served"])
    with live_muster(settings) as base:
        url = f"{base}/a2a/serve/echo"
        assert fetch_card(base)["name"] == "echo"
        assert httpx.post(url, json={}).status_code == 401
        assert httpx.get(f"{url}/rest/tasks").status_code == 401
        assert httpx.get(f"{base}/a2a/serve/echo/x/.well-known/agent-card.json").status_code == 401


async def test_a_reload_serves_a_newly_marked_agent_and_stops_serving_an_unmarked_one(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = served_settings(db_url, tmp_path, monkeypatch)
    with live_muster(settings) as base:
        assert httpx.get(f"{base}/a2a/serve/hidden/.well-known/agent-card.json").status_code == 404
        settings.config.write_text(
            '[dispatch_agents.hidden]\nkind = "custom"\nentrypoint = "tests.served.support:echo"\na2a = true\n'
            '[dispatch_agents.waiter]\nkind = "custom"\nentrypoint = "tests.served.support:waiter"\n'
        )
        assert httpx.post(f"{base}/config/reload").status_code == 200
        assert fetch_card(base, "hidden")["name"] == "hidden"
        assert httpx.get(f"{base}/a2a/serve/waiter/.well-known/agent-card.json").status_code == 404
        answer = _rpc(f"{base}/a2a/serve/hidden", "SendMessage", _message("new"))
        assert answer["result"]["task"]["artifacts"][0]["parts"][0]["text"] == "echo: new"  # type: ignore[index]
