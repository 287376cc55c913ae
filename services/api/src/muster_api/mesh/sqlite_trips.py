"""Whole mesh transactions run as one call on aiosqlite's thread: BEGIN IMMEDIATE, the statements and COMMIT (or
ROLLBACK) in one trip there and back, where running them one by one takes a trip each.

A trip is two thread switches (the event loop queues the call, the driver's thread answers through the loop's
self-pipe); on a busy machine each switch may wait for a core, and a send made of six trips met that wait six times.
The statements are SQLAlchemy's own compilation of the core's (``DriverStatement``), so both paths run the same text.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from muster_api.db.sqlite_driver import in_transaction
from muster_api.mesh.claims_store import OTHERS_EXCLUSIVE
from muster_api.mesh.sqlite_driver import DriverStatement
from muster_api.mesh.store import (
    BUMP_ONE,
    INBOX_ENTRY,
    INSERT_INBOX,
    INSERT_MESSAGE,
    READ_INBOX,
    RENEW_BY_TOKEN,
    mark_statement,
)
from muster_api.mesh.tables import agents
from muster_api.mesh.tasks_store import ADD_EVENT_SQLITE, CLAIM_SQLITE, FAIL_EXHAUSTED_SQLITE, TASK_COLUMNS
from muster_mesh.records import READ
from muster_mesh.tasks import CLAIMED_NOTE, TOKEN_NOTE

T = TypeVar("T")

_RENEW = DriverStatement(RENEW_BY_TOKEN)
_BUMP_ONE = DriverStatement(BUMP_ONE)
_INSERT_MESSAGE = DriverStatement(INSERT_MESSAGE)
_INSERT_INBOX = DriverStatement(INSERT_INBOX, INBOX_ENTRY)
_READ_INBOX = DriverStatement(READ_INBOX)
_MARK_READ = DriverStatement(mark_statement(frozenset({READ})))
_OTHERS_EXCLUSIVE = DriverStatement(OTHERS_EXCLUSIVE)
_AGENT_ID = _RENEW.names.index(agents.c.agent_id.name)
# ``ClaimRecord``'s fields, in order: a check builds its records from the rows' tuples as they come.
CLAIM_COLUMNS = ("claim_id", "repo", "holder", "pattern", "exclusive", "reason", "since")
assert _OTHERS_EXCLUSIVE.names == CLAIM_COLUMNS, _OTHERS_EXCLUSIVE.names


def renew_and_deliver(
    renew: Mapping[str, Any], to: str, live_at: str, message: Mapping[str, Any]
) -> Callable[[sqlite3.Connection], tuple[str, int, bool] | None]:
    """The sender's renewal (``RENEW_BY_TOKEN``), the live recipient's next sequence, the message and its inbox entry,
    in one transaction. Answers (sender, sequence); None, and nothing written, when the sender's token or TTL or the
    recipient's lease does not qualify. The answer also says whether a reader follows the recipient's inbox."""

    def body(conn: sqlite3.Connection) -> tuple[str, int, bool] | None:
        renewed = _RENEW.run(conn, renew)
        if not renewed:
            return None
        bumped = _BUMP_ONE.run(conn, {"p_id": to, "p_now": live_at})
        if not bumped:
            return None
        sender, seq, until = str(renewed[0][_AGENT_ID]), int(bumped[0][1]), bumped[0][2]
        _INSERT_MESSAGE.run(conn, {**message, "sender": sender})
        _INSERT_INBOX.run(conn, {"recipient": to, "seq": seq, "message_id": message["message_id"]})
        # Both the stored text of UTCDateTime, which sorts as the times do.
        return sender, seq, until is not None and until > live_at

    return lambda conn: in_transaction(conn, body)


def renew_and_read(
    renew: Mapping[str, Any], after: int | None, limit: int, shown: int
) -> Callable[[sqlite3.Connection], tuple[dict[str, Any], list[Any]] | None]:
    """The reader's renewal and up to ``limit`` inbox rows after ``after`` (None: after its read cursor, otherwise
    after ``max(after, floor_seq)``), the first ``shown`` of them recorded as read, in one transaction. Answers the
    renewed agent row and the entry rows; None, and nothing written, when the token or TTL does not qualify or
    ``after`` lies beyond the inbox's last sequence."""

    def body(conn: sqlite3.Connection) -> tuple[dict[str, Any], list[Any]] | None:
        renewed = _RENEW.run(conn, renew)
        if not renewed:
            return None
        agent = dict(zip(_RENEW.names, renewed[0], strict=True))
        if after is not None and after > agent["last_seq"]:
            return None
        start = agent["read_cursor"] if after is None else max(after, agent["floor_seq"])
        rows = _READ_INBOX.run(conn, {"p_id": agent["agent_id"], "p_after": start, "p_limit": limit})
        if shown and rows:
            through = rows[min(shown, len(rows)) - 1][0]
            marked = {"p_id": agent["agent_id"], "p_after": start, "p_through": through, "p_now": renew["p_now"]}
            _MARK_READ.run(conn, marked)
        return agent, rows

    return lambda conn: in_transaction(conn, body)


