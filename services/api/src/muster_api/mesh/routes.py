"""REST routes of the mesh capability."""

from fastapi import APIRouter

router = APIRouter(prefix="/mesh", tags=["mesh"])
