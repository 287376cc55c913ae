"""The a2a-sdk ``RequestHandler`` of one served agent: every A2A operation on dispatch runs.

Nothing lives in this process only: a task is read back from the runs table and its journal, a stream follows the
stored events (woken by the run notifier, on whichever instance the worker runs), a cancel is the run's control row.
So any instance answers for any task, whichever instance took the message.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections.abc import AsyncGenerator
from datetime import UTC
from typing import TYPE_CHECKING

import anyio
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler, validate_request_params
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length, validate_history_length, validate_page_size
from pydantic import ValidationError

from muster_a2a._proto import has, which
from muster_api.dispatch.errors import RunFinishedError, RunRequestError, WorkspaceBusyError
from muster_api.dispatch.models import ID_PATTERN, ContinuationIn, Run, RunIn
from muster_api.dispatch.runs import cancel_run, create_run
from muster_api.dispatch.worker import UNSHARED_POLL_SECONDS
from muster_api.served.queries import TaskFilter, latest_conversation, task_page
from muster_api.served.tasks import (
    RUN_STATUSES,
    artifact_event,
    context_of,
    history_message,
    status_event,
    task_of,
    valid_context,
    working_event,
    workspace_of,
)
from muster_dispatch import DispatchError, Observation

if TYPE_CHECKING:
    from muster_api.dispatch.component import DispatchState

DEFAULT_PAGE_SIZE = 50
# A cancel reaches the worker through a control row; the answer waits this long for the run to stop.
CANCEL_WAIT_SECONDS = 30.0
MAX_HISTORY_EVENTS = 5000
# Journal rows read at once.
HISTORY_PAGE = 1000
_ID = re.compile(ID_PATTERN)


def _prompt(message: Message) -> str:
    """The text parts, in order; a part a CLI cannot take is refused by name."""
    texts: list[str] = []
    for index, part in enumerate(message.parts):
        kind = which(part, "content")
        if kind != "text":
            raise ContentTypeNotSupportedError(
                f"message.parts[{index}] is {kind or 'empty'}: served agents take text parts only"
            )
        texts.append(part.text)
    prompt = "\n".join(texts)
    if not prompt.strip():
        raise InvalidParamsError("message: at least one non-empty text part is required")
    return prompt


def _page_token(run_id: str) -> str:
    return base64.urlsafe_b64encode(run_id.encode()).decode().rstrip("=")


def _after_token(token: str) -> str | None:
    if not token:
        return None
    try:
        run_id = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        run_id = ""
    if not _ID.match(run_id):
        raise InvalidParamsError(f"pageToken: {token!r} is not a token this server gave")
    return run_id


class ServedAgentHandler(RequestHandler):
    def __init__(self, state: DispatchState, agent: str, card: AgentCard) -> None:
        self.state = state
        self.agent = agent
        self.card = card

    # -- reading runs -------------------------------------------------------------------------------------------

    async def _run(self, task_id: str) -> Run:
        run = await self.state.store.get(task_id) if _ID.match(task_id) else None
        if run is None or run.agent != self.agent or not run.workspace.startswith(workspace_of(self.agent, "")):
            raise TaskNotFoundError(f"no task {task_id!r} at this agent")
        return run

    async def _observations(self, run_id: str, found: list[Observation] | None = None) -> list[Observation]:
        """The run's journal rows (up to ``MAX_HISTORY_EVENTS``), continuing ``found``: a page shorter than asked for
        is the last."""
        found = found if found is not None else []
        while len(found) < MAX_HISTORY_EVENTS:
            batch = await self.state.store.events_after(run_id, found[-1].seq if found else 0, HISTORY_PAGE)
            found.extend(batch)
            if len(batch) < HISTORY_PAGE:
                break
        return found

    async def _task(self, run: Run) -> Task:
        return task_of(run, await self._observations(run.id))

    def _wait_seconds(self) -> float:
        return self.state.settings.renew_every if self.state.notifier.shared else UNSHARED_POLL_SECONDS

    async def _finished(self, run_id: str) -> Task:
        """The run's task once it has ended. Each look reads the run and the rows it added since the last look, in
        that order: once the run is over, the rows read after it are all of them. A run whose end's wake-up handed
        its whole journal over (a short run this process queued) needs no read."""
        found: list[Observation] = []
        after = 0
        async with self.state.notifier.subscribe(run_id) as sub:
            if self.state.notifier.unheard(run_id) is not None:  # queued here, named by no wake-up since: still queued
                with anyio.move_on_after(self._wait_seconds()):
                    await sub.wait()
            if (ended := self.state.notifier.ended(run_id)) is not None:  # its end handed its whole journal over
                return task_of(Run.model_validate_json(ended.end.run), list(ended.observations))
            while True:
                run, batch = await self.state.store.run_and_events(run_id, after, HISTORY_PAGE)
                assert run is not None
                if batch:  # read on past the history's cap, so that no row is read twice
                    after = batch[-1].seq
                if len(found) < MAX_HISTORY_EVENTS:
                    found.extend(batch)
                if run.finished:
                    more = len(batch) == HISTORY_PAGE
                    return task_of(run, await self._observations(run_id, found) if more else found)
                with anyio.move_on_after(self._wait_seconds()):
                    await sub.wait()

    # -- starting runs ------------------------------------------------------------------------------------------

    async def _check_task_reference(self, message: Message) -> None:
        if not message.task_id:
            return
        run = await self._run(message.task_id)
        if message.context_id and message.context_id != context_of(run):
            raise InvalidParamsError(
                f"contextId {message.context_id} is not the context {context_of(run)} of task {run.id}"
            )
        raise UnsupportedOperationError(
            f"task {run.id} is {run.status} and takes no further message: send a new message with its contextId "
            "(no taskId) to continue the conversation"
        )

    async def _start(self, params: SendMessageRequest) -> Run:
        message = params.message
        validate_history_length(params.configuration)
        if message.task_id:
            await self._check_task_reference(message)
        prompt = _prompt(message)
        context_id = message.context_id or uuid.uuid4().hex
        if not valid_context(context_id):
            raise InvalidParamsError("contextId: letters, digits, '_' and '-' only, at most 100 characters")
        # A context this message opens has no run yet: only a context the client names can be continued.
        source = (
            await latest_conversation(self.state.runtime.engine, self.agent, context_id) if message.context_id else None
        )
        try:
            body = RunIn(
                agent=self.agent,
                prompt=prompt,
                workspace=workspace_of(self.agent, context_id),
                continuation=ContinuationIn(run_id=source) if source else None,
            )
            return await create_run(self.state, body)
        except ValidationError as exc:
            raise InvalidParamsError(f"message: {exc.errors()[0]['msg']}") from None
        except WorkspaceBusyError:
            raise UnsupportedOperationError(
                f"context {context_id} has a task still running: send the next message once it ends"
            ) from None
        except RunRequestError as exc:
            raise InvalidParamsError(str(exc)) from None
        except DispatchError as exc:
            raise InternalError(f"agent {self.agent}: {exc.message}") from None

    # -- the operations -----------------------------------------------------------------------------------------

    @validate_request_params
    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        run = await self._start(params)
        if not params.configuration.return_immediately:
            return apply_history_length(await self._finished(run.id), params.configuration)
        return apply_history_length(await self._task(run), params.configuration)

    @validate_request_params
    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        run = await self._start(params)
        async for event in self._follow(run):
            yield event

    @validate_request_params
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        validate_history_length(params)
        return apply_history_length(await self._task(await self._run(params.id)), params)

    @validate_request_params
    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        run = await self._run(params.id)
        try:
            await cancel_run(self.state, run.id)
        except RunFinishedError:
            raise TaskNotCancelableError(f"task {run.id} is already {run.status}") from None
        with anyio.move_on_after(CANCEL_WAIT_SECONDS):
            return await self._finished(run.id)
        return await self._task(await self._run(run.id))

    @validate_request_params
    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        run = await self._run(params.id)
        if run.finished:
            raise UnsupportedOperationError(f"task {run.id} is in a terminal state ({run.status}): nothing to follow")
        async for event in self._follow(run):
            yield event

    @validate_request_params
    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        validate_history_length(params)
        size = DEFAULT_PAGE_SIZE
        if has(params, "page_size"):
            validate_page_size(params.page_size)
            size = params.page_size
        before = _after_token(params.page_token)
        if params.context_id and not valid_context(params.context_id):
            return ListTasksResponse(page_size=size, total_size=0)
        wanted = TaskFilter(
            agent=self.agent,
            context_id=params.context_id or None,
            statuses=RUN_STATUSES.get(params.status, ()) if params.status else None,
            changed_since=(
                params.status_timestamp_after.ToDatetime(tzinfo=UTC) if has(params, "status_timestamp_after") else None
            ),
        )
        found, total = await task_page(self.state.runtime.engine, wanted, before, size + 1)
        tasks: list[Task] = []
        for run in found[:size]:
            task = await self._task(run)
            if not params.include_artifacts:
                del task.artifacts[:]
            tasks.append(apply_history_length(task, params))
        more = len(found) > size
        return ListTasksResponse(
            tasks=tasks,
            next_page_token=_page_token(found[size - 1].id) if more else "",
            page_size=size,
            total_size=total,
        )

    # -- following a run ----------------------------------------------------------------------------------------

    async def _follow(self, run: Run) -> AsyncGenerator[Event, None]:
        """The task as it is, then what happens to it from the stored events, ending with its final status."""
        observations = await self._observations(run.id)
        yield task_of(run, observations)
        after = observations[-1].seq if observations else 0
        working = run.status != "queued"
        async with self.state.notifier.subscribe(run.id) as sub:
            while True:
                for observation in await self.state.store.events_after(run.id, after):
                    after = observation.seq
                    message = history_message(run, observation)
                    if message is not None:
                        working = True
                        yield working_event(run, message)
                current = await self.state.store.get(run.id)
                assert current is not None
                if current.status == "running" and not working:
                    working = True
                    yield working_event(current)
                if current.finished:
                    if await self.state.store.events_after(run.id, after, limit=1):
                        continue  # the worker flushed its last events before it stored the end: read them first
                    artifact = artifact_event(current)
                    if artifact is not None:
                        yield artifact
                    yield status_event(current)
                    return
                with anyio.move_on_after(self._wait_seconds()):
                    await sub.wait()

    # -- what served agents do not offer ------------------------------------------------------------------------

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError
