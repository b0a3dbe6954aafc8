"""VERDICT performance benchmark: consensus throughput, step overhead, memory, the response cache.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the closed-form consensus; the step-wise loop with
n = 3 candidates and m = 3 judges; the 3.80× sequential wall-clock overhead of the limitations).

    python bench.py                      # sections 1, 2a, 3 and 4; writes docs/bench_report.md
    python bench.py --live-url URL       # also 2b, against a running server (default: $VERDICT_LIVE_URL)
    python bench.py --serve              # also 2b and 2c, on llama-servers it starts with serve_tiny.sh
    python bench.py --quick              # a smoke run: small sizes, fast simulated clock, 5 items

1. Consensus throughput of the closed form against np.linalg.solve and the mean floor.
2. Step overhead (perf/overhead.py): wall time of one VERDICT step / wall time of one base step, and the prompt
   tokens the server computed, in five modes and both prompt layouts (prompting.py), (a) on a SIMULATED
   continuous-batching server (perf/simserver.py), (b) on a real llama-server, (c) with llama-server's flags.
3. Memory: peak RSS of a 100-item evaluate.py run against the simulated server.
4. The response cache: Cache.put in a file and in memory; the same evaluate.py run with either.

Every ratio is measured within one run, so the machine's speed cancels out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import replace

import numpy as np
from PIL import Image

import judges
import verdict
from client import Cache, Client, EndpointError
from perf.loopback import LoopbackServer, chat_response
from perf.overhead import (
    ADAPTIVE,
    BASE,
    CONC,
    CONC_SCORE,
    MODES,
    ORDER,
    PAPER_OVERHEAD,
    SEQ,
    SEQ_SCORE,
    adaptive_lines,
    in_layouts,
    overhead,
    picture,
    run_chains,
    time_table,
    token_table,
)
from perf.simserver import SOURCES, LatencyModel, SimulatedServer


# ----------------------------------------------------------------------------- 1. consensus throughput


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
        "| N | closed form | loop of solve | batched solve | mean (floor) | loop / closed | batched / closed | closed / mean |",
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
            best_of(lambda: [np.linalg.solve(A, r) for r in rhs], repeat=1) if N <= loop_max else float("nan")
        )
        ratios[N] = {"loop": t_loop / t_closed, "mean": t_closed / t_mean}
        ms = lambda t: "—" if t != t else f"{t * 1e3:.2f} ms"
        ratio = lambda a, b: "—" if a != a else f"{a / b:.1f}×"
        rows.append(
            f"| {N:,} | {ms(t_closed)} | {ms(t_loop)} | {ms(t_batched)} | {ms(t_mean)} | "
            f"{ratio(t_loop, t_closed)} | {ratio(t_batched, t_closed)} | {ratio(t_closed, t_mean)} |"
        )
    rows.append(f"\nThe loop of np.linalg.solve is timed up to N = {loop_max:,} only (it grows linearly).")
    return rows, ratios


# ----------------------------------------------------------------------------- 2a. the simulated server

SIM_QUESTION = (
    "Question {k}: Is the red mug to the left of the laptop, as seen from the camera? "
    "Options: A. yes B. no C. they overlap D. the mug is not visible. Answer with the option's letter."
)


def simulated_section(lm: LatencyModel, questions: int, steps: int, reps: int) -> tuple:
    """Section 2a: (markdown lines, {mode: Result})."""
    image, limits = Image.new("RGB", (448, 448), (200, 40, 40)), (256, None, None)
    qs = [SIM_QUESTION.format(k=k) for k in range(questions)]
    sim, zero = SimulatedServer(lm, steps - 1), SimulatedServer(replace(lm, time_scale=0.0), steps - 1)
    with LoopbackServer(sim, model="sim") as srv, LoopbackServer(zero, model="sim") as srv0:
        result = overhead(
            Client(srv.url, "sim"), in_layouts(MODES), qs, steps, reps, limits, image, sim.reset
        )
        harness = float(np.mean(run_chains(Client(srv0.url, "sim"), BASE, qs, steps, limits, image).seconds))
    scale = lm.time_scale or 1.0
    lines = (
        [
            "**This is a simulation**: a loopback server that sleeps as a latency model says; no GPU and no model.",
            "",
            f"Latency model: prefill {lm.prefill_tps:,.0f} tokens/s, decode {lm.decode_tps} tokens/s per sequence, "
            f"batch capacity {lm.capacity} sequences, {lm.image_tokens} tokens per image, prefix cache "
            f"{'on' if lm.prefix_cache else 'off'} (blocks of 16 pseudo-tokens, hashed in the order the request lays "
            f"them out: the system message, each image where the message puts it, the text). Replies: a step "
            f"{lm.step_tokens} tokens, a final answer {lm.final_tokens}, a judge's reason and score "
            f"{lm.rationale_tokens}, a short judge's score {lm.score_tokens}. Sources of the defaults:",
            "",
        ]
        + [f"- {s}" for s in SOURCES]
        + [
            "",
            f"Workload: {questions} question(s) with one image each, {steps} steps per chain, the last a final answer on "
            f"which the n candidates agree; n = 3, m = 3, json judges; median of {reps} repetition(s), the modes "
            "interleaved. The cache is cleared before each mode's chains, so each chain's first step finds nothing "
            f"cached. Times are model seconds: wall time ÷ the clock scale {scale}. Harness overhead (client, HTTP, "
            f"simulator) measured at zero latency: {harness * 1e3:.1f} ms per request = {harness / scale:.3f} model "
            "seconds; it inflates the modes that send more requests. Every ratio is to the base step in the "
            "per-role layout (the reasoner's own system message, as a base model alone is run).",
            "",
        ]
    )
    lines += time_table(result, scale) + [
        "",
        "Prompt tokens per step after each chain's first step, as the simulated "
        "server reports them (its prefix cache's hits, in whole blocks):",
        "",
    ]
    return lines + token_table(result) + [""] + adaptive_lines(result) + [""] + sequential_explanation(
        lm
    ), result


def sequential_explanation(lm: LatencyModel, n: int = 3, m: int = 3) -> list:
    """Why sequential lands where it does. With warm caches every request is decode-bound, so one step
    costs n candidate calls and n·m judge calls of L_judge tokens, against one call of L_step tokens:
    sequential ≈ n + n·m·L_judge / L_step (1 + n·m·L_judge / L_step when the n come from one request)."""
    ratio = lambda judge_tokens: n + n * m * judge_tokens / lm.step_tokens
    at = lambda base: (PAPER_OVERHEAD - base) * lm.step_tokens / (n * m)  # the L_judge that gives 3.80×
    return [
        "Does sequential land near the paper's 3.80×? With warm caches every request is bound by decoding, so "
        f"sequential ≈ n + n·m·L_judge / L_step = {n} + {n * m}·L_judge / {lm.step_tokens}: "
        f"{ratio(lm.rationale_tokens):.1f}× with {lm.rationale_tokens}-token rationales, "
        f"{ratio(lm.score_tokens):.1f}× with {lm.score_tokens}-token score-only replies. The measured chains move "
        "away from these: their first step pays for cold image prefixes, and the final answer is a short step "
        "that is still judged in full. The ratio is set by the judges' reply length relative to the step length: "
        f"3.80× corresponds to judges replying with about {at(n):.0f} tokens ({at(n) / lm.step_tokens:.0%} of a "
        f"step) when the n candidates are sampled one after another, or about {at(1):.0f} tokens when they come "
        "from one request, i.e. a bare score or a very short justification, which fits the paper's agents that "
        "return a single scalar. Judges that explain themselves cost several times more when run one after another."
    ]


# ----------------------------------------------------------------------------- 2b, 2c. real llama-servers

LIVE_QUESTIONS = (
    "Tom has 3 apples and buys 2 more. How many apples does he have? Options: A. 4 B. 5 C. 6",
    "A shelf holds 4 red books and 3 blue books. How many books are on it? Options: A. 6 B. 7 C. 8",
)
LIVE_MODES = in_layouts((SEQ, CONC, CONC_SCORE, ADAPTIVE))  # 2b: every mode in every layout
FLAG_MODES = in_layouts((CONC_SCORE,))  # 2c: the mode with the fewest tokens to decode
LIVE_LIMITS = (
    48,
    None,
    None,
)  # max_tokens of a step; the judges' own (json: a reason of at most 200 characters)
SERVER_FLAGS = (  # llama-server flags tried in 2c, appended to serve_tiny.sh's (-c 8192 -np 4 -t 2), with what they do
    (
        "",
        "serve_tiny.sh's own: 4 slots, each its own KV cache; a prompt cache in RAM (--cache-ram, 8,192 MiB)",
    ),
    ("-kvu", "one KV buffer shared by the slots (unified KV)"),
    (
        "--cache-reuse 32",
        "reuse cached chunks of 32 tokens or more after the common prefix, by shifting their KV",
    ),
    ("--cache-ram 0", "no prompt cache in RAM: a slot keeps only its last prompt"),
    ("-np 2", "2 slots (n = 3 candidates need 3: llama-server serves n choices in n slots)"),
    ("-np 8 -c 16384", "8 slots (the same 2,048 tokens each)"),
)


def server_props(url: str) -> dict:
    """llama-server's GET /props (slots, context, model file), or {} when the server has none."""
    try:
        with urllib.request.urlopen(re.sub(r"/v1/?$", "", url) + "/props", timeout=10) as r:
            return json.load(r)
    except (OSError, ValueError):
        return {}


