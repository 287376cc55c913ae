"""Typed doorways into protobuf's untyped helpers (the generated a2a types carry no annotations for them)."""

from __future__ import annotations

from typing import Any, cast

from google.protobuf import json_format

_to_dict: Any = json_format.MessageToDict


def to_dict(message: object) -> dict[str, Any]:
    return cast(dict[str, Any], _to_dict(message))


def which(message: object, oneof: str) -> str | None:
    return cast(str | None, cast(Any, message).WhichOneof(oneof))


def has(message: object, name: str) -> bool:
    return bool(cast(Any, message).HasField(name))


def copy_from(target: object, source: object) -> None:
    cast(Any, target).CopyFrom(source)


def state_enum_name(value: int) -> str | None:
    from a2a.types import TaskState

    enum: Any = TaskState
    return cast(str, enum.Name(value)) if value in enum.values() else None
