"""Errors of muster_mesh. Every one carries a stable ``code`` so that an agent can act on it without parsing prose.

MeshError                      root: anything the mesh refuses
├── MeshAuthError              no usable credentials (401)
│   ├── TokenRequired          no token presented where one is needed
│   │   └── IdentityConflict   check-in of a live agent_id without its token (would steal a live identity)
│   ├── InvalidToken           the token is not any agent's session
│   │   └── Superseded         the token's session was taken over by a check-in with ``takeover``
│   └── LeaseExpired           the token's session lease ran out (or it checked out): check in anew
├── Forbidden                  credentials of someone else (403)
│   ├── NotTheHolder           check-in of a live agent_id with another session's token
│   └── OverseerOnly           a view of every agent's messages, asked where the service does not open it
├── AgentNotFound              no agent with this agent_id (404)
│   └── RecipientNotFound      direct message to an agent_id that is not checked in
├── ThreadNotFound             a thread with no message the caller may see (404)
├── MessageNotFound            no message with this id that the caller sent or received (404)
├── RecipientExpired           direct message to an agent whose lease expired (409)
├── IdempotencyConflict        an idempotency key reused with different arguments (409)
├── TokenGivenOnce             a retried check-in that made a token: the token is not repeated (409)
├── InvalidCursor              an ack or a read beyond the last message of the inbox (422)
├── MessageTooLarge            a message body over the size bound (413)
├── RateLimited                fan-out sends of one sender over its rate (429, with retry_after)
└── InvalidRequest             a request the models accept but the mesh cannot (422)
    └── InvalidAddress         a message without exactly one of to / role / repo / cap
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any


class MeshError(Exception):
    """Root of every error muster_mesh raises."""

    code = "mesh_error"

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.extra = extra

    @property
    def problem_extra(self) -> dict[str, Any]:
        """Members a problem+json answer adds beside ``detail``."""
        return {"code": self.code, **self.extra}


class MeshAuthError(MeshError):
    code = "unauthorized"


class TokenRequired(MeshAuthError):
    code = "token_required"


class IdentityConflict(TokenRequired):
    code = "agent_id_in_use"

    def __init__(self, agent_id: str, expires_at: datetime) -> None:
        super().__init__(
            f"agent_id {agent_id!r} is held by a live session until {expires_at.isoformat()}; present its token "
            "(Authorization: Bearer …) to renew it, check in with takeover: true if that token is lost (it then "
            "stops working), or choose another agent_id",
            agent_id=agent_id,
            expires_at=expires_at.isoformat(),
        )


class InvalidToken(MeshAuthError):
    code = "invalid_token"


class Superseded(InvalidToken):
    code = "superseded"

    def __init__(self, agent_id: str, at: str) -> None:
        super().__init__(
            f"this token's session of {agent_id!r} was taken over at {at} by a check-in with takeover: true; the "
            "token no longer works. Check in again (with takeover: true to take the agent_id back)",
            agent_id=agent_id,
            superseded_at=at,
        )


class LeaseExpired(MeshAuthError):
    code = "lease_expired"

    def __init__(self, agent_id: str, expired_at: datetime) -> None:
        super().__init__(
            f"the lease of {agent_id!r} ended at {expired_at.isoformat()}; check in again to start a new session",
            agent_id=agent_id,
            expired_at=expired_at.isoformat(),
        )


class Forbidden(MeshError):
    code = "forbidden"


class NotTheHolder(Forbidden):
    code = "not_the_holder"

    def __init__(self, agent_id: str) -> None:
        super().__init__(
            f"the token presented is not the session of {agent_id!r}, which is live: it cannot be checked in by "
            "another session",
            agent_id=agent_id,
        )


class OverseerOnly(Forbidden):
    code = "overseer_only"


class AgentNotFound(MeshError):
    code = "agent_not_found"

    def __init__(self, agent_id: str) -> None:
        super().__init__(f"no agent {agent_id!r} has checked in", agent_id=agent_id)


class RecipientNotFound(AgentNotFound):
    code = "recipient_not_found"


class ThreadNotFound(MeshError):
    code = "thread_not_found"

    def __init__(self, thread_id: str) -> None:
        # The same answer whether the thread does not exist or the caller is in none of it: nothing leaks.
        super().__init__(f"no thread {thread_id!r} among the messages you may see", thread_id=thread_id)


class MessageNotFound(MeshError):
    code = "message_not_found"

    def __init__(self, message_id: str) -> None:
        # The same answer whether the message does not exist or belongs to others: no hint that it exists.
        super().__init__(f"no message {message_id!r} sent or received by the caller", message_id=message_id)


class RecipientExpired(MeshError):
    code = "recipient_expired"

    def __init__(self, agent_id: str, expired_at: datetime, last_seen_at: datetime) -> None:
        # No wake can reach it: every follower of an inbox (a long-poll, an SSE stream, the follower of muster mcp
        # that wakes a Herdr pane) renews the lease with each read, so an agent whose lease ended has none.
        super().__init__(
            f"agent {agent_id!r} is not live: last seen at {last_seen_at.isoformat()}, its lease ended at "
            f"{expired_at.isoformat()}; nothing was stored. No wake can reach it (nothing follows its inbox: a "
            "follower would have kept its lease); it receives again once it checks in",
            agent_id=agent_id,
            expired_at=expired_at.isoformat(),
            lease_ended_at=expired_at.isoformat(),
            last_seen_at=last_seen_at.isoformat(),
            wake_possible=False,
        )


class IdempotencyConflict(MeshError):
    code = "idempotency_conflict"

    def __init__(self, key: str, operation: str) -> None:
        # The key is the client's own value, not a secret: echoing it helps the caller find the bad retry.
        super().__init__(
            f"idempotency key {key!r} was already used for a different {operation} request",
            idempotency_key=key,
            operation=operation,
        )


class TokenGivenOnce(MeshError):
    code = "token_given_once"

    def __init__(self, agent_id: str) -> None:
        super().__init__(
            f"this check-in (same Idempotency-Key) already started the session of {agent_id!r}, and its token is "
            "given once, in the first answer (only its hash is kept). If that answer was lost, check in with "
            "takeover: true and a new Idempotency-Key: a new token is issued and the lost one stops working",
            agent_id=agent_id,
        )


class InvalidCursor(MeshError):
    code = "invalid_cursor"

    def __init__(self, cursor: int, last_seq: int, *, field: str = "cursor") -> None:
        super().__init__(
            f"{field} {cursor} is beyond the last message of this inbox ({last_seq})",
            cursor=cursor,
            last_seq=last_seq,
            field=field,
        )


class MessageTooLarge(MeshError):
    code = "message_too_large"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"body is {size} bytes (UTF-8); the limit is {limit} bytes", size=size, limit=limit, field="body"
        )


class RateLimited(MeshError):
    code = "rate_limited"

    def __init__(self, agent_id: str, per_minute: int, retry_after: float) -> None:
        super().__init__(
            f"{agent_id!r} sent more than {per_minute} role/repo/cap fan-out messages a minute; retry in "
            f"{math.ceil(retry_after)} s (direct messages are not limited)",
            per_minute=per_minute,
            retry_after_seconds=round(retry_after, 1),
        )
        self.retry_after = retry_after


class InvalidRequest(MeshError):
    code = "invalid_request"


class InvalidAddress(InvalidRequest):
    code = "invalid_address"

    def __init__(self, given: list[str]) -> None:
        named = ", ".join(given) if given else "none"
        super().__init__(
            f"a message needs exactly one address: one of to, role, repo, cap (given: {named})",
            errors=[{"field": "to", "rule": "exactly_one_address", "message": f"given: {named}"}],
        )
