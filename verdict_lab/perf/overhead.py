"""VERDICT's step overhead: one VERDICT step against one base step, in several modes and prompt
layouts, on a simulated or a real server: wall time, judge requests, and the prompt tokens the
server computed.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the step-wise loop with n = 3 candidates and m = 3 judges;
the 3.80× sequential wall-clock overhead of the limitations). bench.py writes what this module
measures:

- Mode: how a step runs (candidates one by one or in one request, judge calls one by one or
  overlapped, judges that explain or give the score alone, judging skipped when the candidates
  agree) and its prompt layout (prompting.py: "shared", "per-role" or "role-first");
- run_chains and overhead: chains of verdict.step, timed step by step, with each step's change of
  the client's usage counters (the prompt tokens the server computed and reused, as it reports
  them);
- tables and a picture of the result.

Adaptive judging skips the n·m judge calls of a step when the n candidates are the same string. A
step's decision is the string it extends the chain by (StepRecord.chosen); the decisions make the
chain, and with it Trace.stopped and Trace.answer. Adaptive judging never changes a decision,
compared with judging everything, when the replies are a function of the request (a deterministic
server, fixed seeds, as the reasoner and the judges send) and the judges raise nothing (no Stop, no
error): by induction on the steps, both runs send the same reasoner requests, so they get the same
candidates; a step they both judge gets the same scores; a step adaptive skips has n copies of one
string, and every rule picks an index, so judging it would choose that string too. What does differ
is the record of a skipped step: no ŝ, s* or Δ*, the step unverified rather than accepted or a
fallback (Trace.totals' fallbacks and judge_calls). On a server whose replies also depend on what
else it serves (a batching server's arithmetic), the candidates of both runs may differ; `agreement`
measures how often the chains then still agree, beside the same figure for one mode repeated.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import time
import urllib.request
from dataclasses import dataclass, replace

import numpy as np

import judges
import verdict
from verdict_lab import charts, loop
from verdict_lab.client import usage_change
from verdict_lab.formats import REPLIES
from verdict_lab.layouts import DEFAULT_LAYOUT, layout
from verdict_lab.verifier import thread_map

PAPER_OVERHEAD = 3.80  # the paper's sequential wall-clock overhead


@dataclass(frozen=True)
class Mode:
    """One way to run a VERDICT step (n candidates, m = 3 judges); n = 1 is the base model alone."""

    name: str
    n: int = 3
    concurrent: bool = (
        False  # n in one request, and the n·m judge calls overlapped (verifier.thread_map)
    )
    reasons: bool = (
        True  # judges that explain; False: short judges, the score alone (Judge(reasons=False))
    )
    adaptive: bool = False  # no judging when the n candidates are the same string
    layout: str = DEFAULT_LAYOUT  # the prompt layout of every request (layouts.LAYOUTS)


BASE = Mode(
    "base (reasoner alone, n = 1)", n=1, layout="per-role"
)  # the denominator of every ratio
SEQ, SEQ_SCORE, CONC, CONC_SCORE, ADAPTIVE = MODES = (
    Mode("sequential (the paper's setting)"),
    Mode("sequential, short judges", reasons=False),
    Mode("concurrent", concurrent=True),
    Mode("concurrent, short judges", concurrent=True, reasons=False),
    Mode(
        "adaptive (concurrent, short judges, skip agreeing steps)",
        concurrent=True,
        reasons=False,
        adaptive=True,
    ),
)


ORDER = ("per-role", "shared", "role-first")  # the layouts, as tables and pictures show them
COLOURS = {"per-role": charts.GREY, "shared": charts.BLUE, "role-first": charts.ORANGE}


def in_layouts(modes, layouts=ORDER) -> tuple:
    """BASE in every layout of ORDER, then each mode in each of `layouts`, in ORDER's order."""
    bases = tuple(replace(BASE, layout=lay) for lay in ORDER)
    return bases + tuple(
        replace(m, layout=lay) for m in modes for lay in ORDER if lay in layouts and m.n > 1
    )


