"""The tables and the picture of VERDICT's step-level mode (process.py): process_summary.md and
.json, the per-step CSV and the F1 picture, all computed from the judged rows with no call.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026: the knobs τ, ε and λ of the dual test s̄* > τ ∧ Δ* < ε.
The metrics are process_metrics': VisualProcessBench's macro F1, accuracy on correct and on
incorrect steps, AUROC of each rule's continuous score, and ProcessBench's first-error accuracy, per
source and overall; the sweep is macro F1 over a grid of (τ, ε, λ).
"""

from __future__ import annotations

import csv
import json
import math
import os

import numpy as np

import verdict
from verdict_lab import charts
from verdict_lab import process_metrics as pm
from verdict_lab.harness import rundir

SUMMARY_FORMAT = "verdict-process/1"
TAUS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # the default sweep of τ
EPSS = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5)  # and of ε


def grid(sweeps: list, tau: float, eps: float, lam: tuple) -> dict:
    """{"taus", "epss", "lams"} of --sweep's NAME=V1,V2,... (tau, eps, lam with λ as V/L/C); the
    defaults TAUS and EPSS with the run's τ and ε added, and the run's λ. ValueError names a bad
    value."""
    out = {"taus": sorted({*TAUS, tau}), "epss": sorted({*EPSS, eps}), "lams": [tuple(lam)]}
    for text in sweeps:
        name, _, values = text.partition("=")
        if name not in ("tau", "eps", "lam") or not values:
            raise ValueError(f"--sweep must be tau=..., eps=... or lam=..., got {text!r}")
        try:
            if name == "lam":
                got = [tuple(float(x) for x in v.split("/")) for v in values.split(",")]
                for v in got:
                    verdict.Config(lam=v)  # m >= 2 values, each finite and > 0
                    if len(v) != len(verdict.JUDGES):
                        raise ValueError(f"λ needs {len(verdict.JUDGES)} values, got {v}")
                out["lams"] = got
            else:
                got = sorted({float(v) for v in values.split(",")})
                for v in got:  # τ in [0, 1], ε in (0, 1]
                    verdict.Config(**{name: v})
                out[name + "s"] = got
        except ValueError as e:
            raise ValueError(f"--sweep {text!r}: {e}") from None
    return out


def _clean(v):
    """v JSON-ready: NaN and infinities -> None, numpy numbers -> Python numbers, recursively."""
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    return v


def summarize(rows: list, settings, grid_: dict, neutral: str) -> dict:
    """The summary of the judged rows: counts, cost, every rule's metrics and the sweep."""
    samples, sources, labels, s_hat = pm.as_arrays(rows)
    lam, tau, eps = settings.lam, settings.tau, settings.eps
    calls = sum(r["judge_calls"] for r in rows)
    return {
        "format": SUMMARY_FORMAT,
        "files": sorted({r["data"] for r in rows}),
        "samples": len(rows),
        "steps": len(labels),
        "judges": len(verdict.JUDGES),
        "judge_calls": calls,
        "judge_calls_per_step": calls / len(labels) if len(labels) else None,
        "requests": sum(r["requests"] for r in rows),
        "tokens": sum(r["tokens"] for r in rows),
        "abstentions": int(np.isnan(s_hat).sum()),
        "settings": {"tau": tau, "eps": eps, "lam": list(lam), "neutral": neutral},
        "judge_settings": {k: v for k, v in settings.record().items() if k in JUDGED},
        "rules": pm.DEFINITIONS,
        "score_of": pm.SCORE_OF,
        "report": pm.report(samples, sources, labels, s_hat, lam, tau, eps, neutral),
        "sweep": pm.sweep(labels, s_hat, grid_["taus"], grid_["epss"], grid_["lams"], neutral),
    }


# The settings that change the judges' calls: a resumed run must share them.
JUDGED = (
    "judge_format",
    "judge_max_tokens",
    "reasons",
    "weighted",
    "judge_mode",
    "mode_max_tokens",
    "max_pixels",
    "layout",
)


