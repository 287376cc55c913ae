"""Full-text search over the messages a caller may see: the ones in its inbox and the ones it sent.

The overseer view (``viewer=None``: every message) is the service's to grant, never the mesh's: the mesh only runs
the query it is handed. A query is reduced to its words (letters and digits; everything else separates them, as in
the databases' tokenizers), and a message matches when its body holds every word, in any order and any case. Hits
come best first (the store's relevance score), then newest; the snippet shows the matched words between
``MARK_OPEN`` and ``MARK_CLOSE``. Pages are counted in hits (an opaque cursor carries the offset).

A store indexes a message in the statement that stores it and forgets it in the one that deletes it (a trigger or a
generated column): there is no second write path that could drift from the rows, and the sweeper's retention
sweeps the index with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from pydantic import ConfigDict, Field

from muster_mesh.errors import InvalidRequest
from muster_mesh.mesh import Mesh
from muster_mesh.models import Strict

MAX_QUERY_CHARS = 200
MAX_TERMS = 16
MAX_TERM_CHARS = 64
DEFAULT_SEARCH_PAGE = 20
MAX_SEARCH_PAGE = 100
# Offsets past this are refused: a deep page costs what it skips, and nobody reads 10,000 hits.
MAX_SEARCH_OFFSET = 10_000
MARK_OPEN = "«"
MARK_CLOSE = "»"
SNIPPET_WORDS = 16

# Words as the databases' tokenizers cut them: runs of letters and digits (the underscore separates, as punctuation).
_WORD = re.compile(r"[^\W_]+")


def search_terms(q: str) -> tuple[str, ...]:
    """The words of a query, case-folded, deduplicated in order. Refused when it has none or is too long."""
    if len(q) > MAX_QUERY_CHARS:
        raise _refused(f"a search is at most {MAX_QUERY_CHARS} characters", "string_too_long")
    words = tuple(dict.fromkeys(w.casefold() for w in _WORD.findall(q)))
    if not words:
        raise _refused("a search needs at least one word (letters or digits)", "no_words")
    if len(words) > MAX_TERMS:
        raise _refused(f"a search has at most {MAX_TERMS} distinct words", "too_many_words")
    if any(len(w) > MAX_TERM_CHARS for w in words):
        raise _refused(f"a search word is at most {MAX_TERM_CHARS} characters", "string_too_long")
    return words


def _refused(message: str, rule: str) -> InvalidRequest:
    return InvalidRequest(message, errors=[{"field": "q", "rule": rule, "message": message}])


@dataclass(frozen=True)
class SearchQuery:
    terms: tuple[str, ...]
    viewer: str | None
    """Only messages this agent sent or holds in its inbox; None: every message (the overseer's view)."""
    limit: int
    offset: int


@dataclass(frozen=True)
class SearchRow:
    message_id: str
    sender: str
    thread_id: str | None
    sent_at: datetime
    snippet: str
    score: float


class SearchStore(Protocol):
    async def search_messages(self, query: SearchQuery) -> list[SearchRow]:
        """Up to ``query.limit`` messages whose body holds every term, visible to ``query.viewer``, after skipping
        ``query.offset``: highest score first, then newest, then by message_id (a stable order for paging)."""


class SearchHit(Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    message_id: str
    sender: str = Field(alias="from")
    thread_id: str | None
    sent_at: datetime
    snippet: str = Field(description=f"Text around the matches, each between {MARK_OPEN} and {MARK_CLOSE}.")
    score: float = Field(description="Relevance: higher is better (comparable within one search only).")


class SearchPage(Strict):
    hits: list[SearchHit]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


def _offset(cursor: str | None) -> int:
    if cursor is None:
        return 0
    if not cursor.isdigit() or int(cursor) > MAX_SEARCH_OFFSET:
        raise InvalidRequest(
            "cursor must be the next_cursor of an earlier page",
            errors=[{"field": "cursor", "rule": "invalid_cursor", "message": "not a search cursor"}],
        )
    return int(cursor)


class MeshSearch:
    """Search as the mesh's rules allow it: an agent sees what it sent and what reached its inbox (and its lease is
    renewed, like any call); ``overseer`` sees everything, for callers the service vouches for."""

    def __init__(self, mesh: Mesh, store: SearchStore) -> None:
        self.mesh = mesh
        self.store = store

    async def search(
        self, q: str, *, token: str | None, overseer: bool = False, limit: int | None = None, cursor: str | None = None
    ) -> SearchPage:
        terms = search_terms(q)
        limit = min(max(limit or DEFAULT_SEARCH_PAGE, 1), MAX_SEARCH_PAGE)
        offset = _offset(cursor)
        viewer = None if overseer else (await self.mesh.whoami(token=token)).agent_id
        rows = await self.store.search_messages(SearchQuery(terms, viewer, limit + 1, offset))
        hits = [
            SearchHit(
                message_id=r.message_id,
                sender=r.sender,
                thread_id=r.thread_id,
                sent_at=r.sent_at,
                snippet=r.snippet,
                score=r.score,
            )
            for r in rows[:limit]
        ]
        more = len(rows) > limit and offset + limit <= MAX_SEARCH_OFFSET
        return SearchPage(hits=hits, next_cursor=str(offset + limit) if more else None)


def matching_words(body: str, terms: tuple[str, ...]) -> list[str] | None:
    """The body's words when it holds every term (the in-memory store's match), else None."""
    words = [w.casefold() for w in _WORD.findall(body)]
    present = set(words)
    return words if all(t in present for t in terms) else None


def plain_snippet(body: str, terms: tuple[str, ...]) -> str:
    """A snippet the way the databases make one: up to ``SNIPPET_WORDS`` words from just before the first match,
    each matched word marked."""
    spans = [(m.start(), m.end(), m.group().casefold() in terms) for m in _WORD.finditer(body)]
    first = next((i for i, span in enumerate(spans) if span[2]), 0)
    start = max(first - 2, 0)
    shown = spans[start : start + SNIPPET_WORDS]
    if not shown:
        return ""
    out: list[str] = ["…" if start > 0 else ""]
    cursor = shown[0][0]
    for begin, end, hit in shown:
        out.append(body[cursor:begin])
        word = body[begin:end]
        out.append(f"{MARK_OPEN}{word}{MARK_CLOSE}" if hit else word)
        cursor = end
    out.append("…" if start + SNIPPET_WORDS < len(spans) else "")
    return "".join(out)


__all__ = [
    "DEFAULT_SEARCH_PAGE",
    "MARK_CLOSE",
    "MARK_OPEN",
    "MAX_QUERY_CHARS",
    "MAX_SEARCH_PAGE",
    "MeshSearch",
    "SearchHit",
    "SearchPage",
    "SearchQuery",
    "SearchRow",
    "SearchStore",
    "matching_words",
    "plain_snippet",
    "search_terms",
]
