"""A compute sweep of the searches (best-of-N, weighted best-of-N, majority, beam search) beside
base and VERDICT, run by evaluate against a scripted server: the command, table and picture of
docs/search.md. SCRIPTED: no model answers, and nothing here is the paper's result nor any model's.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the overhead claim: step-wise verification against
regenerating whole trajectories). The server is perf/sweep_demo.py's (Scripted): docs/arith20.jsonl
in two steps, ideas sound with probability 0.4, final answers right with probability 0.85 after a
sound idea and 0.25 after an unsound one, judges scoring good steps around 0.72 and others around
0.45 (sd 0.25), the visual judge fooled half the time. Every draw is a hash of the request, so the
same request always gets the same reply, and a chain's seed decides its candidates (chain i of seed
s: reasoner seed s + 1000·i, harness/chains.py).

    python -m verdict_lab.perf.search_demo    # runs/search-demo/ (summary.md, compute.png,
                                              # search_compute.png); --picture PATH to put the
                                              # last elsewhere (docs/search_compute.png)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from verdict_lab.harness import tables
from verdict_lab.perf.sweep_demo import parse_args, run_evaluate

SIZES = (1, 2, 4, 8)  # N of best-of-N and majority
WIDTHS = (1, 2, 4)  # W of beam search, E = 2
RULES = ",".join(
    ["base", "verdict"]
    + [f"maj{n}" for n in SIZES]
    + [f"bon{n}+last+key" for n in SIZES]
    + [f"wbon{n}+last+mean" for n in SIZES]
    + [f"beam{w}x2+last+key+filter" for w in WIDTHS]
)
NOTE = (
    "SCRIPTED server (perf/search_demo.py: perf/sweep_demo.py's noise model), not a model, not the "
    "paper's result"
)


def main(argv=None) -> int:
    a = parse_args(
        argv,
        "A compute sweep of the searches on a scripted server (SCRIPTED, not a result)",
        "runs/search-demo",
        "search_compute.png",
    )
    code = run_evaluate(
        a,
        ["--rules", RULES, "--judge-format", "text", "--concurrency", "4"],
        stdout=subprocess.DEVNULL,
    )
    if code == 0:
        summary = json.loads((Path(a.out) / "summary.json").read_text(encoding="utf-8"))
        tables.compute_picture(summary, a.picture, note=NOTE)
        with open(Path(a.out) / "results.jsonl", encoding="utf-8") as fh:
            calls = [json.loads(line)["calls"] for line in fh]
        print("\n".join(tables._compute(summary)[3:]))
        print(f"\n{len(calls)} rows; their calls, each method alone: {sum(calls)}", file=sys.stderr)
        print(f"wrote {a.picture} (scripted server)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
