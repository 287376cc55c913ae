"""Where credentials may go and which URLs may be plain http."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import httpx

from muster_a2a.errors import InsecureURLError


def origin(url: str) -> tuple[str, str, int]:
    parsed = httpx.URL(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return (parsed.scheme, parsed.host.lower(), port)


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_scheme(url: str, *, allow_http: bool) -> None:
    """https anywhere; plain http only on loopback unless explicitly allowed."""
    parsed = httpx.URL(url)
    if parsed.scheme == "https":
        return
    if parsed.scheme != "http":
        raise InsecureURLError(f"unsupported URL scheme {parsed.scheme!r} in {url}")
    if not allow_http and not is_loopback(parsed.host):
        raise InsecureURLError(f"plain http refused for {url}: use https, or set allow_http for this agent")


def credentials_allowed(url: str, configured: str | None, allow_hosts: Iterable[str]) -> bool:
    """Credentials go to the configured origin only, or to a host the configuration names explicitly."""
    if configured is not None and origin(url) == origin(configured):
        return True
    host = httpx.URL(url).host.lower()
    return any(host == allowed.lower() for allowed in allow_hosts)