@dataclass
class Chains:
    """What run_chains saw, step by step, question-major."""

    seconds: list  # [Q·S] wall seconds of each step
    usage: list  # [Q·S] each step's change of client.usage
    chains: list  # [Q] each question's chain of chosen steps
    replies: int  # judge replies
    skipped: int  # judge calls skipped (adaptive)
    tasks: list = (
        None  # [Q·S] tokens of each step's judge tasks (Judge.task), summed; None: not counted
    )


def tokenizer(base_url: str, timeout: float = 60.0):
    """count(text) -> how many tokens the server makes of `text` alone (llama-server's
    POST /tokenize at the server's root, {"content": text} -> {"tokens": [...]}), remembered per
    text; None where it cannot say."""
    url, memo = re.sub(r"/v1/?$", "", base_url) + "/tokenize", {}

    def count(text: str) -> int | None:
        if text not in memo:
            body = json.dumps({"content": text, "add_special": False}).encode()
            request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=timeout) as r:
                    memo[text] = len(json.load(r)["tokens"])
            except (OSError, ValueError, KeyError, TypeError):
                memo[text] = None
        return memo[text]

    return count


def task_tokens(count, js, cands) -> int | None:
    """The tokens of a step's n·m judge tasks (each judge's Judge.task of each candidate, as
    count(text) counts them), or None if count cannot say for one of them."""
    counts = [count(j.task(c)) for c in cands for j in js]
    return None if None in counts else sum(counts)


def run_chains(
    client,
    mode: Mode,
    questions,
    steps: int,
    limits: tuple,
    images=None,
    fmt: str = "json",
    count=None,
) -> Chains:
    """Run `steps` steps of verdict.step on each question in `mode`, with judges replying in format
    `fmt`. images: one image per question (as a benchmark's items each have their own), or None
    (text only). limits = max_tokens of (a step, a judge that explains, a short judge); None: the
    judge's own default. count(text) -> tokens (tokenizer): when given, each step's judge tasks are
    counted (Chains.tasks), after the step's time is taken."""
    lay, reply = layout(mode.layout), REPLIES[fmt]
    tokens = limits[1] if mode.reasons else limits[2]
    js = judges.make_judges(
        client, max_tokens=tokens, reasons=mode.reasons, reply=reply, layout=lay
    )
    reasoners = [
        judges.Reasoner(client, max_tokens=limits[0], seed=i, layout=lay) for i in range(mode.n)
    ]
    pool, config = thread_map(mode.n * len(js) if mode.concurrent else 1), verdict.Config(n=mode.n)
    out = Chains([], [], [], 0, 0, [] if count else None)
    if images is not None and len(images) != len(questions):
        raise ValueError(
            f"{len(images)} images for {len(questions)} questions: give one per question"
        )
    for k, q in enumerate(questions):
        state = verdict.State(q, () if images is None else (images[k],))
        for _ in range(steps):
            t0, before = time.perf_counter(), client.usage
            if mode.concurrent or mode.n == 1:
                cands = reasoners[0](state, mode.n)
            else:  # sequential: the candidates one after another
                cands = [r(state, 1)[0] for r in reasoners]
            agree = (
                mode.adaptive and len(set(cands)) == 1
            )  # the same string: every choice is that string
            out.skipped += len(cands) * len(js) if agree else 0
            record = loop.step(
                state, lambda s, n: cands, () if mode.n == 1 or agree else js, config, pool
            )
            out.replies += sum(
                c["replies"] for row in record.calls for c in row
            )  # each call's, follow-ups too
            state = state.extend(record.chosen)
            out.seconds.append(time.perf_counter() - t0)
            out.usage.append(usage_change(before, client.usage))
            if count:
                judged = mode.n > 1 and not agree
                out.tasks.append(task_tokens(count, js, cands) if judged else 0)
        out.chains.append(list(state.steps))
    return out


