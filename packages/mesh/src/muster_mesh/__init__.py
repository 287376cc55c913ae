"""muster_mesh: a roster of agent sessions with presence leases, durable per-recipient inboxes and wake-ups.

``Mesh`` holds every rule; a ``MeshStore`` keeps rows (``InMemoryMeshStore`` here, SQL in the service); a
``Notifier`` wakes long-polls; ``PaneWaker`` wakes a Herdr pane locally.
"""

from muster_mesh.errors import (
    IdempotencyConflict,
    IdentityConflict,
    InvalidCursor,
    InvalidRequest,
    InvalidToken,
    LeaseExpired,
    MeshAuthError,
    MeshError,
    MessageTooLarge,
    RecipientExpired,
    RecipientNotFound,
    TokenRequired,
)
from muster_mesh.memory import InMemoryMeshStore
from muster_mesh.mesh import Mesh, MeshLimits, default_ttl
from muster_mesh.models import (
    AckRequest,
    AckResult,
    Address,
    AgentList,
    AgentView,
    CheckinRequest,
    CheckinResult,
    InboxMessage,
    InboxPage,
    SendRequest,
    SendResult,
)
from muster_mesh.notify import LocalNotifier
from muster_mesh.records import AgentRecord, IdempotencyRecord, InboxEntry, MessageRecord, SweepPolicy, SweepReport
from muster_mesh.store import MeshStore, MeshTx, Notifier, Subscription
from muster_mesh.wake import PaneWaker, pane_from_env, wake_text

__all__ = [
    "AckRequest",
    "AckResult",
    "Address",
    "AgentList",
    "AgentRecord",
    "AgentView",
    "CheckinRequest",
    "CheckinResult",
    "IdempotencyConflict",
    "IdempotencyRecord",
    "IdentityConflict",
    "InMemoryMeshStore",
    "InboxEntry",
    "InboxMessage",
    "InboxPage",
    "InvalidCursor",
    "InvalidRequest",
    "InvalidToken",
    "LeaseExpired",
    "LocalNotifier",
    "Mesh",
    "MeshAuthError",
    "MeshError",
    "MeshLimits",
    "MeshStore",
    "MeshTx",
    "MessageRecord",
    "MessageTooLarge",
    "Notifier",
    "PaneWaker",
    "RecipientExpired",
    "RecipientNotFound",
    "SendRequest",
    "SendResult",
    "Subscription",
    "SweepPolicy",
    "SweepReport",
    "TokenRequired",
    "default_ttl",
    "pane_from_env",
    "wake_text",
]
