"""Path claims: the files an agent holds in a repository, for as long as its presence lease lives.

A claim has no TTL of its own. It is a row naming its holder's agent_id, read only while that agent's lease is live
(so it ends when the lease expires), deleted at check-out and when a new session starts on the agent_id, kept by a
takeover (the identity is the same). The rules (who conflicts with whom, what is refused) live in ``Claims``, once,
for every store; a store keeps rows (``ClaimTx``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from json.encoder import encode_basestring
from typing import Annotated, Protocol, cast

from pydantic import AfterValidator, Field, StringConstraints, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import PydanticCustomError, to_json

from muster_mesh.errors import InvalidRequest
from muster_mesh.mesh import Mesh, _fingerprint
from muster_mesh.models import CONTROLS, MAX_STATUS_CHARS, Repo, Strict
from muster_mesh.patterns import (
    MAX_CLAIMS_PER_AGENT,
    MAX_PATTERN_CHARS,
    MAX_PATTERNS,
    first_match,
    overlaps,
    path_problem,
)
from muster_mesh.patterns import pattern_problem as _problem
from muster_mesh.store import MeshTx
from muster_mesh.tokens import token_hash


def _claimable(value: str) -> str:
    problem = _problem(value)
    if problem is not None:
        raise PydanticCustomError(problem.rule, problem.message)
    return value


_GLOB = re.compile(r"[*?\[]")
# A path that plainly keeps every rule (no glob, control or backslash, nothing blank, negated or absolute, no '.',
# '..' or empty segment): one C match where the rules one by one cost several Python steps, a hundred times per
# check. What it does not accept is judged by the rules themselves, which name the one broken.
# Possessive (``++``, ``*+``): what a run gives back could never match what follows it (a segment's characters
# exclude the slash and the newline after it), and trying that was almost half the match.
_PLAIN_SEGMENT = r"(?!\.\.?(?:/|\n|\Z))[^/\x00-\x1f\x7f\\*?\[]++"
_PLAIN = rf"(?=[^!/\s]){_PLAIN_SEGMENT}(?:/{_PLAIN_SEGMENT})*+/*+"
PLAIN_PATH = re.compile(_PLAIN)
# The same for a whole list at once, its paths joined by newlines (``all_plain``).
PLAIN_PATHS = re.compile(rf"{_PLAIN}(?:\n{_PLAIN})*+")


def _concrete(value: str) -> str:
    """A concrete path is checked by the same rules of text, and may not be a glob."""
    if PLAIN_PATH.fullmatch(value) is not None:
        return value
    problem = path_problem(value)
    if problem is not None:
        raise PydanticCustomError(problem.rule, problem.message)
    if _GLOB.search(value) is not None:
        raise PydanticCustomError("not_concrete", "a checked path is a concrete path, without * ? or [")
    return value


def all_plain(paths: list[str]) -> bool:
    """Whether ``PLAIN_PATH`` accepts every one of these paths, in one C match of them joined by newlines (a path
    holding a newline itself is not plain, and would make the joined text hold more paths than the list)."""
    joined = "\n".join(paths)
    return joined.count("\n") == len(paths) - 1 and PLAIN_PATHS.fullmatch(joined) is not None


def _plain_list(value: object, handler: ValidatorFunctionWrapHandler) -> object:
    """A list of checked paths that are all plain passes at once (``all_plain``), where the list's own validation
    calls ``_concrete`` once per path; any other value (a path that is not plain, a wrong type or length) goes
    through that validation, which names what is wrong and where."""
    if (
        type(value) is list
        and 0 < len(value) <= MAX_CLAIMS_PER_AGENT
        and set(map(type, value)) == {str}
        and max(map(len, value)) <= MAX_PATTERN_CHARS
        and all_plain(value)
    ):
        return value
    return handler(value)


Pattern = Annotated[str, StringConstraints(max_length=MAX_PATTERN_CHARS), AfterValidator(_claimable)]
ConcretePath = Annotated[str, StringConstraints(max_length=MAX_PATTERN_CHARS), AfterValidator(_concrete)]
Reason = Annotated[str, StringConstraints(max_length=MAX_STATUS_CHARS, pattern=rf"^[^{CONTROLS}]*$")]
ClaimId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]


class ClaimRequest(Strict):
    paths: list[Pattern] = Field(
        min_length=1,
        max_length=MAX_PATTERNS,
        description="Gitignore-style globs relative to the repository's root (src/store/**, README.md, *.sql). "
        "Refused: empty, absolute (/…), .. segments, negation (!…).",
    )
    exclusive: bool = Field(default=True, strict=True, description="Shared claims conflict only with exclusive ones.")
    reason: Reason | None = Field(default=None, description="Shown to whoever meets the claim: why you hold it.")
    repo: Repo | None = Field(default=None, description="Default: the repo the caller checked in with.")
    confirm: bool = Field(default=False, strict=True)


class ClaimView(Strict):
    id: str
    repo: str
    holder: str
    pattern: str
    exclusive: bool
    reason: str | None
    since: datetime


class ClaimConflict(Strict):
    pattern: str = Field(description="The pattern asked for.")
    holder: str
    their_pattern: str
    exclusive: bool
    reason: str | None
    since: datetime


class ClaimResult(Strict):
    preview: bool
    granted: list[ClaimView] = Field(description="Claims held once this answers (those that would be, in a preview).")
    conflicts: list[ClaimConflict] = Field(description="Patterns not granted, with who holds what overlaps them.")
    replayed: bool = Field(default=False, exclude=True)


class ReleaseRequest(Strict):
    ids: list[ClaimId] | None = Field(default=None, max_length=MAX_CLAIMS_PER_AGENT)
    paths: list[Pattern] | None = Field(default=None, max_length=MAX_PATTERNS, description="Patterns as claimed.")
    repo: Repo | None = None
    confirm: bool = Field(default=False, strict=True)


class ReleaseResult(Strict):
    preview: bool
    released: list[ClaimView]
    replayed: bool = Field(default=False, exclude=True)


class CheckRequest(Strict):
    repo: Repo
    paths: Annotated[list[ConcretePath], WrapValidator(_plain_list)] = Field(
        min_length=1, max_length=MAX_CLAIMS_PER_AGENT
    )


class PathHolder(Strict):
    path: str
    holder: str | None = Field(description="The agent other than the caller holding the path exclusively; null: free.")
    pattern: str | None
    reason: str | None
    since: datetime | None


class CheckResult(Strict):
    paths: list[PathHolder]


class ClaimList(Strict):
    claims: list[ClaimView]


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    claim_id: str
    repo: str
    holder: str
    pattern: str
    exclusive: bool
    reason: str | None
    since: datetime

    def view(self) -> ClaimView:
        return ClaimView(
            id=self.claim_id,
            repo=self.repo,
            holder=self.holder,
            pattern=self.pattern,
            exclusive=self.exclusive,
            reason=self.reason,
            since=self.since,
        )


class ClaimTx(MeshTx, Protocol):
    """The rows of path claims, inside a mesh transaction (the caller's renewal and its claims commit together)."""

    async def lock_repo_claims(self, repo: str) -> None:
        """Serialise claim grants in ``repo`` until the transaction ends (two grants cannot both see it free)."""

    async def live_claims(self, live_at: datetime, *, repo: str | None, holder: str | None) -> list[ClaimRecord]:
        """Claims whose holder's lease is live at ``live_at``, filtered, in (repo, holder, pattern) order."""

    async def put_claims(self, records: Sequence[ClaimRecord]) -> None:
        """Insert these claims; one with the same (repo, holder, pattern) as a stored one replaces it."""

    async def delete_claims(self, holder: str, ids: Sequence[str]) -> None:
        """Delete these claims of ``holder``."""


class ClaimStore(Protocol):
    def transaction(self) -> AbstractAsyncContextManager[ClaimTx]: ...

    def standalone(self) -> AbstractAsyncContextManager[ClaimTx]: ...

    async def renew_and_claims(self, token_hash: str, now: datetime, repo: str) -> list[ClaimRecord] | None:
        """The caller's renewal (by its token, the TTL seen for it re-checked) and the live exclusive claims of
        ``repo`` held by other agents, in ``live_claims``' order, in one round trip; None, and nothing written,
        when the store has no such step or the token or TTL does not qualify (a check then renews as any call)."""


class NoRepo(InvalidRequest):
    code = "repo_required"

    def __init__(self) -> None:
        super().__init__(
            "this agent checked in without a repo: name the claim's `repo`",
            errors=[{"field": "repo", "rule": "required_without_checkin_repo", "message": "give repo"}],
        )


class TooManyClaims(InvalidRequest):
    code = "too_many_claims"

    def __init__(self, held: int) -> None:
        super().__init__(
            f"an agent holds at most {MAX_CLAIMS_PER_AGENT} claims (it holds {held}); release some first",
            errors=[{"field": "paths", "rule": "max_claims_per_agent", "message": str(MAX_CLAIMS_PER_AGENT)}],
        )


def _conflict(pattern: str, theirs: ClaimRecord) -> ClaimConflict:
    return ClaimConflict(
        pattern=pattern,
        holder=theirs.holder,
        their_pattern=theirs.pattern,
        exclusive=theirs.exclusive,
        reason=theirs.reason,
        since=theirs.since,
    )


class Claims:
    """Claim, release, check and list path claims over a store that keeps claims beside the mesh's rows."""

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.store = cast(ClaimStore, mesh.store)

    async def claim(
        self, request: ClaimRequest, *, token: str | None, idempotency_key: str | None = None
    ) -> ClaimResult:
        now = self.mesh.now()
        fingerprint = _fingerprint("claim", request.model_dump(mode="json", exclude={"confirm"}))
        async with self.store.transaction() as tx:
            agent = await self.mesh.caller(tx, token, now)
            scope = f"agent:{agent.agent_id}"
            if request.confirm:
                replayed = await self.mesh.replayed(tx, scope, idempotency_key, "claim", fingerprint, ClaimResult)
                if replayed is not None:
                    return replayed
            repo = request.repo or agent.repo
            if repo is None:
                raise NoRepo
            await tx.lock_repo_claims(repo)
            mine = await tx.live_claims(now, repo=None, holder=agent.agent_id)
            others = [c for c in await tx.live_claims(now, repo=repo, holder=None) if c.holder != agent.agent_id]
            kept = {c.pattern: c for c in mine if c.repo == repo}
            granted: list[ClaimRecord] = []
            conflicts: list[ClaimConflict] = []
            for pattern in dict.fromkeys(request.paths):
                met = [c for c in others if (request.exclusive or c.exclusive) and overlaps(pattern, c.pattern)]
                if met:
                    conflicts.extend(_conflict(pattern, c) for c in met)
                    continue
                old = kept.get(pattern)
                granted.append(
                    ClaimRecord(
                        claim_id=old.claim_id if old else uuid.uuid4().hex,
                        repo=repo,
                        holder=agent.agent_id,
                        pattern=pattern,
                        exclusive=request.exclusive,
                        reason=request.reason,
                        since=old.since if old else now,
                    )
                )
            fresh = sum(1 for g in granted if g.pattern not in kept)
            if len(mine) + fresh > MAX_CLAIMS_PER_AGENT:
                raise TooManyClaims(len(mine))
            result = ClaimResult(preview=not request.confirm, granted=[g.view() for g in granted], conflicts=conflicts)
            if request.confirm:
                if granted:
                    await tx.put_claims(granted)
                await self.mesh.remember(tx, scope, idempotency_key, "claim", fingerprint, result, now)
            return result

    async def release(
        self, request: ReleaseRequest, *, token: str | None, idempotency_key: str | None = None
    ) -> ReleaseResult:
        """The caller's claims named by id or by pattern (in ``repo`` when given); all of them when neither."""
        now = self.mesh.now()
        fingerprint = _fingerprint("release", request.model_dump(mode="json", exclude={"confirm"}))
        async with self.store.transaction() as tx:
            agent = await self.mesh.caller(tx, token, now)
            scope = f"agent:{agent.agent_id}"
            if request.confirm:
                replayed = await self.mesh.replayed(tx, scope, idempotency_key, "release", fingerprint, ReleaseResult)
                if replayed is not None:
                    return replayed
            held = await tx.live_claims(now, repo=request.repo, holder=agent.agent_id)
            ids, paths = set(request.ids or ()), set(request.paths or ())
            chosen = [
                c
                for c in held
                if (request.ids is None and request.paths is None) or c.claim_id in ids or c.pattern in paths
            ]
            result = ReleaseResult(preview=not request.confirm, released=[c.view() for c in chosen])
            if request.confirm:
                if chosen:
                    await tx.delete_claims(agent.agent_id, [c.claim_id for c in chosen])
                await self.mesh.remember(tx, scope, idempotency_key, "release", fingerprint, result, now)
            return result

    async def check(self, request: CheckRequest, *, token: str | None) -> CheckResult:
        """For each concrete path, the exclusive holder other than the caller (a token renews the caller's lease;
        without one, every exclusive holder is named)."""
        hits = await self.holders(request, token=token)
        # Built from stored, validated rows: not validated again (a hundred models were a tenth of a check).
        return CheckResult.model_construct(
            paths=[
                PathHolder.model_construct(
                    path=path,
                    holder=hit.holder if hit else None,
                    pattern=hit.pattern if hit else None,
                    reason=hit.reason if hit else None,
                    since=hit.since if hit else None,
                )
                for path, hit in zip(request.paths, hits, strict=True)
            ]
        )

    async def holders(self, request: CheckRequest, *, token: str | None) -> list[ClaimRecord | None]:
        """``check``'s answer as the claim holding each path exclusively (None: free), in the request's order."""
        held = await self._held_by_others(request.repo, token)
        matcher = first_match(tuple(c.pattern for c in held))
        return [None if index is None else held[index] for index in matcher.each(request.paths)]

    async def _held_by_others(self, repo: str, token: str | None) -> list[ClaimRecord]:
        now = self.mesh.now()
        if token:
            held = await self.store.renew_and_claims(token_hash(token), now, repo)
            if held is not None:
                return held
        # Each statement by itself: the renewal and the read need not commit together, and a transaction's BEGIN
        # and COMMIT would be two more round trips.
        async with self.store.standalone() as tx:
            me = (await self.mesh.caller(tx, token, now)).agent_id if token is not None else None
            return [c for c in await tx.live_claims(now, repo=repo, holder=None) if c.exclusive and c.holder != me]

    async def list(self, *, repo: str | None = None, agent: str | None = None) -> ClaimList:
        now = self.mesh.now()
        async with self.store.standalone() as tx:
            found = await tx.live_claims(now, repo=repo, holder=agent)
        return ClaimList(claims=[c.view() for c in found])


_FREE = ',"holder":null,"pattern":null,"reason":null,"since":null}'


def _holder_part(hit: ClaimRecord) -> str:
    fields = {"holder": hit.holder, "pattern": hit.pattern, "reason": hit.reason, "since": hit.since}
    return "," + to_json(fields).decode()[1:]


def check_json(paths: Sequence[str], hits: Sequence[ClaimRecord | None]) -> bytes:
    """``CheckResult``'s JSON for these paths and their holders (``Claims.holders``), the same bytes as the models':
    each path's text joined with its holder's part, which pydantic-core encodes once per claim that holds a path. A
    model per path cost more than the match; a dict per path encoded whole, half of what remains."""
    parts: dict[int, str] = {}
    rows = []
    for path, hit in zip(paths, hits, strict=True):
        tail = _FREE if hit is None else parts.get(id(hit)) or parts.setdefault(id(hit), _holder_part(hit))
        rows.append('{"path":' + encode_basestring(path) + tail)
    return ('{"paths":[' + ",".join(rows) + "]}").encode()


__all__ = [
    "CheckRequest",
    "CheckResult",
    "ClaimConflict",
    "ClaimList",
    "ClaimRecord",
    "ClaimRequest",
    "ClaimResult",
    "ClaimStore",
    "ClaimTx",
    "ClaimView",
    "Claims",
    "NoRepo",
    "PathHolder",
    "ReleaseRequest",
    "ReleaseResult",
    "TooManyClaims",
    "check_json",
]
