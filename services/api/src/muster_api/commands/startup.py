"""What ``muster serve`` and ``muster migrate`` check before they start: settings, the bind address and the database.

A setting or a database that cannot work is a ``ConfigurationError`` whose message is one line naming it and what to
do; the CLI prints it and exits with code 2 (never a traceback). The checks run before uvicorn starts because a
failure inside the app's lifespan can only be reported by uvicorn, as a traceback. The database modules are imported
only by the check that needs them: a bad setting is reported before seconds of imports.
"""

from __future__ import annotations

import ipaddress
import re

from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsError

from muster_api.errors import ConfigurationError
from muster_api.settings import Settings

CONNECT_TIMEOUT_SECONDS = 10.0
_FIELD = re.compile(r'field "([a-z_]+)"')
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


def env_name(field: str, prefix: str = "MUSTER_") -> str:
    return f"{prefix}{field.upper()}"


def load_settings() -> Settings:
    """``Settings()`` from the environment; a bad value is a one-line ``ConfigurationError`` naming its variable (the
    value itself is never repeated: it may be a key)."""
    try:
        return Settings()
    except ValidationError as exc:
        raise ConfigurationError(describe_validation(exc)) from None
    except SettingsError as exc:
        found = _FIELD.search(str(exc))
        name = env_name(found.group(1)) if found else "a MUSTER_ setting"
        raise ConfigurationError(
            f'{name} is not valid JSON: a list is written as a JSON array, e.g. {name}=\'["first", "second"]\''
        ) from None
    except ConfigurationError as exc:
        # The one validator that raises it directly is the database URL's.
        raise ConfigurationError(f"MUSTER_DATABASE_URL: {exc}") from None


def _prefix(title: str) -> str:
    """The environment prefix of the settings class a validation error is about (a nested section has its own)."""
    for field in Settings.model_fields.values():
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseSettings) and section.__name__ == title:
            return str(section.model_config.get("env_prefix") or "MUSTER_")
    return "MUSTER_"


def describe_validation(exc: ValidationError) -> str:
    prefix = _prefix(exc.title)
    parts = []
    for error in exc.errors():
        loc = [str(p) for p in error.get("loc", ())]
        name = env_name(loc[0], prefix) if loc else "a setting"
        parts.append(f"{name}: {error.get('msg', 'invalid')}")
    return "; ".join(parts)


def is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings, host: str) -> None:
    if is_loopback(host) or settings.api_keys or settings.allow_open_bind:
        return
    raise ConfigurationError(
        f"binding {host} serves beyond this machine without MUSTER_API_KEYS: anyone who reaches it could act as any "
        "agent. Set MUSTER_API_KEYS, or MUSTER_ALLOW_OPEN_BIND=true if the network (or a proxy in front) is trusted"
    )


async def check_database(settings: Settings, *, need_head: bool) -> None:
    """The database answers (and, when ``need_head``, is migrated to this version's head)."""
    import anyio
    from sqlalchemy import text

    from muster_api.db.diagnose import describe_database_error, where
    from muster_api.db.engine import create_engine
    from muster_api.db.migrate import current_revision, head_revision

    engine = create_engine(settings.database_url)
    try:
        with anyio.fail_after(CONNECT_TIMEOUT_SECONDS):
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
            current = await current_revision(engine) if need_head else None
    except Exception as exc:  # whatever the driver raised, the answer is one line saying what to do
        raise ConfigurationError(describe_database_error(exc, settings.database_url)) from None
    finally:
        await engine.dispose()
    if need_head and current != head_revision():
        state = "has no Muster schema (never migrated)" if current is None else f"is at revision {current}"
        raise ConfigurationError(
            f"the database {where(settings.database_url)} {state}; this version needs {head_revision()}: run "
            "`muster migrate` (MUSTER_MIGRATE_ON_STARTUP is false, so serve does not migrate by itself)"
        )


async def check_config(settings: Settings) -> None:
    """The config file (``MUSTER_CONFIG``) exists when named, parses, and its ``agents`` and ``notify`` blocks are
    well formed."""
    from muster_a2a import AgentConfigError
    from muster_api.configfile import load_agents_block, read_config
    from muster_api.notify.config import parse_notify

    try:
        await load_agents_block(settings.config)
        parse_notify(await read_config(settings.config))
    except (AgentConfigError, ConfigurationError) as exc:
        raise ConfigurationError(f"MUSTER_CONFIG: {exc}") from None
