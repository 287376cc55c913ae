"""The README as a new user reads it: its tour, pasted into bash against a live service, does what it says; its
links to files of the repository lead somewhere."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from muster_api.app import create_app
from muster_api.settings import Settings
from tests.support.live import live_server

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)


def section(heading: str) -> str:
    """The text under ``heading`` down to the next heading of the same or a higher level (outside code blocks)."""
    depth = len(heading.split(" ")[0])
    lines = README.splitlines(keepends=True)
    start = lines.index(heading + "\n") + 1
    fenced = False
    for end in range(start, len(lines)):
        line = lines[end]
        fenced = fenced != line.startswith("```")
        marks = len(line) - len(line.lstrip("#"))
        if not fenced and 0 < marks <= depth and line[marks : marks + 1] == " ":
            return "".join(lines[start:end])
    return "".join(lines[start:])


def shell_blocks(heading: str) -> list[str]:
    blocks = FENCE.findall(section(heading))
    assert blocks, f"no sh block under {heading!r}"
    return blocks


@pytest.fixture
def service(db_url: str) -> Iterator[str]:
    with live_server(create_app(Settings(database_url=db_url))) as url:
        yield url


def paste(script: str, url: str, home: Path, *, activated: bool = True) -> str:
    """Run ``script`` as a user pasting it would: bash, at the root of the clone, with the virtualenv activated (its
    `bin` first on the PATH) unless ``activated`` is false."""
    venv = f"{ROOT / '.venv' / 'bin'}:"
    path = ":".join(p for p in os.environ["PATH"].split(":") if p != venv.rstrip(":"))
    env = {
        "PATH": f"{venv if activated else ''}{path}",
        "HOME": str(home),
        "XDG_STATE_HOME": str(home / "state"),
        "MUSTER_URL": url,
        "LANG": "C.UTF-8",
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done.stdout


def test_the_curl_tour_shows_the_message_arriving(service: str, tmp_path: Path) -> None:
    out = paste("\n".join(shell_blocks("### The mesh with curl")), service, tmp_path)
    assert '"agent_id":"builder"' in out and '"agent_id":"reviewer"' in out  # the roster
    assert '"recipients":["reviewer"],"stored":1' in out
    assert re.search(r'"from":"builder","body":"PR #12 is ready"', out), out


def test_the_muster_tour_shows_the_message_arriving(service: str, tmp_path: Path) -> None:
    out = paste("\n".join(shell_blocks("### The mesh with `muster`")), service, tmp_path)
    assert "checked in as reviewer" in out and "checked in as builder" in out
    assert re.search(r"^builder\s+builder\s+muster\s+merge\s+writing the store", out, re.M), out
    assert re.search(r"#1 from builder", out) and "  PR #12 is ready" in out
    assert "checked out builder" in out and "checked out reviewer" in out


def test_muster_is_on_the_path_as_the_readme_says(tmp_path: Path) -> None:
    out = paste("\n".join(shell_blocks("## `muster` on your PATH")), "http://127.0.0.1:9", tmp_path, activated=False)
    assert out.strip().splitlines()[-1].startswith("muster ")


def test_links_to_repository_files_exist() -> None:
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), target
    assert "../shared" not in README
