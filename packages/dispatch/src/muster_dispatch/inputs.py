"""What a turn is asked to do: the prompt, the conversation to continue (or fork), and live input."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Continuation:
    conversation: str
    fork: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.conversation, str) or not self.conversation.strip():
            raise ValueError("continuation.conversation must be a non-empty conversation id")


@dataclass(frozen=True, slots=True)
class AgentInput:
    prompt: str
    continuation: Continuation | None = None
    live_input: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str):
            raise TypeError("prompt must be a string")
