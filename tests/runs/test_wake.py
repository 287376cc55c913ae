"""Wake by message: an agent with ``wake = true`` sleeps on the mesh between its runs, and a message to it starts ONE
run of the REAL Codex CLI that continues its last conversation, prompted with the count of messages, never their
text; a message while a live-input run of it is running is steered into that run."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from muster_api.app import create_app
from muster_api.dispatch.sleepers import ASLEEP, wake_prompt
from muster_api.settings import Settings
from muster_client import MusterClient
from tests.dispatch.cli.support import user_texts
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply
from tests.runs.support import finished, start
from tests.runs.test_cli_runs import _until, claude, codex
from tests.runs.test_membership import claims_of, mcp_call, member_service, roster_entry, until, when_listed
from tests.support.live import live_server

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


async def runs_of(client: httpx.AsyncClient, agent: str) -> list[dict[str, Any]]:
    response = await client.get("/dispatch/runs", params={"agent": agent})
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["runs"]
    return sorted(found, key=lambda run: run["id"])


def asleep(url: str, agent_id: str) -> bool:
    entry = roster_entry(url, agent_id)
    return entry is not None and entry.alive and entry.status == ASLEEP


async def test_a_burst_of_messages_wakes_one_run_that_continues_the_conversation(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_openai: FakeOpenAI,
) -> None:
    agents = {"sleepy": {**codex(fake_openai.url), "wake": True}}
    # The burst is sent while the agent's run holds its model answer: twenty sends one after another take longer
    # than the quiet that ends an arrival on a loaded machine, so sent to a sleeper they could be several
    # arrivals. Sent meanwhile, they are one wake owed to the run's end, whatever their pace.
    gate = threading.Event()
    fake_openai.script.plan(Reply(text="Noted: the word is PELICAN.", gate=gate), Reply(text="Woken and done."))
    try:
        async with member_service(db_url, tmp_path, monkeypatch, agents) as (client, url, _proxy):
            await until(lambda: asleep(url, "sleepy"), "the agent asleep on the roster before any run")
            first = await start(client, agent="sleepy", prompt="Remember PELICAN", workspace="nest")
            await until(lambda: fake_openai.script.model_requests(), "the held first answer: the run is running")
            with MusterClient(url) as person:
                person.checkin("person", confirm=True)
                answers = [person.send(f"private body {n}", to="sleepy", confirm=True) for n in range(20)]
                assert {getattr(a, "wake", None) for a in answers} == {"scheduled"}
                other = person.send("not for a sleeper", to="person", confirm=True)
                assert getattr(other, "wake", "absent") is None, "no wake for an agent the service does not run"
            gate.set()
            first = await finished(client, first["id"])
            assert first["status"] == "completed" and first["conversation"], first
            await _the_woken_run(client, url, fake_openai, first, answers)
    finally:
        gate.set()


async def _the_woken_run(
    client: httpx.AsyncClient, url: str, fake_openai: FakeOpenAI, first: dict[str, Any], answers: list[Any]
) -> None:
    """The run owed to the first one's end: one, counting the twenty, continuing the conversation, no body."""
    woken = (await until(lambda: len(_runs_now(url, "sleepy")) == 2 and _runs_now(url, "sleepy"), "a wake"))[-1]
    first_sent, last_sent = answers[0].message_id, answers[-1].message_id
    assert first_sent is not None and last_sent is not None
    for message_id in (first_sent, last_sent):
        receipt = await until(lambda m=message_id: _woken(url, "person", m), "the wake in the receipts")
        assert receipt.read_at is None, "woken for the run, not read by the agent"
    done = await finished(client, woken["id"])
    assert done["status"] == "completed" and done["text"] == "Woken and done.", done
    assert done["prompt"] == wake_prompt(20) and "private body" not in done["prompt"]
    assert (done["workspace"], done["continuation"]["conversation"]) == ("nest", first["conversation"])
    request = fake_openai.script.model_requests()[-1]
    assert "Remember PELICAN" in user_texts(request), "the woken run continues the earlier turn"
    assert "private body" not in json.dumps(request.body)
    await until(lambda: asleep(url, "sleepy"), "asleep again after the woken run")
    assert len(await runs_of(client, "sleepy")) == 2, "a burst is one run"


def _woken(url: str, sender: str, message_id: str) -> Any:
    """The recipient's receipt of a message once it records a wake (None before), as its sender reads it."""
    with MusterClient(url) as rest:
        rest.checkin(sender, confirm=True, takeover=True)
        (receipt,) = rest.receipts(message_id).receipts
    return receipt if receipt.woken_at is not None else None


