"""``muster mcp`` answers on stdout whatever stdin and stdout are: pipes (watched by the event loop) or regular files
(the SDK's threaded transport), and stops at the end of stdin. No service is needed for the handshake."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.mcp.support import MUSTER
from tests.support.net import free_port

pytestmark = pytest.mark.slow

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
}


def env(tmp_path: Path) -> dict[str, str]:
    return {"MUSTER_URL": f"http://127.0.0.1:{free_port()}", "XDG_STATE_HOME": str(tmp_path / "state")}


def answered(out: bytes) -> None:
    [line] = out.decode().splitlines()
    answer = json.loads(line)
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "muster", answer


def test_pipes(tmp_path: Path) -> None:
    request = (json.dumps(INITIALIZE) + "\n").encode()
    done = subprocess.run([MUSTER, "mcp"], input=request, capture_output=True, env=env(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    answered(done.stdout)


def test_regular_files(tmp_path: Path) -> None:
    requests, answers = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    requests.write_text(json.dumps(INITIALIZE) + "\n", encoding="utf-8")
    with requests.open("rb") as stdin, answers.open("wb") as stdout:
        done = subprocess.run(
            [MUSTER, "mcp"], stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, env=env(tmp_path), timeout=120
        )
    assert done.returncode == 0, done.stderr.decode()
    answered(answers.read_bytes())


def test_pipe_in_file_out(tmp_path: Path) -> None:
    answers = tmp_path / "out.jsonl"
    request = (json.dumps(INITIALIZE) + "\n").encode()
    with answers.open("wb") as stdout:
        done = subprocess.run(
            [MUSTER, "mcp"], input=request, stdout=stdout, stderr=subprocess.PIPE, env=env(tmp_path), timeout=120
        )
    assert done.returncode == 0, done.stderr.decode()
    answered(answers.read_bytes())
