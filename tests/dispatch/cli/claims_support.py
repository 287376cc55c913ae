"""What the real-CLI claims hook tests share: a git project with a store and a readme, and a real Muster server on
which agent ``holder`` holds ``src/**`` exclusively while agent ``editor`` is checked in on the same repo."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.mesh.support import ServerProcess, server_process

REASON = "rewriting the store's schema"
MUSTER_BIN = str(Path(sys.executable).parent)  # where `muster` is installed beside this interpreter


def project_repo(path: Path) -> Path:
    (path / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "src" / "store.py").write_text("VERSION = 1\n")
    (path / "README.md").write_text("VERSION = 1\n")
    return path.resolve()


@contextmanager
def claimed_server(db_url: str) -> Iterator[ServerProcess]:
    with server_process(db_url) as running:
        with httpx.Client(base_url=running.base_url) as c:
            holder = c.post("/mesh/checkin", json={"agent_id": "holder", "repo": "muster", "confirm": True})
            token = holder.json()["token"]
            c.post("/mesh/checkin", json={"agent_id": "editor", "repo": "muster", "ttl_seconds": 3600, "confirm": True})
            granted = c.post(
                "/mesh/claims",
                json={"paths": ["src/**"], "reason": REASON, "confirm": True},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert granted.json()["granted"], granted.text
        yield running
