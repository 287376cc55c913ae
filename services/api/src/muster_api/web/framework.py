"""Every private name of FastAPI and Starlette the service uses, imported here and nowhere else.

``leanroute`` answers the hot mesh and run routes without FastAPI's general request handler, and needs what that handler
uses: a parameter's field (``ModelField``) and its missing-value error, whether an annotation is a scalar, the
context variable naming the included copy of a route FastAPI is building a handler for, the hook that names the
chosen route for OpenTelemetry, and the route path Starlette's router matches on. None of them is public API, so
``services/api/pyproject.toml`` pins FastAPI and Starlette to the exact versions these were read from, and
``MUSTER_LEAN_ROUTES=0`` (``Settings.lean_routes``) serves every route through FastAPI's own handler and router,
which CI runs the route tests with too: an upgrade that changes one of these shows in one run and not the other.
The attributes ``leanroute`` reads of a route (``_embed_body_fields``, an included router's
``effective_route_contexts`` with their ``original_route``, ``param_convertors``, ``path_format`` and their own
``matches``) belong to the same versions.
"""

from __future__ import annotations

from fastapi._compat import ModelField, field_annotation_is_scalar, get_missing_field_error
from fastapi.routing import _effective_route_context_var as effective_route_context
from fastapi.telemetry._api import _route_selected as route_selected
from starlette._utils import get_route_path

__all__ = [
    "ModelField",
    "effective_route_context",
    "field_annotation_is_scalar",
    "get_missing_field_error",
    "get_route_path",
    "route_selected",
]
