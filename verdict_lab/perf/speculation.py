"""What --speculate saves: whole chains, concurrent judging with and without it, on a server.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the step-wise loop, n = 3, m = 3). ratios() measures, per
repetition, the wall time of VERDICT's whole chains (json score-only judges, the n·m judge calls
overlapped) divided by the base reasoner's, with and without speculate.Speculator, the kinds
interleaved and the server reset before each, on any server (bench.py's section 2b runs it on
llama-server). measure() is a SIMULATION (perf/simserver.py):
`python -m verdict_lab.perf.speculation [reps] [time_scale]` prints its medians.
"""

from __future__ import annotations

import statistics
import sys
import time

from PIL import Image

import judges
from verdict_lab import speculate
import verdict
from verdict_lab.client import Client
from verdict_lab.loopback import LoopbackServer
from verdict_lab.perf.simserver import LatencyModel, SimulatedServer
from verdict_lab.layouts import DEFAULT_LAYOUT, layout as laid_out
from verdict_lab.verifier import thread_map

QUESTION = (
    "Question {k}: Is the red mug to the left of the laptop, as seen from the camera? Options: "
    "A. yes B. no C. they overlap D. the mug is not visible. Answer with the option's letter."
)


def images(k: int) -> list:
    """k different 448×448 images, one per question (a benchmark's items each have their own, so no
    question's chain finds another's image in a prefix cache)."""
    return [Image.new("RGB", (448, 448), (200, 40 + (10 * i) % 200, 40)) for i in range(k)]


def chains(
    client: Client,
    kind: str,
    questions: list,
    steps: int,
    images: list | None,
    layout: str = "per-role",
    max_tokens: int = 256,
) -> float:
    """Seconds of one chain per question, run one after another; kind: base, verdict or speculate.
    The base reasoner's requests are always in the per-role layout (as bench.py's BASE), VERDICT's
    in `layout`. images: one per question, or None (text only); max_tokens: a step's."""
    config = verdict.Config(n=1 if kind == "base" else 3, max_steps=steps)
    lay = laid_out("per-role" if kind == "base" else layout)
    js = () if kind == "base" else judges.make_judges(client, layout=lay)
    propose = judges.Reasoner(client, max_tokens=max_tokens, layout=lay)
    propose = speculate.Speculator(propose, config) if kind == "speculate" else propose
    t0 = time.perf_counter()
    for q, image in zip(questions, images or [None] * len(questions), strict=True):
        verdict.run(q, propose, js, config, image=image, map_fn=thread_map(9))
    seconds = time.perf_counter() - t0
    if kind == "speculate":
        propose.finish()
    return seconds


def ratios(
    client: Client,
    reps: int,
    steps: int,
    questions: list,
    images,
    layout: str,
    reset,
    max_tokens: int = 256,
) -> dict:
    """{"verdict": [ratio per repetition], "speculate": [...]}: whole chains over the base
    reasoner's on the client's server, VERDICT in prompt layout `layout`; the kinds interleaved,
    reset() before each."""
    seconds = {k: [] for k in ("base", "verdict", "speculate")}
    for r in range(reps):
        for kind in list(seconds) if r % 2 == 0 else list(seconds)[::-1]:
            reset()
            seconds[kind].append(chains(client, kind, questions, steps, images, layout, max_tokens))
    return {
        k: [a / b for a, b in zip(seconds[k], seconds["base"])] for k in ("verdict", "speculate")
    }


def said(out: dict) -> str:
    """ratios()' figures in words: each kind's median over repetitions with its min–max spread."""
    spread = lambda xs: f"{statistics.median(xs):.2f}× base (min–max {min(xs):.2f}–{max(xs):.2f})"
    return f"VERDICT {spread(out['verdict'])}, with `--speculate` {spread(out['speculate'])}"


def measure(
    reps: int = 3,
    time_scale: float = 0.5,
    steps: int = 4,
    questions: int = 2,
    layout: str = DEFAULT_LAYOUT,
) -> dict:
    """ratios() on the simulated server, each question with its own image."""
    lm, qs = LatencyModel(time_scale=time_scale), [QUESTION.format(k=k) for k in range(questions)]
    sim = SimulatedServer(lm, steps - 1)
    with LoopbackServer(sim, model="sim") as srv:
        return ratios(Client(srv.url, "sim"), reps, steps, qs, images(questions), layout, sim.reset)


if __name__ == "__main__":
    out = measure(*(int(sys.argv[1]),) if len(sys.argv) > 1 else (), *map(float, sys.argv[2:3]))
    for kind, r in out.items():
        print(
            f"{kind}: median {statistics.median(r):.2f}× base (min {min(r):.2f}, max {max(r):.2f})"
        )
