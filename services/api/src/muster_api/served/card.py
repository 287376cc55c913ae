"""The agent card of a served agent: protocol 1.0 interfaces only (JSON-RPC at the base URL, then HTTP+JSON under
``/rest``), exactly the fields the card schema allows; 0.3 clients are answered on the same endpoints by the SDK's
compatibility layer, which a 0.3 entry in the card would only break (its legacy fields fail the 1.0 schema)."""

from __future__ import annotations

from typing import Any

from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill

from muster_a2a._proto import to_dict
from muster_api import __version__
from muster_api.dispatch.config import AgentDefinition, ServedOptions

REST_PATH = "/rest"
PROTOCOL_VERSION = "1.0"
MODES = ["text/plain"]
CARD_FIELDS = (
    "name",
    "description",
    "version",
    "skills",
    "supportedInterfaces",
    "capabilities",
    "defaultInputModes",
    "defaultOutputModes",
)


def _skills(definition: AgentDefinition, options: ServedOptions) -> list[AgentSkill]:
    if options.skills:
        return [AgentSkill(id=s.id, name=s.name, description=s.description, tags=s.tags) for s in options.skills]
    what = f"{definition.kind} agent" + (f" ({definition.harness})" if definition.harness else "")
    return [
        AgentSkill(
            id="turn",
            name=definition.name,
            description=f"One turn of work by the Muster {what}: the message text is its prompt",
            tags=["muster", "dispatch", definition.kind],
        )
    ]


def card_of(definition: AgentDefinition, options: ServedOptions, base: str) -> AgentCard:
    """The card, its interfaces under ``base`` (the served agent's URL as the client reached it)."""
    return AgentCard(
        name=definition.name,
        description=options.description or f"{definition.name}: a Muster dispatch agent ({definition.kind})",
        version=__version__,
        supported_interfaces=[
            AgentInterface(url=base, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION),
            AgentInterface(url=base + REST_PATH, protocol_binding="HTTP+JSON", protocol_version=PROTOCOL_VERSION),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=MODES,
        default_output_modes=MODES,
        skills=_skills(definition, options),
    )


def card_document(card: AgentCard) -> dict[str, Any]:
    document = to_dict(card)
    # proto3 leaves a false out; the card says it, so that a client never has to guess.
    document["capabilities"] = {"streaming": True, "pushNotifications": False}
    return {key: document[key] for key in CARD_FIELDS if key in document}
