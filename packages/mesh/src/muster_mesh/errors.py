"""Errors of muster_mesh. Every one carries a stable ``code`` so that an agent can act on it without parsing prose.

MeshError                      root: anything the mesh refuses
├── MeshAuthError              the caller's session token does not let it act
│   ├── TokenRequired          no token presented where one is needed
│   ├── InvalidToken           the token is not any agent's current session
│   └── LeaseExpired           the token's session lease ran out: check in again (same token keeps the identity)
├── IdentityConflict           check-in of a live agent_id without its token (would steal a live identity)
├── RecipientNotFound          direct message to an agent_id that never checked in
├── RecipientExpired           direct message to an agent whose lease expired
├── IdempotencyConflict        an idempotency key reused with different arguments
├── InvalidCursor              an ack beyond the last message of the inbox
├── MessageTooLarge            a message body over the size bound
└── InvalidRequest             a request the models accept but the mesh cannot (e.g. a malformed pane id)
"""

from __future__ import annotations

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


class InvalidToken(MeshAuthError):
    code = "invalid_token"


class LeaseExpired(MeshAuthError):
    code = "lease_expired"

    def __init__(self, agent_id: str, expired_at: datetime) -> None:
        super().__init__(
            f"the lease of {agent_id!r} expired at {expired_at.isoformat()}; check in again with the same token "
            "to keep the identity",
            agent_id=agent_id,
            expired_at=expired_at.isoformat(),
        )


class IdentityConflict(MeshError):
    code = "agent_id_in_use"

    def __init__(self, agent_id: str, expires_at: datetime) -> None:
        super().__init__(
            f"agent_id {agent_id!r} is held by a live session until {expires_at.isoformat()}; present its token to "
            "renew it, or choose another agent_id",
            agent_id=agent_id,
            expires_at=expires_at.isoformat(),
        )


class RecipientNotFound(MeshError):
    code = "recipient_not_found"

    def __init__(self, agent_id: str) -> None:
        super().__init__(f"no agent {agent_id!r} has checked in", agent_id=agent_id)


class RecipientExpired(MeshError):
    code = "recipient_expired"

    def __init__(self, agent_id: str, expired_at: datetime) -> None:
        super().__init__(
            f"agent {agent_id!r} is not live: its lease expired at {expired_at.isoformat()}; nothing was stored",
            agent_id=agent_id,
            expired_at=expired_at.isoformat(),
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


class InvalidCursor(MeshError):
    code = "invalid_cursor"

    def __init__(self, cursor: int, last_seq: int) -> None:
        super().__init__(
            f"cursor {cursor} is beyond the last message of this inbox ({last_seq})", cursor=cursor, last_seq=last_seq
        )


class MessageTooLarge(MeshError):
    code = "message_too_large"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"message body is {size} bytes; the limit is {limit} bytes", size=size, limit=limit)


class InvalidRequest(MeshError):
    code = "invalid_request"
