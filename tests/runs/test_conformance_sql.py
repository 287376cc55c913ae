"""The package's conformance suites (conversation stores, journals) on the service's SQL implementations."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from muster_api.db.engine import create_engine
from muster_api.db.migrate import upgrade
from muster_api.dispatch.component import run_store
from muster_api.dispatch.journal import SqlJournal
from muster_api.dispatch.notify import RunNotifier
from muster_api.dispatch.store import SqlConversationStore
from muster_api.runtime import utc_now
from muster_api.settings import Settings
from muster_dispatch import JournalSink
from muster_dispatch.testing import CONVERSATION_CHECKS, JOURNAL_CHECKS, JournalOpener

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("name", sorted(CONVERSATION_CHECKS))
async def test_sql_conversation_store(name: str, db_url: str) -> None:
    @asynccontextmanager
    async def make() -> AsyncIterator[SqlConversationStore]:
        engine = create_engine(Settings(database_url=db_url).database_url)
        try:
            await upgrade(engine)
            yield SqlConversationStore(engine, utc_now)
        finally:
            await engine.dispose()

    await CONVERSATION_CHECKS[name](make)


@pytest.mark.parametrize("name", sorted(JOURNAL_CHECKS))
async def test_sql_journal(name: str, db_url: str) -> None:
    @asynccontextmanager
    async def make() -> AsyncIterator[JournalOpener]:
        engine = create_engine(Settings(database_url=db_url).database_url)
        try:
            await upgrade(engine)
            store = run_store(engine, RunNotifier(engine))

            async def open_journal(key: str) -> JournalSink:
                return await SqlJournal.open(store, key, utc_now)

            try:
                yield open_journal
            finally:
                await store.aclose()
        finally:
            await engine.dispose()

    await JOURNAL_CHECKS[name](make)
