"""Mesh: the message search index (SQLite FTS5 with triggers; PostgreSQL a generated tsvector column with GIN).

Revision ID: 0007_mesh_search
Revises: 0006_mesh_tasks

The index is written only by the database, in the statement that writes the row (see ``muster_api.mesh.search``).
A later step that rebuilds ``mesh_messages`` by copy on SQLite (a batch migration) must recreate the triggers and
``rebuild`` the FTS table afterwards: the copy drops the triggers and may renumber the rowids the index is keyed by.
"""

from collections.abc import Sequence

from alembic import op

from muster_api.db.dialect import dialect_of

revision: str = "0007_mesh_search"
down_revision: str | None = "0006_mesh_tasks"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

# Words as muster_mesh.search cuts them: runs of letters and digits; diacritics kept, case folded.
SQLITE_UP = [
    "CREATE VIRTUAL TABLE mesh_messages_fts USING fts5(body, content='mesh_messages', content_rowid='rowid', "
    "tokenize='unicode61 remove_diacritics 0')",
    "CREATE TRIGGER mesh_messages_fts_insert AFTER INSERT ON mesh_messages BEGIN "
    "INSERT INTO mesh_messages_fts(rowid, body) VALUES (new.rowid, new.body); END",
    "CREATE TRIGGER mesh_messages_fts_delete AFTER DELETE ON mesh_messages BEGIN "
    "INSERT INTO mesh_messages_fts(mesh_messages_fts, rowid, body) VALUES ('delete', old.rowid, old.body); END",
    "CREATE TRIGGER mesh_messages_fts_update AFTER UPDATE OF body ON mesh_messages BEGIN "
    "INSERT INTO mesh_messages_fts(mesh_messages_fts, rowid, body) VALUES ('delete', old.rowid, old.body); "
    "INSERT INTO mesh_messages_fts(rowid, body) VALUES (new.rowid, new.body); END",
    "INSERT INTO mesh_messages_fts(mesh_messages_fts) VALUES ('rebuild')",
]
SQLITE_DOWN = [
    "DROP TRIGGER mesh_messages_fts_update",
    "DROP TRIGGER mesh_messages_fts_delete",
    "DROP TRIGGER mesh_messages_fts_insert",
    "DROP TABLE mesh_messages_fts",
]
# Punctuation becomes a space before parsing, so that a path or an identifier (muster_api/mesh.py) is its words,
# not one "file" token of PostgreSQL's parser; the 'simple' configuration folds case and stems nothing.
POSTGRES_UP = [
    "ALTER TABLE mesh_messages ADD COLUMN search_doc tsvector GENERATED ALWAYS AS "
    "(to_tsvector('simple'::regconfig, regexp_replace(body, '[^[:alnum:]]+', ' ', 'g'))) STORED",
    "CREATE INDEX ix_mesh_messages_search_doc ON mesh_messages USING gin (search_doc)",
]
POSTGRES_DOWN = [
    "DROP INDEX ix_mesh_messages_search_doc",
    "ALTER TABLE mesh_messages DROP COLUMN search_doc",
]


def _run(statements: list[str]) -> None:
    for statement in statements:
        op.execute(statement)


def upgrade() -> None:
    _run(dialect_of(op.get_bind()).pick(sqlite=SQLITE_UP, postgresql=POSTGRES_UP))


def downgrade() -> None:
    _run(dialect_of(op.get_bind()).pick(sqlite=SQLITE_DOWN, postgresql=POSTGRES_DOWN))
