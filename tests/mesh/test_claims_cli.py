"""The people's claim and task commands against a real server, as a user runs them (``muster …`` processes with
their own state directory): check in, claim, see the claims and a conflict, release; post, claim and finish a task."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.mesh.support import server_process

MUSTER = str(Path(sys.executable).parent / "muster")


def test_claims_and_tasks_from_the_command_line(db_url: str, tmp_path: Path) -> None:
    with server_process(db_url) as server:
        env = {**os.environ, "MUSTER_URL": server.base_url, "XDG_STATE_HOME": str(tmp_path)}

        def muster(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([MUSTER, *args], env=env, capture_output=True, text=True, timeout=60, check=False)

        assert muster("checkin", "alice", "--repo", "muster", "--role", "builder").returncode == 0
        assert muster("checkin", "bob", "--repo", "muster", "--role", "builder").returncode == 0
        held = muster("claim", "src/**", "--reason", "refactor", "--as", "alice")
        assert held.returncode == 0 and "src/**" in held.stdout
        refused = muster("claim", "src/app.py", "--as", "bob")
        assert refused.returncode == 1 and "alice" in refused.stdout and "refactor" in refused.stdout
        listing = json.loads(muster("claims", "--json").stdout)
        assert [(c["pattern"], c["holder"]) for c in listing["claims"]] == [("src/**", "alice")]
        assert muster("release", "--as", "alice").returncode == 0
        assert json.loads(muster("claims", "--json").stdout)["claims"] == []
        assert muster("task", "post", "build it", "now", "--role", "builder", "--as", "alice").returncode == 0
        got = json.loads(muster("task", "claim", "--json", "--as", "bob").stdout)["task"]
        assert got["holder"] == "bob"
        done = muster("task", "done", got["id"], str(got["token"]), "--result", "ok", "--as", "bob")
        assert done.returncode == 0 and "done" in done.stdout
        assert json.loads(muster("tasks", "--json", "--state", "done").stdout)["tasks"][0]["id"] == got["id"]