def start_server(flags: str) -> tuple:
    """(url, pid) of a llama-server serving SmolLM2-135M-Instruct that serve_tiny.sh starts with `flags` added."""
    env = {**os.environ, "VERDICT_TINY_FLAGS": flags, "VERDICT_TINY_MODEL": "smollm2"}
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_tiny.sh")
    run = subprocess.run([script], env=env, capture_output=True, text=True, timeout=1800)
    found = [re.search(rf"(?m)^{k}=(\S+)$", run.stdout) for k in ("VERDICT_LIVE_URL", "VERDICT_SERVER_PID")]
    if run.returncode != 0 or not all(found):
        raise RuntimeError(
            f"serve_tiny.sh with {flags!r} failed (exit code {run.returncode}): "
            f"{' '.join(run.stderr.split())[-300:]}"
        )
    return found[0].group(1), int(found[1].group(1))


def stop_server(pid: int, wait: float = 30.0) -> None:
    """Stop the server with this PID: SIGTERM, then SIGKILL if it is still running after `wait` seconds."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":  # exited; its parent has not reaped it yet
                    return
        except OSError:  # gone
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)


def live_section(url: str, model: str, reps: int, steps: int, modes: tuple, questions: int = 2) -> tuple:
    """Section 2b against a real OpenAI-compatible server (text only: the tiny model has no vision), on the first
    `questions` of LIVE_QUESTIONS: (markdown lines, {mode: Result})."""
    props, load, t0 = server_props(url), os.getloadavg(), time.perf_counter()
    qs = LIVE_QUESTIONS[:questions]
    result = overhead(Client(url, model, timeout=900.0), modes, qs, steps, reps, LIVE_LIMITS)
    avg = lambda xs: ", ".join(f"{x:.1f}" for x in xs)
    lines = [
        f"A real server at {url}: llama.cpp's llama-server reporting {props.get('total_slots', '?')} parallel "
        f"slots of {props.get('default_generation_settings', {}).get('n_ctx', '?')} tokens and the model "
        f"{os.path.basename(str(props.get('model_path', '?')))}, on a machine with {os.cpu_count()} cores.",
        "",
        f"Workload: {len(qs)} text question(s), {steps} steps per chain, max_tokens {LIVE_LIMITS[0]} per "
        "step, json judges (a reason of at most 200 characters and a score; short judges the score alone); a "
        f"judge whose reply does not parse asks once more; median of {reps} repetition(s), the modes interleaved; "
        "the server's caches stay warm between modes. Every ratio is to the base step in the per-role layout. "
        f"Load average (1, 5, 15 min) before: {avg(load)}; after: {avg(os.getloadavg())} (other processes may "
        f"share the machine). The section took {time.perf_counter() - t0:.0f} s.",
        "",
    ]
    lines += (
        time_table(result)
        + [
            "",
            "Prompt tokens per step after each chain's first step, as the server reports "
            "them (usage.prompt_tokens_details.cached_tokens):",
            "",
        ]
        + token_table(result)
    )
    return lines + [""] + adaptive_lines(result), result


def flags_section(
    reps: int, steps: int, model: str, questions: int = 2, flag_reps: int | None = None
) -> tuple:
    """Sections 2b and 2c on servers this process starts (serve_tiny.sh) and stops: 2b (LIVE_MODES, `reps`
    repetitions) on serve_tiny.sh's own flags, 2c (FLAG_MODES, `flag_reps`, default `reps`) with each of
    SERVER_FLAGS. (2b lines, 2c lines, 2b result)."""
    flag_reps = reps if flag_reps is None else flag_reps
    lines, first = [], None
    rows = [
        "| flags | what they do | mode | layout | seconds per step | overhead vs base | computed prompt tokens "
        "per step |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for flags, what in SERVER_FLAGS:
        url, pid = start_server(flags)
        try:
            section, result = (
                live_section(url, model, reps, steps, LIVE_MODES, questions)
                if first is None
                else live_section(url, model, flag_reps, steps, FLAG_MODES, questions)
            )
        except (
            EndpointError
        ) as e:  # a flag set the workload cannot run on (-np 2 refuses n = 3): said, not fatal
            if first is None:
                raise
            rows.append(f"| `{flags}` | {what} | the run failed: {e.message} | | | | |")
            continue
        finally:
            stop_server(pid)
        lines, first = (section, result) if first is None else (lines, first)
        rows += [
            f"| `{flags or '(none)'}` | {what} | {m.name} | {m.layout} | {r.seconds:.2f} | {r.ratio:.2f}× | "
            f"{'—' if r.computed is None else f'{r.computed:,.0f}'} |"
            for m, r in result.items()
            if m in FLAG_MODES
        ]
    intro = [
        f"Each server: serve_tiny.sh (llama-server, SmolLM2-135M-Instruct, -c 8192 -np 4 -t 2) with the flags "
        f"added, started and stopped by this run; {questions} question(s), {steps} steps per chain, median of "
        f"{flag_reps} repetition(s) ({reps} for the rows without flags, which are 2b's). Computed prompt tokens: per step after each "
        "chain's first. Each ratio is to the base step (per-role layout) on the same server.",
        "",
    ]
    return lines, intro + rows, first


# ----------------------------------------------------------------------------- 3. memory


def write_items(folder: str, k: int) -> str:
    """A k-item JSONL benchmark with one 448×448 PNG per item; returns its path."""
    path, options = (
        os.path.join(folder, "bench_items.jsonl"),
        {"A": "yes", "B": "no", "C": "overlap", "D": "unseen"},
    )
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(k):
            img = Image.new("RGB", (448, 448), (255, 255, 255))
            img.paste((40 + i % 200, 90, 160), (i % 300, 50, i % 300 + 120, 170))
            img.save(os.path.join(folder, f"img{i}.png"))
            fh.write(
                json.dumps(
                    {
                        "id": f"q{i}",
                        "question": f"Item {i}: is the mug left of the laptop?",
                        "options": options,
                        "answer": "AB"[i % 2],
                        "image": f"img{i}.png",
                    }
                )
                + "\n"
            )
    return path


def run_evaluate(k: int, extra: tuple = (), timeout: float = 1800.0) -> tuple | None:
    """`python evaluate.py` on k generated items, every method, against the simulated server with no sleeping.
    Returns (its exit code, its seconds, one sentence saying what ran and how it ended), or None without evaluate.py."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "evaluate.py")
    if not os.path.exists(script):
        return None
    with (
        tempfile.TemporaryDirectory() as tmp,
        LoopbackServer(SimulatedServer(LatencyModel(time_scale=0.0), 2)) as srv,
    ):
        url, t0 = srv.url, time.perf_counter()
        cmd = [
            sys.executable,
            script,
            "--data",
            write_items(tmp, k),
            "--base-url",
            url,
            "--model",
            "sim",
            "--seeds",
            "1",
            "--out",
            os.path.join(tmp, "out"),
            *extra,
        ]
        run = subprocess.run(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout
        )
        seconds, calls = time.perf_counter() - t0, len(srv.chats)
    said = (
        f"`{' '.join(['python evaluate.py'] + cmd[2:]).replace(url, 'SIM_URL').replace(tmp, 'TMP')}` on {k} generated "
        "items (one 448×448 PNG each), every method, against the simulated server with no sleeping"
    )
    if run.returncode != 0:
        return (
            run.returncode,
            seconds,
            (
                f"{said}: **the run failed** (exit code {run.returncode}, after {seconds:.0f} s); "
                f"the end of its stderr: `{' '.join(run.stderr[-400:].split())}`"
            ),
        )
    return 0, seconds, f"{said}: exit code 0, {calls:,} requests, {seconds:.0f} s."


