"""VERDICT performance benchmark: consensus throughput, step overhead, memory, the response cache.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the closed-form consensus; the step-wise loop with
n = 3 candidates and m = 3 judges; the 3.80× sequential wall-clock overhead of the limitations).

    python bench.py                 # sections 1, 2a, 3 and 4; writes docs/bench_report.md
    python bench.py --live-url URL  # also 2b, against a running server (default: $VERDICT_LIVE_URL)
    python bench.py --serve         # also 2b and 2c, on llama-servers it starts with serve_tiny.sh
    python bench.py --quick         # a smoke run: small sizes, fast simulated clock, 5 items

1. Consensus throughput of the closed form against np.linalg.solve and the mean floor (here).
2. Step overhead (perf/overhead.py): wall time of one VERDICT step / wall time of one base step, and
   the prompt tokens the server computed, in five modes and the prompt layouts (prompting.py), (a)
   on a SIMULATED continuous-batching server (here; the server is perf/simserver.py), with the
   adaptive verification rows (perf/adaptive_rows.py; also on a --live-url server), (b) on a real
   llama-server, (c) with llama-server's flags (both perf/llama_server.py), and (d) the client's own
   CPU time per judge request against json.dumps of its request, timed in the same run
   (perf/client_cpu.py): a figure that does not move with the machine's speed.
3. Memory: peak RSS of a 100-item evaluate.py run against the simulated server (perf/footprint.py).
4. The response cache: Cache.put in a file and in memory; the same evaluate.py run with either
   (likewise).

The report's targets, and what sets the figures they compare, are judged here. Every ratio is
measured within one run, so the machine's speed cancels out.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import replace

import numpy as np

import verdict
from verdict_lab.client import Client
from verdict_lab.cli import Parser
from verdict_lab.perf.footprint import cache_section, memory_section
from verdict_lab.perf.llama_server import (
    LIVE_MODES,
    LIVE_QUESTIONS,
    flags_section,
    live_section,
    server_props,
)
from verdict_lab.perf import adaptive_rows, client_cpu, speculation
from verdict_lab.perf.llama_server import LIVE_LIMITS
from verdict_lab.loopback import LoopbackServer
from verdict_lab.perf.overhead import (
    BASE,
    CONC,
    CONC_SCORE,
    MODES,
    ORDER,
    PAPER_OVERHEAD,
    SEQ_SCORE,
    adaptive_lines,
    in_layouts,
    overhead,
    picture,
    run_chains,
    time_table,
    token_table,
    tokenizer,
)
from verdict_lab.perf.simserver import SOURCES, LatencyModel, SimulatedServer
from verdict_lab.layouts import DEFAULT_LAYOUT


# -------------------------------------------------------------------------- 1. consensus throughput


def best_of(f, repeat: int = 5) -> float:
    """The fastest of `repeat` wall-clock runs of f(), in seconds (the least disturbed one)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def system_matrix(lam) -> np.ndarray:
    """The paper's A with A s* = diag(λ) ŝ: A_ii = 1 + λ_i, A_ij = −1/(m−1).  -> [m, m]"""
    m = len(lam)
    return np.full((m, m), -1.0 / (m - 1)) + np.diag(1.0 + np.asarray(lam) + 1.0 / (m - 1))


