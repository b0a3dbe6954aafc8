"""The judge modes of the related papers, by name, and the verifier's flags that demo.py and evaluate.py
share.

A judge mode changes what VERDICT's judges see, never the consensus: SGV's prior ("prior"), EVPV's fact
sheet ("premises") and reliability gate ("gate", "gate-visual"), ReVISE's look again ("zoom"). JudgeMode
names a combination; modes/calls.py makes its calls, modes/evpv.py and modes/zoom.py hold its pure parts,
modes/rewards.py ReVISE's training rewards. Nothing here makes a request.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

import verdict
from modes.evpv import GATE_TARGET, GATE_TARGETS

MODES = ("prior", "premises", "gate", "zoom")
MODE_MAX_TOKENS = 512  # tokens per prior, fact-sheet, premise-check and region-request reply


@dataclass(frozen=True)
class JudgeMode:
    """Which modes are on. JudgeMode() is plain VERDICT. `name` is "plain", "prior", "premises+gate", ...;
    the gate's word is "gate" for the default target (GATE_TARGET), else "gate-<target>"."""

    prior: bool = False
    premises: bool = False
    gate: bool = False
    gate_target: str = GATE_TARGET
    zoom: bool = False

    def __post_init__(self):
        if self.gate and not self.premises:  # the gate checks steps against the fact sheet
            raise ValueError(
                "the gate needs the premises mode (its fact sheet), got gate=True, premises=False"
            )
        if self.gate_target not in GATE_TARGETS:
            raise ValueError(
                f"gate_target must be one of {', '.join(GATE_TARGETS)}, got gate_target={self.gate_target!r}"
            )
        if self.gate_target != GATE_TARGET and not self.gate:  # a target without its gate: a name that lies
            raise ValueError(f"gate_target={self.gate_target!r} needs the gate, got gate=False")

    @property
    def active(self) -> bool:
        return self.prior or self.premises or self.zoom

    def gates(self, judge: str) -> bool:
        """Whether the gate acts on this judge's scores."""
        return self.gate and (self.gate_target == "step" or judge == "visual")

    @property
    def name(self) -> str:
        gate = "gate" if self.gate_target == GATE_TARGET else f"gate-{self.gate_target}"
        return "+".join(gate if k == "gate" else k for k in MODES if getattr(self, k)) or "plain"

    @classmethod
    def parse(cls, text: str) -> "JudgeMode":
        """ "prior,premises,gate", "premises+gate-visual" (any order); "" or "plain" is plain VERDICT.
        parse(mode.name) == mode for every mode."""
        vocabulary = MODES + tuple(f"gate-{t}" for t in GATE_TARGETS)
        words = [w.strip() for w in re.split(r"[,+]", text or "") if w.strip() not in ("", "plain")]
        gates = [w for w in words if w.startswith("gate")]
        if any(w not in vocabulary for w in words) or len(set(words)) != len(words) or len(gates) > 1:
            raise ValueError(
                f"judge mode {text!r}: expected distinct words from {', '.join(vocabulary)}, "
                "one gate word at most"
            )
        kw = {w: True for w in words if w not in gates}
        if gates:
            kw.update(gate=True, gate_target=gates[0].partition("-")[2] or GATE_TARGET)
        return cls(**kw)


# ----------------------------------------------------------------------------- the flags of the commands


