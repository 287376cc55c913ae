"""``muster agents | checkin | send | inbox | checkout | a2a`` against a live service: rich in a real pseudo-terminal,
plain and JSON when piped, the token kept privately, failures one line."""

from __future__ import annotations

import json
import re
import signal
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal

from tests.a2a.peers import a2a_peer
from tests.console.support import ESC, MUSTER, Terminal, in_terminal, piped
from tests.support.net import free_port
from tests.support.rows import store_status

# Slow: a `muster` process per command.
pytestmark = pytest.mark.slow

COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def test_in_a_terminal_tables_colours_and_a_live_watch(service: Any) -> None:
    _url, http, env = service()
    code, shown = in_terminal(env, "checkin", "reviewer", "--role", "reviewer", "--repo", "muster", "--status", "idle")
    assert code == 0 and "checked in as reviewer" in shown and COLOUR.search(shown)
    assert in_terminal(env, "checkin", "builder", "--role", "builder", "--caps", "merge,deploy")[0] == 0

    code, shown = in_terminal(env, "agents")
    assert code == 0 and COLOUR.search(shown)
    assert "┃" in shown or "│" in shown  # a drawn table, not plain columns
    text = COLOUR.sub("", shown)
    assert re.search(r"builder\s*│\s*builder", text) and "merge,deploy" in text

    assert in_terminal(env, "send", "--to", "reviewer", "PR #12 is ready")[0] == 0
    code, shown = in_terminal(env, "inbox", "--as", "reviewer", "--wait", "5")
    assert code == 0 and "#1 from builder" in shown and "PR #12 is ready" in shown

    watch = Terminal(env, "agents", "--watch")
    watch.expect(lambda text: "reviewer" in text and "Ctrl-C" in text)
    r = http.post("/mesh/checkin", json={"agent_id": "latecomer", "status": "just arrived", "confirm": True})
    assert r.status_code == 200
    watch.expect(lambda text: "latecomer" in text)  # redrawn in place, no restart
    watch.interrupt()
    assert watch.wait() == 0
    assert "Traceback" not in watch.text


def listed(env: dict[str, str], *flags: str) -> list[str]:
    """The agent ids ``muster agents --json FLAGS…`` lists."""
    return sorted(a["agent_id"] for a in json.loads(piped(env, "agents", "--json", *flags).out)["agents"])


def test_piped_the_same_commands_write_plain_text_and_json(service: Any) -> None:
    _url, _http, env = service()
    checked = piped(env, "checkin", "reviewer", "--role", "reviewer", "--repo", "muster", "--json")
    assert checked.code == 0, checked.err
    record = json.loads(checked.out)
    assert record["agent_id"] == "reviewer" and "token" not in record
    assert piped(env, "checkin", "builder", "--repo", "muster", "--status", "writing the store").code == 0

    plain = piped(env, "agents")
    assert plain.code == 0 and ESC not in plain.out
    assert plain.out.splitlines()[0].split() == [
        "agent", "role", "repo", "caps", "status", "state", "status", "age", "heartbeat", "expires", "in", "unread"
    ]  # fmt: skip
    row = r"^builder\s+muster\s+writing the store\s+working · \d+s ago\s+\d+s\s+\d+s ago\s+59m \d\ds\s+0$"
    assert re.search(row, plain.out, re.M), plain.out

    sent = piped(env, "send", "--to", "reviewer", "-", "--json", stdin="from stdin\nsecond line")
    assert sent.code == 0, sent.err
    assert json.loads(sent.out) == {"message_id": json.loads(sent.out)["message_id"], "recipients": ["reviewer"],
                                    "stored": 1, "followed": [], "wake": None}  # fmt: skip
    unread = json.loads(piped(env, "agents", "--json").out)
    assert {a["agent_id"]: a["unread"] for a in unread["agents"]} == {"builder": 0, "reviewer": 1}

    inbox = piped(env, "inbox", "--as", "reviewer")
    assert inbox.code == 0 and ESC not in inbox.out
    assert inbox.out.splitlines()[1:] == ["  from stdin", "  second line"]
    page = json.loads(piped(env, "inbox", "--as", "reviewer", "--json", "--ack").out)
    assert [(m["from"], m["body"]) for m in page["messages"]] == [("builder", "from stdin\nsecond line")]
    assert json.loads(piped(env, "inbox", "--as", "reviewer", "--json").out)["messages"] == []  # acknowledged

    out = piped(env, "checkout", "--json")  # the current agent: builder, the last checked in
    assert out.code == 0 and json.loads(out.out)["agent"]["agent_id"] == "builder"
    # The directory's filter: by role, by repo, and the checked-out builder only with --all.
    assert listed(env, "--role", "reviewer") == listed(env, "--repo", "muster") == listed(env) == ["reviewer"]
    assert listed(env, "--all") == ["builder", "reviewer"] == listed(env, "--all", "--repo", "muster")
    assert listed(env, "--all", "--role", "reviewer") == ["reviewer"] and listed(env, "--role", "nobody") == []
    assert json.loads(piped(env, "a2a", "list", "--json").out)["agents"] == []


