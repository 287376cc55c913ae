"""Tool-call round trip through muster_a2a vs the bare a2a-sdk client, against the same in-process a2a-sdk server.

Both sides use the same protocol flow (non-blocking SendMessage, then GetTask every POLL_MS until terminal) over one
kept-alive httpx client each, interleaved call by call so that drift hits both equally. Printed per scenario: the
median round trip of each side, the ratio muster/bare (goal ≤ 1.05), and HTTP requests per call.

Run: .venv/bin/python bench/a2a/run.py  (about 30 s; traffic only to 127.0.0.1)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from a2a.client import ClientConfig, ClientFactory  # noqa: E402
from a2a.client.card_resolver import parse_agent_card  # noqa: E402
from a2a.helpers import get_artifact_text  # noqa: E402
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState  # noqa: E402
from tests.a2a.peers import a2a_peer  # noqa: E402

from muster_a2a import CardCache, make_http_client, remote_agent  # noqa: E402

POLL_MS = 10
GOAL = 1.05  # muster_a2a's median round trip at most this multiple of the bare a2a-sdk client's
TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
}
SCENARIOS = [
    # (label, message, calls per side)
    ("direct message answer (no task)", "message hi", 200),
    ("task completes at once", "complete hi", 100),
    # Each poll cycle is POLL_MS of sleep plus one GetTask round trip: ~12 poll intervals of work gives ~10 polls.
    ("task takes ~10 polls", f"slow {POLL_MS * 12 / 1000}", 15),
]


class Counter:
    def __init__(self) -> None:
        self.requests = 0

    async def hook(self, request: httpx.Request) -> None:
        self.requests += 1


async def bare_call(client: object, text: str) -> str:
    """The bare SDK, doing by hand what a tool call does: non-blocking send, poll GetTask, read the artifacts."""
    request = SendMessageRequest(
        message=Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
    )
    request.configuration.return_immediately = True
    task = None
    async for event in client.send_message(request):  # type: ignore[attr-defined]
        if event.HasField("message"):
            return "\n".join(p.text for p in event.message.parts)
        task = event.task
    assert task is not None
    while task.status.state not in TERMINAL:
        await asyncio.sleep(POLL_MS / 1000)
        task = await client.get_task(GetTaskRequest(id=task.id))  # type: ignore[attr-defined]
    return "\n".join(get_artifact_text(a) for a in task.artifacts)


async def main() -> None:
    started = time.monotonic()
    async with a2a_peer("Bench") as peer:
        bare_count, muster_count = Counter(), Counter()
        bare_http = httpx.AsyncClient(timeout=httpx.Timeout(30.0), event_hooks={"request": [bare_count.hook]})
        muster_http = make_http_client(60_000)
        muster_http.event_hooks["request"].append(muster_count.hook)
        try:
            card = parse_agent_card((await bare_http.get(peer.card_url)).json())
            bare = ClientFactory(ClientConfig(httpx_client=bare_http, streaming=False)).create(card)
            agent = await remote_agent(
                peer.base, poll_every=POLL_MS, timeout=60_000, http_client=muster_http, card_cache=CardCache()
            )
            assert agent.error is None, agent.error
            [tool] = agent.tools
            print(f"a2a bench: in-process a2a-sdk server {peer.base}, poll every {POLL_MS} ms, dialect {agent.dialect}")
            worst = 0.0
            for label, text, n in SCENARIOS:
                # Warm both sides (connections, code paths) before measuring.
                await bare_call(bare, text)
                await tool.call(text)
                bare_ms: list[float] = []
                muster_ms: list[float] = []
                bare_count.requests = muster_count.requests = 0
                polls: list[int] = []
                for _ in range(n):
                    t0 = time.perf_counter()
                    expected = await bare_call(bare, text)
                    t1 = time.perf_counter()
                    result = await tool.call(text)
                    t2 = time.perf_counter()
                    assert not result.is_error and result.text.split("\n")[0] == expected.split("\n")[0], result.text
                    polls.append(int(result.metadata["polls"]))
                    bare_ms.append((t1 - t0) * 1000)
                    muster_ms.append((t2 - t1) * 1000)
                b, m = statistics.median(bare_ms), statistics.median(muster_ms)
                ratio = m / b
                worst = max(worst, ratio)
                print(
                    f"  {label:34s} bare a2a-sdk {b:7.2f} ms  muster_a2a {m:7.2f} ms  ratio {ratio:5.2f}x  "
                    f"requests/call bare {bare_count.requests / n:.1f} muster {muster_count.requests / n:.1f} "
                    f"(polls/call {statistics.mean(polls):.1f})"
                )
            verdict = "OK" if worst <= GOAL else "OVER GOAL"
            print(
                f"  worst ratio {worst:.2f}x (goal <= {GOAL:.2f}x): {verdict}; {time.monotonic() - started:.1f} s total"
            )
        finally:
            await bare_http.aclose()
            await muster_http.aclose()


if __name__ == "__main__":
    asyncio.run(main())
