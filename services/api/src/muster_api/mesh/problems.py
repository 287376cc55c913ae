"""How errors of muster_mesh map to HTTP statuses; merged into the one table in muster_api.problems.

Each error also carries ``problem_extra`` (its stable ``code`` and the values it names), added to the problem body.
"""

from __future__ import annotations

from muster_mesh import (
    IdempotencyConflict,
    IdentityConflict,
    InvalidCursor,
    InvalidRequest,
    MeshAuthError,
    MeshError,
    MessageTooLarge,
    RecipientExpired,
    RecipientNotFound,
)

STATUS: dict[type[Exception], int] = {
    MeshError: 400,
    MeshAuthError: 401,  # TokenRequired, InvalidToken, LeaseExpired
    IdentityConflict: 409,
    RecipientNotFound: 404,
    RecipientExpired: 409,
    IdempotencyConflict: 409,
    InvalidCursor: 422,
    MessageTooLarge: 413,
    InvalidRequest: 422,
}