@dataclass(frozen=True)
class Result:
    """One mode's figures over the repetitions of `overhead`."""

    seconds: float  # median over repetitions of the mean seconds per step
    ratio: float  # median over repetitions of its mean step time / BASE's, on whole chains
    warm: (
        float | None
    )  # the same on warm full-length steps (not a chain's first or last; None if steps < 3)
    judge_requests: float  # judge replies per step
    skipped: float  # judge calls skipped per step
    prompt: float  # prompt tokens per step, after each chain's first step
    computed: (
        float | None
    )  # prompt tokens the server computed per step after the first (None: it reported none)
    completion: (
        float  # completion tokens per step after the first (every choice's, as the server counts)
    )
    reported: float  # the share of replies that reported their cached prompt tokens
    server_ms: (
        tuple | None
    )  # (computing prompts, generating) milliseconds per step, all steps, as llama-server's
    # timings report them (a request's own; parallel requests overlap); None without timings
    chains: list  # [reps][Q] every repetition's chains
    spread: tuple = (math.nan, math.nan)  # (min, max) over repetitions of the ratio, whole chains
    floor: float | None = (
        None  # the floor of computed prompt tokens per step after the first (floor())
    )
    per_chain: float | None = (
        None  # prompt tokens the server computed per whole chain, first step too
    )

    @property
    def to_floor(self) -> float | None:
        """computed / floor (1.00× is a perfect prefix cache); None when either is unknown."""
        return self.computed / self.floor if self.computed is not None and self.floor else None


def floor(base_computed: float | None, runs: list, steps: int) -> float | None:
    """The physical floor of the prompt tokens a step computes, per step after each chain's first:
    what the base step (BASE: one request, n = 1) computes, plus the tokens of the step's n·m judge
    tasks (candidate and task, Judge.task), which no earlier request holds, so that no prefix cache
    can serve them. runs: every repetition's Chains.tasks. None when either is unknown."""
    if base_computed is None or any(tasks is None for tasks in runs):
        return None
    later = [t for tasks in runs for i, t in enumerate(tasks) if i % steps > 0]
    if not later or None in later:
        return None
    return base_computed + sum(later) / len(later)


def token_figures(runs: list, steps: int) -> tuple:
    """(prompt tokens, computed prompt tokens or None, completion tokens, share of replies
    reporting) per step, after the first step of each chain, over every repetition's usage
    (run_chains' Chains.usage). The computed figure is None unless every reply reported its cached
    tokens."""
    later = [u for usage in runs for i, u in enumerate(usage) if i % steps > 0] or [{}]
    total = lambda k: sum(u.get(k, 0) for u in later)
    replies = total("replies")
    computed = (
        total("computed_prompt_tokens") / len(later)
        if replies and total("cache_reports") == replies
        else None
    )
    return (
        total("prompt_tokens") / len(later),
        computed,
        total("completion_tokens") / len(later),
        total("cache_reports") / replies if replies else math.nan,
    )


def chain_computed(runs: list) -> float | None:
    """Prompt tokens the server computed per whole chain (every step, the cold first one too), over
    every repetition's run_chains Chains: what an item costs, where a layout that computes an image
    once per role shows. None unless every reply reported its cached tokens."""
    usage = [u for c in runs for u in c.usage]
    total = lambda k: sum(u.get(k, 0) for u in usage)
    if not total("replies") or total("cache_reports") != total("replies"):
        return None
    return total("computed_prompt_tokens") / sum(len(c.chains) for c in runs)


def server_ms(runs: list) -> tuple | None:
    """(prompt_ms, predicted_ms) per step over every step of every repetition (run_chains'
    Chains.usage), or None unless every reply reported llama-server's timings."""
    steps = [u for usage in runs for u in usage]
    total = lambda k: sum(u.get(k, 0) for u in steps)
    if not steps or not total("replies") or total("timings_reports") != total("replies"):
        return None
    return total("timings_prompt_ms") / len(steps), total("timings_predicted_ms") / len(steps)


def agreement(result: dict, a: Mode, b: Mode, shift: int = 0) -> tuple:
    """(k, K): in k of K (repetition r, question) pairs, mode a's chain in repetition r is mode b's
    in repetition r + shift (a decision differs somewhere in the others). a = b with shift 1: how
    repeatable the server is."""
    ra, rb = result[a].chains, result[b].chains
    pairs = [
        (x, y)
        for r in range(len(ra))
        if 0 <= r + shift < len(rb)
        for x, y in zip(ra[r], rb[r + shift])
    ]
    return sum(x == y for x, y in pairs), len(pairs)


