"""The ``[notify]`` block of the config file: where notifications go (Apprise URLs), which events, how much text.

    [notify]
    urls = ["ntfy://ntfy.sh/my-topic", "json://hooks.example/muster"]
    on = ["message_to_human", "task_failed", "run_failed", "quota_without_fallback", "agent_stale"]
    body = "first_line"   # "none" | "first_line" | "full"

A URL often holds a secret (a token in its path or its password): no message about the block repeats one. A URL is
named by its position and its scheme, and the outbox keeps only a digest of it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from muster_api.errors import ConfigurationError

BLOCK = "notify"
EventKind = Literal["message_to_human", "task_failed", "run_failed", "quota_without_fallback", "agent_stale"]
EVENT_KINDS: tuple[EventKind, ...] = get_args(EventKind)
BodyMode = Literal["none", "first_line", "full"]
MAX_URLS = 20
MAX_URL_CHARS = 2000


class NotifyBlock(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    urls: list[SecretStr] = Field(default_factory=list, max_length=MAX_URLS)
    on: list[EventKind] = Field(default_factory=lambda: list(EVENT_KINDS))
    body: BodyMode = "first_line"


@dataclass(frozen=True)
class Target:
    """One URL of the block: the URL itself (kept in memory only), the digest the outbox knows it by, and what may be
    shown of it (the service's name and scheme)."""

    url: SecretStr
    digest: str
    service: str
    scheme: str


@dataclass(frozen=True)
class NotifyConfig:
    targets: tuple[Target, ...]
    on: frozenset[EventKind]
    body: BodyMode

    @property
    def enabled(self) -> bool:
        return bool(self.targets) and bool(self.on)

    def target(self, digest: str) -> Target | None:
        return next((t for t in self.targets if t.digest == digest), None)


DISABLED = NotifyConfig(targets=(), on=frozenset(), body="first_line")


def digest(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:32]


def _target(index: int, url: SecretStr) -> Target:
    value = url.get_secret_value().strip()
    scheme = value.partition("://")[0].lower() if "://" in value else ""
    where = f"notify.urls[{index}]"
    if not scheme:
        raise ConfigurationError(f"{where}: not an Apprise URL (SCHEME://…, e.g. ntfy://, json://, mailto://)")
    if len(value) > MAX_URL_CHARS:
        raise ConfigurationError(f"{where} ({scheme}://…): longer than {MAX_URL_CHARS} characters")
    # Imported only for a block with URLs: loading Apprise and its plugins takes seconds on a busy machine, which
    # every `muster serve` without [notify] would pay at start.
    import apprise

    plugin = apprise.Apprise.instantiate(value)
    if plugin is None:
        # Apprise says why only in its log, which may repeat the URL: the scheme is all that is named here.
        raise ConfigurationError(f"{where} ({scheme}://…): Apprise cannot use this URL (unknown scheme or bad form)")
    return Target(url=SecretStr(value), digest=digest(value), service=str(plugin.service_name), scheme=scheme)


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_input=False):
        loc = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"notify.{loc}: {error.get('msg', 'invalid')}" if loc else f"notify: {error.get('msg')}")
    return "; ".join(parts)


def parse_notify(config: Mapping[str, Any]) -> NotifyConfig:
    """The block, checked (unknown keys refused); no block, or no URL in it: notifications are off."""
    raw = config.get(BLOCK)
    if raw is None:
        return DISABLED
    if not isinstance(raw, Mapping):
        raise ConfigurationError("notify: must be a table ([notify])")
    try:
        block = NotifyBlock.model_validate(dict(raw))
    except ValidationError as exc:
        raise ConfigurationError(_describe(exc)) from None
    targets = tuple(_target(i, url) for i, url in enumerate(block.urls))
    return NotifyConfig(targets=targets, on=frozenset(block.on), body=block.body)
