"""Service settings, read from ``MUSTER_*`` environment variables by ``Settings()``.

Nothing here runs at import time: ``create_app(settings)`` receives a ``Settings`` so that one process (a test run)
can build apps on SQLite and on PostgreSQL side by side.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from muster_api.db.url import DEFAULT_DATABASE_URL, normalise_database_url

LogLevel = Literal["CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"]


def _upper(value: object) -> object:
    return value.upper() if isinstance(value, str) else value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MUSTER_", extra="forbid", frozen=True)

    database_url: str = DEFAULT_DATABASE_URL
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    migrate_on_startup: bool = True
    log_level: Annotated[LogLevel, BeforeValidator(_upper)] = "INFO"
    # Optional guard over the whole API: any of these keys as `X-API-Key` (or bearer, where no agent token is due).
    api_keys: list[SecretStr] = Field(default_factory=list)
    # Serving beyond loopback without api_keys exposes every agent's identity to the network: `muster serve` refuses
    # it unless this says the operator means it (a trusted network, or a proxy that authenticates).
    allow_open_bind: bool = False
    config: Path = Path("muster.toml")

    @field_validator("api_keys")
    @classmethod
    def _keys_have_content(cls, keys: list[SecretStr]) -> list[SecretStr]:
        for i, key in enumerate(keys):
            value = key.get_secret_value()
            if not value.strip():
                raise ValueError(f"key {i} is empty or only whitespace: it would let anyone in")
            if value != value.strip():
                raise ValueError(f"key {i} has leading or trailing whitespace: no header could present it")
        return keys

    @field_validator("database_url")
    @classmethod
    def _normalise(cls, value: str) -> str:
        return normalise_database_url(value)
