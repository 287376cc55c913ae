"""REST routes of the dispatch capability."""

from fastapi import APIRouter

router = APIRouter(prefix="/dispatch", tags=["dispatch"])
