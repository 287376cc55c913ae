"""Run the app in-process (lifespan included) and talk to it with httpx."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI

from muster_api.app import create_app
from muster_api.runtime import Runtime
from muster_api.settings import Settings


@asynccontextmanager
async def running(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://muster.test") as client:
            yield client


@asynccontextmanager
async def serve(db_url: str, *, runtime: Runtime | None = None, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The app on ``db_url`` as an httpx client. Pass ``runtime`` to inject a clock."""
    if runtime is None:
        app = create_app(Settings(database_url=db_url, **settings))
    else:
        app = create_app(runtime=runtime)
    async with running(app) as client:
        yield client
