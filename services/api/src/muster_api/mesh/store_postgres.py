"""What the mesh's SQL store does differently on PostgreSQL: storing a message is one round trip (the message, its
inbox entries and the NOTIFY in one statement; for a direct send, the recipient's sequence too)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import bindparam, text

from muster_api.mesh.store import SqlMeshStore, SqlMeshTx, message_values
from muster_api.mesh.tables import agents, messages
from muster_mesh import MessageRecord

_ADD_MESSAGE_SQL = """
WITH m AS (
    INSERT INTO mesh_messages (message_id, sender, body, thread_id, sent_at)
    VALUES (:message_id, :sender, :body, :thread_id, :sent_at)
    RETURNING message_id
), i AS (
    INSERT INTO mesh_inbox (recipient, seq, message_id)
    SELECT u.recipient, u.seq, m.message_id
    FROM m, unnest(CAST(:recipients AS text[]), CAST(:seqs AS bigint[])) AS u(recipient, seq)
    RETURNING 1
)
SELECT {notify} FROM (SELECT count(*) AS n FROM i) AS done
"""
_SENT_AT = bindparam("sent_at", type_=messages.c.sent_at.type)
_ADD_MESSAGE = text(_ADD_MESSAGE_SQL.format(notify="pg_notify(:channel, :payload)")).bindparams(_SENT_AT)
# Without a notifier, or when the recipients need several notifications (sent by ``on_stored`` instead).
_ADD_MESSAGE_QUIET = text(_ADD_MESSAGE_SQL.format(notify="done.n, :channel, :payload")).bindparams(_SENT_AT)


# A direct send's recipient bump, message, inbox entry and wake-up in one round trip. Data-modifying CTEs run to
# completion whether or not the final SELECT reads them; with no live recipient, ``b`` is empty and so is the rest.
_DELIVER_SQL = """
WITH b AS (
    UPDATE mesh_agents SET last_seq = last_seq + 1
    WHERE agent_id = :to AND expires_at > :live_at
    RETURNING agent_id, last_seq
), m AS (
    INSERT INTO mesh_messages (message_id, sender, body, thread_id, sent_at)
    SELECT :message_id, :sender, :body, :thread_id, :sent_at FROM b
    RETURNING message_id
), i AS (
    INSERT INTO mesh_inbox (recipient, seq, message_id)
    SELECT b.agent_id, b.last_seq, m.message_id FROM b, m
    RETURNING 1
)
SELECT b.last_seq{notify} FROM b
"""
_LIVE_AT = bindparam("live_at", type_=agents.c.expires_at.type)
_DELIVER = text(_DELIVER_SQL.format(notify=", pg_notify(:channel, :payload)")).bindparams(_SENT_AT, _LIVE_AT)
_DELIVER_QUIET = text(_DELIVER_SQL.format(notify="")).bindparams(_SENT_AT, _LIVE_AT)


class PostgresMeshTx(SqlMeshTx):
    async def deliver(self, message: MessageRecord, to: str, live_at: datetime) -> dict[str, int]:
        notifier = self._store.notifier
        channel, payload = notifier.payload([to]) if notifier is not None else (None, None)
        params = {**message_values(message), "to": to, "live_at": live_at, "channel": channel, "payload": payload}
        if channel is None:
            del params["channel"], params["payload"]
        row = (await self._conn.execute(_DELIVER if channel is not None else _DELIVER_QUIET, params)).first()
        if row is None:
            return {}
        if channel is None:
            await self._store.on_stored(self._conn, [to])
        return {to: int(row.last_seq)}

    async def add_message(self, message: MessageRecord, seqs: Mapping[str, int]) -> None:
        recipients = sorted(seqs)
        notifier = self._store.notifier
        channel, payload = notifier.payload(recipients) if notifier is not None else (None, None)
        params = {
            **message_values(message),
            "recipients": recipients,
            "seqs": [seqs[r] for r in recipients],
            "channel": channel,
            "payload": payload,
        }
        await self._conn.execute(_ADD_MESSAGE if channel is not None else _ADD_MESSAGE_QUIET, params)
        if channel is None:
            await self._store.on_stored(self._conn, recipients)


class PostgresMeshStore(SqlMeshStore):
    tx_class = PostgresMeshTx


__all__ = ["PostgresMeshStore", "PostgresMeshTx"]