def add_verifier_args(parser) -> None:
    """The verifier's flags, defined once for demo.py and evaluate.py: verdict.Config's numbers, with Config's
    defaults and ranges (config_of checks them), the judge mode (modes_of) and revise on reject."""
    d, on = verdict.Config(), {"step": "every judge's score", "visual": "ŝ_V only"}  # GATE_TARGETS' meanings
    other = "; ".join(f"gate-{t}: on {on[t]}" for t in GATE_TARGETS if t != GATE_TARGET)
    g = parser.add_argument_group("verifier")
    g.add_argument("--n", type=int, default=d.n, help=f"candidates per step ({d.n})")
    g.add_argument(
        "--tau",
        type=float,
        default=d.tau,
        help=f"confidence threshold τ in [0, 1]: a candidate passes only if s̄* > τ ({d.tau})",
    )
    g.add_argument(
        "--eps",
        type=float,
        default=d.eps,
        help=f"dispersion tolerance ε in (0, 1]: a candidate passes only if Δ* < ε ({d.eps})",
    )
    g.add_argument("--max-steps", type=int, default=d.max_steps, help=f"longest chain ({d.max_steps})")
    g.add_argument(
        "--judge-mode",
        default="plain",
        help=(
            "what the judges see, as words joined by +: prior (SGV's prior, +1 call per question), premises "
            "(EVPV's fact sheet, +1 call per question), gate (with premises: EVPV's reliability gate, +1 "
            f"call per candidate, on {on[GATE_TARGET]}; {other}), zoom (ReVISE's look again: the visual "
            "judge names regions and scores with their close-ups, +1 call per candidate). demo.py runs one "
            "mode; evaluate.py runs each of a comma-separated list, as rows named rule+mode (plain)"
        ),
    )
    g.add_argument(
        "--judge-modes", dest="judge_mode", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )  # evaluate.py's name until the flags were shared
    g.add_argument(
        "--revise",
        action="store_true",
        help=(
            "revise on reject: when no candidate passes, the reasoner's model revises the best one from the "
            "judges' reasons, and the same judges score the revision (+1 call, +m judge calls); evaluate.py "
            "adds it as rows named row+revise"
        ),
    )
    g.add_argument("--mode-max-tokens", type=int, help=f"tokens per judge-mode reply ({MODE_MAX_TOKENS})")
    g.add_argument(
        "--reasons",
        action="store_true",
        help=(
            "judges write a reason (at most two sentences) before their score; by default they reply "
            "with the score alone, as the paper's agents do ('every agent returns a single scalar in "
            "[0, 1]'), which makes a judge call a few tokens long. The prompts ask for the same "
            "judgement either way; --revise shows the reviser these reasons (without them, only each "
            "judge's score)"
        ),
    )
    g.add_argument(
        "--speculate",
        action="store_true",
        help=(
            "propose step t+1 after each candidate while the judges score step t (speculate.py): the "
            "chosen candidate's proposal gives the next candidates, the others are dropped; the same "
            "decisions, more reasoner tokens, faster only on a server with spare parallel capacity"
        ),
    )
    g.add_argument(
        "--score-only", action="store_true", help=argparse.SUPPRESS
    )  # the default since judges reply with the score alone; kept so that older commands still run


def config_of(args, **fields) -> verdict.Config:
    """verdict.Config from add_verifier_args' flags and `fields`; ValueError names the flag of a value out of
    Config's range ("--tau must be in [0, 1] ..., got tau=5.0")."""
    flags = {"n": args.n, "tau": args.tau, "eps": args.eps, "max_steps": args.max_steps}
    if getattr(args, "lam", None) is not None:  # evaluate.py's --lam (and its sweeps)
        flags["lam"] = args.lam
    try:
        return verdict.Config(**flags, **fields)
    except ValueError as e:  # Config's message starts with the field's name
        name, _, rest = str(e).partition(" ")
        raise ValueError(f"--{name.replace('_', '-')} {rest}" if name in flags else str(e)) from None


def score_only(args) -> bool:
    """Whether the judges reply with the score alone (the default), from --reasons; ValueError when
    --score-only (the old name of the default) is given with --reasons."""
    if getattr(args, "reasons", False) and getattr(args, "score_only", False):
        raise ValueError("--reasons and --score-only contradict each other (score alone is the default)")
    return not getattr(args, "reasons", False)


def modes_of(args) -> list:
    """The JudgeModes of --judge-mode, in order, and --mode-max-tokens and --reasons checked; ValueError
    names a bad one."""
    score_only(args)
    modes = [JudgeMode.parse(m) for m in args.judge_mode.split(",")]
    if len(set(modes)) != len(modes):
        raise ValueError(f"--judge-mode lists a mode twice: {args.judge_mode!r}")
    if args.mode_max_tokens is not None and args.mode_max_tokens < 1:
        raise ValueError(f"--mode-max-tokens must be >= 1, got {args.mode_max_tokens}")
    return modes
