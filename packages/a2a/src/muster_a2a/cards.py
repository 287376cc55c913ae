"""Fetching, caching and reading Agent Cards of either protocol version (parsing is the SDK's)."""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard, AgentInterface
from google.protobuf.json_format import ParseError

from muster_a2a._proto import copy_from
from muster_a2a.errors import (
    CardHTTPError,
    CardUnreachableError,
    InsecureURLError,
    InvalidCardError,
    NoUsableInterfaceError,
)
from muster_a2a.origins import check_scheme

WELL_KNOWN = "/.well-known/agent-card.json"
LEGACY_WELL_KNOWN = "/.well-known/agent.json"
BINDINGS = ("JSONRPC", "HTTP+JSON")

_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d+)\"?", re.IGNORECASE)


@dataclass
class _Entry:
    document: dict[str, Any]
    etag: str | None
    fresh_until: float


class CardCache:
    """Card documents by URL, honouring ``ETag`` (revalidation) and ``Cache-Control: max-age``/``no-store``.

    Only valid cards are stored; a card that turns invalid evicts the entry.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[str, _Entry] = {}

    def lookup(self, url: str) -> tuple[dict[str, Any] | None, str | None]:
        """(document if still fresh, etag to revalidate with)."""
        entry = self._entries.get(url)
        if entry is None:
            return None, None
        if self._clock() < entry.fresh_until:
            return copy.deepcopy(entry.document), entry.etag
        return None, entry.etag

    def stale(self, url: str) -> dict[str, Any] | None:
        entry = self._entries.get(url)
        return copy.deepcopy(entry.document) if entry else None

    def store(self, url: str, document: dict[str, Any], headers: httpx.Headers) -> None:
        control = headers.get("cache-control", "")
        if "no-store" in control.lower():
            self._entries.pop(url, None)
            return
        etag = headers.get("etag")
        match = _MAX_AGE.search(control)
        max_age = 0 if "no-cache" in control.lower() or match is None else int(match.group(1))
        if etag is None and max_age == 0:
            self._entries.pop(url, None)
            return
        self._entries[url] = _Entry(copy.deepcopy(document), etag, self._clock() + max_age)

    def refresh(self, url: str, headers: httpx.Headers) -> None:
        entry = self._entries.get(url)
        if entry is None:
            return
        merged = httpx.Headers(headers)
        if "etag" not in merged and entry.etag:
            merged["etag"] = entry.etag
        self.store(url, entry.document, merged)

    def evict(self, url: str) -> None:
        self._entries.pop(url, None)

    def __len__(self) -> int:
        return len(self._entries)


DEFAULT_CARD_CACHE = CardCache()


def card_urls(target: str) -> list[str]:
    """A card URL is used as is; a base URL gets the well-known path (and the older one as a fallback)."""
    url = httpx.URL(target)
    if url.path.endswith(".json"):
        return [target]
    base = target.rstrip("/")
    return [base + WELL_KNOWN, base + LEGACY_WELL_KNOWN]


def parse_card(document: object) -> AgentCard:
    """The SDK's lenient parse (v0.3 fields mapped to v1.0), plus the checks that make a card usable at all."""
    if not isinstance(document, dict):
        raise InvalidCardError(f"invalid card: expected a JSON object, got {type(document).__name__}")
    try:
        card = parse_agent_card(copy.deepcopy(document))
    except (ParseError, ValueError, TypeError, AttributeError) as exc:
        raise InvalidCardError(f"invalid card: {exc}") from None
    if not card.name.strip():
        raise InvalidCardError("invalid card: it has no name")
    return card