def memory_section(k: int) -> list:
    """Section 3: peak RSS of run_evaluate's evaluate.py: resource's RUSAGE_CHILDREN maximum, which is that
    child's, as bench.py starts no other process before it. A failed run reports no figure."""
    run = run_evaluate(k)
    if run is None:
        return ["skipped: evaluate.py not found"]
    if run[0] != 0:
        return [run[2], "", "No peak RSS is reported for a failed run."]
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux -> MiB
    return [
        run[2],
        "",
        f"**Peak RSS of the evaluate.py process: {peak:.0f} MiB** "
        "(resource.getrusage(RUSAGE_CHILDREN).ru_maxrss).",
    ]


# ----------------------------------------------------------------------------- 4. the response cache


def put_seconds(path: str, puts: int, threads: int) -> float:
    """Wall seconds per Cache.put of a 48-token reply, `threads` threads putting at once."""
    cache, reply, t0 = (
        Cache(path),
        chat_response("Observation: " + " ".join(["detail"] * 44)),
        time.perf_counter(),
    )
    judges.thread_map(threads)(lambda i: cache.put(f"key {i}", reply), range(puts))
    seconds = time.perf_counter() - t0
    cache.close()
    return seconds / puts


def cache_section(k: int, puts: int) -> list:
    """Section 4: what the response cache costs: Cache.put in a file against in memory, then run_evaluate
    with evaluate.py's default cache file (OUT/cache.sqlite) against --cache :memory:."""
    with tempfile.TemporaryDirectory() as tmp:
        us = {
            (where, t): 1e6
            * put_seconds(os.path.join(tmp, f"{t}.sqlite") if where == "file" else ":memory:", puts, t)
            for where in ("file", "memory")
            for t in (1, 4)
        }
    runs = {
        where: run_evaluate(k, extra) for where, extra in (("file", ()), ("memory", ("--cache", ":memory:")))
    }
    lines = (
        [
            f"Cache.put of {puts:,} replies (a 48-token step each), in a file in a temporary folder and in memory:",
            "",
            "| cache | 1 thread | 4 threads at once |",
            "|---|---:|---:|",
        ]
        + [f"| {w} | {us[w, 1]:,.0f} µs per put | {us[w, 4]:,.0f} µs per put |" for w in ("file", "memory")]
        + [""]
    )
    if runs["file"] is None:
        return lines + ["evaluate.py: skipped (not found)."]
    lines += [f"- cache in a file: {runs['file'][2]}", f"- cache in memory: {runs['memory'][2]}"]
    if runs["file"][0] == runs["memory"][0] == 0:
        lines += [
            "",
            f"With the cache in a file, evaluate.py takes {runs['file'][1] / runs['memory'][1]:.2f}× its time "
            "with the cache in memory.",
        ]
    return lines


