"""Database URL normalisation: plain URLs become their async-driver spellings.

asyncpg is the PostgreSQL driver: it is the fastest async driver and speaks LISTEN/NOTIFY natively, which the
mesh notifier needs across instances.
"""

from __future__ import annotations

from pathlib import Path

from muster_api.errors import ConfigurationError

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./var/muster.db"

_SCHEMES = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}


def normalise_database_url(url: str) -> str:
    """Map ``sqlite:///p`` → aiosqlite and ``postgres(ql)://`` → asyncpg; refuse anything else by name."""
    scheme, sep, rest = url.partition("://")
    if not sep or not rest:
        raise ConfigurationError("database URL must look like 'scheme://…', got a value without '://'")
    target = _SCHEMES.get(scheme.lower())
    if target is None:
        known = ", ".join(sorted({"sqlite", "postgresql", "postgres"}))
        raise ConfigurationError(f"unsupported database URL scheme {scheme!r}; use one of: {known}")
    return f"{target}://{rest}"


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL, or None for an in-memory database."""
    rest = url.partition("://")[2]
    path = rest[1:] if rest.startswith("/") else rest
    path = path.partition("?")[0]
    if path in ("", ":memory:"):
        return None
    return Path(path)


def absolute_sqlite_url(url: str) -> str:
    """A SQLite URL whose file is relative made absolute against the current directory (other URLs unchanged)."""
    if not is_sqlite(url):
        return url
    path = sqlite_path(url)
    if path is None or path.is_absolute():
        return url
    scheme = url.partition("://")[0]
    query = url.partition("?")[2]
    return f"{scheme}:///{path.absolute()}" + (f"?{query}" if query else "")


def redact(url: str) -> str:
    """The URL with any password replaced, for logs."""
    scheme, _, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at or ":" not in creds:
        return url
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"
