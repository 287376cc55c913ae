"""Start-up of notifications inside the service: the ``[notify]`` block read once, and with a URL in it, the one
sender task of this instance (see ``sender``)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
from fastapi import FastAPI

from muster_api.configfile import read_config
from muster_api.errors import ConfigurationError
from muster_api.notify.config import NotifyConfig, parse_notify
from muster_api.notify.outbox import SqlOutbox
from muster_api.notify.sender import Sender, quiet_apprise
from muster_api.runtime import Runtime

log = logging.getLogger("muster.notify")


@dataclass(frozen=True)
class NotifyState:
    config: NotifyConfig
    outbox: SqlOutbox


async def load(runtime: Runtime) -> NotifyConfig:
    try:
        return parse_notify(await read_config(runtime.settings.config))
    except ConfigurationError as exc:
        raise ConfigurationError(f"config file {runtime.settings.config}: {exc}") from None


@asynccontextmanager
async def lifespan(app: FastAPI, runtime: Runtime) -> AsyncIterator[None]:
    config = await load(runtime)
    outbox = SqlOutbox(runtime.engine, runtime.dialect)
    app.state.notify = NotifyState(config, outbox)
    if not config.enabled:
        yield
        return
    quiet_apprise()
    sender = Sender(outbox, config, runtime.settings.notify, runtime.now)
    services = ", ".join(sorted({t.service for t in config.targets}))
    log.info("notify: %d URL(s) (%s) on %s", len(config.targets), services, ", ".join(sorted(config.on)))
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender.run_forever)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()
