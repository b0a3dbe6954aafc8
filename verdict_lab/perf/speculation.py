"""What --speculate saves: whole chains, concurrent judging with and without it, on a server.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the step-wise loop, n = 3, m = 3). ratios() measures, per
repetition, the wall time of VERDICT's whole chains (json score-only judges, the n·m judge calls
overlapped) divided by the base reasoner's, with and without speculate.Speculator, the kinds
interleaved and the server reset before each, on any server (bench.py's section 2b runs it on
llama-server). measure() is a SIMULATION (perf/simserver.py), served from a process of its own
(simserver.Remote) unless asked otherwise, so that the simulator's CPU is not charged to the client:
`python -m verdict_lab.perf.speculation [reps] [time_scale] [in-process]` prints its medians.
"""

from __future__ import annotations

import io
import statistics
import sys
import time

from PIL import Image

import judges
from verdict_lab import speculate
import verdict
from verdict_lab.client import Client
from verdict_lab.loopback import LoopbackServer
from verdict_lab.perf.simserver import LatencyModel, Remote, SimulatedServer
from verdict_lab.layouts import DEFAULT_LAYOUT, layout as laid_out
from verdict_lab.verifier import thread_map

QUESTION = (
    "Question {k}: Is the red mug to the left of the laptop, as seen from the camera? Options: "
    "A. yes B. no C. they overlap D. the mug is not visible. Answer with the option's letter."
)


def images(k: int, as_bytes: bool = True) -> list:
    """k different 448×448 images, one per question (a benchmark's items each have their own, so no
    question's chain finds another's image in a prefix cache): PNG bytes, as evaluate's items hold a
    file's images (verdict_lab.images.encode encodes such an image once), or PIL images (as_bytes
    False, as lmms-eval hands them over)."""
    out = [Image.new("RGB", (448, 448), (200, 40 + (10 * i) % 200, 40)) for i in range(k)]
    return [_png(im) for im in out] if as_bytes else out


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()


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
    own_process: bool = True,
) -> dict:
    """ratios() on the simulated server, each question with its own image; the server in a process
    of its own (own_process), else on this process's threads, where its CPU competes with the
    client's for the interpreter lock."""
    lm, qs = LatencyModel(time_scale=time_scale), [QUESTION.format(k=k) for k in range(questions)]
    if own_process:
        with Remote(lm, steps - 1) as srv:
            client = Client(srv.url, "sim")
            return ratios(client, reps, steps, qs, images(questions), layout, srv.reset)
    sim = SimulatedServer(lm, steps - 1)
    with LoopbackServer(sim, model="sim") as srv:
        return ratios(Client(srv.url, "sim"), reps, steps, qs, images(questions), layout, sim.reset)


if __name__ == "__main__":
    reps = (int(sys.argv[1]),) if len(sys.argv) > 1 else ()
    scale = tuple(map(float, sys.argv[2:3]))
    here = sys.argv[3:4] == ["in-process"]
    out = measure(*reps, *scale, **({"own_process": False} if here else {}))
    for kind, r in out.items():
        print(
            f"{kind}: median {statistics.median(r):.2f}× base (min {min(r):.2f}, max {max(r):.2f})"
        )
