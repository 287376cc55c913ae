"""The served echo and waiter agents through the a2a-sdk clients of both protocol versions on both bindings, against
a live Muster on each database: blocking and immediate sends, GetTask, ListTasks, a conversation continued by its
context, streaming, resubscription and cancel of a run that is still going."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from a2a.client import Client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)

from tests.served.support import CHATTY_LINES, live_muster, run_of, sdk_client, send_request, served_settings, until

# Slow: a live service and A2A clients over HTTP.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BINDINGS = [("JSONRPC", "1.0"), ("JSONRPC", "0.3"), ("HTTP+JSON", "1.0"), ("HTTP+JSON", "0.3")]


async def _send(client: Client, text: str, **kwargs: object) -> Task:
    responses = [r async for r in client.send_message(send_request(text, **kwargs))]  # type: ignore[arg-type]
    assert len(responses) == 1 and responses[0].HasField("task"), responses
    return responses[0].task


def _text(task: Task) -> str:
    return "".join(part.text for artifact in task.artifacts for part in artifact.parts)


def _said(response: StreamResponse) -> list[str]:
    if response.HasField("task"):
        return [p.text for m in response.task.history[1:] for p in m.parts]
    return [p.text for p in response.status_update.status.message.parts]


@pytest.mark.parametrize(("binding", "version"), BINDINGS)
async def test_send_get_list_and_a_conversation_continued_by_its_context(
    binding: str, version: str, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with live_muster(served_settings(db_url, tmp_path, monkeypatch)) as base:
        async with sdk_client(base, "echo", binding, version) as client:
            first = await _send(client, "one")
            assert first.status.state == TaskState.TASK_STATE_COMPLETED
            assert _text(first) == "echo: one"
            assert first.history[0].parts[0].text == "one"
            assert first.status.message.parts[0].text == "echo: one"
            conversation = run_of(base, first.id)["conversation"]
            assert run_of(base, first.id)["status"] == "completed"

            second = await _send(client, "two", context_id=first.context_id)
            assert second.context_id == first.context_id and second.id != first.id
            assert _text(second) == f"echo: two [resumed {conversation}]"

            fetched = await client.get_task(GetTaskRequest(id=first.id))
            assert fetched.status.state == TaskState.TASK_STATE_COMPLETED and _text(fetched) == "echo: one"

            if version == "0.3":
                return  # ListTasks is an operation of protocol 1.0 (the 0.3 clients have none)
            await _send(client, "elsewhere")  # another context: not listed below
            listed = await client.list_tasks(ListTasksRequest(context_id=first.context_id))
            assert [t.id for t in listed.tasks] == [second.id, first.id]
            assert listed.total_size == 2 and all(not t.artifacts for t in listed.tasks)
            page = await client.list_tasks(
                ListTasksRequest(context_id=first.context_id, page_size=1, include_artifacts=True)
            )
            assert [t.id for t in page.tasks] == [second.id] and page.next_page_token
            assert _text(page.tasks[0]) == _text(second)
            rest = await client.list_tasks(
                ListTasksRequest(context_id=first.context_id, page_size=1, page_token=page.next_page_token)
            )
            assert [t.id for t in rest.tasks] == [first.id] and not rest.next_page_token


@pytest.mark.parametrize(("binding", "version"), BINDINGS)
async def test_immediate_send_then_stream_resubscribe_and_cancel_a_running_task(
    binding: str, version: str, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with live_muster(served_settings(db_url, tmp_path, monkeypatch)) as base:
        async with sdk_client(base, "waiter", binding, version) as client:
            # The waiter never finishes by itself: only an answer given at once can come back.
            task = await _send(client, "wait", immediately=True)
            assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)

            async def working() -> bool:
                got = await client.get_task(GetTaskRequest(id=task.id))
                return got.status.state == TaskState.TASK_STATE_WORKING

            await until(working)
            canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            assert run_of(base, task.id)["status"] == "cancelled"

        async with sdk_client(base, "waiter", binding, version, streaming=True) as streaming:
            stream = streaming.send_message(send_request("go"))
            seen: list[StreamResponse] = [await anext(stream)]
            assert seen[0].HasField("task")
            task_id = seen[0].task.id
            # What the agent said reaches the client: in the first snapshot's history when the run got that far
            # before the stream began, else as a working status update.
            with anyio.fail_after(20):
                while "waiting" not in _said(seen[-1]):
                    seen.append(await anext(stream))

            resubscribed = streaming.subscribe(SubscribeToTaskRequest(id=task_id))
            snapshot = await anext(resubscribed)
            assert snapshot.task.id == task_id and snapshot.task.status.state == TaskState.TASK_STATE_WORKING

            await streaming.cancel_task(CancelTaskRequest(id=task_id))
            with anyio.fail_after(20):
                rest = [r async for r in stream]
                after = [r async for r in resubscribed]
            assert rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
            assert after[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
            assert run_of(base, task_id)["status"] == "cancelled"


async def test_a_blocking_send_answers_with_every_row_of_a_long_run(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal is read page by page, while the run goes and after it ended: the task holds every row once."""
    with live_muster(served_settings(db_url, tmp_path, monkeypatch)) as base:
        async with sdk_client(base, "chatty", "JSONRPC", "1.0") as client:
            task = await _send(client, "talk")
            expected = [f"line {n}" for n in range(CHATTY_LINES)]
            assert [p.text for m in task.history[1:] for p in m.parts] == expected
            again = await client.get_task(GetTaskRequest(id=task.id))
            assert [p.text for m in again.history[1:] for p in m.parts] == expected
