"""``muster guard`` on a real git repository against a real server: a commit touching another agent's exclusive
claim is refused naming the holder (a rename out of the claim too), ``MUSTER_GUARD=warn`` only warns, an existing
pre-commit hook is chained (and its refusal kept), the holder itself commits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.mesh.support import server_process

BIN = str(Path(sys.executable).parent)


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=env, check=False, timeout=60)


def test_the_guard_refuses_warns_and_chains(db_url: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    (repo / "src").mkdir()
    (repo / "src" / "store.py").write_text("x = 1\n")
    (repo / "notes.md").write_text("n\n")
    git(repo, "add", ".")
    assert git(repo, "commit", "-qm", "start").returncode == 0
    existing = repo / ".git" / "hooks" / "pre-commit"
    existing.write_text(
        '#!/bin/sh\necho "existing hook ran" >&2\n[ -e "$(git rev-parse --show-toplevel)/STOP" ] && exit 7\nexit 0\n'
    )
    existing.chmod(0o755)
    with server_process(db_url) as server:
        with httpx.Client(base_url=server.base_url) as c:
            a = c.post("/mesh/checkin", json={"agent_id": "a", "repo": "muster", "confirm": True}).json()["token"]
            c.post("/mesh/checkin", json={"agent_id": "b", "repo": "muster", "confirm": True})
            c.post(
                "/mesh/claims",
                json={"paths": ["src/**"], "reason": "store rewrite", "confirm": True},
                headers={"Authorization": f"Bearer {a}"},
            )
        env = {
            **os.environ,
            "PATH": f"{BIN}:{os.environ['PATH']}",
            "MUSTER_URL": server.base_url,
            "MUSTER_REPO": "muster",
        }
        assert subprocess.run([f"{BIN}/muster", "guard", "install"], cwd=repo, env=env, check=False).returncode == 0
        assert subprocess.run([f"{BIN}/muster", "guard", "install"], cwd=repo, env=env, check=False).returncode == 0
        as_b = {**env, "MUSTER_AGENT_ID": "b"}
        (repo / "src" / "store.py").write_text("x = 2\n")
        git(repo, "add", ".")
        refused = git(repo, "commit", "-qm", "edit", env=as_b)
        assert refused.returncode != 0
        assert "existing hook ran" in refused.stderr and "claimed exclusively by a" in refused.stderr
        assert "store rewrite" in refused.stderr
        warned = git(repo, "commit", "-qm", "edit", env={**as_b, "MUSTER_GUARD": "warn"})
        assert warned.returncode == 0 and "claimed exclusively by a" in warned.stderr
        # A rename out of the claimed tree touches the claim too.
        git(repo, "mv", "src/store.py", "store.py")
        assert git(repo, "commit", "-qm", "move", env=as_b).returncode != 0
        assert git(repo, "commit", "-qm", "move", env={**env, "MUSTER_AGENT_ID": "a"}).returncode == 0
        # Unclaimed paths commit; the chained hook's refusal still counts.
        (repo / "notes.md").write_text("more\n")
        git(repo, "add", "notes.md")
        (repo / "STOP").write_text("")
        assert git(repo, "commit", "-qm", "notes", env=as_b).returncode != 0
        (repo / "STOP").unlink()
        assert git(repo, "commit", "-qm", "notes", env=as_b).returncode == 0
