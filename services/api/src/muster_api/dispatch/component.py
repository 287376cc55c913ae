"""Start-up and shut-down of the dispatch capability inside the service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from muster_api.runtime import Runtime


@asynccontextmanager
async def lifespan(app: FastAPI, runtime: Runtime) -> AsyncIterator[None]:
    yield
