"""``MUSTER_DISPATCH_*`` settings (and ``MUSTER_WORKSPACES_ROOT``), read when the capability starts, never at import."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class DispatchSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MUSTER_DISPATCH_", extra="ignore", frozen=True, populate_by_name=True)

    # Runs executed at once by this process (`muster serve` and `muster worker`); 0: this instance only serves.
    workers: int = Field(default=2, ge=0, le=64)
    # How long a run stays held without a renewal before another process calls it interrupted.
    lease_seconds: float = Field(default=30.0, gt=0, le=3600)
    # Private homes of the CLIs (one per workspace): warm resumes find their sessions here.
    homes: Path = Path("var/dispatch/homes")
    workspaces_root: Path = Field(
        default=Path("var/workspaces"), validation_alias=AliasChoices("MUSTER_WORKSPACES_ROOT", "workspaces_root")
    )

    @property
    def renew_every(self) -> float:
        # A third of the lease: one missed renewal (a slow database) does not lose the run.
        return self.lease_seconds / 3
