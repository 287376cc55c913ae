"""Alembic environment: always handed a live connection by ``muster_api.db.migrate``."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from muster_api.db.dialect import dialect_of
from muster_api.db.models import metadata
from muster_api.mesh.search import outside_metadata

connection: Connection | None = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `muster migrate` (muster_api.db.migrate), which supplies the connection")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=dialect_of(connection).batch_migrations,
    compare_type=True,
    include_name=outside_metadata,
)
with context.begin_transaction():
    context.run_migrations()
