"""Prefix caching across data-parallel replicas: the prompt tokens a K-replica server computes for
an evaluate.py run, with each chain pinned to one replica (--dp-replicas K) and without (the front
end routes by load).

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the step-wise loop: a step's n candidates and n·m judge
requests share the chain's image and question prefix). vLLM's data-parallel front end
(--data-parallel-size K) balances requests by load, so a chain's requests scatter over K prefix
caches; the X-data-parallel-rank header pins them to one. SIMULATED: perf/simserver.py's server with
K replicas, each its own prefix cache.

    python -m verdict_lab.perf.replicas [--items 8] [--replicas 4]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile

from verdict_lab.perf.footprint import EVALUATE, ROOT, write_items
from verdict_lab.loopback import LoopbackServer
from verdict_lab.perf.simserver import LatencyModel, SimulatedServer


def computed_tokens(k: int, replicas: int, pinned: bool, extra: tuple = ()) -> int:
    """The prompt tokens the simulated K-replica server computes for `python evaluate.py` on k
    generated items (every method, one seed, no sleeping), with --dp-replicas K when pinned."""
    sim = SimulatedServer(LatencyModel(time_scale=0.0), 2, replicas=replicas)
    with tempfile.TemporaryDirectory() as tmp, LoopbackServer(sim) as srv:
        cmd = [*EVALUATE, "--data", write_items(tmp, k)]
        cmd += [
            "--base-url",
            srv.url,
            "--model",
            "sim",
            "--seeds",
            "1",
            "--out",
            os.path.join(tmp, "out"),
        ]
        cmd += [
            "--cache",
            ":memory:",
            *(["--dp-replicas", str(replicas)] if pinned else []),
            *extra,
        ]
        subprocess.run(
            cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT
        )
    return sim.computed


def replicas_lines(k: int, replicas: int) -> list:
    """A markdown table: computed prompt tokens on one replica, on K routed by load, on K pinned."""
    one = computed_tokens(k, 1, False)
    loose, pinned = computed_tokens(k, replicas, False), computed_tokens(k, replicas, True)
    row = lambda what, c: f"| {what} | {c:,} | {c / k:,.0f} | {c / one:.2f}× |"
    return [
        f"`python evaluate.py` on {k} generated items (one 448×448 PNG each), every method, one "
        "seed, concurrency 4, against the SIMULATED server (perf/simserver.py) with no sleeping:",
        "",
        "| server | prompt tokens computed | per item | against one replica |",
        "|---|---:|---:|---:|",
        row("1 replica", one),
        row(f"{replicas} replicas, routed by load (no header)", loose),
        row(f"{replicas} replicas, each chain pinned (--dp-replicas {replicas})", pinned),
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=8, help="generated items (8)")
    p.add_argument("--replicas", type=int, default=4, help="data-parallel replicas (4)")
    args = p.parse_args(argv)
    print("\n".join(replicas_lines(args.items, args.replicas)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