# ----------------------------------------------------------------------------- report


def targets(ratios: dict, sim: dict, live: dict | None) -> list:
    """The targets, each with its measured figure in every layout (ORDER); met or missed is judged on the shared
    layout, the default."""

    def row(what, values, ok):
        cells = ["—" if v is None or v != v else f"{v:.2f}×" for v in values]
        judged = values[ORDER.index("shared")] if len(values) > 1 else values[0]
        said = "not measured" if judged is None or judged != judged else "met" if ok(judged) else "missed"
        return f"| {what} | {' | '.join(cells + ['—'] * (len(ORDER) - len(cells)))} | {said} |"

    each = lambda result, m, f: [f(result, replace(m, layout=lay)) if result else None for lay in ORDER]
    ratio = lambda result, m: result[m].ratio if m in result else None
    computed = lambda result, m: (
        result[m].computed / result[BASE].computed
        if m in result and result[m].computed and result[BASE].computed
        else None
    )
    near = lambda x: 0.75 <= x / PAPER_OVERHEAD <= 1.25
    return (
        [
            "| target | " + " | ".join(f"measured, {lay} layout" for lay in ORDER) + " | |",
            "|---|" + "---:|" * len(ORDER) + "---|",
            row(
                "closed form ≥ 50× faster than a loop of np.linalg.solve at N = 10⁵",
                [ratios.get(10**5, {}).get("loop")],
                lambda v: v >= 50,
            ),
            row(
                "closed form ≤ 10× the time of mean at N = 10⁶",
                [ratios.get(10**6, {}).get("mean")],
                lambda v: v <= 10,
            ),
        ]
        + [
            row(
                f"simulated server: {m.name} ≤ 1.3× base, whole chains",
                each(sim, m, ratio),
                lambda v: v <= 1.3,
            )
            for m in (CONC, CONC_SCORE, ADAPTIVE)
        ]
        + [
            row(
                f"simulated server: {m.name} near the paper's 3.80× (within ±25%), whole chains",
                each(sim, m, ratio),
                near,
            )
            for m in (SEQ, SEQ_SCORE)
        ]
        + [
            row(f"real llama-server: {m.name} ≤ 3.8× base per step", each(live, m, ratio), lambda v: v <= 3.8)
            for m in (CONC, CONC_SCORE, ADAPTIVE)
        ]
        + [
            row(
                f"real llama-server: {m.name}, prompt tokens computed per step ≤ 2× base's, after the first step",
                each(live, m, computed),
                lambda v: v <= 2,
            )
            for m in (CONC, CONC_SCORE, ADAPTIVE)
        ]
        + [
            row(
                f"simulated server: {m.name}, prompt tokens computed per step ≤ 2× base's, after the first step",
                each(sim, m, computed),
                lambda v: v <= 2,
            )
            for m in (CONC, CONC_SCORE)
        ]
    )


