"""Service settings, read from ``MUSTER_*`` environment variables by ``Settings()``.

Nothing here runs at import time: ``create_app(settings)`` receives a ``Settings`` so that one process (a test run)
can build apps on SQLite and on PostgreSQL side by side.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from muster_api.db.url import DEFAULT_DATABASE_URL, normalise_database_url


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MUSTER_", extra="forbid", frozen=True)

    database_url: str = DEFAULT_DATABASE_URL
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    migrate_on_startup: bool = True
    log_level: str = "INFO"
    # Optional guard over the whole API: any of these keys as `X-API-Key` (or bearer, where no agent token is due).
    api_keys: list[SecretStr] = Field(default_factory=list)
    config: Path = Path("muster.toml")

    @field_validator("database_url")
    @classmethod
    def _normalise(cls, value: str) -> str:
        return normalise_database_url(value)
