"""The Monte-Carlo study of VERDICT's selection, as a command: its report (docs/simulation_report.md and
docs/simulation.png), or with --sweep the τ, ε or λ curve its noise model predicts, in the form of evaluate's
sweeps.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026: when does the coupled consensus beat plain averaging? The study
is perf/simulation.py, its report perf/simulation_report.py.

    python -m verdict_lab.simulate [--trials 2500] [--seeds 20] [--seed 0] [--out docs]
    python -m verdict_lab.simulate --sweep tau=0.01,0.1,0.6 [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from verdict_lab.harness.sweep import picture
from verdict_lab.perf.simulation import curve, run
from verdict_lab.perf.simulation_report import markdown, plot


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Monte-Carlo study: when does VERDICT's consensus beat the mean?")
    p.add_argument("--trials", type=int, default=2500, help="steps per seed and setting (default 2500)")
    p.add_argument(
        "--seeds", type=int, default=20, help="independent seeds; the intervals are over these (default 20)"
    )
    p.add_argument("--seed", type=int, default=0, help="the base seed (default 0)")
    p.add_argument(
        "--out", default="docs", help="directory for simulation_report.md and simulation.png (docs)"
    )
    p.add_argument(
        "--sweep",
        action="append",
        help="NAME=V1,V2,... as evaluate.py's (tau, eps, lam_V, lam_L, lam_C): instead of the report, the "
        "curve this noise model predicts, as OUT/sim_NAME.json and .png in the form of evaluate.py's sweep "
        "(repeat the flag for more)",
    )
    a = p.parse_args(argv)
    if a.sweep:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        for text in a.sweep:
            s = curve(text, a.trials, a.seeds, a.seed)
            path = Path(a.out) / f"sim_{s['axis']}"
            path.with_suffix(".json").write_text(json.dumps(s, indent=1), encoding="utf-8")
            picture(
                s,
                str(path.with_suffix(".png")),
                f"Simulated accuracy (%) against {s['axis']}, ± std over seeds",
            )
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
