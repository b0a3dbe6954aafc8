"""What adaptive verification saves and what it changes, on a server: bench.py's adaptive rows.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, limitations ("reducible by verifying adaptively only at
high-uncertainty steps"). For each signal of adaptive.SIGNALS at a fixed threshold (a step is
judged unless its signal is above it), whole chains
(loop.run: json score-only judges, the n·m judge calls of a step overlapped) are run beside the base
reasoner's and full VERDICT's, the kinds interleaved and the server reset before each:

- judge calls per step: the trace's judge calls over its steps;
- the whole-chain ratio to base: the chains' wall seconds over the base reasoner's (median over
  repetitions);
- agreement with full VERDICT: the share of chains whose chosen steps are full VERDICT's, step for
  step (the same requests give the same candidates until the first decision that differs).

Every reasoner asks for logprobs, full VERDICT's and the agree signal's too, so that all kinds send
the same reasoner requests and differ only in the judge calls they make.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import judges
import verdict
from verdict_lab import adaptive, loop
from verdict_lab.layouts import DEFAULT_LAYOUT, layout as laid_out
from verdict_lab.verifier import thread_map

FULL, BASE = "full VERDICT", "base"
# The bench's fixed thresholds: agree's and min-prob's defaults; mean-prob at 0.85, where the
# simulated server's confidences (simserver.step_logprob) leave some steps unjudged.
SIGNALS = (("agree", 0.9), ("mean-prob", 0.85), ("min-prob", 0.5))


@dataclass(frozen=True)
class Row:
    """One kind's figures over the repetitions."""

    name: str
    calls_per_step: float  # judge calls per step, over every chain of every repetition
    ratios: tuple  # [reps] whole chains' wall seconds / the base reasoner's
    same: float  # the share of chains whose chosen steps equal full VERDICT's
    unverified: float  # the share of steps not judged


def chains(
    client, gate, questions: list, images: list | None, steps: int, judged: bool, max_tokens: int
) -> tuple:
    """(seconds, [trace per question]) of one chain per question, one after another; judged False:
    the base reasoner (n = 1, no judge); max_tokens: a step's."""
    config = verdict.Config(n=3 if judged else 1, max_steps=steps)
    lay = laid_out(DEFAULT_LAYOUT if judged else "per-role")
    js = judges.make_judges(client, layout=lay) if judged else ()
    propose = judges.Reasoner(client, max_tokens, layout=lay, logprobs=judged)
    t0, traces = time.perf_counter(), []
    for q, image in zip(questions, images or [None] * len(questions), strict=True):
        traces.append(loop.run(q, propose, js, config, image, thread_map(9), adaptive=gate))
    return time.perf_counter() - t0, traces


def rows(
    client, reps: int, steps: int, questions: list, images, reset, max_tokens: int = 256
) -> list:
    """[Row] for full VERDICT and each (signal, θ) of SIGNALS, against the base reasoner's chains;
    the kinds interleaved (reversed every other repetition), reset() before each."""
    kinds = {
        BASE: None,
        FULL: None,
        **{f"{s} > {t:g}": adaptive.Adaptive(s, t) for s, t in SIGNALS},
    }
    seconds = {k: [] for k in kinds}
    traces = {k: [] for k in kinds}  # [reps · questions] traces
    for r in range(reps):
        for name in list(kinds) if r % 2 == 0 else list(kinds)[::-1]:
            reset()
            took, got = chains(
                client, kinds[name], questions, images, steps, name != BASE, max_tokens
            )
            seconds[name].append(took)
            traces[name] += got
    out = []
    for name in list(kinds)[1:]:
        ts = traces[name]
        n_steps = sum(len(t.steps) for t in ts)
        same = [t.chain == f.chain for t, f in zip(ts, traces[FULL], strict=True)]
        out.append(
            Row(
                name,
                sum(t.totals()["judge_calls"] for t in ts) / max(1, n_steps),
                tuple(a / b for a, b in zip(seconds[name], seconds[BASE])),
                sum(same) / len(same),
                sum(s.adaptive is not None and not s.adaptive.judged for t in ts for s in t.steps)
                / max(1, n_steps),
            )
        )
    return out


def table(out: list) -> list:
    """Markdown rows of rows()' figures."""
    lines = [
        "| setting | judge calls per step | steps not judged | whole chains / base (median, "
        "min–max) | chains deciding as full VERDICT |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in out:
        r = row.ratios
        lines.append(
            f"| {row.name} | {row.calls_per_step:.2f} | {row.unverified:.0%} | "
            f"{statistics.median(r):.2f}× ({min(r):.2f}–{max(r):.2f}) | {row.same:.0%} |"
        )
    return lines


def section(client, reps: int, steps: int, questions: list, images, reset, **kw) -> tuple:
    """(markdown lines, [Row]): the adaptive rows with what they measure."""
    out = rows(client, reps, steps, questions, images, reset, **kw)
    said = ", ".join(f"{s} > {t:g}" for s, t in SIGNALS)
    return [
        "Adaptive verification (verdict_lab/adaptive.py; perf/adaptive_rows.py): whole chains "
        f"(json score-only judges overlapped, the {DEFAULT_LAYOUT} layout) with each signal at the "
        f"bench's fixed threshold ({said}), beside full VERDICT, against the base reasoner's "
        f"chains; {len(questions)} question(s), {steps} steps, {reps} repetition(s), interleaved. "
        "Every judged kind asks for the reasoner's logprobs, so they all send the same reasoner "
        "requests. \"Deciding as full VERDICT\": the chain's chosen steps are full VERDICT's, step "
        "for step.",
        "",
    ] + table(out), out
