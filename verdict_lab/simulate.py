"""The Monte-Carlo study of VERDICT's selection, as a command: its report (docs/simulation_report.md
and docs/simulation.png), or with --sweep the τ, ε or λ curve its noise model predicts, in the form
of evaluate's sweeps.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026: when does the coupled consensus beat plain averaging? The
study is perf/simulation.py, its report perf/simulation_report.py.

    python -m verdict_lab.simulate [--trials 2500] [--seeds 20] [--seed 0] [--out DIR]
    python -m verdict_lab.simulate --sweep tau=0.01,0.1,0.6 [--out DIR]

Each prints its table and writes its files in --out, the current directory unless named
(`--out docs` regenerates docs/simulation_report.md and docs/simulation.png).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from verdict import STUBBORNNESS, Config
from verdict_lab.cli import Parser
from verdict_lab.harness.sweep import axis_name, parse_sweep, picture
from verdict_lab.perf.simulation import curve, run
from verdict_lab.perf.simulation_report import markdown, plot


def parse_args(argv) -> argparse.Namespace:
    """The command's flags, checked: a bad one is one line and exit 2."""
    p = Parser(
        prog="verdict_lab.simulate",
        description="Monte-Carlo study: when does VERDICT's consensus beat the mean?",
    )
    p.add_argument(
        "--trials", type=int, default=2500, help="steps per seed and setting (default 2500)"
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=20,
        help="independent seeds, at least 2: the intervals are over these (20)",
    )
    p.add_argument("--seed", type=int, default=0, help="the base seed, >= 0 (default 0)")
    p.add_argument(
        "--out",
        default=".",
        help="directory for simulation_report.md and simulation.png, or the sweep's files, made if "
        "missing (the current one)",
    )
    p.add_argument(
        "--sweep",
        action="append",
        help="NAME=V1,V2,... as evaluate's (tau, eps, lam_V, lam_L, lam_C): instead of the report, "
        "the curve this noise model predicts, as OUT/sim_NAME.json and .png in the form of "
        "evaluate's sweeps (repeat the flag for more)",
    )
    a = p.parse_args(argv)
    if a.trials < 1 or a.seeds < 2 or a.seed < 0:
        p.error(
            f"need --trials >= 1, --seeds >= 2 and --seed >= 0, "
            f"got {a.trials}, {a.seeds} and {a.seed}"
        )
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        p.error(f"--out {a.out!r} is a file, not a directory")
    try:
        for text in a.sweep or ():
            check_sweep(text)
    except ValueError as e:
        p.error(str(e))
    return a


def check_sweep(text: str) -> None:
    """ValueError naming a --sweep that is no knob, no list of finite values, or a value out of
    verdict.Config's range (τ in [0, 1], ε in (0, 1], λ > 0), as evaluate refuses it."""
    for st in parse_sweep(text):
        lam = list(STUBBORNNESS)
        if st.axis.startswith("lam_"):
            lam["VLC".index(st.axis[-1])] = st.value
        knob = {} if st.axis.startswith("lam_") else {st.axis: st.value}
        try:
            Config(lam=tuple(lam), **knob)
        except ValueError as e:
            raise ValueError(f"--sweep {st.axis}={st.value:g}: {e}") from None


def table(s: dict) -> str:
    """A simulated sweep's table (sweep.curve's summary): a row per setting, Avg accuracy (%) of
    base, Mean and VERDICT, mean ± std over seeds, and VERDICT − Mean (points)."""
    pct = lambda c: f"{c['mean']:.2f} ±{c['std']:.2f}" if c.get("std") is not None else "—"
    lines = [
        f"| {axis_name(s['axis'])} | " + " | ".join(s["methods"]) + " | VERDICT − Mean |",
        "|---" * (len(s["methods"]) + 2) + "|",
    ]
    for k, t in zip(s["settings"], s["ticks"]):
        cells = [pct(s["accuracy"][k][m]["Avg"]) for m in s["methods"]]
        lines.append(f"| {t} | " + " | ".join(cells) + f" | {s['margin'][k]['Avg']:+.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    a = parse_args(argv)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    if a.sweep:
        for text in a.sweep:
            s = curve(text, a.trials, a.seeds, a.seed)
            path = Path(a.out) / f"sim_{s['axis']}"
            path.with_suffix(".json").write_text(json.dumps(s, indent=1), encoding="utf-8")
            picture(
                s,
                str(path.with_suffix(".png")),
                f"Simulated accuracy (%) against {s['axis']}, ± std over seeds",
            )
            print(f"{s['note']}; {s['source']}\n\n{table(s)}\n")
            print(f"wrote {path}.json and {path}.png")
        return 0
    results = run(a.trials, a.seeds, a.seed)
    out, text = Path(a.out), markdown(results, a.trials, a.seeds, a.seed)
    (out / "simulation_report.md").write_text(text, encoding="utf-8")
    plot(results, out / "simulation.png")
    print(text[text.index("| noise model") : text.index("\n\n## Accuracy")])  # the headline table
    print(f"wrote {out / 'simulation_report.md'} and {out / 'simulation.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
