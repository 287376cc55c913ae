"""The argument parsers of the people's commands, and the one place their failures become one line and a status."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from muster_api.commands.console import a2a, claims, mesh, roster, runs, threads
from muster_api.commands.console.output import Output
from muster_api.commands.console.text import inert
from muster_api.errors import CommandError
from muster_client import ApiError, InvalidRequest, MusterClient, MusterClientError, ServiceUnreachable

Command = Callable[[argparse.Namespace, Output], int]

FAILED = 1
UNREACHABLE = 3
INTERRUPTED = 130
# Session-token problems the service names by code: the way out is the same for each.
SESSION_ENDED = frozenset({"token_required", "invalid_token", "lease_expired", "superseded"})
HELD_BY_ANOTHER = frozenset({"agent_id_in_use", "not_the_holder"})


def explain(exc: ApiError) -> str:
    if isinstance(exc, InvalidRequest) and exc.errors:
        fields = "; ".join(f"{e.get('field', '?')}: {e.get('message', e.get('rule', ''))}" for e in exc.errors)
        return f"invalid input ({fields})"
    if "X-API-Key" in exc.detail:
        return f"{exc.detail}: set MUSTER_API_KEY to one of the service's keys"
    if exc.code in SESSION_ENDED:
        return f"{exc.detail} ({exc.code}): check in again with `muster checkin AGENT_ID`"
    if exc.code in HELD_BY_ANOTHER:
        return f"{exc.detail} ({exc.code}): another session holds that agent id; pick another id or let its lease end"
    return f"{exc.detail} ({exc.code})"


def guarded(command: Command) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        out = Output(as_json=args.json)
        try:
            return command(args, out)
        except KeyboardInterrupt:
            # Ctrl-C is how a watch or a follow ends: that is success.
            return 0 if getattr(args, "watch", False) or getattr(args, "follow", False) else INTERRUPTED
        except CommandError as exc:
            return fail(str(exc), FAILED)
        except ServiceUnreachable as exc:
            return fail(f"{exc}: start it with `make run` (or `muster serve`), or set MUSTER_URL", UNREACHABLE)
        except ApiError as exc:
            return fail(explain(exc), FAILED)
        except MusterClientError as exc:
            return fail(str(exc), FAILED)
        except BrokenPipeError:
            # The reader went away (`| head`): nothing left to say, and nothing more may be written to stdout.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return FAILED

    return run


def fail(message: str, status: int) -> int:
    sys.stderr.write(f"muster: {inert(message)}\n")
    return status


def _agents(args: argparse.Namespace, out: Output) -> int:
    with MusterClient(args.url) as client:
        return roster.run(args, out, client)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the people's commands to the ``muster`` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="answer JSON (one document per line)")
    common.add_argument("--url", help="the service (default MUSTER_URL or http://127.0.0.1:8000)")
    acting = argparse.ArgumentParser(add_help=False)
    acting.add_argument("--as", dest="as_agent", metavar="AGENT_ID", help="act as this agent (default: the last one)")

    p = sub.add_parser("agents", parents=[common], help="the directory of agents, with unread counts")
    for name in ("--repo", "--role", "--cap"):
        p.add_argument(name, help=f"only agents with this {name[2:]}")
    p.add_argument("--all", action="store_true", help="include expired agents")
    p.add_argument("--watch", action="store_true", help="redraw every 2 s until Ctrl-C")
    p.set_defaults(fn=guarded(_agents))

    p = sub.add_parser("checkin", parents=[common], help="check in (or renew) as an agent; its token is kept")
    p.add_argument("agent_id")
    p.add_argument("--role", help="what it does: builder, reviewer…")
    p.add_argument("--repo", help="the repository it works on")
    p.add_argument("--status", help="one line: what it is doing right now")
    p.add_argument("--caps", help="comma-separated, e.g. merge,deploy")
    p.add_argument("--ttl", type=int, help="lease in seconds (60-86400)")
    p.add_argument("--preview", action="store_true", help="show what would change, change nothing")
    p.set_defaults(fn=guarded(mesh.checkin))

    p = sub.add_parser("send", parents=[common, acting], help="send a message (BODY '-' reads stdin)")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to", metavar="AGENT_ID", help="one agent")
    for name in ("--role", "--repo", "--cap"):
        to.add_argument(name, help=f"every live agent with this {name[2:]}")
    p.add_argument("--thread")
    p.add_argument("body")
    p.set_defaults(fn=guarded(mesh.send))

    p = sub.add_parser("inbox", parents=[common, acting], help="read the inbox (--follow: as messages arrive)")
    p.add_argument("--after", type=int, help="messages after this sequence (default: the acknowledged cursor)")
    p.add_argument("--wait", type=float, default=0, metavar="SECONDS", help="long-poll up to this long")
    p.add_argument("--follow", action="store_true", help="stream messages as they arrive until Ctrl-C")
    p.add_argument("--ack", action="store_true", help="acknowledge what was shown")
    p.set_defaults(fn=guarded(mesh.inbox))

    p = sub.add_parser("checkout", parents=[common, acting], help="leave the roster; the stored token is forgotten")
    p.set_defaults(fn=guarded(mesh.checkout))
    claims.register(sub, common, acting, guarded)
    threads.register(sub, common, acting, guarded)

    p = sub.add_parser("run", parents=[common], help="dispatch a turn of work to an agent (PROMPT '-': stdin)")
    p.add_argument("agent")
    p.add_argument("prompt")
    p.add_argument("--workspace", default=runs.DEFAULT_WORKSPACE, help="the workspace to run in (a name)")
    p.add_argument("--follow", action="store_true", help="show its events live, then its usage")
    p.set_defaults(fn=guarded(runs.start_run))

    p = sub.add_parser("runs", parents=[common], help="the latest runs: status, agent, duration, usage, error")
    p.add_argument("--agent")
    p.add_argument("--status", choices=["queued", "running", "completed", "failed", "cancelled", "interrupted"])
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(fn=guarded(runs.list_runs))

    p = sub.add_parser("a2a", help="remote Agent2Agent agents")
    a2a_sub = p.add_subparsers(dest="a2a_command", required=True)
    a2a_sub.add_parser("list", parents=[common], help="agents, status, tools").set_defaults(fn=guarded(a2a.list_agents))
    p = a2a_sub.add_parser("call", parents=[common], help="call a tool and wait for its answer (TASK '-': stdin)")
    p.add_argument("tool")
    p.add_argument("task")
    p.set_defaults(fn=guarded(a2a.call))
