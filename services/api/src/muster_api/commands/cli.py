"""The ``muster`` command: serve, migrate, version, mcp, worker, install; the people's commands live in
``muster_api.commands.console``."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

from muster_api import __version__


def _port(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port from 1 to 65535")
    return int(value)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from muster_api.commands.startup import check_bind, check_config, check_database, load_settings

    settings = load_settings()
    host = args.host or settings.host
    port = args.port or settings.port
    check_bind(settings, host)
    # The app reads its settings from the environment (the factory below): it must see where it serves, which is
    # where the MCP servers of its dispatched agents reach it.
    os.environ["MUSTER_HOST"], os.environ["MUSTER_PORT"] = host, str(port)
    asyncio.run(check_config(settings))
    asyncio.run(check_database(settings, need_head=not settings.migrate_on_startup))
    uvicorn.run(
        "muster_api.app:app_from_env",
        factory=True,
        host=host,
        port=port,
        reload=args.reload,
        log_level=settings.log_level.lower(),
        access_log=False,  # our Edge middleware writes one line per request
    )
    return 0


def _migrate(_args: argparse.Namespace) -> int:
    from muster_api.commands.startup import check_database, load_settings
    from muster_api.db.engine import create_engine
    from muster_api.db.migrate import current_revision, upgrade

    settings = load_settings()

    async def run() -> str | None:
        await check_database(settings, need_head=False)
        engine = create_engine(settings.database_url)
        try:
            await upgrade(engine)
            return await current_revision(engine)
        finally:
            await engine.dispose()

    print(f"database at revision {asyncio.run(run())}")
    return 0


def _version(_args: argparse.Namespace) -> int:
    print(f"muster {__version__}")
    return 0


def _register_all(sub: Any) -> None:
    from muster_api.commands.console import register as register_console

    register_console(sub)

    from muster_api.commands import dispatch_commands, guard, hooks, sandbox

    hooks.register(sub)
    guard.register(sub)

    dispatch_commands.register(sub)
    sandbox.register(sub)
    from muster_api.commands import doctor

    doctor.register(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="muster", description="Muster agent runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the API (uvicorn)")
    serve.add_argument("--host", help="bind address (default MUSTER_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=_port, help="port (default MUSTER_PORT or 8000)")
    serve.add_argument("--reload", action="store_true", help="restart on code changes (development)")
    serve.set_defaults(fn=_serve)
    sub.add_parser("migrate", help="apply migrations up to head").set_defaults(fn=_migrate)
    sub.add_parser("version", help="print the version").set_defaults(fn=_version)
    from muster_api.mcp.command import add_parser as add_mcp

    add_mcp(sub)
    # `muster mcp` is started by every dispatched CLI of a mesh member, which waits for its answer before its first
    # model request: it loads none of the other commands (the console's and the doctor's imports were about half a
    # second of its start).
    if list(sys.argv[1:] if argv is None else argv)[:1] != ["mcp"]:
        _register_all(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args))
    except Exception as exc:
        from muster_api.errors import MusterApiError

        if isinstance(exc, MusterApiError):
            print(f"muster: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
