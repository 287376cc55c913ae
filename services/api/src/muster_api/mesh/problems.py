"""How errors of muster_mesh map to HTTP statuses; merged into the one table in muster_api.web.problems.

Each error also carries ``problem_extra`` (its stable ``code`` and the values it names), added to the problem body.
401: no usable credentials; 403: someone else's.
"""

from __future__ import annotations

from muster_mesh import (
    AgentNotFound,
    Forbidden,
    IdempotencyConflict,
    InvalidCursor,
    InvalidRequest,
    MeshAuthError,
    MeshError,
    MessageNotFound,
    MessageTooLarge,
    RateLimited,
    RecipientExpired,
    ThreadNotFound,
    TokenGivenOnce,
)
from muster_mesh.tasks import StaleClaim, TaskNotFound

STATUS: dict[type[Exception], int] = {
    MeshError: 400,
    MeshAuthError: 401,  # TokenRequired (and IdentityConflict), InvalidToken (and Superseded), LeaseExpired
    Forbidden: 403,  # NotTheHolder
    AgentNotFound: 404,  # and RecipientNotFound
    MessageNotFound: 404,
    RecipientExpired: 409,
    IdempotencyConflict: 409,
    TokenGivenOnce: 409,
    InvalidCursor: 422,
    MessageTooLarge: 413,
    RateLimited: 429,  # with Retry-After
    InvalidRequest: 422,  # and InvalidAddress
    TaskNotFound: 404,
    ThreadNotFound: 404,
    StaleClaim: 409,
}
