"""Mesh: on SQLite, a send queues its message for the search index; the index takes the queue in batches.

Revision ID: 0014_mesh_search_batched
Revises: 0013_runtime_run_keys

FTS5 writes a new segment at every commit that adds to it: one message per transaction, as a send commits, cost
63 µs of CPU per message against 8 µs in batches of 100. The insert trigger now adds the message's rowid to
``mesh_messages_fts_pending`` (in the send's own statement, so nothing is lost on a kill), and
``muster_api.mesh.search.index_pending`` moves the queue into the index: before every search (which so sees every
committed message) and after every so many writes of the mesh store. A deleted message leaves the index, or the
queue if it never reached the index (FTS5's 'delete' of a row it does not hold would corrupt it). PostgreSQL's
generated column is unchanged. A later step that rebuilds ``mesh_messages`` by copy on SQLite recreates these
triggers, and queues every row again (or rebuilds the index) since the copy may renumber the rowids.
"""

from collections.abc import Sequence

from alembic import op

from muster_api.db.dialect import dialect_of

revision: str = "0014_mesh_search_batched"
down_revision: str | None = "0013_runtime_run_keys"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

_DROP_TRIGGERS = [
    "DROP TRIGGER mesh_messages_fts_update",
    "DROP TRIGGER mesh_messages_fts_delete",
    "DROP TRIGGER mesh_messages_fts_insert",
]
SQLITE_UP = [
    *_DROP_TRIGGERS,
    "CREATE TABLE mesh_messages_fts_pending (message_rowid INTEGER NOT NULL PRIMARY KEY)",
    "CREATE TRIGGER mesh_messages_fts_insert AFTER INSERT ON mesh_messages BEGIN "
    "INSERT INTO mesh_messages_fts_pending(message_rowid) VALUES (new.rowid); END",
    "CREATE TRIGGER mesh_messages_fts_delete AFTER DELETE ON mesh_messages BEGIN "
    "INSERT INTO mesh_messages_fts(mesh_messages_fts, rowid, body) SELECT 'delete', old.rowid, old.body "
    "WHERE NOT EXISTS (SELECT 1 FROM mesh_messages_fts_pending WHERE message_rowid = old.rowid); "
    "DELETE FROM mesh_messages_fts_pending WHERE message_rowid = old.rowid; END",
    "CREATE TRIGGER mesh_messages_fts_update AFTER UPDATE OF body ON mesh_messages BEGIN "
    "INSERT INTO mesh_messages_fts(mesh_messages_fts, rowid, body) SELECT 'delete', old.rowid, old.body "
    "WHERE NOT EXISTS (SELECT 1 FROM mesh_messages_fts_pending WHERE message_rowid = old.rowid); "
    "INSERT OR IGNORE INTO mesh_messages_fts_pending(message_rowid) VALUES (new.rowid); END",
]
# Back to 0007's shape: the queue indexed first, then the triggers that write the index in every statement.
SQLITE_DOWN = [
    "INSERT INTO mesh_messages_fts(rowid, body) SELECT m.rowid, m.body FROM mesh_messages_fts_pending p "
    "JOIN mesh_messages m ON m.rowid = p.message_rowid",
    *_DROP_TRIGGERS,
    "DROP TABLE mesh_messages_fts_pending",
    "CREATE TRIGGER mesh_messages_fts_insert AFTER INSERT ON mesh_messages BEGIN "
    "INSERT INTO mesh_messages_fts(rowid, body) VALUES (new.rowid, new.body); END",
    "CREATE TRIGGER mesh_messages_fts_delete AFTER DELETE ON mesh_messages BEGIN "
    "INSERT INTO mesh_messages_fts(mesh_messages_fts, rowid, body) VALUES ('delete', old.rowid, old.body); END",
    "CREATE TRIGGER mesh_messages_fts_update AFTER UPDATE OF body ON mesh_messages BEGIN "
    "INSERT INTO mesh_messages_fts(mesh_messages_fts, rowid, body) VALUES ('delete', old.rowid, old.body); "
    "INSERT INTO mesh_messages_fts(rowid, body) VALUES (new.rowid, new.body); END",
]


def _run(statements: list[str]) -> None:
    for statement in statements:
        op.execute(statement)


def upgrade() -> None:
    _run(dialect_of(op.get_bind()).pick(sqlite=SQLITE_UP, postgresql=[]))


def downgrade() -> None:
    _run(dialect_of(op.get_bind()).pick(sqlite=SQLITE_DOWN, postgresql=[]))
