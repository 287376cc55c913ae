"""End-of-turn logic shared by ``dispatch`` and ``decode_transcript``: from events + exit code to a TurnResult."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from muster_dispatch.errors import ERROR_CODES, DispatchError, ErrorCode
from muster_dispatch.events import AgentEvent
from muster_dispatch.faults import parse_reset
from muster_dispatch.results import TurnResult
from muster_dispatch.usage import Usage

Stopped = Literal["timeout", "aborted"]
STDERR_TAIL = 50


@dataclass(frozen=True, slots=True)
class Signals:
    """How to read failure texts: the harness's recognisers, or none for custom agents."""

    quota: Callable[[str], bool]
    unavailable: Callable[[str], bool]
    requires_finished_event: bool


_TEXT_KINDS = frozenset(("text", "text_delta", "tool"))

NO_SIGNALS = Signals(lambda _t: False, lambda _t: False, False)


class TurnState:
    """Accumulates the normalized events of one process run."""

    __slots__ = (
        "conversation",
        "deltas",
        "events",
        "failures",
        "finished",
        "quotas",
        "result_text",
        "retries",
        "signals",
        "stderr",
        "text",
        "usage",
    )

    def __init__(self, signals: Signals) -> None:
        self.signals = signals
        self.text: str | None = None
        # Fragments of the message being streamed, for a CLI that prints its text only as deltas (Gemini CLI).
        self.deltas: list[str] = []
        self.result_text: str | None = None
        self.usage: Usage | None = None
        self.conversation: str | None = None
        self.finished = False
        self.failures: list[AgentEvent] = []
        self.quotas: list[AgentEvent] = []
        self.retries: list[AgentEvent] = []
        self.stderr: list[str] = []
        self.events = 0

    def observe(self, event: AgentEvent) -> None:
        self.events += 1
        kind = event.type
        if kind in _TEXT_KINDS:
            self._observe_text(event)
        elif kind == "usage" and event.usage is not None:
            if self.usage is None or event.code == "total":  # "total": a running total, the last one counts
                self.usage = event.usage
            else:
                self.usage = self.usage + event.usage
        elif kind == "result":
            if event.text is not None:
                self.result_text = event.text
        elif kind == "conversation":
            if event.id:
                self.conversation = event.id
        elif kind == "finished":
            self.finished = True
        elif kind == "failure":
            self.failures.append(event)
        elif kind == "quota":
            self.quotas.append(event)
        elif kind == "retry":
            self.retries.append(event)
        elif kind == "stderr" and event.text is not None:
            self.stderr.append(event.text)
            if len(self.stderr) > 4 * STDERR_TAIL:
                del self.stderr[:-STDERR_TAIL]

    def _observe_text(self, event: AgentEvent) -> None:
        kind = event.type
        if kind == "text":
            self.text = event.text
            self.deltas.clear()
        elif kind == "text_delta":
            if event.text:
                self.deltas.append(event.text)
        elif self.deltas:  # a tool call ends the message streamed before it
            self.text = "".join(self.deltas)
            self.deltas.clear()

    def final_text(self) -> str | None:
        if self.result_text is not None:
            return self.result_text
        return "".join(self.deltas) if self.deltas else self.text

    def conclude(self, *, exit_code: int | None, stopped: Stopped | None = None) -> TurnResult:
        usage = self.usage if self.usage is not None else Usage.missing()
        error = self.error(exit_code=exit_code, stopped=stopped)
        status: Literal["completed", "failed", "canceled"]
        status = "completed" if error is None else ("canceled" if error.code == "aborted" else "failed")
        return TurnResult(
            status=status,
            text=self.final_text(),
            usage=usage,
            conversation=self.conversation,
            error=error,
            events=self.events,
            exit_code=exit_code,
            stderr=self.stderr[-STDERR_TAIL:],
        )

    def error(self, *, exit_code: int | None, stopped: Stopped | None) -> DispatchError | None:
        signals = self.signals
        # A failure's code (Claude's `error` / `api_error`) is read with its text; messages quote the text alone.
        pairs = [(f"{e.text or ''} {e.code or ''}".strip(), e.text or e.code or "") for e in self.failures]
        pairs += [(line, line) for line in self.stderr]
        texts = [probe for probe, _ in pairs]
        quota_texts = [shown for probe, shown in pairs if signals.quota(probe)]
        coded_quota = [e for e in self.failures if e.code == "quota"]
        unavailable = any(signals.unavailable(t) for t in texts) or any(e.code == "unavailable" for e in self.failures)
        if stopped == "aborted":
            return DispatchError("aborted", "the turn was canceled")
        if stopped == "timeout":
            details: dict[str, object] = {}
            if unavailable or self.retries:
                details["unavailable"] = True
            return DispatchError("timeout", "the turn did not finish before its deadline", details)
        failed = bool(self.failures) or (exit_code not in (0, None))
        if signals.requires_finished_event and not self.finished:
            failed = True
        if not failed:
            return None
        message = self._message(exit_code)
        details = {}
        if exit_code is not None:
            details["exit_code"] = exit_code
        if unavailable:
            details["unavailable"] = True
        if self.quotas or quota_texts or coded_quota:
            resets: list[datetime | None] = [e.reset_at for e in self.quotas if e.reset_at is not None]
            resets += [e.reset_at for e in coded_quota if e.reset_at is not None]
            resets += [parse_reset(t) for t in quota_texts]
            found = [r for r in resets if r is not None]
            reset_at = min(found) if found else None
            if reset_at is not None:
                details["reset_at"] = reset_at.isoformat()
            quota_message = (quota_texts or [e.text for e in self.quotas if e.text] or [message])[0]
            return DispatchError("quota", quota_message, details)
        code: ErrorCode = "process"
        for event in self.failures:
            if event.code in ERROR_CODES and event.code != "quota":
                code = event.code  # type: ignore[assignment]
                break
        return DispatchError(code, message, details)

    def _message(self, exit_code: int | None) -> str:
        for event in self.failures:
            if event.text:
                return event.text
        last = f": {self.stderr[-1]}" if self.stderr else ""
        if self.signals.requires_finished_event and not self.finished:
            suffix = f" (exit code {exit_code})" if exit_code is not None else ""
            return f"the CLI ended without its final event{suffix}{last}"
        return f"the process exited with code {exit_code}{last}"
