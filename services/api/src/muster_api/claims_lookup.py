"""The mesh's path claims as the dispatch capability asks them after a turn (``dispatch.claims_watch``): composed
here, beside the app, because the capabilities never import each other."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import TypeAdapter, ValidationError

from muster_api.dispatch.claims_watch import ClaimsLookup, HeldPath
from muster_mesh import Mesh
from muster_mesh.claims import CheckRequest, Claims, ConcretePath
from muster_mesh.patterns import MAX_CLAIMS_PER_AGENT

_CONCRETE: TypeAdapter[str] = TypeAdapter(ConcretePath)


def _checkable(path: str) -> bool:
    """A path no claim can name (a glob character in a file name, an over-long path) is not asked about."""
    try:
        _CONCRETE.validate_python(path)
    except ValidationError:
        return False
    return True


def mesh_claims(mesh: Mesh) -> ClaimsLookup:
    claims = Claims(mesh)

    async def lookup(repo: str, paths: Sequence[str]) -> list[HeldPath]:
        asked = [p for p in paths if _checkable(p)]
        held: list[HeldPath] = []
        for start in range(0, len(asked), MAX_CLAIMS_PER_AGENT):
            batch = asked[start : start + MAX_CLAIMS_PER_AGENT]
            answer = await claims.check(CheckRequest(repo=repo, paths=batch), token=None)
            held += [HeldPath(p.path, p.holder, p.pattern or "", p.reason) for p in answer.paths if p.holder]
        return held

    return lookup


__all__ = ["mesh_claims"]
