"""``muster worker`` (dispatch workers without HTTP) and ``muster install`` (the pinned CLIs), for the CLI.

Outside ``muster_api.dispatch``: start-up checks the whole service's settings (``commands.startup``), which the
capability itself must not depend on."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from typing import Any

log = logging.getLogger("muster.dispatch")

HARNESSES = ("claude", "codex", "opencode", "gemini", "copilot")


def register(sub: Any) -> None:
    worker = sub.add_parser("worker", help="execute dispatch runs from the database (no HTTP)")
    worker.add_argument("--workers", type=int, help="runs executed at once (default MUSTER_DISPATCH_WORKERS or 2)")
    worker.set_defaults(fn=_worker)
    install = sub.add_parser(
        "install", help="install the pinned Claude Code / Codex / OpenCode / Gemini / Copilot CLIs"
    )
    install.add_argument("target", choices=[*HARNESSES, "all"])
    install.add_argument("--json", action="store_true", help="print one JSON result object")
    install.set_defaults(fn=_install)


# -- worker ----------------------------------------------------------------------------------------------------------


async def serve_workers(workers: int | None = None) -> None:
    """Run the dispatch workers (and the lease sweep) until SIGTERM or SIGINT."""
    import gc

    import anyio

    from muster_api.claims_lookup import mesh_claims
    from muster_api.commands.logs import configure
    from muster_api.commands.startup import check_database, load_settings
    from muster_api.db.engine import create_engine
    from muster_api.db.migrate import upgrade
    from muster_api.dispatch.component import running
    from muster_api.mesh.component import running as mesh_running
    from muster_api.runtime import Runtime
    from muster_api.settings import DispatchSettings

    settings = load_settings()
    configure(settings.log_level)
    await check_database(settings, need_head=not settings.migrate_on_startup)
    dispatch_settings = DispatchSettings()
    if workers is not None:
        dispatch_settings = dispatch_settings.model_copy(update={"workers": workers})
    engine = create_engine(settings.database_url)
    try:
        if settings.migrate_on_startup:
            await upgrade(engine)
        runtime = Runtime(settings=settings, engine=engine)
        # The mesh too: the agents that are its members join it while their runs run here, and each turn's changed
        # paths are checked against its claims.
        async with (
            runtime.running(),
            mesh_running(runtime) as mesh,
            running(runtime, dispatch_settings, mesh.mesh, mesh.tasks, mesh_claims(mesh.mesh)) as state,
        ):
            # As ``muster serve`` does once started (app.py): what is alive now lives as long as the process, and a
            # full collection no longer walks it.
            gc.freeze()
            log.info("muster worker %s: %d worker(s) ready", state.instance, dispatch_settings.workers)
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for received in signals:
                    log.info("muster worker %s: %s, stopping", state.instance, signal.Signals(received).name)
                    break
    finally:
        await engine.dispose()


def _worker(args: argparse.Namespace) -> int:
    if args.workers is not None and not 1 <= args.workers <= 64:
        print("muster: --workers is a number from 1 to 64", file=sys.stderr)
        return 2
    import anyio

    from muster_api.commands.eventloop import loop_options

    anyio.run(serve_workers, args.workers, backend_options=loop_options())
    return 0


# -- install ---------------------------------------------------------------------------------------------------------


def install_one(name: str) -> dict[str, Any]:
    from muster_dispatch import DispatchError, cli_status, ensure_cli
    from muster_dispatch.bootstrap import known_harnesses

    harness = known_harnesses()[name]
    started = time.monotonic()
    try:
        path = ensure_cli(harness)
    except DispatchError as exc:
        reason = exc.message.splitlines()[0] if exc.message else exc.code
        return {"harness": name, "ok": False, "error": reason}
    except OSError as exc:  # the cache directory cannot be made or written
        return {"harness": name, "ok": False, "error": f"cannot write the CLI cache: {exc.strerror or exc}"}
    status = cli_status(harness)
    seconds = round(time.monotonic() - started, 1)
    return {"harness": name, "ok": True, "version": status.version, "path": str(path), "seconds": seconds}


def _install(args: argparse.Namespace) -> int:
    names = list(HARNESSES) if args.target == "all" else [args.target]
    results: list[dict[str, Any]] = []
    if args.json:
        results = [install_one(name) for name in names]
        print(json.dumps({"ok": all(r["ok"] for r in results), "installed": results}))
    elif sys.stdout.isatty():
        results = _install_with_progress(names)
    else:
        for name in names:
            print(f"installing {name}…", flush=True)
            result = install_one(name)
            results.append(result)
            print(_line(result), flush=True)
    failed = [r for r in results if not r["ok"]]
    if failed and not args.json:
        print(f"muster: {failed[0]['harness']}: {failed[0]['error']}", file=sys.stderr)
    return 1 if failed else 0


def _line(result: dict[str, Any]) -> str:
    if result["ok"]:
        return f"{result['harness']} {result['version']} ready at {result['path']} ({result['seconds']} s)"
    return f"{result['harness']} failed: {result['error']}"


def _install_with_progress(names: list[str]) -> list[dict[str, Any]]:
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console()
    results: list[dict[str, Any]] = []
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as bar:
        for name in names:
            task = bar.add_task(f"installing {name}", total=1)
            result = install_one(name)
            results.append(result)
            bar.update(task, completed=1, description=_line(result))
    return results