def test_the_token_is_kept_privately_and_never_shown(service: Any, tmp_path: Path) -> None:
    _url, http, env = service()
    outputs = [piped(env, "checkin", "builder", "--status", "one"), piped(env, "checkin", "builder", "--json")]
    stored = Path(env["XDG_STATE_HOME"]) / "muster" / "cli"
    session = json.loads((stored / "builder.json").read_text())
    assert stat.S_IMODE((stored / "builder.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(stored.stat().st_mode) == 0o700
    # The second check-in renewed the same session with the stored token (no new token was minted).
    assert http.get("/mesh/agents/builder").json()["status"] == "one"
    held = http.get("/mesh/inbox", headers={"Authorization": f"Bearer {session['token']}"})
    assert held.status_code == 200  # the stored token is the live session's
    outputs += [piped(env, "inbox", "--json"), piped(env, "agents", "--json"), piped(env, "checkout")]
    for out in outputs:
        assert out.code == 0, out.err
        assert session["token"] not in out.out + out.err
    assert not (stored / "builder.json").exists()  # forgotten at check-out


def test_failures_are_one_line_with_a_non_zero_status(service: Any) -> None:
    _url, http, env = service(api_keys=["sekret-key"])
    cases = [
        (piped(env, "agents"), 1, "MUSTER_API_KEY"),
        (piped({**env, "MUSTER_URL": f"http://127.0.0.1:{free_port()}"}, "agents"), 3, "not reachable"),
        (piped(env, "inbox"), 1, "muster checkin AGENT_ID"),
    ]
    keyed = {**env, "MUSTER_API_KEY": "sekret-key"}
    cases.append((piped(keyed, "checkin", "builder", "--ttl", "5"), 1, "ttl_seconds"))
    assert piped(keyed, "checkin", "builder").code == 0
    cases.append((piped(keyed, "send", "--role", "nobody", "hello"), 1, "no live agent matched"))
    cases.append((piped(keyed, "a2a", "call", "no_such_tool", "task"), 1, "no_such_tool"))
    held = http.post("/mesh/checkin", json={"agent_id": "holder", "confirm": True}, headers={"X-API-Key": "sekret-key"})
    assert held.status_code == 200
    cases.append((piped(keyed, "checkin", "holder"), 1, "another session holds that agent id"))
    assert piped(keyed, "checkout").code == 0
    cases.append((piped(keyed, "send", "--as", "builder", "--to", "builder", "x"), 1, "muster checkin builder"))
    for out, code, says in cases:
        assert out.code == code, (out.code, out.err)
        assert out.out == "" and out.err.count("\n") == 1 and out.err.startswith("muster: "), out.err
        assert says in out.err and "Traceback" not in out.err
    assert "sekret-key" not in "".join(c[0].err for c in cases)


def test_what_agents_wrote_cannot_drive_the_terminal(service: Any, db_url: str) -> None:
    _url, http, env = service()
    hostile = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x1b[0m \u202eevil"
    r = http.post("/mesh/checkin", json={"agent_id": "mallory", "status": "harmless", "confirm": True})
    assert r.status_code == 200
    token = r.json()["token"]
    # The API refuses control characters in a status now; a row stored before that rule is still shown.
    store_status(db_url, "mallory", hostile)
    assert piped(env, "checkin", "victim").code == 0
    sent = http.post("/mesh/messages", json={"to": "victim", "body": f"hi {hostile}", "confirm": True},
                     headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert sent.status_code == 200
    for code, shown in (in_terminal(env, "agents"), in_terminal(env, "inbox")):
        assert code == 0
        assert "\x1b]0;pwned" not in shown and "\x1b[2J" not in shown and "\u202e" not in shown
        assert "red \ufffdevil" in shown
    plain = piped(env, "inbox")
    assert ESC not in plain.out and "hi red \ufffdevil" in plain.out


def test_inbox_follow_prints_messages_as_they_arrive(service: Any) -> None:
    _url, http, env = service()
    assert piped(env, "checkin", "reader").code == 0
    sender = http.post("/mesh/checkin", json={"agent_id": "sender", "confirm": True}).json()["token"]
    argv = [MUSTER, "inbox", "--follow", "--json"]
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True) as follow:
        assert follow.stdout is not None
        try:
            for n in (1, 2):
                r = http.post("/mesh/messages", json={"to": "reader", "body": f"message {n}", "confirm": True},
                              headers={"Authorization": f"Bearer {sender}"})  # fmt: skip
                assert r.status_code == 200
                line = json.loads(follow.stdout.readline())  # blocks until the message is streamed
                assert (line["seq"], line["from"], line["body"]) == (n, "sender", f"message {n}")
        finally:
            follow.send_signal(signal.SIGINT)
            assert follow.wait(timeout=30) == 0


def test_a2a_list_shows_a_failing_remote_agent(service: Any, tmp_path: Path) -> None:
    config = tmp_path / "muster.toml"
    config.write_text(f'[agents.offline]\ncard = "http://127.0.0.1:{free_port()}"\n')
    _url, _http, env = service(config=config)
    plain = piped(env, "a2a", "list")
    assert plain.code == 0
    assert re.search(r"^offline\s+error\s+", plain.out, re.M), plain.out
    code, shown = in_terminal(env, "a2a", "list")
    assert code == 0 and "offline" in shown and COLOUR.search(shown)


def test_a2a_call_reaches_a_real_remote_agent(service: Any, tmp_path: Path) -> None:
    # The a2a-sdk peer is async: it runs on a portal's event loop while this test drives `muster` synchronously.
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(a2a_peer("Alpha")) as alpha:
        config = tmp_path / "muster.toml"
        config.write_text(f'[agents.alpha]\ncard = "{alpha.base}"\n')
        _url, _http, env = service(config=config)
        listed = piped(env, "a2a", "list")
        assert re.search(r"^alpha\s+ok\s+\S+\s+Alpha_echo", listed.out, re.M), listed.out

        answered = piped(env, "a2a", "call", "Alpha_echo", "complete hello there")
        assert answered.code == 0, answered.err
        assert answered.out.splitlines() == ["hello there", "second part"]
        code, shown = in_terminal(env, "a2a", "call", "Alpha_echo", "complete in a terminal")
        assert code == 0 and "in a terminal" in shown

        failed = piped(env, "a2a", "call", "Alpha_echo", "fail sorry", "--json")
        assert failed.code == 1 and json.loads(failed.out)["is_error"] is True
        assert failed.err.startswith("muster: Alpha_echo answered an error")


def test_agents_watch_piped_prints_a_snapshot_at_each_change(service: Any) -> None:
    _url, http, env = service()
    assert http.post("/mesh/checkin", json={"agent_id": "first", "confirm": True}).status_code == 200
    with subprocess.Popen([MUSTER, "agents", "--watch", "--json"], env=env, stdout=subprocess.PIPE, text=True) as watch:
        assert watch.stdout is not None
        try:
            first = json.loads(watch.stdout.readline())
            assert [a["agent_id"] for a in first["agents"]] == ["first"]
            assert http.post("/mesh/checkin", json={"agent_id": "second", "confirm": True}).status_code == 200
            second = json.loads(watch.stdout.readline())  # blocks until the next poll sees the change
            assert [a["agent_id"] for a in second["agents"]] == ["first", "second"]
        finally:
            watch.send_signal(signal.SIGINT)
            assert watch.wait(timeout=30) == 0


def test_threads_and_a_thread_as_an_agent_and_as_the_overseer(service: Any) -> None:
    _url, _http, env = service()
    for agent in ("reviewer", "builder"):
        assert piped(env, "checkin", agent).code == 0
    assert piped(env, "send", "--as", "builder", "--to", "reviewer", "--thread", "pr-12", "PR #12 is ready").code == 0
    said = "\x1b[31mlooks good\x1b[0m\nmerging"
    assert piped(env, "send", "--as", "reviewer", "--to", "builder", "--thread", "pr-12", said).code == 0

    listed = piped(env, "threads", "--as", "builder")
    assert listed.code == 0, listed.err
    assert listed.out.splitlines()[0].split() == ["thread", "participants", "messages", "last", "says"]
    assert re.search(r"^pr-12\s+builder, reviewer\s+2\s+reviewer · \d+s ago\s+looks good…$", listed.out, re.M)
    assert ESC not in listed.out

    shown = piped(env, "thread", "pr-12", "--as", "builder")
    assert shown.code == 0 and ESC not in shown.out
    assert shown.out.splitlines()[0] == "thread pr-12"
    assert re.match(r"builder → reviewer · \d+s ago$", shown.out.splitlines()[1])
    assert re.match(r"reviewer → builder · \d+s ago$", shown.out.splitlines()[3])
    assert [shown.out.splitlines()[i] for i in (2, 4, 5)] == ["  PR #12 is ready", "  looks good", "  merging"]

    every = json.loads(piped(env, "threads", "--all", "--agent", "reviewer", "--json").out)
    assert [(t["thread_id"], t["messages"]) for t in every["threads"]] == [("pr-12", 2)]
    page = json.loads(piped(env, "thread", "pr-12", "--all", "--json").out)
    assert [(m["from"], m["to"]) for m in page["messages"]] == [("builder", ["reviewer"]), ("reviewer", ["builder"])]

    missing = piped(env, "thread", "elsewhere", "--as", "builder")
    assert missing.code == 1 and "thread_not_found" in missing.err
