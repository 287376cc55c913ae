"""Fake CLIs for the unit tests: small Python scripts run as real subprocesses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

TRANSCRIPTS = Path(__file__).resolve().parent.parent / "transcripts"


def transcript(name: str) -> list[str]:
    return (TRANSCRIPTS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()


def meta(name: str) -> dict[str, object]:
    data = json.loads((TRANSCRIPTS / f"{name}.meta.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def make_cli(directory: Path, body: str, name: str = "fake-cli") -> Path:
    """An executable Python script; ``body`` runs with ``sys``, ``os``, ``json``, ``time`` imported."""
    path = directory / name
    path.write_text(f"#!{sys.executable}\nimport json, os, sys, time\n{body}\n", encoding="utf-8")
    path.chmod(0o755)
    return path


# Prints the lines of $FAKE_TRANSCRIPT, then sleeps $FAKE_SLEEP seconds and exits with $FAKE_EXIT.
REPLAY_CLI = """
with open(os.environ["FAKE_TRANSCRIPT"], encoding="utf-8") as f:
    for line in f:
        sys.stdout.write(line)
sys.stdout.flush()
for line in os.environ.get("FAKE_STDERR", "").split("|"):
    if line:
        print(line, file=sys.stderr)
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


# A Claude-like CLI with real session files: `-p PROMPT` or `--resume ID [--fork-session]`, history kept in
# $HOME/.claude/projects/<cwd as dashes>/<id>.jsonl; a prompt "hang" waits forever after the init line; with
# `--input-format stream-json` every stdin line is one turn (init + text + result).
SESSION_CLI = r"""
import re, uuid
args = sys.argv[1:]
resume = args[args.index("--resume") + 1] if "--resume" in args else None
session = str(uuid.uuid4()) if resume is None or "--fork-session" in args else resume
project = os.path.join(os.environ["HOME"], ".claude", "projects", re.sub(r"[^A-Za-z0-9]", "-", os.getcwd()))
os.makedirs(project, exist_ok=True)
history = []
if resume is not None:
    source = os.path.join(project, resume + ".jsonl")
    if not os.path.exists(source):
        print(json.dumps({"type": "result", "subtype": "error_during_execution", "is_error": True,
                          "result": "No conversation found with session ID: " + resume}))
        sys.exit(1)
    history = [json.loads(line)["prompt"] for line in open(source)]

def turn(prompt):
    history.append(prompt)
    with open(os.path.join(project, session + ".jsonl"), "w") as f:
        for p in history:
            f.write(json.dumps({"prompt": p}) + "\n")
    print(json.dumps({"type": "system", "subtype": "init", "session_id": session, "model": "fake-1"}), flush=True)
    if prompt == "hang":
        time.sleep(600)
    answer = " | ".join(history)
    print(json.dumps({"type": "assistant", "message": {"id": "m", "content": [{"type": "text", "text": answer}]}}))
    print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": answer,
                      "session_id": session, "usage": {"input_tokens": 10, "output_tokens": 2,
                      "cache_read_input_tokens": 1, "cache_creation_input_tokens": 0},
                      "modelUsage": {"fake-1": {"inputTokens": 10, "outputTokens": 2, "cacheReadInputTokens": 1}}}),
          flush=True)

if "--input-format" in args:
    for line in sys.stdin:
        message = json.loads(line)["message"]["content"][0]["text"]
        turn(message)
else:
    turn(args[args.index("-p") + 1])
"""
