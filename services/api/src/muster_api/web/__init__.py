"""The HTTP edge: what every request passes through before and after a capability's route, in order.

1. ``middleware.Edge`` (pure ASGI): the access log, the API-key guard (``X-API-Key``), the body-size limit, and the
   last-resort problem answer for an error nothing else caught.
2. ``leanroute.HotPaths``: the mesh's and the dispatch runs' routes found by a lookup on (method, path) or
   (method, path prefix) and answered by a lean handler; every other request falls through to FastAPI's router.
3. The route: ``jsonbody.StrictJsonRoute`` parses a body strictly (a duplicate key, a non-JSON content type and
   unknown fields are refused), ``deps`` hands it the runtime and the capabilities' state.
4. On the way out: ``etag`` answers ``304 Not Modified`` for an unchanged listing; ``problems`` turns every error
   into ``application/problem+json`` naming the field and the rule.

``openapi`` shapes the published document; ``health`` is the probe (``/healthz``, ``/readyz``).
"""
