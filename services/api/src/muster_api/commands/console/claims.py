"""``muster claims``, ``muster claim PATTERN…``, ``muster release``, ``muster tasks`` and ``muster task
post|claim|done``: path claims and tasks as the checked-in agent (``--as``), shown as inert text."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from muster_api.commands.console import session
from muster_api.commands.console.output import Output
from muster_api.commands.console.text import inert
from muster_api.errors import CommandError
from muster_client import MusterClient
from muster_client.config import service_url


def list_claims(args: argparse.Namespace, out: Output) -> int:
    with MusterClient(args.url) as client:
        found = client.claims(repo=args.repo, agent=args.agent)
    if out.as_json:
        out.json(found)
        return 0
    if not found.claims:
        out.line("no live claims", "dim")
        return 0
    rows = [
        [
            inert(c.repo),
            inert(c.pattern),
            inert(c.holder),
            "exclusive" if c.exclusive else "shared",
            inert(c.reason or ""),
        ]
        for c in found.claims
    ]
    out.table(["repo", "pattern", "holder", "kind", "reason"], rows)
    return 0


def claim(args: argparse.Namespace, out: Output) -> int:
    me = session.load(args.as_agent, service_url(args.url))
    with MusterClient(me.url, token=me.token) as client:
        result = client.claim_paths(
            args.patterns, exclusive=not args.shared, reason=args.reason, repo=args.repo, confirm=True
        )
    if out.as_json:
        out.json(result)
    else:
        for g in result.granted:
            out.line(f"✓ {inert(g.pattern)} held by {inert(me.agent_id)} in {inert(g.repo)}", "bold green")
        for c in result.conflicts:
            out.line(
                f"✗ {inert(c.pattern)}: {inert(c.holder)} holds {inert(c.their_pattern)}: {inert(c.reason or '')}",
                "red",
            )
    return 1 if result.conflicts else 0


def release(args: argparse.Namespace, out: Output) -> int:
    me = session.load(args.as_agent, service_url(args.url))
    with MusterClient(me.url, token=me.token) as client:
        result = client.release_paths(paths=args.patterns or None, repo=args.repo, confirm=True)
    if out.as_json:
        out.json(result)
    else:
        out.line(f"released {len(result.released)} claim(s)", "bold green")
    return 0


def list_tasks(args: argparse.Namespace, out: Output) -> int:
    with MusterClient(args.url) as client:
        found = client.tasks(state=args.state, role=args.role)
    if out.as_json:
        out.json(found)
        return 0
    rows = [
        [t.id[:8], inert(t.title), t.state, inert(t.holder or ""), str(t.attempts), inert(t.poster)]
        for t in found.tasks
    ]
    out.table(["id", "title", "state", "holder", "attempts", "poster"], rows)
    return 0


def task(args: argparse.Namespace, out: Output) -> int:
    me = session.load(args.as_agent, service_url(args.url))
    with MusterClient(me.url, token=me.token) as client:
        if args.task_command == "post":
            answer = client.task_post(
                args.title, args.body, to=args.to, role=args.role, repo=args.repo, cap=args.cap, confirm=True
            )
        elif args.task_command == "claim":
            answer = client.task_claim(role=args.role, repo=args.repo, cap=args.cap, confirm=True)
        else:
            answer = client.task_update(args.task_id, "done", token=args.token, text=args.result, confirm=True)
    if out.as_json:
        out.json(answer)
        return 0
    if answer.task is None:
        raise CommandError("no open task is addressed to you")
    t = answer.task
    out.line(f"✓ task {t.id} {inert(t.title)!r}: {t.state} (token {t.token})", "bold green")
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    acting: argparse.ArgumentParser,
    wrap: Callable[[Callable[[argparse.Namespace, Output], int]], Callable[[argparse.Namespace], int]],
) -> None:
    """Add the commands; ``wrap`` is the commands' one error handling (``commands.guarded``)."""
    p = sub.add_parser("claims", parents=[common], help="the live path claims")
    p.add_argument("--repo")
    p.add_argument("--agent")
    p.set_defaults(fn=wrap(list_claims))
    p = sub.add_parser("claim", parents=[common, acting], help="claim paths (gitignore globs) while your lease lives")
    p.add_argument("patterns", nargs="+", metavar="PATTERN")
    p.add_argument("--shared", action="store_true", help="a shared claim (conflicts only with exclusive ones)")
    p.add_argument("--reason")
    p.add_argument("--repo", help="default: the repo you checked in with")
    p.set_defaults(fn=wrap(claim))
    p = sub.add_parser("release", parents=[common, acting], help="release your claims (all when no PATTERN)")
    p.add_argument("patterns", nargs="*", metavar="PATTERN")
    p.add_argument("--repo")
    p.set_defaults(fn=wrap(release))
    p = sub.add_parser("tasks", parents=[common], help="the mesh's tasks")
    p.add_argument("--state", choices=["open", "claimed", "done", "failed"])
    p.add_argument("--role")
    p.set_defaults(fn=wrap(list_tasks))
    p = sub.add_parser("task", help="post, claim or finish a task")
    kinds = p.add_subparsers(dest="task_command", required=True)
    k = kinds.add_parser("post", parents=[common, acting])
    k.add_argument("title")
    k.add_argument("body")
    address = k.add_mutually_exclusive_group(required=True)
    for name in ("--to", "--role", "--repo", "--cap"):
        address.add_argument(name)
    k.set_defaults(fn=wrap(task), to=None, role=None, repo=None, cap=None)
    k = kinds.add_parser("claim", parents=[common, acting])
    for name in ("--role", "--repo", "--cap"):
        k.add_argument(name)
    k.set_defaults(fn=wrap(task))
    k = kinds.add_parser("done", parents=[common, acting])
    k.add_argument("task_id")
    k.add_argument("token", type=int)
    k.add_argument("--result")
    k.set_defaults(fn=wrap(task))