def adaptive_lines(result: dict) -> list:
    """Markdown: what adaptive judging changed in `result`, per layout: how often its chains are
    those of judging everything with the same judges (CONC_SCORE, same repetition), beside how often
    CONC_SCORE repeats itself."""
    said = lambda k_n: f"{k_n[0]} of {k_n[1]}" if k_n[1] else "—"
    rows = [
        f"| {lay} | "
        + said(agreement(result, replace(ADAPTIVE, layout=lay), replace(CONC_SCORE, layout=lay)))
        + " | "
        + said(
            agreement(result, replace(CONC_SCORE, layout=lay), replace(CONC_SCORE, layout=lay), 1)
        )
        + " |"
        for lay in ORDER
        if replace(ADAPTIVE, layout=lay) in result and replace(CONC_SCORE, layout=lay) in result
    ]
    return (
        []
        if not rows
        else [
            "Adaptive judging and the decisions: a step's decision is the string it extends the "
            "chain by; the chain and its final answer follow from the decisions. Adaptive judging "
            "never changes a decision when the server's replies depend on the request alone (the n "
            "candidates are one string, so every rule chooses it); it does change the record of a "
            "skipped step (no scores; unverified rather than accepted or a fallback). Measured, "
            "the (repetition, question) pairs whose whole chain is the same:",
            "",
            "| layout | adaptive vs concurrent, short judges (same repetition) | "
            "concurrent, short judges vs itself in the next repetition |",
            "|---|---:|---:|",
        ]
        + rows
    )


def overhead(
    client,
    modes,
    questions,
    steps: int,
    reps: int,
    limits: tuple,
    images=None,
    reset=lambda: None,
    fmt: str = "json",
    count=None,
) -> dict:
    """{mode: Result} for BASE and `modes`. Each repetition runs every mode, in alternating order;
    `reset` runs before each (the simulator forgets its cache). Ratios are to BASE (the per-role
    layout) of the same repetition: the median, and the (min, max) spread. count: a token counter
    (tokenizer), for the floor."""
    modes = (BASE,) + tuple(m for m in modes if m != BASE)
    runs = {m: [] for m in modes}
    for r in range(reps):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            reset()
            runs[mode].append(
                run_chains(client, mode, questions, steps, limits, images, fmt, count)
            )
    times = {
        m: [np.array(c.seconds).reshape(len(questions), steps) for c in runs[m]] for m in modes
    }  # [Q, S] each
    ratios = lambda m, cols: [
        a[:, cols].mean() / b[:, cols].mean() for a, b in zip(times[m], times[BASE])
    ]
    ratio = lambda m, cols: statistics.median(ratios(m, cols))
    per = len(questions) * steps * reps
    out = {}
    for m in modes:
        prompt, computed, completion, reported = token_figures([c.usage for c in runs[m]], steps)
        whole = ratios(m, slice(None))  # [reps]
        out[m] = Result(
            statistics.median(a.mean() for a in times[m]),
            statistics.median(whole),
            ratio(m, slice(1, steps - 1)) if steps >= 3 else None,
            sum(c.replies for c in runs[m]) / per,
            sum(c.skipped for c in runs[m]) / per,
            prompt,
            computed,
            completion,
            reported,
            server_ms([c.usage for c in runs[m]]),
            [c.chains for c in runs[m]],
            (min(whole), max(whole)),
            floor(out[BASE].computed if m != BASE else computed, [c.tasks for c in runs[m]], steps),
            chain_computed(runs[m]),
        )
    return out


def time_table(result: dict, scale: float = 1.0) -> list:
    """Markdown rows: time per step and overhead of each mode (seconds divided by the clock
    scale)."""
    rows = [
        "| mode | layout | seconds per step | overhead vs base: median (min–max) | "
        "on warm full-length steps | judge requests per step | judge calls skipped per step |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    return rows + [
        f"| {m.name} | {m.layout} | {r.seconds / scale:.3f} | "
        f"{r.ratio:.2f}× ({r.spread[0]:.2f}–{r.spread[1]:.2f}) | "
        f"{'—' if r.warm is None else f'{r.warm:.2f}×'} | {r.judge_requests:.2f} | "
        f"{r.skipped:.2f} |"
        for m, r in result.items()
    ]


