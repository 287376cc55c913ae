"""Any instance answers for any task: a message taken by one Muster instance (which runs the workers) is followed,
read and cancelled through another instance on the same database that runs none."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from a2a.types import CancelTaskRequest, GetTaskRequest, SubscribeToTaskRequest, TaskState

from tests.served.support import live_muster, run_of, sdk_client, send_request, served_settings

pytestmark = pytest.mark.anyio


async def test_a_task_is_followed_and_cancelled_through_another_instance(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = served_settings(db_url, tmp_path, monkeypatch)
    monkeypatch.setenv("MUSTER_DISPATCH_WORKERS", "2")
    with live_muster(settings) as working:
        monkeypatch.setenv("MUSTER_DISPATCH_WORKERS", "0")
        with live_muster(settings) as serving_only:
            async with sdk_client(working, "waiter", "HTTP+JSON", "1.0") as taker:
                [response] = [r async for r in taker.send_message(send_request("wait", immediately=True))]
            task_id = response.task.id
            async with sdk_client(serving_only, "waiter", "JSONRPC", "1.0", streaming=True) as other:
                stream = other.subscribe(SubscribeToTaskRequest(id=task_id))
                first = await anext(stream)
                assert first.task.id == task_id
                await other.cancel_task(CancelTaskRequest(id=task_id))
                with anyio.fail_after(20):
                    events = [first, *[r async for r in stream]]
                assert events[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
                fetched = await other.get_task(GetTaskRequest(id=task_id))
                assert fetched.status.state == TaskState.TASK_STATE_CANCELED
            assert run_of(working, task_id)["status"] == "cancelled"
