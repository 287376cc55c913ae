"""SQL tables of the dispatch capability (all on the one service MetaData)."""

from muster_api.db.schema import metadata

__all__ = ["metadata"]