def causes(sim: dict, live: dict | None) -> list:
    """What sets the two figures the targets compare, measured in this run: the prompt tokens a perfect prefix cache
    still computes (the simulator's keeps every block it saw), and where a real llama-server's time goes (its own
    timings: computing prompts against generating)."""
    shared = lambda m: replace(m, layout="shared")
    ratio = lambda res, m: (
        f"{res[m].computed / res[BASE].computed:.1f}×"
        if m in res and res[m].computed and res[BASE].computed
        else "—"
    )
    lines = [
        "- Prompt tokens computed per step after the first: a base step's request holds, beyond what its previous "
        "request held, only that request's reply and the task text; each of a VERDICT step's n·m judge requests "
        "ends with its own candidate and task, which no earlier request holds, so any prefix cache computes them "
        "(n·m candidates and tasks against one step). The simulated server's cache keeps every block it has seen, "
        "so it computes only what no prefix cache can reuse in a layout: concurrent judging computes "
        f"{ratio(sim, shared(CONC))} the base step's tokens there in the shared layout (short judges "
        f"{ratio(sim, shared(CONC_SCORE))}), {ratio(sim, replace(CONC, layout='role-first'))} in the role-first "
        f"layout, {ratio(sim, replace(CONC, layout='per-role'))} in the per-role layout."
    ]
    if live and live[BASE].server_ms:
        ms = lambda m: live[m].server_ms or (math.nan, math.nan)
        lines.append(
            "- Time on the real llama-server, from its own timings (per step, all steps; a request's "
            "milliseconds, so parallel requests overlap): "
            + "; ".join(
                f"{m.name} ({m.layout}) {ms(m)[0]:,.0f} ms computing prompts and {ms(m)[1]:,.0f} ms "
                f"generating ({ms(m)[1] / sum(ms(m)):.0%} generating)"
                for m in (BASE, shared(CONC), shared(CONC_SCORE))
                if m in live
            )
            + ". On 2 CPU cores the slots share "
            "the same cores, so generation is not batched into free capacity as on a GPU: the judges' "
            "generated tokens cost time one after another."
        )
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--out", default="docs/bench_report.md", help="where to write the report (its picture beside it)"
    )
    p.add_argument(
        "--quick", action="store_true", help="a fast smoke run (small sizes; targets partly unmeasured)"
    )
    p.add_argument(
        "--live-url", default=os.environ.get("VERDICT_LIVE_URL"), help="a real server for section 2b"
    )
    p.add_argument(
        "--serve",
        action="store_true",
        help="start llama-servers with serve_tiny.sh for 2b and 2c "
        "(SmolLM2-135M-Instruct), each flag set of 2c in turn, and stop them; --live-url is then unused",
    )
    p.add_argument("--live-model", default="smollm2", help="the model name sent to the real server")
    p.add_argument("--live-reps", type=int, default=3, help="repetitions of section 2b (3)")
    p.add_argument(
        "--flag-reps", type=int, help="repetitions of section 2c's flag sets (default: --live-reps)"
    )
    p.add_argument("--sim-reps", type=int, default=3, help="repetitions of section 2a (3)")
    p.add_argument("--live-steps", type=int, default=3, help="steps per chain in sections 2b and 2c (3)")
    p.add_argument(
        "--live-questions",
        type=int,
        default=2,
        choices=range(1, len(LIVE_QUESTIONS) + 1),
        help=f"questions in sections 2b and 2c (2; at most {len(LIVE_QUESTIONS)})",
    )
    p.add_argument(
        "--time-scale", type=float, help="wall seconds per simulated second (0.5; 0.02 with --quick)"
    )
    args = p.parse_args(argv)
    if (
        min(args.live_reps, args.sim_reps, args.flag_reps or 1) < 1
        or args.live_steps < 2
        or (args.time_scale is not None and not args.time_scale > 0)
    ):
        p.error(
            f"need --live-reps, --flag-reps, --sim-reps >= 1, --live-steps >= 2 and --time-scale > 0, got "
            f"{args.live_reps}, {args.flag_reps}, {args.sim_reps}, {args.live_steps} and {args.time_scale}"
        )
    q, t0 = args.quick, time.perf_counter()
    lines = [
        "# VERDICT benchmark report",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, NumPy "
        f"{np.__version__}; load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the start (the "
        f"machine may be shared).{' A --quick smoke run: the figures mean little.' if q else ''}",
        "",
        f"Command: `python bench.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
        "",
        "## 1. Consensus throughput on [N, 3] (best of 5)",
        "",
    ]
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
    sim_lines, sim = simulated_section(
        LatencyModel(time_scale=scale), 1 if q else 2, 3 if q else 4, 1 if q else args.sim_reps
    )
    lines += sim_lines + ["", "### 2b. Real llama-server (llama.cpp, C++)", ""]
    reps, live, flag_lines = (
        1 if q else args.live_reps,
        None,
        ["skipped: pass --serve to start servers with each flag set."],
    )
    if args.serve:
        live_lines, flag_lines, live = flags_section(
            reps, args.live_steps, args.live_model, args.live_questions, 1 if q else args.flag_reps
        )
    elif args.live_url:
        live_lines, live = live_section(
            args.live_url, args.live_model, reps, args.live_steps, LIVE_MODES, args.live_questions
        )
    else:
        live_lines = [
            "skipped: no live server (pass --serve, or --live-url URL or set VERDICT_LIVE_URL; serve_tiny.sh "
            "starts one)."
        ]
    lines += live_lines + ["", "### 2c. llama-server's flags", ""] + flag_lines
    docs = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(docs, exist_ok=True)
    picture(
        [("simulated server (2a)", sim)] + ([("real llama-server (2b)", live)] if live else []),
        os.path.join(docs, "bench_overhead.png"),
    )
    lines += ["", "## 3. Memory", ""] + memory_section(5 if q else 100)
    lines += ["", "## 4. The response cache", ""] + cache_section(5 if q else 100, 200 if q else 2000)
    lines += ["", "## Targets", ""] + targets(ratios, sim, live)
    lines += ["", "What sets the figures the targets compare:", ""] + causes(sim, live)
    report = "\n".join(lines + ["", f"The whole run took {time.perf_counter() - t0:,.0f} s."]) + "\n"
    print(report)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
