"""muster_client: the typed Python client of the Muster service (httpx and pydantic only).

``MusterClient`` (synchronous) and ``AsyncMusterClient`` cover the mesh, the A2A routes and the dispatch runs; they
answer typed models, raise a service's problem+json as an ``ApiError`` carrying its ``code``, follow SSE streams as
iterators, and read ``MUSTER_URL`` (default http://127.0.0.1:8000) and ``MUSTER_API_KEY`` when not given them.
"""

from muster_client.aio import AsyncMusterClient
from muster_client.client import MusterClient
from muster_client.config import DEFAULT_URL
from muster_client.errors import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    InvalidRequest,
    MusterClientError,
    NotFound,
    PayloadTooLarge,
    ServerError,
    ServiceUnreachable,
    TooManyRequests,
    Unauthorized,
    UnexpectedAnswer,
)
from muster_client.models import (
    A2AAgent,
    A2AAgents,
    A2ACall,
    A2ACallResult,
    A2ACollision,
    A2ATool,
    A2AToolResult,
    AckPreview,
    AckResult,
    AgentList,
    AgentView,
    CheckinPreview,
    CheckinRecord,
    CheckoutPreview,
    CheckoutResult,
    InboxMessage,
    InboxPage,
    Ready,
    SendPreview,
    SendResult,
)

__all__ = [
    "DEFAULT_URL",
    "A2AAgent",
    "A2AAgents",
    "A2ACall",
    "A2ACallResult",
    "A2ACollision",
    "A2ATool",
    "A2AToolResult",
    "AckPreview",
    "AckResult",
    "AgentList",
    "AgentView",
    "ApiError",
    "AsyncMusterClient",
    "BadRequest",
    "CheckinPreview",
    "CheckinRecord",
    "CheckoutPreview",
    "CheckoutResult",
    "Conflict",
    "Forbidden",
    "InboxMessage",
    "InboxPage",
    "InvalidRequest",
    "MusterClient",
    "MusterClientError",
    "NotFound",
    "PayloadTooLarge",
    "Ready",
    "SendPreview",
    "SendResult",
    "ServerError",
    "ServiceUnreachable",
    "TooManyRequests",
    "Unauthorized",
    "UnexpectedAnswer",
]
