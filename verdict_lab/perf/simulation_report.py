"""The Monte-Carlo study's report and figure: docs/simulation_report.md and docs/simulation.png.

simulate.py runs the study (its model, sweeps and run); this module writes what it measured:
`markdown`, the report (the headline table of VERDICT against the mean, every rule's accuracy,
acceptance and fallback, the sweeps, and EVPV's gate), a pure function of the results and the
arguments; `plot`, one panel per sweep (charts.py). Like simulate.py, it imports no HTTP.
"""

from __future__ import annotations

import math

import numpy as np

from verdict_lab import charts
from verdict_lab.modes.evpv import GATE_TARGETS
from verdict_lab.perf.simulation import (
    ALL_RULES,
    FOOLS,
    FORMAT,
    GATE_KNOBS,
    SWEEPS,
    TARGETS,
    fools_name,
    gate_name,
    interval,
)


def _pm(x, digits=1, sign=False) -> str:
    mean, hw = interval(100 * np.asarray(x))
    return f"{mean:{'+' if sign else ''}.{digits}f} ± {hw:.{digits}f}"


def _diff(r: dict, a: str = "verdict", b: str = "mean") -> np.ndarray:
    """Rule a's accuracy minus rule b's, paired, per seed.  -> [S]"""
    return r[a]["accuracy"] - r[b]["accuracy"]


def _headline_row(name: str, setting: str, r: dict) -> str:
    best = max(ALL_RULES, key=lambda k: r[k]["accuracy"].mean())
    return (
        f"| {name} | {setting} | {_pm(r['verdict']['accuracy'])} | {_pm(r['mean']['accuracy'])} | "
        f"{_pm(_diff(r), 2, True)} | {_pm(_diff(r, b='no-filter'), 2, True)} | "
        f"{_pm(r['raw-dual']['accuracy'])} | {best} ({100 * r[best]['accuracy'].mean():.1f}) |"
    )


def gate_report(results: dict) -> list:
    """The report's section on EVPV's gate: every target against a contradicted premise."""
    at = lambda field, f, g, v: dict(results[gate_name(field, f, g)])[v]
    cols = [(f, g) for f in FOOLS for g in GATE_TARGETS]
    L = [
        "## EVPV's gate: the visual judge's score, or the step's?",
        "",
        "A wrong step rests on a contradicted visual premise with probability p_premise = 0.4; the "
        "judges it fools score it around 0.9. The premise check flags it (r = 0, α(r) = 0) with "
        "probability p_detect = 0.8 and flags any other step with probability p_false = 0.1 "
        "(unless swept); an unflagged step has r = 1. Target `visual`: a flagged step's "
        "ŝ_V ← 0.5 + α(r)(ŝ_V − 0.5) = 0.5; `step`: every judge's ŝ likewise; `none`: no gate. "
        "Contradicted accepted = contradicted-premise candidates passing VERDICT's filter; "
        "contradicted chosen = steps where VERDICT picks one, given one exists. With a perfect "
        "check (p_detect = 1) and target `step`, none passes the filter: each answering judge "
        "reports 0.5, so s̄* = 0.5 < τ. The sweeps leave out `none`, which neither knob changes "
        "(its row above).",
        "",
        "| fooled by the premise | gate | VERDICT accuracy | mean accuracy | contradicted accepted "
        "| contradicted chosen | VERDICT fallback |",
        "|---|---|---|---|---|---|---|",
    ]
    for f, g in cols:
        r = at("p_false", f, g, 0.1)["verdict"]
        L.append(
            f"| {fools_name(f)} | {g} | {_pm(r['accuracy'])} | "
            f"{_pm(at('p_false', f, g, 0.1)['mean']['accuracy'])} | "
            f"{_pm(r['contradicted_accepted'])} | {_pm(r['contradicted_chosen'])} | "
            f"{_pm(r['fallback'])} |"
        )
    for (field, label, values, _), whats in zip(
        GATE_KNOBS, (("accuracy",), ("accuracy", "contradicted_accepted"))
    ):
        for what in (
            whats
        ):  # a false alarm never touches a contradicted step: p_false leaves its acceptance alone
            title = {
                "accuracy": "VERDICT accuracy",
                "contradicted_accepted": "contradicted steps accepted by VERDICT",
            }[what]
            L += [
                "",
                f"### {title} (%) against {label}",
                "",
                f"| {field} | " + " | ".join(f"{fools_name(f)}: {g}" for f, g in cols) + " |",
                "|---" * (len(cols) + 1) + "|",
            ]
            L += [
                f"| {v} | "
                + " | ".join(
                    f"{100 * at(field, f, g, v)['verdict'][what].mean():.1f}" for f, g in cols
                )
                + " |"
                for v in values
            ]
    return L + [""]


