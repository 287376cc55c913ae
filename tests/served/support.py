"""Served agents for the tests and the benchmark (custom dispatch agents), and a live Muster serving them.

echo     answers "echo: <prompt>"; in a continued conversation it adds "[resumed <conversation>]"
waiter   says "waiting", then waits until cancelled (a run that is still going)
limited  fails with a quota error whose reset is known
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path

import anyio
import httpx
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types import AgentCard, AgentInterface, Message, Part, Role, SendMessageRequest
from google.protobuf.json_format import ParseDict

from muster_api.app import create_app
from muster_api.settings import Settings
from muster_dispatch import AgentEvent, AgentInput
from tests.support.live import live_server
from tests.support.net import READY_WITHIN, free_port

ROOT = Path(__file__).resolve().parents[2]

RESET_AT = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)

CONFIG = """
[dispatch_agents.echo]
kind = "custom"
entrypoint = "tests.served.support:echo"

[dispatch_agents.echo.a2a]
description = "Echoes its prompt"
skills = [{ id = "echo", name = "Echo", description = "echoes", tags = ["test"] }]

[dispatch_agents.waiter]
kind = "custom"
entrypoint = "tests.served.support:waiter"
a2a = true

[dispatch_agents.limited]
kind = "custom"
entrypoint = "tests.served.support:limited"
a2a = true

[dispatch_agents.chatty]
kind = "custom"
entrypoint = "tests.served.support:chatty"
a2a = true

[dispatch_agents.hidden]
kind = "custom"
entrypoint = "tests.served.support:echo"
"""


async def echo(input: AgentInput, context: object) -> AsyncIterator[AgentEvent]:
    resumed = input.continuation.conversation if input.continuation is not None else None
    conversation = resumed or f"echo-{uuid.uuid4().hex}"
    yield AgentEvent("conversation", id=conversation)
    text = f"echo: {input.prompt}" + (f" [resumed {resumed}]" if resumed else "")
    yield AgentEvent("text", text=text)


async def waiter(input: AgentInput, context: object) -> AsyncIterator[AgentEvent]:
    yield AgentEvent("text", text="waiting")
    await anyio.Event().wait()  # until the run is cancelled
    yield AgentEvent("text", text="never")


# More journal rows than a served agent reads at once (its history is read page by page).
CHATTY_LINES = 2500


async def chatty(input: AgentInput, context: object) -> AsyncIterator[AgentEvent]:
    for line in range(CHATTY_LINES):
        yield AgentEvent("text", text=f"line {line}")


async def limited(input: AgentInput, context: object) -> AsyncIterator[AgentEvent]:
    yield AgentEvent("failure", text="usage limit reached", code="quota", reset_at=RESET_AT)


def write_config(path: Path, extra: str = "") -> Path:
    path.write_text(CONFIG + extra)
    return path


def served_settings(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **settings: object) -> Settings:
    monkeypatch.setenv("MUSTER_WORKSPACES_ROOT", str(tmp_path / "workspaces"))
    monkeypatch.setenv("MUSTER_DISPATCH_HOMES", str(tmp_path / "homes"))
    return Settings(database_url=db_url, config=write_config(tmp_path / "muster.toml"), **settings)  # type: ignore[arg-type]


@contextmanager
def muster_process(db_url: str, tmp_path: Path) -> Iterator[str]:
    """``muster serve`` in a process of its own (as an operator starts it) serving the agents of ``CONFIG``."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")}
    env.update(
        PYTHONPATH=str(ROOT),  # the test agents' entrypoints live in this repository's tests
        MUSTER_DATABASE_URL=db_url,
        MUSTER_CONFIG=str(write_config(tmp_path / "muster.toml")),
        MUSTER_WORKSPACES_ROOT=str(tmp_path / "workspaces"),
        MUSTER_DISPATCH_HOMES=str(tmp_path / "homes"),
        MUSTER_LOG_LEVEL="WARNING",
    )
    command = [sys.executable, "-m", "muster_api.commands.cli", "serve", "--port", str(port)]
    base = f"http://127.0.0.1:{port}"
    with subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as process:
        try:
            deadline = time.monotonic() + READY_WITHIN
            while not _ready(base):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("muster serve did not start")
                time.sleep(0.1)
            yield base
        finally:
            process.terminate()
            process.wait(timeout=30)


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def live_muster(settings: Settings) -> Iterator[str]:
    """A Muster process's app served over real HTTP on loopback; yields its base URL."""
    with live_server(create_app(settings)) as base:
        yield base


def fetch_card(base: str, agent: str = "echo") -> dict[str, object]:
    document: dict[str, object] = httpx.get(f"{base}/a2a/serve/{agent}/.well-known/agent-card.json").json()
    return document


@asynccontextmanager
async def sdk_client(
    base: str, agent: str, binding: str, version: str, *, streaming: bool = False
) -> AsyncIterator[Client]:
    """The a2a-sdk client of protocol ``version`` on ``binding``, for the served agent's interface of that binding
    (a 0.3 client is given the same URL: the server answers both versions on one endpoint)."""
    card = ParseDict(fetch_card(base, agent), AgentCard(), ignore_unknown_fields=True)
    interface = next(i for i in card.supported_interfaces if i.protocol_binding == binding)
    del card.supported_interfaces[:]
    card.supported_interfaces.append(
        AgentInterface(url=interface.url, protocol_binding=binding, protocol_version=version)
    )
    async with httpx.AsyncClient(timeout=30) as http:
        config = ClientConfig(httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding])
        client = ClientFactory(config).create(card)
        try:
            yield client
        finally:
            await client.close()


def user_message(text: str, *, context_id: str = "", task_id: str = "") -> Message:
    return Message(
        role=Role.ROLE_USER,
        message_id=uuid.uuid4().hex,
        parts=[Part(text=text)],
        context_id=context_id,
        task_id=task_id,
    )


def send_request(text: str, *, context_id: str = "", immediately: bool = False) -> SendMessageRequest:
    request = SendMessageRequest(message=user_message(text, context_id=context_id))
    request.configuration.return_immediately = immediately
    return request


async def until(condition: Callable[[], Awaitable[bool]], seconds: float = 20.0) -> None:
    """Wait for an observable condition (each look is a real request), failing after ``seconds``."""
    with anyio.fail_after(seconds):
        while not await condition():
            await anyio.sleep(0.05)


def run_of(base: str, run_id: str) -> dict[str, object]:
    document: dict[str, object] = httpx.get(f"{base}/dispatch/runs/{run_id}").json()
    return document
