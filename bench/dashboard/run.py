"""What a dashboard's poll costs: GET /mesh/agents answered in full (the baseline) against the same poll answered
304 Not Modified to If-None-Match, over real HTTP on loopback, with 100 agents checked in.

The two kinds of poll are interleaved one for one so that drift hits both alike. Printed per database: the median
and p95 of each, bytes per answer, the ratio conditional/full of both, and how many polls per second one process
answers at the median (a hundred open dashboards polling every 2 s need 50 per second for the roster).

Run: .venv/bin/python bench/dashboard/run.py  (about 20 s per database; traffic only to 127.0.0.1)
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.databases import PostgresServer  # noqa: E402
from tests.support.live import live_server  # noqa: E402

from muster_api.app import create_app  # noqa: E402
from muster_api.settings import Settings  # noqa: E402

AGENTS = 100
WARMUP = 50
SAMPLES = 400
POLL = "/mesh/agents?include_expired=true&limit=500"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(db_url: str, label: str) -> None:
    os.environ.setdefault("MUSTER_LOG_LEVEL", "WARNING")
    with (
        live_server(create_app(Settings(database_url=db_url, log_level="WARNING"))) as url,
        httpx.Client(base_url=url) as http,
    ):
        for i in range(AGENTS):
            r = http.post(
                "/mesh/checkin",
                json={
                    "agent_id": f"agent-{i:03d}",
                    "role": "builder",
                    "repo": "muster",
                    "caps": ["merge"],
                    "status": f"working on step {i} of the plan",
                    "confirm": True,
                },
            )
            r.raise_for_status()
        tag = http.get(POLL).headers["etag"]
        full: list[float] = []
        conditional: list[float] = []
        full_bytes = conditional_bytes = 0
        for n in range(WARMUP + SAMPLES):
            started = time.perf_counter()
            whole = http.get(POLL)
            middle = time.perf_counter()
            held = http.get(POLL, headers={"If-None-Match": tag})
            ended = time.perf_counter()
            assert whole.status_code == 200 and held.status_code == 304, (whole.status_code, held.status_code)
            if n >= WARMUP:
                full.append((middle - started) * 1000)
                conditional.append((ended - middle) * 1000)
                full_bytes, conditional_bytes = len(whole.content), len(held.content)
    f, c = statistics.median(full), statistics.median(conditional)
    print(f"[{label}] {AGENTS} agents, {SAMPLES} polls of each kind")
    print(f"  full 200 (baseline)  median {f:6.2f} ms  p95 {percentile(full, 0.95):6.2f} ms  {full_bytes} bytes")
    c95 = percentile(conditional, 0.95)
    print(f"  304 Not Modified     median {c:6.2f} ms  p95 {c95:6.2f} ms  {conditional_bytes} bytes")
    print(f"  ratio conditional/full: time {c / f:.2f}, bytes {conditional_bytes / max(full_bytes, 1):.3f}")
    print(f"  polls answered per second at the median: full {1000 / f:.0f}, conditional {1000 / c:.0f}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        measure(f"sqlite:///{Path(tmp) / 'bench.db'}", "sqlite")
    pg = os.environ.get("MUSTER_TEST_POSTGRES_URL")
    if not pg:
        print("[postgres] skipped: set MUSTER_TEST_POSTGRES_URL (make bench does when a server answers)")
        return
    server = PostgresServer(pg)
    url = server.create()
    try:
        measure(url, "postgres")
    finally:
        server.drop(url)


if __name__ == "__main__":
    main()