def markdown(results: dict, trials: int, seeds: int, seed: int) -> str:
    """The markdown report; a pure function of the results and the arguments (no clock, no
    paths)."""
    head = {
        sw.name: (sw, dict(results[sw.name])[sw.headline]) for sw in SWEEPS if sw.field != "lam_V"
    }
    L = (
        _assumptions(trials, seeds, seed)
        + _headline(results, head)
        + _per_rule(head)
        + _sweeps(results)
    )
    return "\n".join(L + gate_report(results))


def _assumptions(trials: int, seeds: int, seed: int) -> list:
    """The report's title, the command that made it, and the model it simulates."""
    cmd = f"python -m verdict_lab.simulate --trials {trials} --seeds {seeds} --seed {seed}"
    return [
        "# VERDICT simulation: when does the coupled consensus beat plain averaging?",
        "",
        f"Format: `{FORMAT}`. Generated by `{cmd}` ({seeds} independent seeds × {trials} steps per "
        "setting).",
        "Every number is a percentage: mean over seeds ± the 95% Student-t half-width over seeds.",
        "",
        "## Assumptions",
        "",
        "- One step: 3 candidates, each correct with probability 0.5; judges V, L, C with "
        "λ = (1.5, 1.0, 0.8), τ = 0.6, ε = 0.1.",
        "- Raw score = 0.72 (correct step) or 0.45 (wrong step) + Gaussian noise (σ = 0.15 unless "
        "swept), clipped to [0, 1].",
        "- Noise models, one knob each: `iid` σ; `fooled-X` judge X scores a wrong step around 0.9 "
        "with probability p_fool; `correlated` a per-candidate noise shared by all judges with "
        "weight ρ; `offset-V` / `compress-V` judge V reports 0.5 + κ(ŝ − 0.5) + δ; `abstain` each "
        "judge returns NaN with probability q.",
        "- Accuracy = a correct candidate chosen, given that one exists. Acceptance = candidates "
        "passing the rule's filter (no filter: every candidate with ≥ 2 answers). Fallback = steps "
        "where none passes.",
        "- `lam-mean` = the highest λ-weighted raw mean, no filter. Other rules as defined in "
        "`verdict.select`.",
        "- `premise X, gate T` (last rows of the headline table): a wrong step rests on a "
        "contradicted premise with probability 0.4 and fools judges X; EVPV's gate with target T "
        "(see the gate section at the end).",
        "",
    ]


def _headline(results: dict, head: dict) -> list:
    """The headline table: VERDICT against the mean per noise model, then per premise and gate
    target."""
    L = [
        "## Headline: VERDICT against the mean",
        "",
        "`VERDICT − no-filter` isolates the dual filter and fallback; `no-filter` differs from "
        "`mean` only by weighting the judges unequally (a fixed weighted mean: see the README's "
        "errata). Differences are paired (same steps), per seed.",
        "",
        "| noise model | setting | VERDICT | mean | VERDICT − mean (pp) | VERDICT − no-filter (pp) "
        "| raw-dual | best rule |",
        "|---|---|---|---|---|---|---|---|",
    ]
    L += [_headline_row(name, f"{sw.field} = {sw.headline}", r) for name, (sw, r) in head.items()]
    return L + [
        _headline_row(
            f"premise {fools_name(f)}, gate {g}",
            "p_detect = 0.8, p_false = 0.1",
            dict(results[gate_name("p_false", f, g)])[0.1],
        )
        for f in FOOLS
        for g in TARGETS
    ]


def _per_rule(head: dict) -> list:
    """Every rule's accuracy, acceptance and fallback at the headline settings, a table each."""
    L = []
    for what in ("accuracy", "acceptance", "fallback"):
        L += [
            "",
            f"## {what.capitalize()} (%) of every rule, at the headline settings",
            "",
            "| rule | " + " | ".join(head) + " |",
            "|---" * (len(head) + 1) + "|",
        ]
        L += [
            f"| {rule} | " + " | ".join(_pm(r[rule][what]) for _, r in head.values()) + " |"
            for rule in ALL_RULES
        ]
    return L


def _sweeps(results: dict) -> list:
    """The sweeps section: every rule's mean accuracy at each swept value, and VERDICT − mean."""
    L = [
        "",
        "## Sweeps: accuracy (%) against the swept parameter",
        "",
        "Means only (half-widths are in the tables above and the VERDICT − mean column).",
        "",
    ]
    for sw in SWEEPS:
        rows = results[sw.name]
        L += [
            f"### {sw.name}: {sw.label}",
            "",
            f"| {sw.field} | " + " | ".join(ALL_RULES) + " | VERDICT − mean (pp) |",
            "|---" * (len(ALL_RULES) + 2) + "|",
        ]
        L += [
            f"| {v} | "
            + " | ".join(f"{100 * r[k]['accuracy'].mean():.1f}" for k in ALL_RULES)
            + f" | {_pm(_diff(r), 2, True)} |"
            for v, r in rows
        ]
        if sw.field == "lam_V":
            acc = [100 * r["verdict"]["accuracy"].mean() for _, r in rows]
            L += [
                "",
                f"VERDICT's range over λ_V ∈ {list(sw.values)}: {max(acc) - min(acc):.2f} pp "
                f"(the paper reports 2.90 pp on 3DSRBench).",
            ]
        L.append("")
    return L


