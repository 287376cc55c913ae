"""agent_send + agent_inbox through ``muster mcp`` (official mcp client SDK, stdio) vs the same work over REST with
MusterClient, against one live service (a server process on SQLite), in one run.

Two agents on each side: the sender sends one direct message, the reader reads its inbox. Both sides do the same
HTTP work: agent_inbox acknowledges what the previous call returned and reads the next page (``muster mcp`` sends
the acknowledgement alongside the read, as it always does; the REST side sends them one after the other, as a plain
synchronous client does). The sides are interleaved pair by pair so that drift hits both. Printed: the median per
call of each side and the ratio MCP/REST per call: a figure to watch, not a goal (an agent's tool call sits inside a
model turn of seconds).

Context, measured in the same run: the floor of any MCP tool call — a tool that does nothing (bench/mcp/noop.py,
served by the same SDK over the same transport) — against a REST round trip that does nothing (GET /healthz).

Run: .venv/bin/python bench/mcp/run.py  (about a minute; traffic only to 127.0.0.1)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx
from mcp import Client
from mcp.client.stdio import StdioServerParameters

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.client.support import API_KEY, live_service  # noqa: E402
from tests.mcp.support import call, mcp_agent  # noqa: E402

from muster_client import MusterClient, SendResult  # noqa: E402

WARM_UP = 20
PAIRS = 300
NOOP = Path(__file__).with_name("noop.py")


def rest_pair(sender: MusterClient, reader: MusterClient, to: str, cursor: list[int]) -> tuple[float, float]:
    started = time.perf_counter()
    sent = sender.send("ping", to=to, confirm=True)
    between = time.perf_counter()
    assert isinstance(sent, SendResult) and sent.stored == 1
    if cursor[0]:
        reader.ack(cursor[0], confirm=True)
    page = reader.inbox(after=cursor[0] or None)
    done = time.perf_counter()
    assert len(page.messages) == 1
    cursor[0] = page.next_cursor
    return between - started, done - between


async def mcp_pair(sender: object, reader: object, to: str) -> tuple[float, float]:
    started = time.perf_counter()
    await call(sender, "agent_send", to=to, body="ping", confirm=True)  # type: ignore[arg-type]
    between = time.perf_counter()
    got = await call(reader, "agent_inbox")  # type: ignore[arg-type]
    done = time.perf_counter()
    assert got.startswith("1 new message(s)"), got
    return between - started, done - between


async def floor(url: str) -> tuple[float, float]:
    """Median ms of a no-op MCP tool call and of a no-op REST round trip, interleaved."""
    params = StdioServerParameters(command=sys.executable, args=[str(NOOP)], env={"PYTHONPATH": str(ROOT)})
    mcp_times: list[float] = []
    rest_times: list[float] = []
    async with Client(params, read_timeout_seconds=120) as noop:
        with httpx.Client(base_url=url) as http:
            for i in range(WARM_UP + PAIRS):
                started = time.perf_counter()
                await noop.call_tool("noop", {})
                between = time.perf_counter()
                http.get("/healthz").raise_for_status()
                done = time.perf_counter()
                if i >= WARM_UP:
                    mcp_times.append(between - started)
                    rest_times.append(done - between)
    return ms(mcp_times), ms(rest_times)


def ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        with live_service(f"sqlite:///{base / 'muster.db'}", base) as server:
            url = server.base_url
            with (
                MusterClient(url, api_key=API_KEY) as rest_sender,
                MusterClient(url, api_key=API_KEY) as rest_reader,
            ):
                rest_sender.checkin("rest-sender", confirm=True)
                rest_reader.checkin("rest-reader", confirm=True)
                async with mcp_agent(url, base / "s") as mcp_sender, mcp_agent(url, base / "r") as mcp_reader:
                    await call(mcp_sender, "agent_checkin", agent_id="mcp-sender", confirm=True)
                    await call(mcp_reader, "agent_checkin", agent_id="mcp-reader", confirm=True)
                    cursor = [0]
                    rest: dict[str, list[float]] = {"send": [], "inbox": []}
                    mcp: dict[str, list[float]] = {"send": [], "inbox": []}
                    for i in range(WARM_UP + PAIRS):
                        r = rest_pair(rest_sender, rest_reader, "rest-reader", cursor)
                        m = await mcp_pair(mcp_sender, mcp_reader, "mcp-reader")
                        if i >= WARM_UP:
                            for side, pair in ((rest, r), (mcp, m)):
                                side["send"].append(pair[0])
                                side["inbox"].append(pair[1])
            noop_mcp, noop_rest = await floor(url)
    print(f"mcp bench: {PAIRS} pairs (after {WARM_UP} warm-up), SQLite, loopback; median per call")
    print(f"{'call':<12}{'REST (MusterClient)':>22}{'MCP (muster mcp)':>20}{'ratio MCP/REST':>18}")
    for name in ("send", "inbox"):
        label = f"agent_{name}"
        r_ms, m_ms = ms(rest[name]), ms(mcp[name])
        print(f"{label:<12}{r_ms:>19.2f} ms{m_ms:>17.2f} ms{m_ms / r_ms:>17.2f}x")
    r_all = ms([a + b for a, b in zip(rest["send"], rest["inbox"], strict=True)]) / 2
    m_all = ms([a + b for a, b in zip(mcp["send"], mcp["inbox"], strict=True)]) / 2
    print(f"{'per call':<12}{r_all:>19.2f} ms{m_all:>17.2f} ms{m_all / r_all:>17.2f}x")
    print(
        f"context: a no-op MCP tool call (the mcp SDK's floor, bench/mcp/noop.py) {noop_mcp:.2f} ms vs a no-op REST "
        f"round trip (GET /healthz) {noop_rest:.2f} ms: {noop_mcp - noop_rest:+.2f} ms per call before any work; "
        f"muster mcp adds {m_all - r_all:+.2f} ms per call over REST"
    )


if __name__ == "__main__":
    anyio.run(main)
