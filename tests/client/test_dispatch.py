"""Dispatch runs through the client: agents, a run queued then waited for over its SSE events, listing, a failing
agent's error code, an unknown run, against a live service with custom agents."""

from __future__ import annotations

import pytest

from muster_client import AsyncMusterClient, Conflict, MusterClient, NotFound, Run
from tests.client.support import API_KEY
from tests.mesh.support import ServerProcess
from tests.runs.agents import EVENTS

# Slow: a live service process.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def test_runs_sync(service: ServerProcess, name: str) -> None:
    with MusterClient(service.base_url, api_key=API_KEY) as client:
        agents = {a.name: a for a in client.dispatch_agents().agents}
        assert agents["fast"].kind == "custom" and agents["fast"].error is None

        queued = client.start_run("fast", "hello", name, idempotency_key=f"{name}-1")
        assert isinstance(queued, Run) and queued.status == "queued" and not queued.finished
        events = list(client.run_events(queued.id))
        assert [e.id for e in events[:-1]] == list(range(1, len(events)))
        assert events[-1].type == "result"
        done = events[-1].run()
        assert done is not None and done.status == "completed" and done.text == "done: hello"
        assert done.usage is not None and done.usage["output"] == EVENTS
        assert client.run(queued.id).text == "done: hello"
        assert queued.id in [r.id for r in client.runs(agent="fast").runs]

        failed = client.wait_run(client.start_run("broken", "x", name).id)
        assert failed.status == "failed" and failed.error_code == "quota"

        with pytest.raises(NotFound):
            client.run("0" * 32)


async def test_runs_async(service: ServerProcess, name: str) -> None:
    async with AsyncMusterClient(service.base_url, api_key=API_KEY) as client:
        run = await client.start_run("fast", "again", name)
        done = await client.wait_run(run.id)
        assert (done.status, done.text, done.selected) == ("completed", "done: again", "fast")
        # A custom agent keeps no conversation: a continuation of its run is refused, by field.
        with pytest.raises(Conflict) as refused:
            await client.start_run("fast", "more", name, continuation={"run_id": run.id})
        assert refused.value.detail.startswith("continuation.run_id:")
