"""What both Codex protocols share (``codex exec --json`` in ``codex``, ``codex app-server`` in ``codex_live``): the
words that mark a terminal quota or outage, usage from the token counts, the events of a failed turn, the result of
a shell command. Both modules import this one; neither imports the other for it."""

from __future__ import annotations

import re
from typing import Any

from muster_dispatch.events import AgentEvent, event
from muster_dispatch.faults import reset_in
from muster_dispatch.usage import Usage, counter, usage

# Substring tests on the lower-cased text: several times faster than one alternation regex with IGNORECASE, and
# failure texts are checked on the decode path.
QUOTA_WORDS = (
    "hit your usage limit",
    "usage_limit_reached",
    "quota exceeded",
    "insufficient_quota",
    "exceeded retry limit, last status: 429",
    "429 too many requests",
    "rate limit",
)
UNAVAILABLE_WORDS = (
    "high demand",
    "at capacity",
    "stream disconnected before completion",
    "waiting for network",
    "error sending request",
    "connection refused",
    "connection reset",
    "failed to connect",
    "dns error",
    "server_error",
    "internal server error",
    "service unavailable",
    "bad gateway",
    "gateway timeout",
    "overloaded",
)
_STATUS_5XX = re.compile(r"\b50[0234]\b|last status: 5\d\d")


def retry_notice(lowered: str) -> bool:
    """A "Reconnecting... N/M" or "retrying" notice (lower-cased text): Codex goes on, nothing is terminal yet."""
    return lowered.lstrip().startswith("reconnecting...") or "retrying" in lowered


def quota(text: str) -> bool:
    """A TERMINAL usage or rate limit ("Reconnecting... N/M" notices never match)."""
    return quota_lowered(text.lower())


def quota_lowered(lowered: str) -> bool:
    """``quota(text)`` given ``text.lower()``."""
    if retry_notice(lowered):
        return False
    # A loop, not ``any()`` over a generator: half the cost, and this runs on every failed turn line.
    for word in QUOTA_WORDS:  # noqa: SIM110
        if word in lowered:
            return True
    return False


def unavailable(text: str) -> bool:
    """A terminal outage or connection failure ("Reconnecting... N/M" notices never match)."""
    lowered = text.lower()
    if retry_notice(lowered):
        return False
    for word in UNAVAILABLE_WORDS:
        if word in lowered:
            return True
    return _STATUS_5XX.search(lowered) is not None


def usage_from_counts(total_input: Any, cached_input: Any, cache_write_input: Any, output: Any) -> Usage:
    """Usage from Codex's counts, where the input total includes the cached and cache-written tokens."""
    # Counts are non-negative integers but for a broken CLI: ``counter`` only for anything else (a call per count
    # is a good part of decoding the line).
    tokens_in = total_input if total_input.__class__ is int and total_input >= 0 else counter(total_input)
    cached = cached_input if cached_input.__class__ is int and cached_input >= 0 else counter(cached_input) or 0
    created = (
        cache_write_input
        if cache_write_input.__class__ is int and cache_write_input >= 0
        else counter(cache_write_input) or 0
    )
    tokens_out = output if output.__class__ is int and output >= 0 else counter(output)
    fresh = (tokens_in or 0) - cached - created
    complete = tokens_in is not None and tokens_out is not None
    return usage(fresh if fresh > 0 else 0, cached, created, tokens_out or 0, {}, complete)


def turn_failure(message: str, data: Any) -> list[AgentEvent]:
    """The events of a failed turn (before its ``finished``). Codex has no quota event of its own: the terminal
    failure text is the signal."""
    out = [event("failure", text=message, code="turn.failed", data=data)]
    lowered = message.lower()  # once for both readings: a long message that is not ASCII lowers slowly
    if quota_lowered(lowered):
        out.append(event("quota", text=message, reset_at=reset_in(message, lowered), code="usage_limit"))
    return out


def shell_result(item_id: str | None, exit_code: Any, status: Any, output: Any) -> AgentEvent:
    """A finished shell command, from ``codex exec --json`` (snake_case) or app-server (camelCase) fields."""
    failed = status == "failed" or (isinstance(exit_code, int) and exit_code != 0)
    return event(
        "tool_result",
        id=item_id,
        name="shell",
        output=output,
        code="error" if failed else None,
        data={"exit_code": exit_code, "status": status},
    )
