"""`muster mcp` is started by every dispatched CLI of a mesh member, which waits for it before its first model
request: it loads none of the other commands of `muster` (the console's and the doctor's modules)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("muster_api.commands.console", "muster_api.commands.doctor")

PROGRAM = f"""
import json, sys
from muster_api.commands import cli
try:
    cli.main(["mcp", "--help"])
except SystemExit:
    pass
import muster_api.mcp.server  # what `muster mcp` then runs
print(json.dumps([name for name in {HEAVY!r} if name in sys.modules]))
"""


def test_muster_mcp_loads_no_other_command() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert "muster mcp" in done.stdout, "the mcp command still parses"


def test_the_other_commands_are_still_there() -> None:
    code = "from muster_api.commands import cli; cli.main(['--help'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and all(name in done.stdout for name in ("checkin", "doctor", "runs", "mcp"))