def _f(x, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def markdown(s: dict) -> str:
    """process_summary.md: the counts, the overall table, macro F1 per source, AUROC per score, the
    sweep's best of each rule."""
    st, rep = s["settings"], s["report"]
    steps = rep["overall"]["steps"]
    lines = [
        "# VERDICT against human step labels",
        "",
        f"{s['samples']} samples, {s['steps']} steps ({steps['+1']} correct, {steps['0']} "
        f"neutral, {steps['-1']} incorrect) from {', '.join(s['files'])}; {s['judge_calls']} "
        f"judge calls ({_f(s['judge_calls_per_step'], 2)} per step: m = {s['judges']} judges, no "
        f"reasoner call), {s['abstentions']} abstentions.",
        f"τ = {st['tau']}, ε = {st['eps']}, λ = {tuple(st['lam'])}; neutral steps: "
        f"{st['neutral']}.",
        "",
        "## Overall",
        "",
        "| rule | accepts a step when | macro F1 | F1 correct | F1 incorrect | acc. correct "
        "| acc. incorrect | AUROC (score) | first error: acc. erroneous | acc. correct | F1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rule, m in rep["overall"]["rules"].items():
        fe = m["first_error"]
        lines.append(
            f"| {rule} | {s['rules'][rule]} | {_f(m['macro_f1'])} | {_f(m['f1_correct'])} | "
            f"{_f(m['f1_incorrect'])} | {_f(m['acc_correct'])} | {_f(m['acc_incorrect'])} | "
            f"{_f(m['auroc'])} ({s['score_of'][rule]}) | {_f(fe['acc_erroneous'])} | "
            f"{_f(fe['acc_correct'])} | {_f(fe['f1'])} |"
        )
    return "\n".join(lines + _per_source(s) + _scores(s) + _best(s)) + "\n"


def _per_source(s: dict) -> list:
    rep = s["report"]
    groups = [g for g in rep if g != "overall"]
    head = "| source | steps (+1/0/−1) | " + " | ".join(pm.RULES) + " |"
    out = ["", "## Macro F1 per source", "", head, "|---" * (len(pm.RULES) + 2) + "|"]
    for g in groups + ["overall"]:
        n = rep[g]["steps"]
        f1s = " | ".join(_f(rep[g]["rules"][r]["macro_f1"]) for r in pm.RULES)
        out.append(f"| {g} | {n['+1']}/{n['0']}/{n['-1']} | {f1s} |")
    means = " | ".join(_f(rep["overall"]["rules"][r]["macro_f1_by_source"]) for r in pm.RULES)
    out.append(f"| mean of the sources, weighted by counted steps | | {means} |")
    return out


def _scores(s: dict) -> list:
    rep = s["report"]
    groups = ["overall"] + [g for g in rep if g != "overall"]
    out = ["", "## AUROC of each continuous score (correct steps as positives)", ""]
    out += ["| score | " + " | ".join(groups) + " |", "|---" * (len(groups) + 1) + "|"]
    for name in pm.SCORES:
        out.append(f"| {name} | " + " | ".join(_f(rep[g]["scores"][name]) for g in groups) + " |")
    return out


def _best(s: dict) -> list:
    sw = s["sweep"]
    out = ["", "## Sweep: each rule's best overall macro F1 on the same judge scores", ""]
    out += [
        f"τ in {sw['taus']}, ε in {sw['epss']}, λ in {[tuple(v) for v in sw['lams']]}; ties go "
        "to the first in that order.",
        "",
        "| rule | best macro F1 | τ | ε | λ |",
        "|---|---|---|---|---|",
    ]
    for rule, b in sw["best"].items():
        out.append(
            f"| {rule} | {_f(b['macro_f1'])} | {b['tau']} | {b['eps']} | {tuple(b['lam'])} |"
        )
    return out


def write_csv(path: str, rows: list, settings) -> None:
    """process_steps.csv: one line per step, its label, ŝ, s*, s̄*, Δ* and each rule's decision."""
    samples, sources, labels, s_hat = pm.as_arrays(rows)
    st = pm.stats(s_hat, settings.lam)
    s_star = verdict.consensus(s_hat, settings.lam) if len(s_hat) else s_hat  # [N, m]
    accept = pm.decide(st, settings.tau, settings.eps)
    steps = [t for r in rows for t in range(1, len(r["labels"]) + 1)]
    j = [name[0].upper() for name in verdict.JUDGES]
    head = ["sample", "source", "step", "label", *(f"s_hat_{x}" for x in j)]
    head += [*(f"s_star_{x}" for x in j), "s_bar_star", "delta_star", "raw_mean", *pm.RULES]
    num = lambda x: "" if math.isnan(x) else f"{x:.6f}"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(head)
        for i in range(len(labels)):
            w.writerow(
                [samples[i], sources[i], steps[i], int(labels[i])]
                + [num(x) for x in (*s_hat[i], *s_star[i])]
                + [num(st.s_bar_star[i]), num(st.delta_star[i]), num(st.raw_mean[i])]
                + [int(accept[r][i]) for r in pm.RULES]
            )


def picture(path: str, s: dict) -> None:
    """process_f1.png: VERDICT's overall macro F1 over (τ, ε) at the sweep's first λ, each cell
    shaded and numbered, beside a bar per rule: its best macro F1 over the sweep."""
    sw = s["sweep"]
    f1 = np.asarray(sw["verdict"], dtype=float)[0]  # [τ, ε]
    taus, epss = sw["taus"], sw["epss"]
    c = charts.Canvas((980, 150 + 30 * len(taus)))
    c.text((20, 10), "VERDICT's macro F1 over (tau, eps), and each rule's best", 15)
    cw, ch, x0, y0 = 56, 30, 80, 70
    c.text((x0 + cw * len(epss) / 2, y0 - 26), "eps (accept if Delta* < eps)", 11, anchor="ma")
    for b, tau in enumerate(taus):
        c.text((x0 - 8, y0 + b * ch + ch / 2), f"{tau:g}", 10, anchor="rm")
        for k, eps in enumerate(epss):
            v = f1[b, k]
            box = (x0 + k * cw, y0 + b * ch, x0 + (k + 1) * cw - 2, y0 + (b + 1) * ch - 2)
            fill = charts.GRID if math.isnan(v) else charts.tint(charts.BLUE, 1 - v)
            c.draw.rectangle(box, fill=fill)
            ink = "white" if not math.isnan(v) and v > 0.6 else charts.INK
            c.text(((box[0] + box[2]) / 2, (box[1] + box[3]) / 2), _f(v, 2), 10, ink, "mm")
    for k, eps in enumerate(epss):
        c.text((x0 + k * cw + cw / 2, y0 + len(taus) * ch + 4), f"{eps:g}", 10, anchor="ma")
    c.text((10, y0 + len(taus) * ch / 2), "tau", 11, anchor="lm")
    _bars(c, s, (x0 + cw * len(epss) + 60, y0))
    c.save(path)


def _bars(c, s: dict, xy: tuple) -> None:
    """One bar per rule, its best macro F1 over the sweep, VERDICT's first and in orange."""
    x0, y0 = xy
    width = c.img.size[0] - x0 - 60
    c.text((x0, y0 - 26), "best macro F1 of each rule over the sweep", 11)
    for i, (rule, b) in enumerate(s["sweep"]["best"].items()):
        y, v = y0 + i * 28, b["macro_f1"]
        c.text((x0 + 80, y + 11), rule, 11, anchor="rm")
        colour = charts.ORANGE if rule == "verdict" else charts.GREY
        if not math.isnan(v):
            c.draw.rectangle((x0 + 88, y + 2, x0 + 88 + v * (width - 90), y + 20), fill=colour)
        c.text((x0 + 92 + max(v, 0) * (width - 90), y + 11), _f(v), 10, anchor="lm")


def write(out: str, rows: list, settings, grid_: dict, neutral: str, args=None) -> str:
    """Every output of a run in OUT, each written whole; returns the markdown."""
    s = summarize(rows, settings, grid_, neutral)
    md = markdown(s)
    rundir._write_atomic(os.path.join(out, "process_summary.json"), json.dumps(_clean(s), indent=1))
    rundir._write_atomic(os.path.join(out, "process_summary.md"), md)
    write_csv(os.path.join(out, "process_steps.csv"), rows, settings)
    picture(os.path.join(out, "process_f1.png"), s)
    return md
