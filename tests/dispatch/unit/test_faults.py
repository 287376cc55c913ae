"""Quota / outage recognition and reset-time parsing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from muster_dispatch import DispatchError, claude_harness, codex_harness, parse_reset, quota_fault, unavailable_fault
from muster_dispatch.faults import earliest, reset_from_epoch

CLAUDE = claude_harness()
CODEX = codex_harness()
NOW = datetime(2029, 6, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    [
        "You've hit your 5-hour limit · resets 5pm (America/New_York)",
        "You've hit your weekly limit · resets Jan 1, 2030, 12am (UTC)",
        "You have reached your specified API usage limits. You will regain access on 2030-01-01.",
        "Credit balance is too low",
        "API Error: Request rejected (429) · Rate limited",
        "something failed usage_limit_reached",
    ],
)
def test_claude_quota_texts(text: str) -> None:
    assert CLAUDE.quota(text)


@pytest.mark.parametrize(
    "text",
    [
        "You’ve hit your usage limit. Upgrade to Pro or try again at Jan 1st, 2030 12:00 AM.",
        "You've hit your usage limit.",
        "Quota exceeded. Check your plan and billing details.",
        "exceeded retry limit, last status: 429 Too Many Requests",
    ],
)
def test_codex_quota_texts(text: str) -> None:
    assert CODEX.quota(text)


@pytest.mark.parametrize(
    ("harness", "text"),
    [
        (CLAUDE, "API Error: Repeated 529 Overloaded errors."),
        (CLAUDE, "API Error: 500 Internal server error."),
        (CLAUDE, "API Error: Connection refused (ECONNREFUSED)"),
        (CLAUDE, "failed connection_failed"),
        (CODEX, "We’re currently experiencing high demand, which may cause temporary errors."),
        (CODEX, "Selected model is at capacity. Please try a different model."),
        (CODEX, "stream disconnected before completion: connection reset"),
    ],
)
def test_unavailable_texts(harness, text: str) -> None:  # type: ignore[no-untyped-def]
    assert harness.unavailable(text)
    assert not harness.quota(text)


@pytest.mark.parametrize(
    ("harness", "text"),
    [
        (CODEX, "Reconnecting... 1/5 (We’re currently experiencing high demand)"),
        (CODEX, "Reconnecting... 2/5 (exceeded retry limit, last status: 429 Too Many Requests)"),
        (CODEX, "Reconnecting... waiting for network (Connection failed: error sending request)"),
        (CLAUDE, "API retry 1/2: 529 overloaded"),
        (CLAUDE, "API retry 1/2: 429 rate_limit"),
    ],
)
def test_retry_notices_never_match(harness, text: str) -> None:  # type: ignore[no-untyped-def]
    assert not harness.quota(text)
    assert not harness.unavailable(text)


@pytest.mark.parametrize("harness", [CLAUDE, CODEX], ids=["claude", "codex"])
def test_auth_failure_is_neither(harness) -> None:  # type: ignore[no-untyped-def]
    text = "Invalid API key · Fix external API key unexpected status 401 Unauthorized"
    assert not harness.quota(text) and not harness.unavailable(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("resets Jan 1, 2030, 12am (UTC)", datetime(2030, 1, 1, tzinfo=UTC)),
        ("try again at Jan 1st, 2030 12:00 AM.", datetime(2030, 1, 1, tzinfo=UTC)),
        ("try again at Feb 2nd, 2030 3:30 PM", datetime(2030, 2, 2, 15, 30, tzinfo=UTC)),
        ("· resets Jan 1, 2030, 12am (Europe/Paris)", datetime(2029, 12, 31, 23, tzinfo=UTC)),
        ("resets 5pm (UTC)", datetime(2029, 6, 1, 17, tzinfo=UTC)),
        ("resets 11am (UTC)", datetime(2029, 6, 2, 11, tzinfo=UTC)),  # already past today: tomorrow
        ("resets Mar 3 at 1am (UTC)", datetime(2030, 3, 3, 1, tzinfo=UTC)),  # no year: the next March 3rd
        ("resets Jul 4, 9pm", datetime(2029, 7, 4, 21, tzinfo=UTC)),
        ("resets Feb 29 at 1am (UTC)", datetime(2032, 2, 29, 1, tzinfo=UTC)),  # no year: the next leap year's
        ("You will regain access on 2030-01-01 at 00:00 UTC.", datetime(2030, 1, 1, tzinfo=UTC)),
        ("regain access on 2030-03-04 at 7:15 (Europe/Paris)", datetime(2030, 3, 4, 6, 15, tzinfo=UTC)),
        ("resets on 2030-02-03", datetime(2030, 2, 3, tzinfo=UTC)),
    ],
)
def test_parse_reset(text: str, expected: datetime) -> None:
    assert parse_reset(text, now=NOW) == expected


@pytest.mark.parametrize(
    "text",
    [
        "no reset here",
        "resets 5 times",
        "resets Foo 1, 2030, 12am",
        "try again at Feb 30th, 2030 1:00 AM",
        "resets Apr 31 at 1am",  # no year has it
    ],
)
def test_parse_reset_without_a_time(text: str) -> None:
    assert parse_reset(text, now=NOW) is None


def test_reset_from_epoch_seconds_and_milliseconds() -> None:
    assert reset_from_epoch(1893456000) == datetime(2030, 1, 1, tzinfo=UTC)
    assert reset_from_epoch(1893456000000) == datetime(2030, 1, 1, tzinfo=UTC)
    assert reset_from_epoch("1893456000") == datetime(2030, 1, 1, tzinfo=UTC)
    assert reset_from_epoch(None) is None and reset_from_epoch(True) is None and reset_from_epoch(-1) is None


def test_quota_fault_reads_details_then_message() -> None:
    error = DispatchError("quota", "limit", {"reset_at": "2030-01-01T00:00:00+00:00"})
    fault = quota_fault(error)
    assert fault is not None and fault.reset_at == datetime(2030, 1, 1, tzinfo=UTC)
    from_text = quota_fault(DispatchError("quota", "You've hit your limit · resets Jan 1, 2030, 12am (UTC)"))
    assert from_text is not None and from_text.reset_at == datetime(2030, 1, 1, tzinfo=UTC)
    assert quota_fault(DispatchError("process", "x")) is None
    assert quota_fault(None) is None


def test_unavailable_fault_reads_the_detail() -> None:
    assert unavailable_fault(DispatchError("process", "down", {"unavailable": True})) is not None
    assert unavailable_fault(DispatchError("process", "down")) is None
    assert unavailable_fault(ValueError("x")) is None


def test_earliest_needs_every_reset() -> None:
    a, b = datetime(2030, 1, 2, tzinfo=UTC), datetime(2030, 1, 1, tzinfo=UTC)
    assert earliest([a, b]) == b
    assert earliest([a, None]) is None
    assert earliest([]) is None


def test_error_code_is_checked() -> None:
    with pytest.raises(ValueError, match="unknown dispatch error code"):
        DispatchError("nope", "x")  # type: ignore[arg-type]
