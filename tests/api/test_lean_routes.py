"""The hot routes skip FastAPI's general request handler and router (``muster_api.web.leanroute``): they must answer
every input exactly as FastAPI's handler and router would, and the hot mesh routes must actually take that path."""

from __future__ import annotations

import pathlib
import re
from typing import Annotated, Any

import pytest
from fastapi import APIRouter, Body, Depends, FastAPI, Path, Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request

from muster_api.app import create_app
from muster_api.settings import Settings
from muster_api.web import problems
from muster_api.web.jsonbody import StrictJsonRoute
from muster_api.web.leanroute import Direct, HotPaths, LeanRoute, _lean
from tests.runs.support import AGENTS, dispatch_env, start, write_config
from tests.support.app import running

pytestmark = pytest.mark.anyio


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=5)
    count: int = Field(ge=1)
    confirm: bool = Field(default=False, strict=True)


class Who(Direct):
    def direct(self, request: Request) -> str:
        if request.headers.get("x-refuse"):
            raise ValueError("refused")
        return request.headers.get("x-who", "nobody")


def _router(route_class: type[StrictJsonRoute]) -> APIRouter:
    router = APIRouter(route_class=route_class)

    @router.post("/items")
    async def post_item(
        body: Item,
        who: Annotated[str, Depends(Who())],
        limit: Annotated[int, Query(ge=1, le=10)] = 5,
        after: Annotated[int | None, Query(ge=0)] = None,
        wait: Annotated[float, Query(ge=0, le=30)] = 0,
    ) -> Response:
        return Response(f"{who} {body.model_dump_json()} {limit} {after} {wait}")

    @router.get("/items/{item_id}")
    async def get_item(
        item_id: Annotated[str, Path(pattern="^[a-z]+$")], who: Annotated[str, Depends(Who())], flag: bool = False
    ) -> Response:
        return Response(f"{who} {item_id} {flag}")

    @router.post("/optional")
    async def optional(who: Annotated[str, Depends(Who())], body: Annotated[Item | None, Body()] = None) -> Response:
        return Response(f"{who} {body}")

    return router


def _app(route_class: type[StrictJsonRoute]) -> FastAPI:
    app = FastAPI()
    problems.install(app)
    app.include_router(_router(route_class))
    return app


JSON = {"content-type": "application/json"}
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/items", {"content": b'{"name": "a", "count": 1}', "headers": JSON}),
    ("POST", "/items?limit=3&after=2&wait=1.5", {"content": b'{"name": "a", "count": 2}', "headers": JSON}),
    ("POST", "/items?limit=0&after=-1&wait=nan", {"content": b'{"name": "a", "count": 1}', "headers": JSON}),
    ("POST", "/items?limit=&after=x", {"content": b'{"name": "toolong", "count": 0, "zz": 1}', "headers": JSON}),
    ("POST", "/items?limit=1&limit=2", {"content": b'{"name": "a", "count": 1}', "headers": JSON}),
    ("POST", "/items", {"content": b'{"name": "a", "count": 1, "confirm": "yes"}', "headers": JSON}),
    ("POST", "/items", {"content": b'{"name": "a", "name": "b", "count": 1}', "headers": JSON}),
    ("POST", "/items", {"content": b"{not json", "headers": JSON}),
    ("POST", "/items", {"content": b"\xff\xfe", "headers": JSON}),
    ("POST", "/items", {"content": b"", "headers": JSON}),
    ("POST", "/items", {"content": b"[1, 2]", "headers": JSON}),
    ("POST", "/items", {"content": b"null", "headers": JSON}),
    ("POST", "/items", {"content": b'{"name": "a", "count": 1}', "headers": {}}),
    ("POST", "/items", {"content": b"{not json", "headers": {}}),
    ("POST", "/items", {"content": b'{"name": "a", "count": 1}', "headers": {"content-type": "text/plain"}}),
    ("POST", "/items", {"content": b'{"name": "a", "count": 1}', "headers": {"content-type": "Application/JSON"}}),
    ("POST", "/items", {"content": b'{"name": "a", "count": 1}', "headers": {"content-type": "application/x+json"}}),
    ("POST", "/items", {"content": b'{"name": "a", "count": 1}', "headers": {"content-type": "application/a/b+json"}}),
    ("POST", "/items", {"content": b'{"name": "a", "count": 1}', "headers": {"content-type": "json"}}),
    (
        "POST",
        "/items",
        {"content": b'{"name": "a", "count": 1}', "headers": {"content-type": "application/json; charset=utf-8"}},
    ),
    ("POST", "/items", {"content": b'{"name": "a", "count": 1}', "headers": {**JSON, "x-who": "ann"}}),
    ("POST", "/items?limit=99", {"content": b'{"name": "a", "count": 1}', "headers": {**JSON, "x-refuse": "1"}}),
    ("GET", "/items/abc", {}),
    ("GET", "/items/abc?flag=yes", {}),
    ("GET", "/items/ABC?flag=maybe", {}),
    ("POST", "/optional", {"content": b"", "headers": JSON}),
    ("POST", "/optional", {"content": b'{"name": "a", "count": 1}', "headers": JSON}),
    ("POST", "/optional", {"content": b'{"name": "a"}', "headers": JSON}),
]


