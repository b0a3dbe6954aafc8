"""Requests and tokens per item per method, from evaluate.py's own counters on a scripted run.

AN ESTIMATE. Runs `python evaluate.py` on K generated items (one 448×448 PNG each) against the
simulated server (perf/simserver.py, no sleeping), reads each row's `calls` and `tokens` from the
run's results.jsonl, and scales the per-item means by the six benchmarks' row counts (docs/gpu.md
cites them). The simulated server counts pseudo-tokens (a word or a punctuation mark; 1,280 per
image, Qwen2.5-VL's budget at 1280·28·28 pixels) and writes 3 reasoning steps then the final answer,
so the figures are the harness's request pattern at that chain length, not a measurement of a model.

Run in the checkout's root, on K items (8 by default); it prints a markdown table:

    python -m verdict_lab.perf.cost_estimate [K]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

from verdict_lab.perf.footprint import EVALUATE, ROOT, write_items
from verdict_lab.loopback import LoopbackServer
from verdict_lab.perf.simserver import LatencyModel, SimulatedServer

ROWS = {
    "3DSRBench": 2772,
    "CV-Bench (2D + 3D)": 2638,
    "BLINK (val)": 1901,
    "MMStar": 1500,
    "AI2D_TEST": 3088,
}
RULES = "base,verdict,mean"
MODES = "plain,zoom"


def per_item(k: int) -> dict:
    """{method: (calls per item, tokens per item)} from one evaluate.py run on k items."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        LoopbackServer(SimulatedServer(LatencyModel(time_scale=0.0), final_at=3)) as srv,
    ):
        out = os.path.join(tmp, "out")
        cmd = [*EVALUATE, "--data", write_items(tmp, k)]
        cmd += ["--base-url", srv.url, "--model", "sim", "--seeds", "1", "--rules", RULES]
        cmd += ["--judge-mode", MODES, "--out", out]
        subprocess.run(
            cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT
        )
        sums = defaultdict(lambda: [0, 0, 0])
        with open(os.path.join(out, "results.jsonl"), encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                s = sums[row["method"]]
                s[0], s[1], s[2] = s[0] + 1, s[1] + row["calls"], s[2] + row["tokens"]
    return {m: (c / n, t / n) for m, (n, c, t) in sums.items()}


def main() -> None:
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    items = sum(ROWS.values())
    print(f"ESTIMATE: {k} simulated items per method, scaled to {items:,} items (one seed)\n")
    print(
        "| method | requests/item | tokens/item | requests, six benchmarks | "
        "tokens, six benchmarks |"
    )
    print("|---|---:|---:|---:|---:|")
    for m, (calls, tokens) in per_item(k).items():
        print(
            f"| {m} | {calls:.1f} | {tokens:,.0f} | {calls * items:,.0f} | "
            f"{tokens * items / 1e6:,.1f} M |"
        )


if __name__ == "__main__":
    main()
