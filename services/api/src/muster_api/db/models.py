"""Imports every table module so that ``metadata`` is complete (for migrations and the model/migration check)."""

from muster_api.a2a import tables as a2a_tables
from muster_api.db.schema import metadata
from muster_api.dispatch import tables as dispatch_tables
from muster_api.mesh import claims_tables as mesh_claims_tables
from muster_api.mesh import tables as mesh_tables
from muster_api.mesh import tasks_tables as mesh_tasks_tables
from muster_api.notify import tables as notify_tables

__all__ = [
    "a2a_tables",
    "dispatch_tables",
    "mesh_claims_tables",
    "mesh_tables",
    "mesh_tasks_tables",
    "metadata",
    "notify_tables",
]
