"""What --speculate saves on the simulated server: whole chains, concurrent judging with and without it.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the step-wise loop, n = 3, m = 3). A SIMULATION
(perf/simserver.py): `python -m perf.speculation [reps] [time_scale]` prints, per repetition, the wall time
of VERDICT's whole chains (json score-only judges, the n·m judge calls overlapped, in measure()'s layout)
divided by the base reasoner's, with and without speculate.Speculator; the modes interleaved, the cache reset
before each.
"""

from __future__ import annotations

import statistics
import sys
import time

from PIL import Image

import judges
from perf import speculate
import verdict
from client import Client
from perf.loopback import LoopbackServer
from perf.simserver import LatencyModel, SimulatedServer

QUESTION = (
    "Question {k}: Is the red mug to the left of the laptop, as seen from the camera? "
    "Options: A. yes B. no C. they overlap D. the mug is not visible. Answer with the option's letter."
)


def chains(url: str, kind: str, questions: list, steps: int, image, layout: str = "per-role") -> float:
    """Seconds of one chain per question, run one after another; kind: base, verdict or speculate. The base
    reasoner's requests are always in the per-role layout (as bench.py's BASE), VERDICT's in `layout`."""
    c = Client(url, "sim")
    config = verdict.Config(n=1 if kind == "base" else 3, max_steps=steps)
    js = () if kind == "base" else judges.make_judges(c, fmt="json", layout=layout)
    propose = judges.Reasoner(c, layout="per-role" if kind == "base" else layout)
    propose = speculate.Speculator(propose, config) if kind == "speculate" else propose
    t0 = time.perf_counter()
    for q in questions:
        verdict.run(q, propose, js, config, image=image, map_fn=judges.thread_map(9))
    seconds = time.perf_counter() - t0
    if kind == "speculate":
        propose.finish()
    return seconds


def measure(
    reps: int = 3, time_scale: float = 0.25, steps: int = 3, questions: int = 2, layout: str = "per-role"
) -> dict:
    """{"verdict": [ratio per repetition], "speculate": [...]}: whole chains over the base reasoner's, VERDICT
    in prompt layout `layout`."""
    lm, image = LatencyModel(time_scale=time_scale), Image.new("RGB", (448, 448), (200, 40, 40))
    qs, sim = [QUESTION.format(k=k) for k in range(questions)], SimulatedServer(lm, steps - 1)
    seconds = {k: [] for k in ("base", "verdict", "speculate")}
    with LoopbackServer(sim, model="sim") as srv:
        for r in range(reps):
            for kind in list(seconds) if r % 2 == 0 else list(seconds)[::-1]:
                sim.reset()
                seconds[kind].append(chains(srv.url, kind, qs, steps, image, layout))
    return {k: [a / b for a, b in zip(seconds[k], seconds["base"])] for k in ("verdict", "speculate")}


if __name__ == "__main__":
    ratios = measure(*(int(sys.argv[1]),) if len(sys.argv) > 1 else (), *map(float, sys.argv[2:3]))
    for kind, r in ratios.items():
        print(f"{kind}: median {statistics.median(r):.2f}× base (min {min(r):.2f}, max {max(r):.2f})")
