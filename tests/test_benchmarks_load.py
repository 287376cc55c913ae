"""Every benchmark ``make bench`` runs loads as ``make bench`` starts it: ``python bench/<name>/run.py`` from the
repository's root, where Python puts the script's own folder first on its path (not the root). A script that
imports ``bench.…`` without putting the root on its path itself fails there, and only there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(ROOT.glob("bench/*/run.py"))
# The module's code without its ``if __name__ == "__main__"`` part, with the path a script run by name gets.
LOAD = "import runpy, sys; sys.path[0] = sys.argv[2]; runpy.run_path(sys.argv[1], run_name='bench_load_check')"


def test_every_capability_has_a_benchmark() -> None:
    assert {p.parent.name for p in SCRIPTS} >= {"a2a", "claims", "dispatch", "mesh", "runs", "served", "sandbox"}


def test_every_benchmark_loads_as_make_bench_starts_it() -> None:
    # All at once: each is a Python process importing most of the project.
    started = {
        script.parent.name: subprocess.Popen(
            [sys.executable, "-c", LOAD, str(script), str(script.parent)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for script in SCRIPTS
    }
    failed = {}
    for name, process in started.items():
        _, err = process.communicate(timeout=180)
        if process.returncode != 0:
            failed[name] = err[-2000:]
    assert not failed, failed