async def fetch_card_document(
    target: str,
    http: httpx.AsyncClient,
    *,
    headers: Mapping[str, str],
    cache: CardCache,
    allow_http: bool,
) -> tuple[dict[str, Any], AgentCard, str]:
    """(document, parsed card, the URL it came from). Raises an ``AgentResolutionError`` subclass."""
    check_scheme(target, allow_http=allow_http)
    urls = card_urls(target)
    last: Exception | None = None
    for index, url in enumerate(urls):
        try:
            return await _fetch_one(url, http, headers=headers, cache=cache)
        except CardHTTPError as exc:
            last = exc
            if exc.status != 404 or index == len(urls) - 1:
                raise
    assert last is not None
    raise last


async def _fetch_one(
    url: str, http: httpx.AsyncClient, *, headers: Mapping[str, str], cache: CardCache
) -> tuple[dict[str, Any], AgentCard, str]:
    fresh, etag = cache.lookup(url)
    if fresh is not None:
        return fresh, parse_card(fresh), url
    request_headers = {"Accept": "application/json", **headers}
    if etag:
        request_headers["If-None-Match"] = etag
    try:
        response = await http.get(url, headers=request_headers)
    except httpx.TimeoutException:
        raise CardUnreachableError(f"unreachable: timed out fetching the card from {url}") from None
    except httpx.HTTPError as exc:
        raise CardUnreachableError(f"unreachable: {url}: {type(exc).__name__}: {exc}") from None
    if response.status_code == 304:
        stale = cache.stale(url)
        if stale is not None:
            cache.refresh(url, response.headers)
            return stale, parse_card(stale), url
    if response.status_code >= 300:
        # Redirects are not followed (they could carry the credentials elsewhere): configure the final URL.
        cache.evict(url)
        where = response.headers.get("location") if 300 <= response.status_code < 400 else None
        hint = f" (redirect to {where}: configure that URL instead)" if where else ""
        raise CardHTTPError(f"HTTP {response.status_code} fetching the card from {url}{hint}", response.status_code)
    try:
        document = json.loads(response.content)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        cache.evict(url)
        raise InvalidCardError(f"invalid card at {url}: not JSON ({exc})") from None
    try:
        card = parse_card(document)
    except InvalidCardError as exc:
        cache.evict(url)
        raise InvalidCardError(f"{exc} (at {url})") from None
    cache.store(url, document, response.headers)
    return document, card, url


def _version(interface: AgentInterface) -> str:
    raw = interface.protocol_version or "1.0"
    parts = raw.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else raw


def dialect_of(interface: AgentInterface) -> str:
    """``v1.0/JSONRPC``, ``v0.3/HTTP+JSON``, …"""
    return f"v{_version(interface)}/{interface.protocol_binding}"


def select_interface(card: AgentCard, *, allow_http: bool) -> AgentInterface:
    """The first interface, in the card's preference order, with a binding we speak and a URL we may use; among the
    interfaces of that binding a v1.0 one is preferred (as the SDK's factory does)."""
    refused: list[str] = []
    usable: list[AgentInterface] = []
    for interface in card.supported_interfaces:
        if interface.protocol_binding not in BINDINGS:
            refused.append(f"{interface.protocol_binding or '?'} at {interface.url or '?'} (binding not supported)")
            continue
        if not interface.url:
            refused.append(f"{interface.protocol_binding} without a url")
            continue
        try:
            check_scheme(interface.url, allow_http=allow_http)
        except InsecureURLError as exc:
            refused.append(str(exc))
            continue
        usable.append(interface)
    if not usable:
        detail = "; ".join(refused) if refused else "the card lists no interfaces"
        raise NoUsableInterfaceError(f"no usable interface: {detail}")
    binding = usable[0].protocol_binding
    same = [i for i in usable if i.protocol_binding == binding]
    for interface in same:
        if _version(interface) == "1.0":
            return interface
    return same[0]


def interface_only(card: AgentCard, interface: AgentInterface) -> AgentCard:
    """A copy of the card listing just ``interface``, so that the SDK's factory uses exactly that one."""
    chosen = AgentCard()
    copy_from(chosen, card)
    del chosen.supported_interfaces[:]
    chosen.supported_interfaces.append(interface)
    return chosen