def consensus_throughput(sizes=(10**3, 10**4, 10**5, 10**6), loop_max: int = 10**5) -> tuple:
    """Time the closed form against np.linalg.solve (looped, batched) and a plain mean on [N, 3].
    Returns (markdown rows, {N: {"loop": loop/closed, "mean": closed/mean}})."""
    lam = np.array(verdict.STUBBORNNESS)
    A = system_matrix(lam)
    rows = [
        "| N | closed form | loop of solve | batched solve | mean (floor) | loop / closed | "
        "batched / closed | closed / mean |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ratios = {}
    for N in sizes:
        s_hat = np.random.default_rng(N).random((N, 3))  # [N, 3]
        t_closed = best_of(lambda: verdict.consensus(s_hat, lam))
        t_mean = best_of(lambda: s_hat.mean(axis=-1))
        rhs = s_hat * lam  # [N, 3]
        A_b = np.broadcast_to(A, (N, 3, 3))
        t_batched = best_of(lambda: np.linalg.solve(A_b, rhs[..., None]), repeat=3)
        t_loop = (
            best_of(lambda: [np.linalg.solve(A, r) for r in rhs], repeat=1)
            if N <= loop_max
            else float("nan")
        )
        ratios[N] = {"loop": t_loop / t_closed, "mean": t_closed / t_mean}
        ms = lambda t: "—" if t != t else f"{t * 1e3:.2f} ms"
        ratio = lambda a, b: "—" if a != a else f"{a / b:.1f}×"
        rows.append(
            f"| {N:,} | {ms(t_closed)} | {ms(t_loop)} | {ms(t_batched)} | {ms(t_mean)} | "
            f"{ratio(t_loop, t_closed)} | {ratio(t_batched, t_closed)} | "
            f"{ratio(t_closed, t_mean)} |"
        )
    rows.append(
        f"\nThe loop of np.linalg.solve is timed up to N = {loop_max:,} only (it grows linearly)."
    )
    return rows, ratios


# ------------------------------------------------------------------------- 2a. the simulated server


def simulated_section(lm: LatencyModel, questions: int, steps: int, reps: int) -> tuple:
    """Section 2a: (markdown lines, {mode: Result},
    {"verdict": [ratio per repetition], "speculate": [...]} of perf/speculation.py in the default
    layout)."""
    qs, limits = [speculation.QUESTION.format(k=k) for k in range(questions)], (256, None, None)
    images = speculation.images(questions)
    sim, zero = (
        SimulatedServer(lm, steps - 1),
        SimulatedServer(replace(lm, time_scale=0.0), steps - 1),
    )
    with LoopbackServer(sim, model="sim") as srv, LoopbackServer(zero, model="sim") as srv0:
        result = overhead(
            Client(srv.url, "sim"),
            in_layouts(MODES),
            qs,
            steps,
            reps,
            limits,
            images,
            sim.reset,
            count=tokenizer(srv.url),
        )
        harness = float(
            np.mean(run_chains(Client(srv0.url, "sim"), BASE, qs, steps, limits, images).seconds)
        )
    lines = simulated_description(lm, questions, steps, reps, harness)
    lines += time_table(result, lm.time_scale or 1.0) + [
        "",
        "Prompt tokens per step after each chain's first step, as the simulated "
        "server reports them (its prefix cache's hits, in whole blocks):",
        "",
    ]
    lines += (
        token_table(result)
        + ["", FLOOR, ""]
        + adaptive_lines(result)
        + [""]
        + sequential_explanation(lm)
    )
    spec = speculation.measure(reps, lm.time_scale, steps, questions, DEFAULT_LAYOUT)
    lines += [
        "",
        "`--speculate` (verdict_lab/perf/speculation.py: verdict.run's whole chains, json "
        f"score-only judges overlapped, the {DEFAULT_LAYOUT} layout, against the base reasoner's "
        f"chains; {reps} repetition(s), interleaved, the same questions, steps and clock): "
        f"{speculation.said(spec)}.",
        "",
    ]
    gated = SimulatedServer(lm, steps - 1)
    with LoopbackServer(gated, model="sim") as srv:
        lines += adaptive_rows.section(
            Client(srv.url, "sim"), reps, steps, qs, images, gated.reset
        )[0]
    return lines, result, spec


def simulated_description(
    lm: LatencyModel, questions: int, steps: int, reps: int, harness: float
) -> list:
    """What section 2a simulates: the latency model and its sources, the workload, the clock and the
    harness's own overhead (`harness` seconds per request at zero latency)."""
    scale = lm.time_scale or 1.0
    return (
        [
            "**This is a simulation**: a loopback server that sleeps as a latency model says; no "
            "GPU and no model.",
            "",
            f"Latency model: prefill {lm.prefill_tps:,.0f} tokens/s, decode {lm.decode_tps} "
            f"tokens/s per sequence, batch capacity {lm.capacity} sequences and one prefill "
            f"engine, served first come, first served; {lm.image_tokens} tokens per image, prefix "
            f"cache {'on' if lm.prefix_cache else 'off'} (blocks of 16 "
            "pseudo-tokens, hashed in the order the request lays them out: the system message, "
            f"each image where the message puts it, the text). Replies: a step {lm.step_tokens} "
            f"tokens, a final answer {lm.final_tokens}, a judge's reason and score "
            f"{lm.rationale_tokens}, a short judge's score {lm.score_tokens}. Sources of the "
            "defaults:",
            "",
        ]
        + [f"- {s}" for s in SOURCES]
        + [
            "",
            f"Workload: {questions} question(s), each with its own image, {steps} steps per chain, "
            "the last a final answer on which the n candidates agree; n = 3, m = 3, json judges; "
            f"median of {reps} repetition(s), the modes interleaved. The cache is cleared before "
            "each mode's chains, so each chain's first step finds nothing cached. Times are model "
            "seconds: wall time ÷ the clock scale "
            f"{scale}. Harness overhead (client, HTTP, simulator) measured at zero latency: "
            f"{harness * 1e3:.1f} ms per request = {harness / scale:.3f} model seconds; it "
            "inflates the modes that send more requests. Every ratio is to the base step in the "
            "per-role layout (the reasoner's own system message, as a base model alone is run).",
            "",
        ]
    )


FLOOR = (
    "The floor of a step's computed prompt tokens, per step after each chain's first: what the "
    "base step computes (the base reasoner, one request, per-role layout) plus, for each of the "
    "step's n·m judge requests, the tokens of its own task, the candidate and the reply line (the "
    "prompt's [task], Judge.task), counted alone by the server's POST /tokenize. No earlier "
    "request holds a judge's task, so no prefix cache can serve it; everything before it (system "
    "message, images, question, steps, the role's instructions) could be served. Steps that "
    "adaptive judging does not judge have the base's floor. Computed vs floor: the server's "
    "computed tokens over this floor (1.00× is a perfect prefix cache)."
)


def sequential_explanation(lm: LatencyModel, n: int = 3, m: int = 3) -> list:
    """Why sequential lands where it does. With warm caches every request is decode-bound, so one
    step costs n candidate calls and n·m judge calls of L_judge tokens, against one call of L_step
    tokens:

        sequential ≈ n + n·m·L_judge / L_step

    (1 + n·m·L_judge / L_step when the n come from one request)."""
    ratio = lambda judge_tokens: n + n * m * judge_tokens / lm.step_tokens
    # The judges' reply length L_judge at which the ratio is 3.80×.
    at = lambda base: (PAPER_OVERHEAD - base) * lm.step_tokens / (n * m)
    return [
        "Does sequential land near the paper's 3.80×? With warm caches every request is bound by "
        f"decoding, so sequential ≈ n + n·m·L_judge / L_step = {n} + {n * m}·L_judge / "
        f"{lm.step_tokens}: {ratio(lm.rationale_tokens):.1f}× with {lm.rationale_tokens}-token "
        f"rationales, {ratio(lm.score_tokens):.1f}× with {lm.score_tokens}-token score-only "
        "replies. The measured chains move away from these: their first step pays for cold image "
        "prefixes, and the final answer is a short step that is still judged in full. The ratio is "
        "set by the judges' reply length relative to the step length: 3.80× corresponds to judges "
        f"replying with about {at(n):.0f} tokens ({at(n) / lm.step_tokens:.0%} of a step) when the "
        f"n candidates are sampled one after another, or about {at(1):.0f} tokens when they come "
        "from one request, i.e. a bare score or a very short justification, which fits the paper's "
        "agents that return a single scalar. Judges that explain themselves cost several times "
        "more when run one after another."
    ]


CPU_NOTE = (
    "The calling thread's CPU time (time.thread_time) of one visual-judge call in the default "
    "layout through the lab's Client (json score-only reply with its logprobs, one 448×448 PIL "
    "image) on the simulated server "
    "at zero latency, each call another candidate, against json.loads of the same reply and "
    "json.dumps of the same request, timed on the same thread in the same run "
    "(verdict_lab/perf/client_cpu.py). The server's threads are not counted. Wall-clock ratios "
    "move with the machine; this ratio moves when the client's own work per request changes. "
    "A step pays it n·m times, and on the simulated server the judges' calls share the GIL with "
    "the simulator and each other."
)


# ----------------------------------------------------------------------------- report


def _target_row(what: str, values: list, ok, unit: str = "×") -> str:
    """One row of the targets table: the figure in each layout given, then met, missed or not
    measured, judged on the default layout's figure (the only one when a single value is given)."""
    cells = [
        "—" if v is None or v != v else f"{v:,.0f} B" if unit == " B" else f"{v:.2f}×"
        for v in values
    ]
    judged = values[ORDER.index(DEFAULT_LAYOUT)] if len(values) > 1 else values[0]
    said = (
        "not measured" if judged is None or judged != judged else "met" if ok(judged) else "missed"
    )
    return f"| {what} | {' | '.join(cells + ['—'] * (len(ORDER) - len(cells)))} | {said} |"


def targets(
    ratios: dict,
    sim: dict,
    live: dict | None,
    per_judge: float | None = None,
    spec: dict | None = None,
    cpu: client_cpu.ClientCpu | None = None,
) -> list:
    """The targets, each with its measured figure in every layout (ORDER); met or missed is judged
    on the default layout (layouts.DEFAULT_LAYOUT). per_judge: the response cache's stored bytes per
    judge reply (section 4); spec: perf/speculation.py's ratios (section 2a), measured in the
    default layout; cpu: the client's CPU per judge request (section 2d)."""
    each = lambda result, m, f: [
        f(result, replace(m, layout=lay)) if result else None for lay in ORDER
    ]
    measured = [
        _target_row(what, each(res, m, f), ok) for what, res, m, f, ok in overhead_checks(sim, live)
    ]
    speculate = statistics.median(spec["speculate"]) if spec else None
    # The speculation row goes after the simulated rows, measured in the default layout only.
    measured.insert(
        2,
        _target_row(
            "simulated server: `--speculate` ≤ 1.25× base, whole chains (median)",
            [speculate if lay == DEFAULT_LAYOUT else None for lay in ORDER],
            at_most(1.25),
        ),
    )
    loop, mean = ratios.get(10**5, {}).get("loop"), ratios.get(10**6, {}).get("mean")
    return [
        f"Met or missed on the default layout ({DEFAULT_LAYOUT}).",
        "",
        "| target | " + " | ".join(f"measured, {lay} layout" for lay in ORDER) + " | |",
        "|---|" + "---:|" * len(ORDER) + "---|",
        _target_row(
            "closed form ≥ 50× faster than a loop of np.linalg.solve at N = 10⁵",
            [loop],
            lambda v: v >= 50,
        ),
        _target_row("closed form ≤ 10× the time of mean at N = 10⁶", [mean], at_most(10)),
        _target_row(
            "response cache: ≤ 2 KB per judge reply, stored bytes (section 4)",
            [per_judge],
            at_most(2000),
            " B",
        ),
        _target_row(
            f"client's CPU per judge request ≤ {client_cpu.TARGET:.0f}× json.dumps of its request "
            "(section 2d)",
            [cpu.request_ratio if cpu else None],
            at_most(client_cpu.TARGET),
        ),
    ] + measured


def at_most(bound: float):
    return lambda v: v <= bound


def overhead_checks(sim: dict, live: dict | None) -> tuple:
    """The step-overhead targets: (the target; {mode: Result}; the mode; the figure; met if)."""
    ratio = lambda result, m: result[m].ratio if m in result else None
    to_floor = lambda result, m: result[m].to_floor if m in result else None
    near = lambda v: 0.75 <= v / PAPER_OVERHEAD <= 1.25
    return (
        (
            f"simulated server: default settings ({CONC_SCORE.name}) ≤ 1.6× base, whole chains",
            sim,
            CONC_SCORE,
            ratio,
            at_most(1.6),
        ),
        (
            f"simulated server: the paper's sequential setting ({SEQ_SCORE.name}) within ±25% of "
            "3.80×, whole chains",
            sim,
            SEQ_SCORE,
            ratio,
            near,
        ),
        (
            f"real llama-server: default settings ({CONC_SCORE.name}), computed prompt tokens per "
            "step ≤ 1.5× the floor",
            live,
            CONC_SCORE,
            to_floor,
            at_most(1.5),
        ),
    )


def causes(sim: dict, live: dict | None) -> list:
    """What sets the figures the targets compare, measured in this run: the prompt tokens computed
    per step against the floor (Result.floor) in each layout, on the simulator (a prefix cache that
    keeps every block it saw) and on llama-server, and where the real server's time goes (its own
    timings: computing prompts against generating)."""
    multiple = lambda res, m: (
        f"{res[m].to_floor:.2f}×" if res and m in res and res[m].to_floor is not None else "—"
    )
    per_layout = lambda res: ", ".join(
        f"{multiple(res, replace(CONC_SCORE, layout=lay))} in the {lay} layout" for lay in ORDER
    )
    per_chain = lambda res: ", ".join(
        f"{res[m].per_chain:,.0f} in the {lay} layout"
        if res and m in res and res[m].per_chain is not None
        else f"— in the {lay} layout"
        for lay in ORDER
        for m in [replace(CONC_SCORE, layout=lay)]
    )
    lines = [
        "- Prompt tokens computed per step after the first, against the floor (section 2a): each "
        "of a VERDICT step's n·m judge requests ends with its own candidate and task, which no "
        "earlier request holds, so any prefix cache computes them; the rest of a request could be "
        "served from the cache. What a layout computes beyond the floor is what its cache could "
        "not serve: in the shared layout the role's instructions follow the previous steps, so "
        "they are computed again at every step. Concurrent, "
        "short judges: the simulated server (whose cache keeps every block it has seen) computes "
        f"{per_layout(sim)}; the real llama-server {per_layout(live)}.",
        "- Prompt tokens computed per whole chain, its cold first step too (concurrent, short "
        f"judges): the simulated server {per_chain(sim)}; the real llama-server {per_chain(live)}. "
        "A layout whose requests differ from the first token (per-role) computes each item's image "
        "once per role.",
    ]
    if live and live[BASE].server_ms:
        ms = lambda m: live[m].server_ms or (math.nan, math.nan)
        at_default = lambda m: replace(m, layout=DEFAULT_LAYOUT)
        lines.append(
            "- Time on the real llama-server, from its own timings (per step, all steps; a "
            "request's milliseconds, so parallel requests overlap): "
            + "; ".join(
                f"{m.name} ({m.layout}) {ms(m)[0]:,.0f} ms computing prompts and {ms(m)[1]:,.0f} "
                f"ms generating ({ms(m)[1] / sum(ms(m)):.0%} generating)"
                for m in (BASE, at_default(CONC), at_default(CONC_SCORE))
                if m in live
            )
            + ". On 2 CPU cores the slots share "
            "the same cores, so generation is not batched into free capacity as on a GPU: the "
            "judges' generated tokens cost time one after another."
        )
    return lines


def parse_args(argv) -> argparse.Namespace:
    """The command's flags; a bad value is one line and exit 2."""
    p = Parser(prog="verdict_lab.bench", description=__doc__.splitlines()[0])
    p.add_argument(
        "--out",
        default="docs/bench_report.md",
        help="where to write the report (its picture beside it)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a fast smoke run (small sizes; targets partly unmeasured)",
    )
    p.add_argument(
        "--live-url",
        default=os.environ.get("VERDICT_LIVE_URL"),
        help="a real server for section 2b",
    )
    p.add_argument(
        "--serve",
        action="store_true",
        help="start llama-servers with serve_tiny.sh for 2b and 2c "
        "(SmolLM2-135M-Instruct), each flag set of 2c in turn, and stop them; "
        "--live-url is then unused",
    )
    p.add_argument("--live-model", default="smollm2", help="the model name sent to the real server")
    p.add_argument("--live-reps", type=int, default=3, help="repetitions of section 2b (3)")
    p.add_argument(
        "--flag-reps", type=int, help="repetitions of section 2c's flag sets (default: --live-reps)"
    )
    p.add_argument("--sim-reps", type=int, default=3, help="repetitions of section 2a (3)")
    p.add_argument(
        "--live-steps", type=int, default=3, help="steps per chain in sections 2b and 2c (3)"
    )
    p.add_argument(
        "--live-questions",
        type=int,
        default=2,
        choices=range(1, len(LIVE_QUESTIONS) + 1),
        help=f"questions in sections 2b and 2c (2; at most {len(LIVE_QUESTIONS)})",
    )
    p.add_argument(
        "--time-scale",
        type=float,
        help="wall seconds per simulated second (0.5; 0.02 with --quick)",
    )
    args = p.parse_args(argv)
    flag_reps = 1 if args.flag_reps is None else args.flag_reps
    scale_ok = args.time_scale is None or (math.isfinite(args.time_scale) and args.time_scale > 0)
    if min(args.live_reps, args.sim_reps, flag_reps) < 1 or args.live_steps < 2 or not scale_ok:
        p.error(
            "need --live-reps, --flag-reps, --sim-reps >= 1, --live-steps >= 2, a finite "
            f"--time-scale > 0; got {args.live_reps}, {args.flag_reps}, {args.sim_reps}, "
            f"{args.live_steps}, {args.time_scale}"
        )
    return args


def header(args, argv) -> list:
    """The report's title, machine, command and section 1's heading."""
    shown = " ".join(argv if argv is not None else sys.argv[1:])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    smoke = " A --quick smoke run: the figures mean little." if args.quick else ""
    return [
        "# VERDICT benchmark report",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, NumPy {np.__version__}; load average {load} at the start "
        f"(the machine may be shared).{smoke}",
        "",
        f"Command: `python -m verdict_lab.bench {shown}`",
        "",
        "## 1. Consensus throughput on [N, 3] (best of 5)",
        "",
    ]


def real_server_sections(args) -> tuple:
    """Sections 2b and 2c: (2b's lines, 2c's lines, {mode: Result} of 2b or None)."""
    q = args.quick
    reps, flag_reps = (1, 1) if q else (args.live_reps, args.flag_reps)
    if args.serve:
        return flags_section(reps, args.live_steps, args.live_model, args.live_questions, flag_reps)
    skipped = ["skipped: pass --serve to start servers with each flag set."]
    if args.live_url:
        lines, live = live_section(
            args.live_url, args.live_model, reps, args.live_steps, LIVE_MODES, args.live_questions
        )
        lines += ["", *live_adaptive(args, reps)]
        return lines, skipped, live
    none = (
        "skipped: no live server (pass --serve, or --live-url URL or set "
        "VERDICT_LIVE_URL; serve_tiny.sh "
    )
    return [none + "starts one)."], skipped, None


def live_adaptive(args, reps: int) -> list:
    """The adaptive rows on the live server (its caches stay warm: it is not this process's to
    restart), each question with its own image when the server takes images."""
    qs = LIVE_QUESTIONS[: args.live_questions]
    vision = server_props(args.live_url).get("modalities", {}).get("vision")
    images = speculation.images(len(qs)) if vision else None
    client = Client(args.live_url, args.live_model, timeout=900.0)
    return adaptive_rows.section(
        client, reps, args.live_steps, qs, images, lambda: None, max_tokens=LIVE_LIMITS[0]
    )[0]


def main(argv=None) -> int:
    args = parse_args(argv)
    q, t0 = args.quick, time.perf_counter()
    lines = header(args, argv)
    rows, ratios = consensus_throughput(
        (10**3, 10**4) if q else (10**3, 10**4, 10**5, 10**6), 10**4 if q else 10**5
    )
    lines += rows + [
        "",
        "## 2. Step overhead: one VERDICT step (n = 3, m = 3) / one base step (n = 1)",
        "",
        "![overhead per mode and prompt layout](bench_overhead.png)",
        "",
        "### 2a. Simulated continuous-batching server (a simulation, not a measurement of a GPU)",
        "",
    ]
    scale = args.time_scale or (0.02 if q else 0.5)
    sim_lines, sim, spec = simulated_section(
        LatencyModel(time_scale=scale), 1 if q else 2, 3 if q else 4, 1 if q else args.sim_reps
    )
    live_lines, flag_lines, live = real_server_sections(args)
    lines += sim_lines + ["", "### 2b. Real llama-server (llama.cpp, C++)", ""]
    lines += live_lines + ["", "### 2c. llama-server's flags", ""] + flag_lines
    cpu = client_cpu.measure(20 if q else 200)
    lines += ["", "### 2d. The client's own CPU per judge request", "", CPU_NOTE, ""]
    lines += [client_cpu.said(cpu) + "."]
    docs = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(docs, exist_ok=True)
    picture(
        [("simulated server (2a)", sim)] + ([("real llama-server (2b)", live)] if live else []),
        os.path.join(docs, "bench_overhead.png"),
    )
    lines += ["", "## 3. Memory", ""] + memory_section(5 if q else 100)
    cache_lines, per_judge = cache_section(5 if q else 100, 200 if q else 2000)
    lines += ["", "## 4. The response cache", ""] + cache_lines
    lines += ["", "## Targets", ""] + targets(ratios, sim, live, per_judge, spec, cpu)
    lines += ["", "What sets the figures the targets compare:", ""] + causes(sim, live)
    report = (
        "\n".join(lines + ["", f"The whole run took {time.perf_counter() - t0:,.0f} s."]) + "\n"
    )
    print(report)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
