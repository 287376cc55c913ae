"""How errors of muster_dispatch map to HTTP statuses; merged into the one table in muster_api.problems."""

from __future__ import annotations

STATUS: dict[type[Exception], int] = {}
