"""``muster doctor``: what a person runs when something does not work. One row per thing Muster depends on — the
database, each dispatch agent (its sandbox and whether it can start, where it may connect, its CLI at the pin,
where its credentials come from), each remote A2A agent (its card
answers, in which dialect), the paths — each wrong row with the one line that fixes it. A table on a terminal,
``--json`` for scripts; the exit code is 1 when any row is wrong.

The checks are a list (``CHECKS``) of functions from the settings to rows: a new capability adds its function.
Nothing here prints a secret: a credential row names the variable or the file it comes from.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from muster_api.errors import ConfigurationError
from muster_api.settings import Settings

if TYPE_CHECKING:
    from muster_api.dispatch.config import AgentDefinition


@dataclass(frozen=True, slots=True)
class Row:
    check: str  # what was checked: "database", "dispatch claude cli", …
    ok: bool
    detail: str
    fix: str | None = None  # one line, for a wrong row


Check = Callable[[Settings], Awaitable[list[Row]]]


async def database_rows(settings: Settings) -> list[Row]:
    from muster_api.commands.startup import check_database
    from muster_api.db.diagnose import where

    try:
        await check_database(settings, need_head=True)
    except ConfigurationError as exc:
        return [Row("database", False, where(settings.database_url), str(exc))]
    return [Row("database", True, f"{where(settings.database_url)}, migrated to head")]


async def dispatch_rows(settings: Settings) -> list[Row]:
    from muster_api.configfile import read_config
    from muster_api.dispatch.config import CliEntry, credential_state, harness_of, parse_dispatch_agents
    from muster_dispatch import cli_status

    agents = parse_dispatch_agents(await read_config(settings.config))
    rows: list[Row] = []
    problems: dict[str, str | None] = {}
    for name, definition in sorted(agents.definitions.items()):
        if definition.error is not None:
            rows.append(Row(f"dispatch {name}", False, definition.error, f"fix dispatch_agents.{name} in the config"))
            continue
        rows += sandbox_rows(name, definition, problems)
        entry = definition.entry
        if not isinstance(entry, CliEntry):
            rows.append(Row(f"dispatch {name}", True, definition.kind))
            continue
        harness = harness_of(entry)
        status = cli_status(harness)
        pin = harness.bootstrap.version if harness.bootstrap else "none"
        if status.installed:
            rows.append(Row(f"dispatch {name} cli", True, f"{harness.name} {status.version} (pin {pin}) {status.path}"))
        else:
            rows.append(
                Row(
                    f"dispatch {name} cli",
                    False,
                    f"{harness.name} {pin} not installed",
                    f"muster install {entry.harness}",
                )
            )
        source = credential_state(definition, settings.host_home)
        login = harness.credentials(entry.variables).host_login
        if source is not None:
            rows.append(Row(f"dispatch {name} credentials", True, source))
        else:
            fix = login.fix if login is not None else "give the agent its key variable"
            rows.append(Row(f"dispatch {name} credentials", False, f"no login under {settings.host_home}", fix))
    return rows


def sandbox_rows(name: str, definition: AgentDefinition, problems: dict[str, str | None]) -> list[Row]:
    """Where the agent's runs execute, whether that sandbox can start here, and where they may connect."""
    from muster_api.dispatch.config import CliEntry, harness_of
    from muster_dispatch.sandboxes import sandbox_problem

    sandbox, egress = definition.sandbox, definition.egress
    if sandbox is None or egress is None:
        return []
    if sandbox not in problems:
        problems[sandbox] = sandbox_problem(sandbox)  # a bwrap probe: once per sandbox
    problem = problems[sandbox]
    if problem is not None:
        return [Row(f"dispatch {name} sandbox", False, f"{sandbox} cannot start", problem)]
    detail = f"{sandbox}, egress {egress.describe()}"
    entry = definition.entry
    if isinstance(entry, CliEntry) and egress.proxied:
        allowed = egress.allowed(harness_of(entry).endpoints(entry.variables))
        detail += f" ({', '.join(str(endpoint) for endpoint in allowed) or 'nothing'})"
    return [Row(f"dispatch {name} sandbox", True, detail)]


async def a2a_rows(settings: Settings) -> list[Row]:
    from muster_a2a import load_agents
    from muster_api.configfile import load_agents_block

    descriptors = await load_agents_block(settings.config)
    if not list(descriptors):
        return []
    agents = await load_agents(descriptors)
    try:
        rows = []
        for name, status in sorted(agents.status.items()):
            if status.status == "error":
                fix = f"check agents.{name} (its URL, and that the agent serves its card)"
                rows.append(Row(f"a2a {name}", False, status.error or "its card does not answer", fix))
            else:
                rows.append(Row(f"a2a {name}", True, f"card answers, dialect {status.dialect}, {status.endpoint}"))
        return rows
    finally:
        await agents.aclose()


async def path_rows(settings: Settings) -> list[Row]:
    from muster_dispatch.bootstrap import default_cache_dir

    paths = {
        "config": settings.config,
        "workspaces root": settings.dispatch.workspaces_root,
        "dispatch homes": settings.dispatch.homes,
        "cli cache": default_cache_dir(),
        "host home": settings.host_home,
    }
    return [
        Row(f"path {name}", True, str(path) + ("" if path.exists() else " (created on first use)"))
        for name, path in paths.items()
    ]


CHECKS: list[Check] = [database_rows, dispatch_rows, a2a_rows, path_rows]


async def diagnose(settings: Settings, checks: list[Check] | None = None) -> list[Row]:
    rows: list[Row] = []
    for check in checks or CHECKS:
        try:
            rows += await check(settings)
        except Exception as exc:  # a check that cannot run is itself a wrong row, never a traceback
            rows.append(Row(check.__name__.removesuffix("_rows"), False, f"{type(exc).__name__}: {exc}", "see above"))
    return rows


def table(rows: list[Row]) -> str:
    width = max((len(row.check) for row in rows), default=0)
    lines = []
    for row in rows:
        lines.append(f"{'ok ' if row.ok else 'BAD'}  {row.check:<{width}}  {row.detail}")
        if row.fix:
            lines.append(f"     {'':<{width}}  fix: {row.fix}")
    return "\n".join(lines)


def _doctor(args: argparse.Namespace) -> int:
    from muster_api.commands.startup import load_settings

    rows = asyncio.run(diagnose(load_settings()))
    if args.json:
        print(json.dumps({"ok": all(r.ok for r in rows), "rows": [asdict(r) for r in rows]}, indent=2))
    else:
        print(table(rows))
    sys.stdout.flush()
    return 0 if all(row.ok for row in rows) else 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doctor = sub.add_parser("doctor", help="check the database, the agents, their CLIs and logins, and the paths")
    doctor.add_argument("--json", action="store_true", help="rows as JSON, for scripts")
    doctor.set_defaults(fn=_doctor)
