"""The pure parts: the agents block, task_output in both dialects, tool names, the in-memory store."""

from __future__ import annotations

import pytest
from a2a.types import Artifact, Message, Part, Role, Task, TaskState, TaskStatus
from google.protobuf.json_format import MessageToDict

from muster_a2a import AgentConfigError, parse_agents_config, state_name, task_output
from muster_a2a.naming import VALID, tool_name, unique
from muster_a2a.output import status_text

pytestmark = pytest.mark.anyio


def test_agents_block_ordered_filtered_and_expanded() -> None:
    config = {
        "agents": {
            "zeta": {"card": "https://z.example", "headers": {"Authorization": "Bearer ${TOKEN}"}, "pollEvery": 250},
            "alpha": {"card": "https://a.example", "timeout": 5000, "poll-every": 100},
            "off": {"card": "https://o.example", "disabled": True},
            "off2": {"card": "https://o.example", "enabled": False},
            "nocard": {"url": "https://n.example"},
            "dictcard": {"card": {"name": "inline"}},
            "badtype": {"card": "https://b.example", "timeout": "soon"},
            "unknownkey": {"card": "https://u.example", "colour": "blue"},
            "noenv": {"card": "https://e.example", "headers": {"X": "${NOT_SET_ANYWHERE_42}"}},
        }
    }
    parsed = parse_agents_config(config, env={"TOKEN": "t0k"})
    assert [d.name for d in parsed] == ["alpha", "zeta"]
    alpha, zeta = parsed
    assert (alpha.timeout, alpha.poll_every) == (5000, 100)
    assert (zeta.timeout, zeta.poll_every) == (300_000, 250)
    assert zeta.headers == {"Authorization": "Bearer t0k"}
    assert "t0k" not in repr(zeta), "header values never appear in reprs (logs)"
    assert set(parsed.skipped) == {"nocard", "dictcard", "badtype", "unknownkey", "noenv"}
    assert "card" in parsed.skipped["nocard"]
    assert "timeout" in parsed.skipped["badtype"]
    assert "colour" in parsed.skipped["unknownkey"]
    assert "NOT_SET_ANYWHERE_42" in parsed.skipped["noenv"]


def test_agents_block_absent_or_wrong() -> None:
    assert parse_agents_config({}) == []
    with pytest.raises(AgentConfigError, match="'agents' must be a table"):
        parse_agents_config({"agents": ["x"]})


def test_task_output_v1_proto_and_documents() -> None:
    artifacts = Task(
        id="t",
        status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED),
        artifacts=[
            Artifact(artifact_id="a", parts=[Part(text="one"), Part(url="https://x")]),
            Artifact(artifact_id="b", parts=[Part(text="two")]),
        ],
    )
    assert task_output(artifacts) == "one\ntwo"
    in_status = Task(
        id="t",
        status=TaskStatus(
            state=TaskState.TASK_STATE_COMPLETED, message=Message(role=Role.ROLE_AGENT, parts=[Part(text="s")])
        ),
        history=[Message(role=Role.ROLE_AGENT, parts=[Part(text="h")])],
    )
    assert task_output(in_status) == "s"
    v03 = {
        "kind": "task",
        "id": "t",
        "status": {"state": "completed"},
        "history": [
            {"role": "agent", "parts": [{"kind": "text", "text": "first"}]},
            {"role": "agent", "parts": [{"kind": "text", "text": "last"}, {"kind": "data", "data": {}}]},
            {"role": "user", "parts": [{"kind": "text", "text": "question"}]},
        ],
    }
    assert task_output(v03) == "last"
    assert task_output({"artifacts": "garbage", "status": 3, "history": [None, 5]}) == ""


def test_task_output_reads_sdk_objects_as_it_reads_their_documents() -> None:
    """The SDK's objects are read directly (no dict conversion): same answer as their JSON documents give."""
    agent = Message(role=Role.ROLE_AGENT, parts=[Part(text="older")])
    latest = Message(role=Role.ROLE_AGENT, parts=[Part(text=""), Part(data={}), Part(text="latest")])
    user = Message(role=Role.ROLE_USER, parts=[Part(text="question")])
    tasks = [
        Task(id="t", artifacts=[Artifact(artifact_id="a", parts=[Part(raw=b"x"), Part(text="")])]),
        Task(id="t", history=[agent, latest, user]),
        Task(id="t", status=TaskStatus(message=Message(role=Role.ROLE_AGENT, parts=[Part(url="https://x")]))),
        Task(id="t", status=TaskStatus(message=user), history=[agent]),
        Task(id="t"),
    ]
    outputs = [task_output(task) for task in tasks]
    assert outputs == [task_output(MessageToDict(task)) for task in tasks]
    assert outputs == ["", "\nlatest", "", "question", ""]
    failed = Task(id="t", status=TaskStatus(message=Message(parts=[Part(text="why"), Part(text="because")])))
    assert status_text(failed) == status_text(MessageToDict(failed)) == "why\nbecause"
    assert status_text(Task(id="t")) == ""


def test_state_names_of_both_dialects() -> None:
    assert state_name("TASK_STATE_INPUT_REQUIRED") == "input-required"
    assert state_name("input-required") == "input-required"
    assert state_name(TaskState.TASK_STATE_CANCELED) == "canceled"
    assert state_name("cancelled") == "canceled"


def test_tool_names() -> None:
    assert tool_name("Weather Bot (EU)", "get forecast!") == "Weather_Bot_EU_get_forecast"
    assert tool_name("名前", None) == "agent"
    long = tool_name("x" * 80, "y")
    assert len(long) == 64 and VALID.match(long)
    assert unique(long, [long]) == "x" * 62 + "_2"
    assert unique("a", ["a", "a_2"]) == "a_3"