def renew_and_claims(renew: Mapping[str, Any], repo: str) -> Callable[[sqlite3.Connection], list[Any] | None]:
    """The caller's renewal and the live exclusive claims of ``repo`` held by others (``OTHERS_EXCLUSIVE``), in one
    transaction. Answers the claims' rows, their columns in ``CLAIM_COLUMNS``' order; None, and nothing written,
    when the token or TTL does not qualify."""

    def body(conn: sqlite3.Connection) -> list[Any] | None:
        renewed = _RENEW.run(conn, renew)
        if not renewed:
            return None
        params = {"p_now": renew["p_now"], "p_repo": repo, "p_me": renewed[0][_AGENT_ID]}
        return _OTHERS_EXCLUSIVE.run(conn, params)

    return lambda conn: in_transaction(conn, body)


def claim_task(
    renew: Mapping[str, Any], claim: Mapping[str, Any], message_id: str
) -> Callable[[sqlite3.Connection], tuple[str, dict[str, Any] | None, int | None] | None]:
    """The caller's renewal, the failing of its exhausted lapsed tasks, the claim of its next task, the claim's
    history row and the message to a live poster in the task's thread, in one transaction (``claim``: the attempts
    cap, the reason, the filters and now, as ``FAIL_EXHAUSTED_SQLITE`` and ``CLAIM_SQLITE`` name them). Answers
    (caller, the claimed task's row or None, the poster's sequence or None); None, and nothing written, when the
    token or TTL does not qualify."""

    def body(conn: sqlite3.Connection) -> tuple[str, dict[str, Any] | None, int | None] | None:
        renewed = _RENEW.run(conn, renew)
        if not renewed:
            return None
        agent = dict(zip(_RENEW.names, renewed[0], strict=True))
        me = str(agent["agent_id"])
        params = {**claim, "p_me": me, "p_role": agent["role"], "p_repo": agent["repo"], "p_caps": agent["caps"]}
        conn.execute(FAIL_EXHAUSTED_SQLITE, params)
        claimed = conn.execute(CLAIM_SQLITE, params).fetchall()
        if not claimed:
            return me, None, None
        task = dict(zip(TASK_COLUMNS, claimed[0], strict=True))
        now = claim["p_now"]
        event = {"task_id": task["task_id"], "at": now, "kind": "claimed", "agent": me}
        conn.execute(ADD_EVENT_SQLITE, {**event, "note": f"{TOKEN_NOTE}{task['fence']}"})
        bumped = _BUMP_ONE.run(conn, {"p_id": task["poster"], "p_now": now})
        if not bumped:
            return me, task, None
        seq = int(bumped[0][1])
        message = {
            "message_id": message_id,
            "sender": me,
            "body": CLAIMED_NOTE + task["title"],
            "thread_id": f"task:{task['task_id']}",
            "sent_at": now,
        }
        _INSERT_MESSAGE.run(conn, message)
        _INSERT_INBOX.run(conn, {"recipient": task["poster"], "seq": seq, "message_id": message_id})
        return me, task, seq

    return lambda conn: in_transaction(conn, body)


class Busy(Exception):
    """Another connection holds the database's write lock: the call did not run (``on_this_thread``)."""


def on_this_thread(conn: sqlite3.Connection, call: Callable[[sqlite3.Connection], T], busy_ms: int, backstop: int) -> T:
    """``call`` on the calling thread (the event loop's) where it may not wait: no busy handler (a write lock held
    elsewhere raises ``Busy`` at once, and nothing ran) and no automatic checkpoint at its commit (a checkpoint syncs
    both files). The connection's ``busy_ms`` and ``backstop`` are set back after it."""
    conn.execute("PRAGMA busy_timeout=0")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    try:
        return call(conn)
    except sqlite3.OperationalError as error:
        if getattr(error, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY:
            raise Busy from error
        raise
    finally:
        conn.execute(f"PRAGMA wal_autocheckpoint={backstop}")
        conn.execute(f"PRAGMA busy_timeout={busy_ms}")


def one_statement(stmt: DriverStatement, params: Mapping[str, Any]) -> Callable[[sqlite3.Connection], bool | None]:
    """One statement (receipts, a follower's wait) in a transaction of its own."""

    def body(conn: sqlite3.Connection) -> bool:
        stmt.run(conn, params)
        return True

    return lambda conn: in_transaction(conn, body)


__all__ = [
    "Busy",
    "claim_task",
    "on_this_thread",
    "one_statement",
    "renew_and_claims",
    "renew_and_deliver",
    "renew_and_read",
]
