"""REST routes of the a2a capability."""

from fastapi import APIRouter

router = APIRouter(prefix="/a2a", tags=["a2a"])
