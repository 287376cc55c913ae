"""The send path with [notify] on against the same path with it off, in the same run: does the event path slow sends?

Two ``muster serve`` processes, each in a checkout of its own (SQLite under its ./var/), one with a [notify] block
(a json:// URL to a receiver in this process, every event kind on, alice a person) and one without. Each round
sends the same batch through each server in turn (alternating which goes first): most messages agent to agent, one
in ten to alice (each of those is a notification, coalesced). Printed: sends per second (wall clock) and the server
process's CPU per send, per server, and the ratio on/off. Goal: throughput on ≥ 0.9× off.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.cpu import process_cpu  # noqa: E402
from bench.serving import free_port, wait_ready  # noqa: E402

MUSTER = Path(sys.executable).with_name("muster")
ROUNDS = 6
SENDS = 300
TO_PERSON_EVERY = 10


class Counting(BaseHTTPRequestHandler):
    received = 0

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        Counting.received += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


@contextmanager
def server(checkout: Path, notify: str | None) -> Iterator[tuple[str, int]]:
    checkout.mkdir()
    (checkout / "muster.toml").write_text(notify or "# no [notify] block\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")}
    env["MUSTER_LOG_LEVEL"] = "WARNING"
    env["MUSTER_DISPATCH_WORKERS"] = "0"
    port = free_port()
    log = (checkout / "serve.log").open("wb")
    process = subprocess.Popen(
        [str(MUSTER), "serve", "--port", str(port)], cwd=checkout, env=env, stdout=log, stderr=log
    )
    base = f"http://127.0.0.1:{port}"
    try:
        # A loaded shared machine took minutes to start a server: a bound for a failure, never waited out otherwise.
        wait_ready(base, process, "muster serve", within=300)
        yield base, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def join(client: httpx.Client, agent_id: str, role: str) -> dict[str, str]:
    r = client.post("/mesh/checkin", json={"agent_id": agent_id, "role": role, "confirm": True, "ttl_seconds": 86400})
    r.raise_for_status()
    return {"Authorization": f"Bearer {r.json()['token']}"}


def batch(client: httpx.Client, bob: dict[str, str], pid: int) -> tuple[float, float]:
    """(sends per second, server CPU ms per send) of one batch."""
    cpu, start = process_cpu(pid), time.perf_counter()
    for index in range(SENDS):
        to = "alice" if index % TO_PERSON_EVERY == 0 else "carol"
        r = client.post("/mesh/messages", json={"to": to, "body": f"message {index}", "confirm": True}, headers=bob)
        r.raise_for_status()
    wall = time.perf_counter() - start
    return SENDS / wall, (process_cpu(pid) - cpu) * 1000 / SENDS


def main() -> None:
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    block = f'[notify]\nurls = ["json://127.0.0.1:{receiver.server_address[1]}/hook"]\n'
    with (
        tempfile.TemporaryDirectory() as tmp,
        server(Path(tmp) / "on", block) as on,
        server(Path(tmp) / "off", None) as off,
    ):
        figures: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
        clients = {}
        for name, (base, pid) in (("on", on), ("off", off)):
            client = httpx.Client(base_url=base, timeout=30)
            join(client, "alice", "human")
            join(client, "carol", "reviewer")
            clients[name] = (client, join(client, "bob", "builder"), pid)
        for name in ("on", "off"):  # warm-up
            batch(*clients[name])
        for round_ in range(ROUNDS):
            order = ("on", "off") if round_ % 2 == 0 else ("off", "on")
            for name in order:
                figures[name].append(batch(*clients[name]))
    load = os.getloadavg()
    rate = {n: statistics.median(f[0] for f in figures[n]) for n in figures}
    cpu = {n: statistics.median(f[1] for f in figures[n]) for n in figures}
    print(f"notify send path, SQLite, {ROUNDS} alternating pairs of {SENDS} sends (1 in {TO_PERSON_EVERY} to a person)")
    print(f"  load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    for name in ("off", "on"):
        print(f"  [notify] {name:3}: {rate[name]:7.1f} sends/s  server CPU {cpu[name]:.3f} ms/send")
    print(f"  notifications received: {Counting.received}")
    ratio = rate["on"] / rate["off"]
    print(f"  throughput on/off: {ratio:.2f}x (goal >= 0.90)  CPU per send on/off: {cpu['on'] / cpu['off']:.2f}x")


if __name__ == "__main__":
    main()