def token_table(result: dict) -> list:
    """Markdown rows: prompt tokens per step after each chain's first step, and those the server
    computed, to the base step's and to the floor (Result.floor); the server's own time per step
    computing prompts and generating (all steps; when it reports timings); the tokens it computed
    per whole chain."""
    base = result[BASE].computed
    rows = [
        "| mode | layout | prompt tokens per step | computed by the server | reused from its cache "
        "| computed vs base | floor | computed vs floor | completion tokens per step | "
        "server ms per step: prompts + generating (prompts' share) | computed per whole chain |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m, r in result.items():
        c, ms, f = r.computed, r.server_ms, r.floor
        rows.append(
            f"| {m.name} | {m.layout} | {r.prompt:,.0f} | {'—' if c is None else f'{c:,.0f}'} | "
            f"{'—' if c is None or not r.prompt else f'{1 - c / r.prompt:.0%}'} | "
            f"{'—' if c is None or not base else f'{c / base:.2f}×'} | "
            f"{'—' if f is None else f'{f:,.0f}'} | "
            f"{'—' if r.to_floor is None else f'{r.to_floor:.2f}×'} | {r.completion:,.0f} | "
            + (
                "—"
                if not ms or not sum(ms)
                else f"{ms[0]:,.0f} + {ms[1]:,.0f} ({ms[0] / sum(ms):.0%})"
            )
            + f" | {'—' if r.per_chain is None else f'{r.per_chain:,.0f}'} |"
        )
    return rows


def picture(panels: list, path: str) -> None:
    """A PNG of the overhead per mode (whole chains, log scale), a bar per layout, one panel per
    (title, result)."""
    w, h, left, top, base = 440, 300, 46, 44, 286  # a panel's size; the plot's left, top and bottom
    c = charts.Canvas((w * len(panels), h + 60))
    for k, (title, result) in enumerate(panels):
        x0, modes = (
            k * w + left,
            list(dict.fromkeys(replace(m, layout=DEFAULT_LAYOUT) for m in result)),
        )
        lo = 2.0 ** math.floor(
            math.log2(min(1.0, *(r.ratio for r in result.values())))
        )  # a power of 2 up to 1×
        hi = max(4.0, *(r.ratio for r in result.values()))
        y = lambda v: (
            top + (base - top) * math.log2(hi / v) / math.log2(hi / lo)
        )  # log scale: lo at the axis
        c.text((k * w + 16, 8), title, 13, width=w - 24, lines=2)
        for v in (0.25, 0.5, 1, 2, 4, 8, 16, 32, 64):
            if lo <= v <= hi:
                c.draw.line((x0, y(v), x0 + w - left - 20, y(v)), fill=charts.GRID)
                c.text((x0 - 6, y(v)), f"{v:g}x", anchor="rm")
        c.draw.line((x0, y(PAPER_OVERHEAD), x0 + w - left - 20, y(PAPER_OVERHEAD)), fill=charts.RED)
        span = (w - left - 30) / len(modes)
        for i, m in enumerate(modes):
            label = (
                m.name.split(" (")[0]
                .replace("concurrent, ", "conc., ")
                .replace("sequential", "seq.")
            )
            c.text(
                (x0 + i * span + span / 2, base + 4), label, anchor="ma", width=span - 4, lines=3
            )
            for j, lay in enumerate(ORDER):
                r, bar = result.get(replace(m, layout=lay)), (span - 12) / len(ORDER)
                if r is not None:
                    bx = x0 + i * span + 6 + j * bar
                    c.draw.rectangle((bx, y(r.ratio), bx + bar - 2, base), fill=COLOURS[lay])
                    c.text(
                        (bx + bar / 2 - 1, y(r.ratio) - 2),
                        f"{r.ratio:.1f}",
                        10,
                        anchor="mb",
                        moves=((0, 0), (0, -12), (0, -24)),
                    )
    paper = lambda d, b: d.line(
        (b[0], b[1] + 5, b[2] + 2, b[1] + 5), fill=charts.RED, width=2
    )  # its swatch
    items = [("layout:", None)] + [(lay, COLOURS[lay]) for lay in ORDER]
    items += [(f"paper: {PAPER_OVERHEAD:.2f}x", paper)]
    charts.legend(c, (left, h + 42), items, width=w - left, across=True)
    c.save(path)
