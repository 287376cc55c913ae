"""What a database URL that cannot be used is told as: one line naming the database and what to do.

The texts differ between SQLite (a file) and PostgreSQL (a server, its credentials and databases), so they live with
the other database-specific code rather than in the startup checks that print them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import make_url

from muster_api.db.url import is_sqlite, redact, sqlite_path


def where(url: str) -> str:
    """The database as a person knows it: the SQLite file, or the PostgreSQL database and its server."""
    if is_sqlite(url):
        return f"file {sqlite_path(url)}"
    parsed = make_url(url)
    return f"{parsed.database!r} on {parsed.host or 'localhost'}:{parsed.port or 5432}"


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        orig: Any = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else (current.__cause__ or current.__context__)
    return seen


def describe_database_error(exc: BaseException, url: str) -> str:
    names = {type(e).__name__ for e in _chain(exc)}
    if is_sqlite(url):
        return f"the SQLite {where(url)} cannot be opened ({type(exc).__name__}): fix MUSTER_DATABASE_URL"
    parsed = make_url(url)
    host, port, user = parsed.host or "localhost", parsed.port or 5432, parsed.username or "postgres"
    if "InvalidCatalogNameError" in names:
        return (
            f"the database {parsed.database!r} does not exist on {host}:{port}: create it with "
            f"`createdb -h {host} -p {port} -U {user} {parsed.database}`, or fix MUSTER_DATABASE_URL"
        )
    if names & {"InvalidPasswordError", "InvalidAuthorizationSpecificationError"}:
        return f"PostgreSQL at {host}:{port} refused user {user!r}: fix the credentials in MUSTER_DATABASE_URL"
    if any(isinstance(e, OSError | TimeoutError) for e in _chain(exc)):
        return f"PostgreSQL at {host}:{port} is unreachable: start it, or point MUSTER_DATABASE_URL at a running server"
    return f"the database at {redact(url)} cannot be used ({type(exc).__name__}): check MUSTER_DATABASE_URL"