async def _answers(app: FastAPI) -> list[tuple[int, str, str]]:
    answers = []
    async with running(app) as client:
        for method, path, kwargs in CASES:
            try:
                r = await client.request(method, path, **kwargs)
                answers.append((r.status_code, r.headers.get("content-type", ""), r.text))
            except ValueError as exc:  # the dependency's own error, raised through the transport
                answers.append((0, "raised", str(exc)))
    return answers


async def test_a_lean_route_answers_every_input_as_fastapis_handler_does() -> None:
    lean, full = _app(LeanRoute), _app(StrictJsonRoute)
    contexts = [c for r in lean.router.routes for c in getattr(r, "effective_route_contexts", list)()]
    assert len(contexts) == 3 and all(_lean(c.dependant, c._embed_body_fields) is not None for c in contexts)
    assert await _answers(lean) == await _answers(full)


def test_the_hot_mesh_routes_take_the_lean_path_and_the_hot_paths_table(tmp_path: object) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/l.db", lean_routes=True))
    hot = app.router.routes[0]
    assert isinstance(hot, HotPaths)
    for method, path in (("POST", "/mesh/messages"), ("GET", "/mesh/inbox"), ("POST", "/mesh/checkin")):
        context = hot.table[(method, path)]
        assert _lean(context.dependant, context._embed_body_fields) is not None, path


def test_lean_routes_off_leaves_every_route_to_fastapi(tmp_path: object) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/p.db", lean_routes=False))
    assert not any(isinstance(route, HotPaths) for route in app.router.routes)
    assert app.state.lean_routes is False


def test_the_hot_paths_table_never_claims_a_path_an_earlier_route_answers(tmp_path: object) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/h.db", lean_routes=True))
    earlier = APIRouter()

    @earlier.get("/mesh/inbox")
    async def shadow() -> dict[str, str]:
        return {}

    app.include_router(earlier)
    routes = [route for route in app.router.routes if not isinstance(route, HotPaths)]
    assert ("GET", "/mesh/inbox") in HotPaths(routes).table
    routes.insert(0, routes.pop())
    table = HotPaths(routes).table
    assert ("GET", "/mesh/inbox") not in table and ("POST", "/mesh/messages") in table


async def test_the_router_still_answers_what_the_hot_paths_do_not(tmp_path: object) -> None:
    async with running(create_app(Settings(database_url=f"sqlite:///{tmp_path}/r.db"))) as client:
        wrong_method = await client.put("/mesh/messages", json={})
        assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
        slash = await client.get("/mesh/inbox/")
        assert slash.status_code == 307 and slash.headers["location"].endswith("/mesh/inbox")


