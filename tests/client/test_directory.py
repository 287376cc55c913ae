"""``DirectoryQuery``, the directory filter as one value: the same fields as the mesh's own value type and as the
keyword arguments the clients still take, its query string, and both clients paging and filtering a live service
with it."""

from __future__ import annotations

import dataclasses
import typing
from contextlib import ExitStack

import pytest

import muster_mesh
from muster_client import AgentList, AsyncMusterClient, BacklogPage, DirectoryFields, DirectoryQuery, MusterClient
from tests.client.support import API_KEY
from tests.mesh.support import ServerProcess

pytestmark = [pytest.mark.anyio]


def test_the_client_value_has_the_mesh_values_fields_and_defaults() -> None:
    def fields(cls: type) -> dict[str, object]:
        return {f.name: f.default for f in dataclasses.fields(cls)}

    assert fields(DirectoryQuery) == fields(muster_mesh.DirectoryQuery)
    assert list(typing.get_type_hints(DirectoryFields)) == list(fields(DirectoryQuery))


def test_the_query_string_has_only_what_was_given() -> None:
    assert DirectoryQuery().params() == {}
    query = DirectoryQuery(role="reviewer", include_expired=True, limit=2, cursor="c1")
    assert query.params() == {"role": "reviewer", "include_expired": "true", "limit": 2, "cursor": "c1"}
    assert query.but(cursor="c2", role=None).params() == {"include_expired": "true", "limit": 2, "cursor": "c2"}
    assert query.but() is query


def check_in(clients: ExitStack, service: ServerProcess, agent_id: str, role: str) -> MusterClient:
    client = clients.enter_context(MusterClient(service.base_url, api_key=API_KEY))
    client.checkin(agent_id, role=role, repo="directory", confirm=True)
    return client


def ids_of(page: AgentList | BacklogPage) -> list[str]:
    return sorted(a.agent_id for a in page.agents)


@pytest.mark.slow
async def test_both_clients_filter_and_page_with_the_value(service: ServerProcess, name: str) -> None:
    role = f"{name}-reviewer"
    ids = [f"{name}-{i}" for i in range(3)]
    with ExitStack() as clients:
        members = [check_in(clients, service, agent_id, role) for agent_id in ids]
        check_in(clients, service, f"{name}-builder", f"{name}-builder")
        members[2].checkout(confirm=True)
        await both_clients(service, role, ids)


async def both_clients(service: ServerProcess, role: str, ids: list[str]) -> None:
    query = DirectoryQuery(role=role, limit=1)
    with MusterClient(service.base_url, api_key=API_KEY) as sync:
        seen: list[str] = []
        page = sync.agents(query)
        while True:
            seen += [a.agent_id for a in page.agents]
            if page.next_cursor is None:
                break
            page = sync.agents(query.but(cursor=page.next_cursor))
        assert seen == ids[:2], "one agent a page, the checked-out one left out"
        every = sync.agents(query.but(include_expired=True, limit=None))
        assert ids_of(every) == ids
        # The keywords still work, and given beside a value they take the place of its fields.
        assert ids_of(sync.agents(role=role, include_expired=True)) == ids
        assert ids_of(sync.agents(DirectoryQuery(role="nobody"), role=role, include_expired=True)) == ids
        assert sync.agents(DirectoryQuery(role="nobody")).agents == []
        assert ids_of(sync.backlog(query.but(limit=None))) == ids[:2]
    async with AsyncMusterClient(service.base_url, api_key=API_KEY) as aio:
        assert ids_of(await aio.agents(query.but(limit=None))) == ids[:2]
        assert ids_of(await aio.backlog(DirectoryQuery(role=role, include_expired=True))) == ids