def _runs_now(url: str, agent: str) -> list[dict[str, Any]]:
    with httpx.Client(base_url=url) as plain:
        found: list[dict[str, Any]] = plain.get("/dispatch/runs", params={"agent": agent}).json()["runs"]
    return sorted(found, key=lambda run: run["id"])


async def test_a_message_during_a_live_input_run_steers_it(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_openai: FakeOpenAI,
) -> None:
    agents = {"lively": {**codex(fake_openai.url), "wake": True}}
    gate = threading.Event()
    fake_openai.script.plan(Reply(text="Working.", gate=gate), Reply(text="Read the inbox."))
    try:
        async with member_service(db_url, tmp_path, monkeypatch, agents) as (client, url, _proxy):
            await until(lambda: asleep(url, "lively"), "the agent asleep on the roster")
            run = await start(client, agent="lively", prompt="Work on it", workspace="desk", live_input=True)
            await _until(client, run["id"], "conversation")
            await until(lambda: fake_openai.script.model_requests(), "the held first answer: the turn is running")
            with MusterClient(url) as person:
                person.checkin("person", confirm=True)
                sent = person.send("a private note", to="lively", confirm=True)
                assert getattr(sent, "wake", None) == "steered"
            await _until(client, run["id"], "turn.steer")  # the wake went into the running CLI
            assert sent.message_id is not None
            await until(lambda: _woken(url, "person", sent.message_id), "the steer in the receipts")
            gate.set()
            done = await finished(client, run["id"])
            assert done["status"] == "completed" and done["text"] == "Read the inbox.", done
            assert len(await runs_of(client, "lively")) == 1, "steered, not woken into another run"
    finally:
        gate.set()
    texts = user_texts(fake_openai.script.model_requests()[-1])
    assert wake_prompt(1) in texts and not any("a private note" in text for text in texts)


@pytest.mark.postgres
async def test_two_instances_wake_an_agent_once(
    postgres_server: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_openai: FakeOpenAI,
) -> None:
    """Both instances follow the sleeping agent's inbox (LISTEN/NOTIFY) and both try to wake it: the database lets
    one of them."""
    db_url = postgres_server.create()
    agents = {"shared": {**codex(fake_openai.url), "wake": True}}
    fake_openai.script.plan(Reply(text="Woken once."))
    async with member_service(db_url, tmp_path, monkeypatch, agents) as (client, url, _proxy):
        second = create_app(Settings(database_url=db_url, config=tmp_path / "muster.json"))
        with live_server(second):
            await until(lambda: asleep(url, "shared"), "the agent asleep on the roster")
            with MusterClient(url) as person:
                person.checkin("person", confirm=True)
                person.send("wake up", to="shared", confirm=True)
            [woken] = await until(lambda: _runs_now(url, "shared"), "the wake")
            done = await finished(client, woken["id"])
            assert done["status"] == "completed" and done["text"] == "Woken once."
            await until(lambda: asleep(url, "shared"), "asleep again")
            assert len(await runs_of(client, "shared")) == 1, "one wake across both instances"


async def test_a_sleepers_claims_end_with_its_run_while_it_stays_asleep(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
) -> None:
    """A REAL Claude Code run of a sleeper claims src/** through its MCP server: the claim is listed while the run
    lives, and gone at its end though the agent stays checked in (asleep)."""
    agents = {"dozer": {**claude(fake_anthropic.url), "wake": True, "mesh": {"repo": "shop"}}}
    gate, listed = threading.Event(), threading.Event()
    claim = {"paths": ["src/**"], "reason": "reworking the store", "confirm": True}
    fake_anthropic.script.plan(
        Reply(text="Claiming.", tool=mcp_call("claim_paths", "call_claim", claim, namespace=None), gate=listed),
        Reply(text="Claimed and done.", gate=gate),
    )
    try:
        async with member_service(db_url, tmp_path, monkeypatch, agents) as (client, url, proxy):
            async with anyio.create_task_group() as group:
                group.start_soon(when_listed, proxy, listed)
                await until(lambda: asleep(url, "dozer"), "the agent asleep before its run")
                run = await start(client, agent="dozer", prompt="Claim the store", workspace="shop")
                [held] = await until(lambda: claims_of(url, "dozer"), "the run's claim")
                assert (held.holder, held.pattern) == ("dozer", "src/**")
                gate.set()
                done = await finished(client, run["id"])
                assert done["status"] == "completed" and done["text"] == "Claimed and done.", done
                group.cancel_scope.cancel()
            await until(lambda: asleep(url, "dozer"), "asleep again after its run")
            assert claims_of(url, "dozer") == [], "the run's claims ended with the run"
    finally:
        gate.set()
        listed.set()
