"""A τ sweep of evaluate against a scripted server whose judges follow the simulation's noise model:
the command and picture of docs/sweeps.md. SCRIPTED: no model answers, and nothing here is the
paper's result.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the τ regimes). The server (Scripted) answers
docs/arith20.jsonl in two steps. Step 1: n candidate ideas, each sound with probability 0.4. Step 2:
n final answers, each right with probability 0.85 after a sound idea and 0.25 after an unsound one.
Judge k scores a sound or right step around mu1 = 0.72 and any other around mu0 = 0.45, with noise
sd 0.25 (the simulation's iid world, noisier), except that the visual judge is fooled on a wrong
step with probability 0.5 and scores it around 0.9 (its fooled-V world). Every draw is a hash of the
request, so the same request always gets the same reply.

    python -m verdict_lab.perf.sweep_demo     # prints the sweep's tables; writes runs/sweep-demo/
                                              # under the current directory, its picture included
    python -m verdict_lab.perf.sweep_demo --picture docs/sweep_tau.png    # docs/sweeps.md's picture

Nothing is written in the checkout unless named: --out (runs/sweep-demo) and --picture
(OUT/sweep_tau.png) are taken from the current directory.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import verdict
from verdict_lab.cli import Parser
from verdict_lab.harness import sweep
from verdict_lab.layouts import role_of
from verdict_lab.loopback import LoopbackServer, chat_response, user_text
from verdict_lab.perf.footprint import EVALUATE, ROOT

DATA = Path(ROOT) / "docs" / "arith20.jsonl"
TAUS = "0.01,0.1,0.3,0.6,0.8,0.95"
MU1, MU0, SIGMA, P_FOOL, MU_FOOL = (
    0.72,
    0.45,
    0.25,
    0.5,
    0.9,
)  # the simulation's world: fooled-V, noisier
NOTE = (
    "SCRIPTED server (perf/sweep_demo.py: the simulation's noise model), not a model, "
    "not the paper's result"
)


def uniform(*key) -> float:
    """A number in [0, 1) from a hash of `key`: the same request, the same draw."""
    return int(hashlib.sha256(json.dumps(key).encode()).hexdigest()[:13], 16) / 16**13


def normal(*key) -> float:
    """A standard normal draw from a hash of `key` (Box-Muller)."""
    u1, u2 = max(uniform(*key, 1), 1e-12), uniform(*key, 2)
    return math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)


class Scripted:
    """The handler of LoopbackServer: the reasoner's candidates and the judges' scores (module
    docstring)."""

    def __init__(self, data: Path = DATA):
        rows = [
            json.loads(line)
            for line in data.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        self.answers = {r["question"]: r["answer"] for r in rows}

    def __call__(self, body, path):
        role, text = role_of(body["messages"]), user_text(body)
        question = next(q for q in self.answers if q in text)
        if role == "reasoner":
            n, seed = body.get("n", 1), body["seed"]
            idea = re.search(r"(?m)^Step 1: (.*)$", text)
            if idea is None:  # step 1: ideas, sound or not
                sound = [uniform(question, seed, j) < 0.4 for j in range(n)]
                steps = [
                    f"Idea {seed}.{j}: a {'sound' if s else 'hasty'} reading."
                    for j, s in enumerate(sound)
                ]
                return 200, chat_response(steps, prompt_tokens=120)
            p = 0.85 if "sound" in idea.group(1) else 0.25
            right = [uniform(question, idea.group(1), j) < p for j in range(n)]
            letters = [
                self.answers[question] if r else self._wrong(question, j)
                for j, r in enumerate(right)
            ]
            return 200, chat_response(
                [f"Try {j}. Final answer: {x}" for j, x in enumerate(letters)], 160
            )
        step = re.search(r"<step>\n(.*?)\n</step>", text, re.S).group(1)
        good = "sound" in step or step.endswith(f"Final answer: {self.answers[question]}")
        judge = verdict.JUDGES.index(role)
        mu = MU1 if good else MU0
        if judge == 0 and not good and uniform(question, step, "fool") < P_FOOL:
            mu = MU_FOOL
        score = min(1.0, max(0.0, mu + SIGMA * normal(question, step, judge)))
        return 200, chat_response([f"Checked.\nScore: {score:.2f}"], prompt_tokens=200)

    def _wrong(self, question: str, j: int) -> str:
        others = [x for x in "ABCD" if x != self.answers[question]]
        return others[int(uniform(question, "wrong", j) * len(others))]


def parse_args(argv, description: str, out: str, picture: str):
    """The demos' flags: --out (default `out`), --seeds, --picture (default OUT/`picture`), both
    relative to the current directory and made absolute (evaluate runs in the checkout)."""
    p = Parser(description=description)
    p.add_argument("--out", default=out, help=f"the run's directory ({out})")
    p.add_argument("--seeds", type=int, default=3, help="seeds (3)")
    p.add_argument("--picture", help=f"the picture, labelled (OUT/{picture})")
    a = p.parse_args(argv)
    a.out = str(Path(a.out).resolve())
    a.picture = str(Path(a.picture).resolve()) if a.picture else str(Path(a.out) / picture)
    return a


def run_evaluate(a, flags: list, stdout=None) -> int:
    """verdict_lab.evaluate on DATA against the Scripted server, as a user runs it, with `flags`
    after the data, endpoint, --out and --seeds; its exit status. How many requests the server
    received goes to stderr."""
    with LoopbackServer(Scripted()) as srv:
        cmd = [
            *EVALUATE,
            "--data",
            str(DATA),
            "--base-url",
            srv.url,
            "--out",
            a.out,
            "--seeds",
            str(a.seeds),
        ]
        code = subprocess.run(cmd + flags, cwd=ROOT, stdout=stdout).returncode
        print(f"the server received {len(srv.chats)} requests", file=sys.stderr)
    return code


def main(argv=None) -> int:
    a = parse_args(
        argv,
        "A τ sweep on a scripted server (SCRIPTED, not the paper's result)",
        "runs/sweep-demo",
        "sweep_tau.png",
    )
    code = run_evaluate(
        a, ["--rules", "base,mean,verdict", "--judge-format", "text", "--sweep", f"tau={TAUS}"]
    )
    if code == 0:
        summary = json.loads((Path(a.out) / "summary.json").read_text(encoding="utf-8"))
        try:
            sweep.picture({**summary, "note": NOTE}, a.picture)
        except OSError as e:  # the run and its tables stand; only the picture is missing
            print(f"sweep_demo: cannot write {a.picture}: {e}", file=sys.stderr)
            return 2
        print(f"wrote {a.picture} (scripted server)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