COLORS = tuple(
    charts.PALETTE[i] for i in (3, 0, 5, 6, 7, 8, 1, 2, 9, 4)
)  # ALL_RULES' colours, verdict red


GATE_COLORS = {"none": charts.GREY, "visual": charts.BLUE, "step": charts.RED}
W, H, COLS = 400, 300, 4  # one panel's size in pixels; panels per row


def _panel(c, k: int, title: str, xlabel: str, xs, ys: dict, colors: dict, bold: str = "") -> None:
    """Panel k of the grid on canvas c: one line per label of ys (label -> [len(xs)] values), `bold`
    drawn thick, last."""
    ox, oy = (k % COLS) * W, 40 + (k // COLS) * H
    x0, x1, y0, y1 = ox + 55, ox + W - 20, oy + 25, oy + H - 50  # the plot box, pixels
    xs = np.array(xs, float)
    lo, hi = min(y.min() for y in ys.values()), max(y.max() for y in ys.values())
    step = next(t for t in (0.5, 1, 2, 5, 10, 20, 50) if (hi - lo) / t <= 5)  # at most ~6 ticks
    lo, hi = step * math.floor(lo / step + 1e-9), step * math.ceil(hi / step - 1e-9)
    px = lambda x: x0 + (x - xs.min()) / (np.ptp(xs) or 1) * (x1 - x0)
    py = lambda y: y1 - (y - lo) / ((hi - lo) or 1) * (y1 - y0)
    c.draw.rectangle((x0, y0, x1, y1), outline=charts.INK)
    c.text((x0, oy + 6), title, 13, width=x1 - x0, lines=1)
    c.text((x0, y1 + 28), xlabel, 13, width=x1 - x0, lines=1)
    for x in sorted(xs):  # a label that would overlap the previous one is left out
        c.draw.line((px(x), y1, px(x), y1 + 4), fill=charts.INK)
        c.text((px(x), y1 + 10), f"{x:g}", 13, anchor="mt")
    for t in np.arange(lo, hi + step / 2, step):
        c.draw.line((x0 - 4, py(t), x0, py(t)), fill=charts.INK)
        c.text((x0 - 6, py(t)), f"{t:g}", 13, anchor="rm")
    for label in sorted(ys, key=lambda s: s == bold):  # the bold line last, on top
        pts = [(px(x), py(y)) for x, y in sorted(zip(xs, ys[label]))]
        c.draw.line(pts, fill=colors[label], width=3 if label == bold else 2)


def plot(results: dict, path) -> None:
    """Accuracy against the swept parameter: a panel per sweep, a line per rule; then a panel per
    group of judges a contradicted premise fools, VERDICT's accuracy against p_false, a line per
    gate target (pillow)."""
    acc = lambda name, rule: np.array([100 * m[rule]["accuracy"].mean() for _, m in results[name]])
    panels = [
        (
            f"{sw.name}: accuracy (%)",
            sw.label,
            sw.values,
            {r: acc(sw.name, r) for r in ALL_RULES},
            dict(zip(ALL_RULES, COLORS)),
            "verdict",
        )
        for sw in SWEEPS
    ]
    field, label, values, _ = GATE_KNOBS[0]
    flat = lambda name: np.full(
        len(values), acc(name, "verdict")[0]
    )  # no gate: the knob changes nothing
    panels += [
        (
            f"premise, {fools_name(f)} fooled: VERDICT accuracy (%)",
            label,
            values,
            {
                gt: acc(gate_name(field, f, gt), "verdict")
                if gt != "none"
                else flat(gate_name(field, f, gt))
                for gt in TARGETS
            },
            GATE_COLORS,
            "",
        )
        for f in FOOLS
    ]
    c = charts.Canvas((W * COLS, 40 + H * math.ceil((len(panels) + 1) / COLS)))
    title = (
        "VERDICT simulation: accuracy (%, a correct candidate chosen given one exists) "
        "by noise model"
    )
    c.text((10, 10), title, 13, lines=1)
    for k, panel in enumerate(panels):
        _panel(c, k, *panel)
    ox, oy = (len(panels) % COLS) * W, 40 + (len(panels) // COLS) * H  # the legend cell
    legend = [("rule (y axis: accuracy %)", None)] + list(zip(ALL_RULES, COLORS))
    legend += [("premise panels: gate target", None)] + list(GATE_COLORS.items())
    charts.legend(c, (ox + 30, oy + 10), legend, width=W - 60, size=13, line=True)
    c.save(path)
