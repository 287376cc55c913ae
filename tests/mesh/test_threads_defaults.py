"""Threads and the person's page with the defaults: `muster serve` started as `make run` starts it (cwd = a checkout
with a muster.toml, no ``MUSTER_*`` path variable), then a person and two agents talking through the muster_client,
read back as threads and found by a search (on SQLite, through the index's queue in the default database file), and
the dashboard serving the person's script."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from muster_client import MusterClient
from tests.runs.processes import api


def test_threads_and_search_with_the_defaults_of_muster_serve(db_url: str, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "muster.toml").write_text("# the defaults\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")}
    if not db_url.startswith("sqlite"):
        env["MUSTER_DATABASE_URL"] = db_url  # on SQLite: the default file under ./var/ of the checkout
    with api(env, tmp_path / "serve.log", cwd=checkout) as url:
        with MusterClient(url) as builder, MusterClient(url) as person:
            builder.checkin("builder-1", role="builder", confirm=True)
            person.checkin("alice", role="human", confirm=True)
            builder.send("a decision is needed", role="human", thread_id="deploy", confirm=True)
            person.send("go ahead", to="builder-1", thread_id="deploy", confirm=True)
            [thread] = builder.threads().threads
            assert (thread.thread_id, thread.participants, thread.messages) == ("deploy", ["alice", "builder-1"], 2)
            said = [(m.sender, m.to, m.body) for m in person.thread("deploy").messages]
            assert said == [("builder-1", ["alice"], "a decision is needed"), ("alice", ["builder-1"], "go ahead")]
            assert [t.thread_id for t in builder.threads(view="all").threads] == ["deploy"]
            [found] = person.search("decision").hits
            assert (found.sender, found.thread_id) == ("builder-1", "deploy")
            assert [h.sender for h in builder.search("ahead", view="all").hits] == ["alice"]
            assert person.search("nowhere").hits == []
        page = httpx.get(f"{url}/")
        assert page.status_code == 200 and "/ui/people.js" in page.text
        assert "sessionStorage" in httpx.get(f"{url}/ui/people.js").text
    if db_url.startswith("sqlite"):
        assert list((checkout / "var").glob("*.db")), "the default database file is under ./var of the checkout"