RUN = "/dispatch/runs"
UNKNOWN = "0123456789abcdef0123456789abcdef"
RUN_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", RUN, {"json": {"agent": "fast", "prompt": "hi", "workspace": "{ws}"}}),
    ("POST", RUN, {"json": {"agent": "fast", "prompt": "again", "workspace": "{ws}"}}),
    ("POST", RUN, {"json": {"agent": "nobody", "prompt": "hi", "workspace": "other"}}),
    ("POST", RUN, {"json": {"agent": "fast", "workspace": "other", "extra": 1}}),
    ("POST", RUN, {"content": b"{not json", "headers": JSON}),
    ("POST", RUN, {"content": b"", "headers": JSON}),
    ("POST", RUN, {"content": b'{"agent": "fast", "prompt": "x"}', "headers": {"content-type": "text/plain"}}),
    ("GET", RUN + "/{done}", {}),
    ("GET", RUN + "/BAD", {}),
    ("GET", RUN + f"/{UNKNOWN}", {}),
    ("GET", RUN + "/{done}/events", {}),
    ("GET", RUN + "/{done}/events", {"headers": {"Last-Event-ID": "5"}}),
    ("GET", RUN + "/{done}/events", {"headers": {"last-event-id": "x"}}),
    ("GET", RUN + "/{done}/events", {"headers": {"Last-Event-ID": ""}}),
    ("GET", RUN + "/{done}/events?format=jsonl", {}),
    ("GET", RUN + "/{done}/events?format=xml", {"headers": {"Last-Event-ID": "-1"}}),
    ("GET", RUN + "/BAD/events?format=xml", {"headers": {"Last-Event-ID": "x"}}),
    ("GET", RUN + f"/{UNKNOWN}/events", {}),
    ("GET", RUN + f"/{UNKNOWN}/events?format=jsonl", {}),
    ("GET", RUN + "/{done}/events/", {}),
    ("PUT", RUN + "/{done}/events", {}),
    ("POST", RUN + "/{done}/cancel", {}),
    ("POST", RUN + f"/{UNKNOWN}/cancel", {}),
    ("POST", RUN + "/{done}/steer", {"json": {"text": "more"}}),
    ("POST", RUN + "/{done}/steer", {"json": {"text": 1}}),
]


def _in(value: object, ws: str) -> object:
    return value.format(ws=ws) if isinstance(value, str) else value


async def _run_answers(db_url: str, tmp_path: pathlib.Path, lean: bool, done: str) -> list[tuple[int, str, str]]:
    ws = "lean" if lean else "full"
    app = create_app(Settings(database_url=db_url, config=tmp_path / "muster.json", lean_routes=lean))
    answers = []
    async with running(app) as client:
        for method, path, kwargs in RUN_CASES:
            if "json" in kwargs:
                kwargs = {**kwargs, "json": {k: _in(v, ws) for k, v in kwargs["json"].items()}}
            r = await client.request(method, path.format(done=done), **kwargs)
            text = re.sub(r"[0-9a-f]{32}|\d{4}-\d\d-\d\dT[\d:.]+(Z|\+00:00)", "X", r.text.replace(ws, "WS"))
            answers.append((r.status_code, r.headers.get("content-type", ""), text))
    return answers


async def test_the_run_routes_answer_every_input_as_fastapis_handler_and_router_do(
    db_url: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    write_config(tmp_path / "muster.json", AGENTS)
    async with running(create_app(Settings(database_url=db_url, config=tmp_path / "muster.json"))) as client:
        done = await start(client, agent="fast", prompt="hello", workspace="done")
        assert (await client.get(f"{RUN}/{done['id']}/events")).status_code == 200  # read to its end: finished
    monkeypatch.setenv("MUSTER_DISPATCH_WORKERS", "0")  # the runs posted below stay queued, the same both ways
    lean = await _run_answers(db_url, tmp_path, True, done["id"])
    statuses = [202, 409, 404, 422, 422, 422, 422, 200, 422, 404, 200, 200, 422, 422, 200, 422, 422, 404, 404, 307, 405]
    assert [status for status, _, _ in lean] == [*statuses, 409, 404, 409, 422]
    assert lean[10][1].startswith("text/event-stream") and "event: result" in lean[10][2]
    assert lean == await _run_answers(db_url, tmp_path, False, done["id"])


def test_the_run_routes_take_the_lean_path_and_the_hot_paths_table(tmp_path: pathlib.Path) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/d.db", lean_routes=True))
    hot = app.router.routes[0]
    assert isinstance(hot, HotPaths)
    post = hot.table[("POST", RUN)]
    by_prefix = [context.path_format for context in hot.prefixed[("GET", RUN + "/")]]
    assert by_prefix == [RUN + "/{run_id}", RUN + "/{run_id}/events"]
    for context in (post, *hot.prefixed[("GET", RUN + "/")]):
        assert _lean(context.dependant, context._embed_body_fields) is not None, context.path_format


def test_the_hot_paths_never_claim_a_prefix_an_earlier_route_may_answer(tmp_path: pathlib.Path) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/e.db", lean_routes=True))
    earlier = APIRouter()

    @earlier.get("/dispatch/runs/latest")
    async def latest() -> dict[str, str]:
        return {}

    app.include_router(earlier)
    routes = [route for route in app.router.routes if not isinstance(route, HotPaths)]
    assert ("GET", RUN + "/") in HotPaths(routes).prefixed
    routes.insert(0, routes.pop())
    prefixed = HotPaths(routes).prefixed
    assert ("GET", RUN + "/") not in prefixed and ("POST", RUN + "/") in prefixed
