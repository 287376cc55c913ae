"""A part of a media type the served agent does not take fails with the protocol's ContentTypeNotSupportedError
(JSON-RPC -32005; on HTTP+JSON its 400 INVALID_ARGUMENT with the CONTENT_TYPE_NOT_SUPPORTED reason), carrying the
human detail that names the part, through the a2a-sdk client on both bindings."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from a2a.types import Message, Part, Role, SendMessageRequest
from a2a.utils.errors import ContentTypeNotSupportedError

from tests.served.support import live_muster, sdk_client, served_settings

# Slow: a live service and A2A clients over HTTP.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _request(*parts: Part) -> SendMessageRequest:
    return SendMessageRequest(message=Message(role=Role.ROLE_USER, message_id="m-media", parts=list(parts)))


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a_part_the_agent_does_not_take_is_content_type_not_supported(
    binding: str, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with live_muster(served_settings(db_url, tmp_path, monkeypatch)) as base:
        async with sdk_client(base, "echo", binding, "1.0") as client:
            for part, named in [
                (Part(raw=b"\x00\x01", media_type="application/octet-stream"), "message.parts[1] is raw"),
                (Part(url="https://example.com/a.png", media_type="image/png"), "message.parts[1] is url"),
            ]:
                with pytest.raises(ContentTypeNotSupportedError) as refused:
                    async for _ in client.send_message(_request(Part(text="look"), part)):
                        pass
                assert named in str(refused.value) and "text parts only" in str(refused.value)
        # On the wire: the error table's code and status, the SDK's reason, the human detail.
        request = {"role": "ROLE_USER", "parts": [{"raw": "dGNr", "mediaType": "application/x-unknown"}]}
        headers = {"A2A-Version": "1.0"}
        if binding == "JSONRPC":
            params = {"message": {**request, "messageId": "m-wire"}}
            rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
            answer = httpx.post(f"{base}/a2a/serve/echo", json=rpc, headers=headers)
            error = answer.json()["error"]
            assert (answer.status_code, error["code"]) == (200, -32005)
            reasons = [d["reason"] for d in error["data"]]
        else:
            body = {"message": {**request, "messageId": "m-wire"}}
            answer = httpx.post(f"{base}/a2a/serve/echo/rest/message:send", json=body, headers=headers)
            error = answer.json()["error"]
            assert (answer.status_code, error["code"], error["status"]) == (415, 415, "INVALID_ARGUMENT")
            assert answer.headers["content-length"] == str(len(answer.content))
            reasons = [d["reason"] for d in error["details"]]
        assert reasons == ["CONTENT_TYPE_NOT_SUPPORTED"]
        assert error["message"] == "message.parts[0] is raw: served agents take text parts only"
