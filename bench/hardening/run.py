"""What the input gates cost on a send: the strict JSON parse (duplicate keys refused) against ``json.loads``, and the
send model's validation with its text rules (NUL in the body, control characters and bidi marks in repo/status,
strict booleans) against the same model without them, measured side by side in one run.

Printed per case: the median of each side per call and the ratio gated/baseline (goal ≤ 1.5 on a typical send).

Run: .venv/bin/python bench/hardening/run.py  (a few seconds, no I/O)
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from muster_api.web.jsonbody import loads_strict  # noqa: E402
from muster_mesh import SendRequest  # noqa: E402

ROUNDS = 7
CALLS = 2000


class PlainSend(BaseModel):
    """The send model as it would be without the text rules and strict booleans (the baseline)."""

    model_config = ConfigDict(extra="forbid")
    to: str | None = None
    role: str | None = None
    repo: str | None = None
    cap: str | None = None
    body: str
    thread_id: str | None = None
    idempotency_key: str | None = None
    confirm: bool = False


def per_call(fn: Callable[[], Any]) -> float:
    """Median over rounds of the time per call, in microseconds."""
    samples = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(CALLS):
            fn()
        samples.append((time.perf_counter() - started) / CALLS * 1e6)
    return statistics.median(samples)


def compare(name: str, gated: Callable[[], Any], baseline: Callable[[], Any]) -> None:
    gated(), baseline()  # warm
    g, b = per_call(gated), per_call(baseline)
    print(f"{name:<44} gated {g:8.2f} us   baseline {b:8.2f} us   ratio {g / b:5.2f}")


def main() -> None:
    small = {"to": "reviewer-1", "body": "PR #12 is ready\n\tsee the diff", "thread_id": "pr-12", "confirm": True}
    large = {**small, "body": "line of a long report\n" * 2900}  # about 64 KiB, the mesh's bound
    for label, doc in (("typical send (~100 B)", small), ("largest send (~64 KiB)", large)):
        raw = json.dumps(doc).encode()
        compare(f"JSON parse, {label}", lambda raw=raw: loads_strict(raw), lambda raw=raw: json.loads(raw))
        parsed = json.loads(raw)
        compare(
            f"send model, {label}",
            lambda parsed=parsed: SendRequest.model_validate(parsed),
            lambda parsed=parsed: PlainSend.model_validate(parsed),
        )


if __name__ == "__main__":
    main()
