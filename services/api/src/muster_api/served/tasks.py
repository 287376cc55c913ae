"""A run seen as an A2A task: its state, its history (the prompt, then what the agent said on the way: text,
fallbacks, quota notices) and its artifact (the run's final text)."""

from __future__ import annotations

import re
from datetime import datetime

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf.timestamp_pb2 import Timestamp  # type: ignore[attr-defined]

from muster_api.dispatch.models import Run
from muster_dispatch import Observation

WORKSPACE_PREFIX = "a2a"
CONTEXT_PATTERN = r"^[A-Za-z0-9_-]{1,100}$"
_CONTEXT = re.compile(CONTEXT_PATTERN)

STATE: dict[str, TaskState] = {
    "queued": TaskState.TASK_STATE_SUBMITTED,
    "running": TaskState.TASK_STATE_WORKING,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "cancelled": TaskState.TASK_STATE_CANCELED,
    "interrupted": TaskState.TASK_STATE_FAILED,
}
# What ListTasks' status filter selects among the runs.
RUN_STATUSES: dict[int, tuple[str, ...]] = {
    TaskState.TASK_STATE_SUBMITTED: ("queued",),
    TaskState.TASK_STATE_WORKING: ("running",),
    TaskState.TASK_STATE_COMPLETED: ("completed",),
    TaskState.TASK_STATE_FAILED: ("failed", "interrupted"),
    TaskState.TASK_STATE_CANCELED: ("cancelled",),
}
# Events of the journal that a person reading the task's history wants to see.
SPOKEN = frozenset({"text", "fallback", "quota", "failure"})
ARTIFACT_NAME = "response"


def valid_context(context_id: str) -> bool:
    return bool(_CONTEXT.match(context_id))


def workspace_of(agent: str, context_id: str) -> str:
    return f"{WORKSPACE_PREFIX}/{agent}/{context_id}"


def context_of(run: Run) -> str:
    return run.workspace.rsplit("/", 1)[-1]


def _timestamp(run: Run) -> datetime:
    return run.finished_at or run.started_at or run.queued_at


def _agent_message(run: Run, key: str, text: str) -> Message:
    return Message(
        message_id=f"{run.id}-{key}",
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
        task_id=run.id,
        context_id=context_of(run),
    )


def user_message(run: Run) -> Message:
    return Message(
        message_id=f"{run.id}-request",
        role=Role.ROLE_USER,
        parts=[Part(text=run.prompt)],
        task_id=run.id,
        context_id=context_of(run),
    )


def failure_text(run: Run) -> str:
    """What a failed run's status message says: the error code and message, and when a quota resets."""
    error = run.error or {}
    code = str(error.get("code", "failed"))
    text = f"{code}: {error.get('message', 'the run failed')}"
    reset_at = (error.get("details") or {}).get("reset_at")
    if code == "quota" and reset_at:
        text += f" (quota resets at {reset_at})"
    return text


def spoken(observation: Observation) -> str | None:
    """The words of a journal event worth a history message, None for the others."""
    event = observation.event
    kind = event.get("type")
    if kind not in SPOKEN:
        return None
    text = str(event.get("text") or "")
    if kind == "fallback":
        return f"fallback to {event.get('name')}: {text}".rstrip(": ")
    if kind == "quota":
        reset = f" (resets at {event['reset_at']})" if event.get("reset_at") else ""
        return f"quota: {text}{reset}"
    if kind == "failure":
        return f"failure ({event.get('code') or 'unknown'}): {text}"
    return text or None


def _status(state: TaskState, at: datetime, message: Message | None) -> TaskStatus:
    timestamp = Timestamp()
    timestamp.FromDatetime(at)
    return TaskStatus(state=state, timestamp=timestamp, message=message)


def status_of(run: Run) -> TaskStatus:
    message = None
    if run.status == "completed" and run.text:
        message = _agent_message(run, "final", run.text)
    elif run.status in ("failed", "interrupted", "cancelled") and run.error:
        message = _agent_message(run, "final", failure_text(run))
    return _status(STATE[run.status], _timestamp(run), message)


def artifacts_of(run: Run) -> list[Artifact]:
    if not run.text:
        return []
    return [Artifact(artifact_id=f"{run.id}-response", name=ARTIFACT_NAME, parts=[Part(text=run.text)])]


def history_message(run: Run, observation: Observation) -> Message | None:
    words = spoken(observation)
    return _agent_message(run, f"e{observation.seq}", words) if words else None


def task_of(run: Run, observations: list[Observation]) -> Task:
    history = [user_message(run)]
    history += [m for m in (history_message(run, o) for o in observations) if m is not None]
    return Task(
        id=run.id,
        context_id=context_of(run),
        status=status_of(run),
        artifacts=artifacts_of(run),
        history=history,
    )


def status_event(run: Run, status: TaskStatus | None = None) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=run.id, context_id=context_of(run), status=status or status_of(run))


def artifact_event(run: Run) -> TaskArtifactUpdateEvent | None:
    found = artifacts_of(run)
    if not found:
        return None
    return TaskArtifactUpdateEvent(task_id=run.id, context_id=context_of(run), artifact=found[0], last_chunk=True)


def working_event(run: Run, message: Message | None = None) -> TaskStatusUpdateEvent:
    return status_event(run, _status(TaskState.TASK_STATE_WORKING, run.started_at or run.queued_at, message))
