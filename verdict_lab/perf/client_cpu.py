"""The client's own CPU time per judge request, against reference operations timed in the same run.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (a step makes n·m judge calls, so the client's cost per
call is paid n·m times a step). Wall-clock ratios of whole chains move with the machine's speed and
load; a ratio of two CPU times measured on the same thread in the same run moves much less:

    per_request = the calling thread's CPU seconds (time.thread_time) of one judges.Judge call
                  in the lab's default layout through the lab's Client (the messages and the image,
                  the cache key, merging, the deadline, HTTP, reading the reply, the score);
    reply_ratio   = median over calls of per_request / the CPU time of json.loads on that call's
                    reply bytes, timed right after it;
    request_ratio = likewise, to json.dumps of that call's request payload.

The server is the simulated one (perf/simserver.py) at zero latency in this process, on its own
threads, whose CPU the calling thread's clock does not count; each call judges another candidate, so
neither the cache nor merging answers it. A regression of the client's own cost shows as a larger
ratio; a slower machine slows both sides alike. The target (TARGET) is on request_ratio, the
steadier of the two on a loaded machine. `python -m verdict_lab.perf.client_cpu` prints it.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass

import judges
import verdict
from verdict_lab.client import Client
from verdict_lab.layouts import DEFAULT_LAYOUT, layout
from verdict_lab.loopback import LoopbackServer
from verdict_lab.perf.simserver import LatencyModel, SimulatedServer
from verdict_lab.perf.speculation import QUESTION, images

# The most request_ratio may be (bench.py's targets): b3dc14b's client measured 222–240×; 437–482×
# while a PIL image was encoded again for every request; 213–317× with that memoised; 178–215×
# since a reply is serialised once, copied from that text, and an upright RGB image is not copied
# to key the memo.
TARGET = 300.0


@dataclass(frozen=True)
class ClientCpu:
    """The figure: CPU seconds per judge request, of the references, and their ratios, each the
    median over the requests (each request's ratio is to the references timed right after it)."""

    requests: int
    per_request: float  # CPU seconds of one judge call on the calling thread (median)
    loads: float  # CPU seconds of json.loads on one reply (median)
    dumps: float  # CPU seconds of json.dumps of one request payload (median)
    reply_ratio: float  # median over requests of per_request / loads
    request_ratio: float  # median over requests of per_request / dumps


def cpu_of(f, batch: int) -> float:
    """The calling thread's CPU seconds per call of f, run `batch` times in a row (one call of
    json.loads is too short for the clock alone)."""
    t = time.thread_time()
    for _ in range(batch):
        f()
    return (time.thread_time() - t) / batch


def measure(requests: int = 200, batch: int = 20) -> ClientCpu:
    """ClientCpu of `requests` visual-judge calls (json score-only replies, one 448×448 image) on
    the zero-latency simulated server. After each call, json.loads of its reply and json.dumps of
    its request are timed (`batch` times each), so that a slow phase of the machine slows a call
    and its references alike."""
    if requests < 1 or batch < 1:
        raise ValueError(f"need requests >= 1 and batch >= 1, got {requests}, {batch}")
    sim, kept = SimulatedServer(LatencyModel(time_scale=0.0)), {}

    def keep(body, path, headers=None):
        reply = sim(body, path, headers)
        kept["request"], kept["reply"] = body, json.dumps(reply).encode()
        return reply

    keep.takes_headers = True
    rows = []  # [requests] (call, loads, dumps) CPU seconds
    with LoopbackServer(keep, model="sim") as srv:
        judge = judges.Judge(Client(srv.url, "sim"), "visual", layout=layout(DEFAULT_LAYOUT))
        # A PIL image, as lmms-eval hands one over: the layout encodes it for each request.
        state = verdict.State(QUESTION.format(k=0), tuple(images(1, as_bytes=False)))
        judge(state, "A warm-up candidate: the first call opens the connection.")
        for i in range(requests):
            t = time.thread_time()
            judge(state, f"Candidate {i}: the red mug stands to the left of the laptop.")
            call = time.thread_time() - t
            reply, request = kept["reply"], kept["request"]
            loads = cpu_of(lambda: json.loads(reply), batch)
            rows.append((call, loads, cpu_of(lambda: json.dumps(request), batch)))
    median = lambda xs: statistics.median(xs)
    return ClientCpu(
        requests,
        median([c for c, _, _ in rows]),
        median([r for _, r, _ in rows]),
        median([d for _, _, d in rows]),
        median([c / r for c, r, _ in rows]),
        median([c / d for c, _, d in rows]),
    )


def said(c: ClientCpu) -> str:
    """The figure in words, as the report prints it."""
    return (
        f"{c.per_request * 1e6:,.0f} µs of the client's CPU per judge request (median of "
        f"{c.requests}) = {c.reply_ratio:,.0f}× json.loads of its reply ({c.loads * 1e6:.1f} µs) "
        f"= {c.request_ratio:,.1f}× json.dumps of its request ({c.dumps * 1e6:,.0f} µs)"
    )


if __name__ == "__main__":
    print(said(measure()))
