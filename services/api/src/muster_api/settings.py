"""Service settings, read from ``MUSTER_*`` environment variables by ``Settings()``: everything ``create_app``
needs, in one place, with a section per capability (``MUSTER_MESH_*``, ``MUSTER_A2A_*``, ``MUSTER_DISPATCH_*``).

Nothing here runs at import time: ``create_app(settings)`` receives a ``Settings`` so that one process (a test run)
can build apps on SQLite and on PostgreSQL side by side, each with its own limits and periods.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, AliasChoices, BeforeValidator, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from muster_a2a import DEFAULT_LEASE
from muster_api.db.url import DEFAULT_DATABASE_URL, absolute_sqlite_url, normalise_database_url
from muster_mesh import MAX_WAIT_SECONDS, MeshLimits

LogLevel = Literal["CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"]


def _upper(value: object) -> object:
    return value.upper() if isinstance(value, str) else value


def absolute(path: Path) -> Path:
    """A path setting made absolute once, when settings are read, against the directory the process started in: a
    CLI runs in its workspace, where a relative home or cache would point somewhere else."""
    return path.expanduser().absolute()


AbsolutePath = Annotated[Path, AfterValidator(absolute)]


class MeshSettings(BaseSettings):
    """``MUSTER_MESH_*``: the mesh's limits and its sweeper's period."""

    model_config = SettingsConfigDict(env_prefix="MUSTER_MESH_", extra="ignore", frozen=True)

    max_message_bytes: int = Field(default=64 * 1024, ge=1, le=512 * 1024)
    max_wait_seconds: float = Field(default=MAX_WAIT_SECONDS, gt=0, le=MAX_WAIT_SECONDS)
    read_retention_hours: float = Field(default=7 * 24, gt=0)
    expired_agent_retention_hours: float = Field(default=7 * 24, gt=0)
    sweep_seconds: float = Field(default=300.0, gt=0)
    fanout_per_minute: int = Field(default=60, ge=1, le=100_000)
    task_max_attempts: int = Field(
        default=3, ge=1, le=100, description="Claims of a task whose holder's lease ended before it fails."
    )

    def limits(self) -> MeshLimits:
        return MeshLimits(
            max_message_bytes=self.max_message_bytes,
            max_wait_seconds=self.max_wait_seconds,
            read_retention=timedelta(hours=self.read_retention_hours),
            expired_agent_retention=timedelta(hours=self.expired_agent_retention_hours),
            fanout_per_minute=self.fanout_per_minute,
        )


class A2ASettings(BaseSettings):
    """``MUSTER_A2A_*``: how long an instance holds a remote call it follows, and how often it renews its holds and
    scans for calls nobody holds any more. The periods are real seconds (sleeps), while lease expiries come from the
    injected clock; by default a third of the lease, so that one missed renewal (a slow database) loses no call."""

    model_config = SettingsConfigDict(env_prefix="MUSTER_A2A_", extra="ignore", frozen=True)

    lease_seconds: float = Field(default=DEFAULT_LEASE.total_seconds(), gt=0)
    renew_seconds: float | None = Field(default=None, gt=0)
    scan_seconds: float | None = Field(default=None, gt=0)
    # The cards of the agents Muster serves (/a2a/serve/{name}/.well-known/agent-card.json) readable without an API
    # key: they say what an agent does and where, never a credential; the operations stay keyed.
    serve_public_cards: bool = False

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.lease_seconds)

    @property
    def renew_every(self) -> float:
        return self.renew_seconds if self.renew_seconds is not None else self.lease_seconds / 3

    @property
    def scan_every(self) -> float:
        return self.scan_seconds if self.scan_seconds is not None else self.lease_seconds / 3


class DispatchSettings(BaseSettings):
    """``MUSTER_DISPATCH_*`` (and ``MUSTER_WORKSPACES_ROOT``): workers, the run lease, where homes and workspaces
    live."""

    model_config = SettingsConfigDict(env_prefix="MUSTER_DISPATCH_", extra="ignore", frozen=True, populate_by_name=True)

    # Runs executed at once by this process (`muster serve` and `muster worker`); 0: this instance only serves.
    workers: int = Field(default=2, ge=0, le=64)
    # How long a run stays held without a renewal before another process calls it interrupted.
    lease_seconds: float = Field(default=30.0, gt=0, le=3600)
    # Private homes of the CLIs (one per workspace): warm resumes find their sessions here.
    homes: AbsolutePath = Field(default=Path("var/dispatch/homes"), validate_default=True)
    workspaces_root: AbsolutePath = Field(
        default=Path("var/workspaces"),
        validation_alias=AliasChoices("MUSTER_WORKSPACES_ROOT", "workspaces_root"),
        validate_default=True,
    )

    # Where the MCP server of a dispatched mesh member reaches the service; unset: this instance's own host and port.
    service_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")

    @property
    def renew_every(self) -> float:
        # A third of the lease: one missed renewal (a slow database) does not lose the run.
        return self.lease_seconds / 3


class NotifySettings(BaseSettings):
    """``MUSTER_NOTIFY_*``: how the sender of notifications ([notify] in the config file) paces itself. The periods
    are real seconds (sleeps); due times and lookbacks come from the injected clock."""

    model_config = SettingsConfigDict(env_prefix="MUSTER_NOTIFY_", extra="ignore", frozen=True)

    # How often the stores are scanned for new events (and the outbox for due deliveries).
    scan_seconds: float = Field(default=2.0, gt=0, le=3600)
    # A person's messages within this long of the first are one notification.
    coalesce_seconds: float = Field(default=2.0, ge=0, le=3600)
    # One attempt's bound: Apprise's connect and read timeouts, and how long the sender waits for its thread.
    timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    max_attempts: int = Field(default=5, ge=1, le=50)
    # The wait before attempt n + 1 is backoff_seconds * 2**(n - 1) (capped, with jitter).
    backoff_seconds: float = Field(default=2.0, ge=0, le=3600)
    backoff_max_seconds: float = Field(default=600.0, ge=0, le=86400)
    # How far back a scan looks for failed runs and tasks and lapsed leases (a restart within it misses none).
    lookback_seconds: float = Field(default=3600.0, gt=0, le=7 * 86400)
    retention_hours: float = Field(default=7 * 24, gt=0)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MUSTER_", extra="forbid", frozen=True)

    database_url: str = Field(default=DEFAULT_DATABASE_URL, validate_default=True)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    migrate_on_startup: bool = True
    # Off: the hot mesh and run routes are found and answered by FastAPI's own router and handler (web/leanroute.py).
    lean_routes: bool = True
    log_level: Annotated[LogLevel, BeforeValidator(_upper)] = "INFO"
    # Optional guard over the whole API: every request must carry one of these keys in `X-API-Key`.
    api_keys: list[SecretStr] = Field(default_factory=list)
    # Serving beyond loopback without api_keys exposes every agent's identity to the network: `muster serve` refuses
    # it unless this says the operator means it (a trusted network, or a proxy that authenticates).
    allow_open_bind: bool = False
    config: AbsolutePath = Field(default=Path("muster.toml"), validate_default=True)
    # Where the users' own CLI logins are read from (``~/.claude``, ``~/.codex``); tests point it at a fake home.
    host_home: AbsolutePath = Field(default_factory=Path.home, validate_default=True)
    mesh: MeshSettings = Field(default_factory=MeshSettings)
    a2a: A2ASettings = Field(default_factory=A2ASettings)
    dispatch: DispatchSettings = Field(default_factory=DispatchSettings)
    notify: NotifySettings = Field(default_factory=NotifySettings)

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
        return absolute_sqlite_url(normalise_database_url(value))
