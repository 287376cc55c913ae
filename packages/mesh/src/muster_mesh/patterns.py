"""Path patterns of claims: gitignore-style globs relative to a repository's root.

A concrete path is matched by ``pathspec`` (gitignore semantics: a pattern without a slash matches at any depth, a
pattern that names a directory covers everything under it). Whether two patterns overlap — some path could match
both — is decided here, on the same semantics, segment by segment (see ``overlaps`` and the package README).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import pathspec

MAX_PATTERNS = 64
"""Patterns in one claim, release or check request."""
MAX_PATTERN_CHARS = 256
MAX_CLAIMS_PER_AGENT = 256
"""Live path claims one agent may hold at once."""

# Literal characters a pattern may not hold: controls (invisible in a terminal) and the backslash (gitignore's
# escape, and a Windows separator: either way not a path relative to a repository's root as the mesh means it).
_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f\\]")


@dataclass(frozen=True, slots=True)
class PatternProblem:
    """Why a pattern is refused: a stable ``rule`` and a sentence."""

    rule: str
    message: str


def pattern_problem(pattern: str) -> PatternProblem | None:
    """The first rule ``pattern`` breaks, None when it is a claimable pattern."""
    problem = path_problem(pattern)
    if problem is not None:
        return problem
    try:
        _spec(pattern)
    except ValueError as exc:  # pathspec's refusal of a pattern it cannot compile
        return PatternProblem("invalid_glob", str(exc))
    return None


def path_problem(pattern: str) -> PatternProblem | None:
    """The first rule of the text of a pattern or concrete path it breaks (a concrete path is never compiled: it is
    matched against the patterns, and compiling each checked path would cost more than the whole match)."""
    if not pattern.strip():
        return PatternProblem("empty", "a pattern must name something")
    if len(pattern) > MAX_PATTERN_CHARS:
        return PatternProblem("too_long", f"a pattern has at most {MAX_PATTERN_CHARS} characters")
    if pattern.startswith("!"):
        return PatternProblem("negation", "negation (!) is refused: claim what you hold, not what you do not")
    if pattern.startswith("/"):
        return PatternProblem("absolute", "patterns are relative to the repository's root: drop the leading /")
    if _FORBIDDEN.search(pattern) is not None:
        return PatternProblem("forbidden_character", "no control characters or backslashes")
    segments = pattern.rstrip("/").split("/")
    if ".." in segments:
        return PatternProblem("parent_reference", "a pattern may not step out of the repository (..)")
    if "." in segments or "" in segments:
        return PatternProblem("not_normalized", "no '.' or empty segments (write src/a, not ./src/a or src//a)")
    return None


@lru_cache(maxsize=8192)
def _spec(pattern: str) -> pathspec.PathSpec[Any]:
    return pathspec.PathSpec.from_lines("gitignore", [pattern])


def covers_below(pattern: str) -> bool:
    """Whether the pattern also covers everything under what it names: a directory pattern (``build/``), one ending
    in ``**``, or an anchored one (a slash before its end) whose last segment is a plain name (``src/store``). A bare
    name (``README.md``, ``Makefile``) means files of that name at any depth, not a directory: otherwise it would
    overlap every claim on a directory it could sit in (write ``docs/`` for a directory). A wildcard name (``*.sql``)
    covers the files it matches, not the contents of a directory that happens to be called ``x.sql``."""
    if pattern.endswith("/"):
        return True
    head, _, last = pattern.rpartition("/")
    return last == GLOBSTAR or (bool(head) and not any(ch in last for ch in "*?["))


def matches(pattern: str, path: str) -> bool:
    """Whether the concrete repository-relative ``path`` falls under ``pattern``: gitignore's match by ``pathspec``,
    a match through a parent directory counted only when the pattern ``covers_below``."""
    found = [p.regex.match(path) for p in _spec(pattern).patterns if p.regex is not None]
    hit = next((m for m in found if m is not None), None)
    if hit is None:
        return False
    return hit.end() >= len(path.rstrip("/")) or covers_below(pattern)


class FirstMatch:
    """The first of several patterns each concrete path falls under, as ``matches`` decides it, with one regular
    expression per path instead of one per pattern: every pattern's regex (all anchored at the start, none with a
    group of its own) becomes one alternative, and an alternation tries its alternatives in order, each exactly as
    it would match alone. The winner's match still has to pass ``matches``' end rule; in the rare case it does not,
    the patterns after it are tried one by one."""

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.patterns = patterns
        owners: list[int] = []
        parts: list[str] = []
        for index, pattern in enumerate(patterns):
            for p in _spec(pattern).patterns:
                if p.regex is not None:
                    owners.append(index)
                    parts.append(f"({p.regex.pattern})")
        combined = re.compile("|".join(parts)) if parts else None
        self._owners = owners
        self._below = tuple(covers_below(p) for p in patterns)
        # Any group inside a pattern's own regex would shift the numbering: then match pattern by pattern.
        self._regex = combined if combined is not None and combined.groups == len(parts) else None

    def first(self, path: str) -> int | None:
        """The index of the first pattern ``path`` falls under; None when none does."""
        if self._regex is None:
            return self._one_by_one(path, 0)
        hit = self._regex.match(path)
        if hit is None or hit.lastindex is None:
            return None
        index = self._owners[hit.lastindex - 1]
        if hit.end() >= len(path.rstrip("/")) or covers_below(self.patterns[index]):
            return index
        return self._one_by_one(path, index + 1)

    def each(self, paths: Sequence[str]) -> list[int | None]:
        """``first`` of each path, in one loop (a check asks it of a hundred paths at once)."""
        if self._regex is None:
            return [self._one_by_one(path, 0) for path in paths]
        match, owners, below = self._regex.match, self._owners, self._below
        found: list[int | None] = []
        for path in paths:
            hit = match(path)
            if hit is None or hit.lastindex is None:
                found.append(None)
                continue
            index = owners[hit.lastindex - 1]
            if below[index] or hit.end() >= len(path.rstrip("/")):
                found.append(index)
            else:
                found.append(self._one_by_one(path, index + 1))
        return found

    def _one_by_one(self, path: str, start: int) -> int | None:
        return next((i for i in range(start, len(self.patterns)) if matches(self.patterns[i], path)), None)


@lru_cache(maxsize=1024)
def first_match(patterns: tuple[str, ...]) -> FirstMatch:
    """The compiled ``FirstMatch`` of these patterns (the live claims of a repo change far less often than they are
    checked)."""
    return FirstMatch(patterns)


# ---------------------------------------------------------------------------------------------------- overlap

STAR = "*"
GLOBSTAR = "**"


@dataclass(frozen=True, slots=True)
class _Chars:
    """One character position of a segment: a literal, ``?`` (any), or a class ``[...]`` (``negated`` for ``[!…]``)."""

    members: frozenset[str] | None  # None: any character
    negated: bool = False

    def admits(self, ch: str) -> bool:
        if self.members is None:
            return True
        return (ch in self.members) != self.negated

    def meets(self, other: _Chars) -> bool:
        """Some character is admitted by both."""
        if self.members is None or other.members is None:
            return True
        if self.negated and other.negated:
            return True  # two finite exclusions leave infinitely many characters
        if self.negated:
            return other.meets(self)
        return any(other.admits(ch) for ch in self.members)


Token = _Chars | str  # a character position, or STAR


def _segments(pattern: str) -> tuple[str, ...]:
    """The pattern as path segments under gitignore's rules: anchored when it has a slash before its end, matching at
    any depth otherwise; ``GLOBSTAR`` appended when it ``covers_below``."""
    body = pattern.rstrip("/")
    parts = tuple(body.split("/"))
    if "/" not in body:
        parts = (GLOBSTAR, *parts)
    return (*parts, GLOBSTAR) if covers_below(pattern) else parts


def _class(segment: str, start: int) -> tuple[_Chars, int] | None:
    """The class opening at ``segment[start]`` and the index after it; None when the bracket does not close."""
    i = start + 1
    negated = i < len(segment) and segment[i] in "!^"
    if negated:
        i += 1
    members: set[str] = set()
    first = True
    while i < len(segment) and (segment[i] != "]" or first):
        first = False
        if i + 2 < len(segment) and segment[i + 1] == "-" and segment[i + 2] != "]":
            low, high = ord(segment[i]), ord(segment[i + 2])
            # A huge range admits nearly anything: treated as any character (the overlap rule may only err towards
            # reporting an overlap).
            if high - low > 4096:
                return _Chars(None), segment.index("]", i) + 1 if "]" in segment[i:] else len(segment)
            members.update(chr(c) for c in range(low, high + 1))
            i += 3
        else:
            members.add(segment[i])
            i += 1
    if i >= len(segment):
        return None
    return _Chars(frozenset(members), negated), i + 1


@lru_cache(maxsize=8192)
def _tokens(segment: str) -> tuple[Token, ...]:
    tokens: list[Token] = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            if not tokens or tokens[-1] != STAR:
                tokens.append(STAR)
            i += 1
        elif ch == "?":
            tokens.append(_Chars(None))
            i += 1
        elif ch == "[" and (found := _class(segment, i)) is not None:
            tokens.append(found[0])
            i = found[1]
        else:
            tokens.append(_Chars(frozenset(ch)))
            i += 1
    return tuple(tokens)


def _sequences_meet(a: tuple[Any, ...], b: tuple[Any, ...], wild: object, one: Callable[[Any, Any], bool]) -> bool:
    """Whether some string is in both sequences' languages, where ``wild`` matches any run of units and every other
    pair of units is compared by ``one(x, y)``. Memoised over positions: O(len(a) × len(b))."""

    @cache
    def go(i: int, j: int) -> bool:
        if i == len(a) and j == len(b):
            return True
        if i < len(a) and a[i] == wild and (go(i + 1, j) or (j < len(b) and go(i, j + 1))):
            return True
        if j < len(b) and b[j] == wild and (go(i, j + 1) or (i < len(a) and go(i + 1, j))):
            return True
        if i < len(a) and j < len(b) and a[i] != wild and b[j] != wild:
            return one(a[i], b[j]) and go(i + 1, j + 1)
        return False

    return go(0, 0)


def _chars_meet(p: _Chars, q: _Chars) -> bool:
    return p.meets(q)


def _segments_meet(x: str, y: str) -> bool:
    return _sequences_meet(_tokens(x), _tokens(y), STAR, _chars_meet)


@lru_cache(maxsize=65536)
def overlaps(a: str, b: str) -> bool:
    """Whether some path could match both patterns: their segments are aligned, ``**`` standing for any run of
    segments (none included), ``*`` for any run of characters within one, and two character positions meeting when
    some character fits both."""
    return _sequences_meet(_segments(a), _segments(b), GLOBSTAR, _segments_meet)


__all__ = [
    "MAX_CLAIMS_PER_AGENT",
    "MAX_PATTERNS",
    "MAX_PATTERN_CHARS",
    "PatternProblem",
    "covers_below",
    "matches",
    "overlaps",
    "pattern_problem",
]
