"""``muster install`` as a process: plain lines when piped, one JSON object with --json, a one-line reason and a
non-zero exit on failure (the pinned CLIs are already in the cache, so a success only checks them)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

from tests.runs.processes import MUSTER


def muster(*args: str, cache: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if cache is not None:
        env["MUSTER_CLI_CACHE"] = cache
    return subprocess.run([str(MUSTER), *args], env=env, capture_output=True, text=True, timeout=600, check=False)


def test_install_all_piped_prints_plain_lines() -> None:
    done = muster("install", "all")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "installing claude…" and lines[2] == "installing codex…"
    assert lines[1].startswith("claude 2.1.328 ready at ") and lines[3].startswith("codex 0.169.0 ready at ")
    assert "installing gemini…" in lines
    assert any(line.startswith("gemini 0.61.0 ready at ") for line in lines)
    assert "installing copilot…" in lines and any(line.startswith("copilot 1.0.102 ready at ") for line in lines)
    assert "\x1b[" not in done.stdout  # no terminal control sequences when piped


def test_install_json_result() -> None:
    done = muster("install", "claude", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ok"] is True
    assert [(r["harness"], r["version"]) for r in result["installed"]] == [("claude", "2.1.328")]
    assert Path(result["installed"][0]["path"]).exists()


def test_install_gemini_json_result() -> None:
    done = muster("install", "gemini", "--json")
    assert done.returncode == 0, done.stderr
    (result,) = json.loads(done.stdout)["installed"]
    assert (result["harness"], result["version"]) == ("gemini", "0.61.0")
    assert Path(result["path"]).name == "gemini" and Path(result["path"]).exists()


def test_install_copilot_checks_the_pin_with_its_package_unpacked_beside_it() -> None:
    done = muster("install", "copilot", "--json")
    assert done.returncode == 0, done.stderr
    (installed,) = json.loads(done.stdout)["installed"]
    assert (installed["harness"], installed["version"]) == ("copilot", "1.0.102")
    binary = Path(installed["path"])
    assert binary.name == "copilot" and (binary.parents[2] / "unpacked").is_dir()


def test_install_failure_exits_non_zero_with_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    done = muster("install", "codex", cache=str(blocker / "cache"))
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0 and done.stderr.startswith("muster: codex: cannot write the CLI cache")
    done = muster("install", "all", "--json", cache=str(blocker / "cache"))
    assert done.returncode == 1 and json.loads(done.stdout)["ok"] is False


def test_install_refuses_an_unknown_harness() -> None:
    done = muster("install", "aider")
    assert done.returncode == 2 and "invalid choice" in done.stderr


def test_install_on_a_terminal_shows_progress() -> None:
    """On a terminal the progress display (rich) draws; the final line names the version."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm"}
    proc = subprocess.Popen([str(MUSTER), "install", "claude"], stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=600) == 0
    out = b"".join(chunks).decode("utf-8", "replace")
    assert "claude 2.1.328 ready at" in out
    assert "\x1b[" in out, "a terminal gets the live display"
    assert "installing claude…\n" not in out.replace("\r\n", "\n"), "not the plain lines of a pipe"
