"""``DirectoryQuery``: what a page of the directory (``agents``) or of its backlog asks for, one value for the
synchronous client, the asynchronous one and whoever builds on them.

The service has the same value type in its mesh package; this one is the client's own (the packages are leaves and
never import each other). ``DirectoryFields`` is the same six fields as keyword arguments, for callers that write
``client.agents(role="builder")``; a test keeps the two alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TypedDict, Unpack


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectoryQuery:
    """The filters (all given must match), expired agents or not, and the page (``limit``, the ``cursor`` of the
    previous page's ``next_cursor``); None leaves the service's default."""

    repo: str | None = None
    role: str | None = None
    cap: str | None = None
    include_expired: bool = False
    limit: int | None = None
    cursor: str | None = None

    def params(self) -> dict[str, str | int]:
        """The query string of the listing: the fields given, ``include_expired`` only when true."""
        given: dict[str, str | int] = {k: v for k, v in asdict(self).items() if v is not None and v is not False}
        if self.include_expired:
            given["include_expired"] = "true"
        return given

    def but(self, **fields: Unpack[DirectoryFields]) -> DirectoryQuery:
        """This query with ``fields`` in place of its own (e.g. the next page: ``query.but(cursor=...)``)."""
        return DirectoryQuery(**{**asdict(self), **fields}) if fields else self


class DirectoryFields(TypedDict, total=False):
    """``DirectoryQuery``'s fields as keyword arguments."""

    repo: str | None
    role: str | None
    cap: str | None
    include_expired: bool
    limit: int | None
    cursor: str | None


EVERY_LIVE_AGENT = DirectoryQuery()
