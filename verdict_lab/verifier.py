"""The live verifier, built in one place from its settings: the reasoner, the judges in their judge
mode and reply format, the reviser, the speculative proposer and verdict.Config, for evaluate's
harness, the studies and the VLMEvalKit model (demo.py uses judges.py alone).

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026: n, τ, ε, λ and max_steps are the paper's knobs
(verdict.Config checks their ranges); the judge modes are the related papers' (modes.JudgeMode),
revise on reject is ReVISE's (revise.Reviser).

- Settings: every setting of a live chain, checked once, here: a bad value is a ValueError naming
  it, before any call. flags.py maps each command-line flag to one field; VerdictVLM takes the
  fields as keywords;
- build(settings, reasoner, judge, seed, fmt) -> Verifier: one chain's parts, on two clients (the
  same object when the reasoner and the judges share an endpoint and model);
- run(verifier, question, images, map_fn, meter) -> verdict.Trace, with what the parts recorded in
  its meta; with Settings.adaptive, only the steps where the reasoner is unsure are judged
  (adaptive.py);
- CallBudget: at most max_calls model calls per chain; thread_map: a step's judge calls on k
  threads.
"""

from __future__ import annotations

import numbers
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from typing import Any, Callable

import verdict
from judges import MAX_PIXELS, SEED_STRIDE, Judge, Reasoner
from verdict_lab import loop
from verdict_lab.adaptive import OFF, Adaptive, gate_of
from verdict_lab.client import total_usage
from verdict_lab.formats import FORMATS, REPLIES, FormatJudge, JudgeFormat
from verdict_lab.layouts import DEFAULT_LAYOUT, check_layout, layout
from verdict_lab.modes import MODE_MAX_TOKENS, JudgeMode
from verdict_lab.modes.judge import ModeChain, ModeJudge
from verdict_lab.revise import Reviser
from verdict_lab.speculate import Speculator

_PAPER = verdict.Config()  # the paper's n, τ, ε, λ and max_steps
RULES = ("base",) + verdict.RULES  # base: the reasoner alone, one sampled chain (n = 1, no judge)


def _count(v, low: int = 1) -> bool:
    """v is an integer >= low (not a bool)."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= low


@dataclass(frozen=True)
class Settings:
    """The settings of a live chain, with the paper's values and the commands' defaults. ValueError
    names a bad field ("max_tokens must be an integer >= 1, got 0"); verdict.Config checks n, tau,
    eps, lam and max_steps (its message starts with the field's name)."""

    rule: str = "verdict"  # "base", or a rule of verdict.RULES
    n: int = _PAPER.n  # candidates per step
    tau: float = _PAPER.tau  # τ: a candidate passes only if s̄* > τ
    eps: float = _PAPER.eps  # ε: a candidate passes only if Δ* < ε
    lam: tuple = _PAPER.lam  # λ_V, λ_L, λ_C
    max_steps: int = _PAPER.max_steps  # the longest chain
    max_tokens: int = 256  # per reasoner step (and revision)
    judge_format: str = "json"  # formats.FORMATS: the judges' reply
    judge_max_tokens: int | None = None  # per judge reply (None: the reply format's own)
    reasons: bool = False  # judges write a reason before their score
    weighted: bool = False  # ŝ is the probability-weighted score where the server sent logprobs
    judge_mode: str = (
        "plain"  # modes.JudgeMode.parse's words: prior, premises, gate, zoom, joined by +
    )
    mode_max_tokens: int = MODE_MAX_TOKENS  # per judge-mode reply
    revise: bool = False  # revise on reject
    speculate: bool = False  # propose step t+1 while step t is judged (speculate.Speculator)
    adaptive: str = OFF  # off, or a signal of adaptive.SIGNALS: judge only unsure steps
    adaptive_threshold: float | None = None  # θ of that signal (None: adaptive.THRESHOLDS')
    max_calls: int | None = None  # model calls per chain (None: no limit); past it the chain stops
    max_pixels: int = MAX_PIXELS  # the most pixels an image is sent at
    layout: str = DEFAULT_LAYOUT  # layouts.LAYOUTS: how each request is laid out

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {', '.join(RULES)}, got rule={self.rule!r}")
        object.__setattr__(
            self, "lam", tuple(self.lam) if isinstance(self.lam, (list, tuple)) else self.lam
        )
        self.config  # n, tau, eps, lam, max_steps: verdict.Config's checks
        # There is one stubbornness per judge: visual, logical, contextual.
        if len(self.lam) != len(verdict.JUDGES):
            raise ValueError(
                f"lam must hold {len(verdict.JUDGES)} values (λ_V, λ_L, λ_C), got lam={self.lam!r}"
            )
        if (
            1 + self.n
        ) * self.n > SEED_STRIDE:  # a step and its top-ups: n + 1 requests of n seeds each
            most = max(k for k in range(1, SEED_STRIDE) if (1 + k) * k <= SEED_STRIDE)
            raise ValueError(
                f"n must be at most {most} ((1 + n)·n sampling seeds a step), got n={self.n}"
            )
        for name, low in (("max_tokens", 1), ("mode_max_tokens", 1), ("max_pixels", 1)):
            if not _count(getattr(self, name), low):
                raise ValueError(
                    f"{name} must be an integer >= {low}, got {name}={getattr(self, name)!r}"
                )
        for name in ("judge_max_tokens", "max_calls"):
            if getattr(self, name) is not None and not _count(getattr(self, name)):
                raise ValueError(
                    f"{name} must be an integer >= 1 or None, got {name}={getattr(self, name)!r}"
                )
        for name in ("reasons", "weighted", "revise", "speculate"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"{name} must be True or False, got {name}={getattr(self, name)!r}"
                )
        if self.judge_format not in FORMATS:
            raise ValueError(
                f"judge_format must be one of {', '.join(FORMATS)}, got {self.judge_format!r}"
            )
        if self.weighted and self.judge_format == "text":  # a decimal spreads over several tokens
            raise ValueError(
                "a weighted score needs a one-digit score: judge_format json or digit, not text"
            )
        self.mode  # JudgeMode.parse's checks
        check_layout(self.layout)
        if self.rule == "base" and (self.mode.active or self.revise or self.speculate):
            raise ValueError("base runs no judges: it takes no judge mode, revise or speculate")
        self.gate  # Adaptive's checks of the signal and its threshold
        if self.rule == "base" and self.adaptive != OFF:
            raise ValueError("adaptive must be off for base: base runs no judges")
        if self.adaptive == OFF and self.adaptive_threshold is not None:
            raise ValueError(
                "adaptive_threshold needs an adaptive signal, got adaptive=off with "
                f"adaptive_threshold={self.adaptive_threshold!r}"
            )

    @property
    def config(self) -> verdict.Config:
        """verdict.Config of these settings: base samples one chain (n = 1) with no judges."""
        rule, n = ("verdict", 1) if self.rule == "base" else (self.rule, self.n)
        return verdict.Config(
            lam=self.lam, n=n, tau=self.tau, eps=self.eps, rule=rule, max_steps=self.max_steps
        )

    @property
    def mode(self) -> JudgeMode:
        return JudgeMode.parse(self.judge_mode)

    @property
    def gate(self) -> Adaptive | None:
        """The adaptive verification of these settings, or None (every step judged)."""
        return gate_of(self.adaptive, self.adaptive_threshold)

    @property
    def judged(self) -> bool:
        return self.rule != "base"

    @classmethod
    def of(cls, **kw) -> "Settings":
        """Settings(**kw); a keyword that names no setting is a ValueError naming it and the
        settings."""
        unknown = sorted(set(kw) - {f.name for f in fields(cls)})
        if unknown:
            names = ", ".join(f.name for f in fields(cls))
            raise ValueError(f"unknown setting {unknown[0]!r}; the settings are {names}")
        return cls(**kw)

    def record(self) -> dict:
        """The settings, JSON-ready (what a run directory or a sidecar file pins)."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
            for f in fields(self)
        }


class CallBudget:
    """At most `limit` model calls per chain (Settings.max_calls; None: no limit), shared by the
    chain's clients, whose on_chat hook is `spend`. Past the limit, verdict.Stop("budget") ends the
    chain."""

    def __init__(self, limit: int | None):
        self.limit, self.spent = limit, 0

    def spend(self) -> None:
        if self.limit is not None and self.spent >= self.limit:
            raise verdict.Stop("budget")
        self.spent += 1


@dataclass(frozen=True)
class Verifier:
    """One chain's parts: the proposer, the judges, the reviser (or None), verdict.Config, the judge
    mode's calls (None in plain VERDICT), the run's reply format, the clients and the settings they
    came from."""

    settings: Settings
    config: verdict.Config
    propose: Callable
    judges: tuple
    revise: Callable | None
    chain: ModeChain | None
    format: JudgeFormat
    clients: tuple
    adaptive: Adaptive | None = None  # which steps are judged; None: every step


def judges_of(
    settings: Settings, client, fmt: JudgeFormat, chain: ModeChain | None = None
) -> tuple:
    """The three judges of a chain in the run's reply format `fmt` (json judges fall back to text
    with it) and in the chain's judge mode (ModeJudge, when `chain` is given)."""
    lay = layout(settings.layout, settings.max_pixels)

    def judge(name: str, fmt_name: str):
        reply = REPLIES[fmt_name]
        # Text, the fallback format, has no score digit to weight.
        weighted = settings.weighted and reply.digit_at is not None
        j = Judge(
            client,
            name,
            reply=reply,
            reasons=settings.reasons,
            weighted=weighted,
            max_tokens=settings.judge_max_tokens,
            layout=lay,
        )
        return j if chain is None else ModeJudge(j, chain)

    if fmt.requested != "json":
        return tuple(judge(name, fmt.requested) for name in verdict.JUDGES)
    return tuple(
        FormatJudge({f: judge(name, f) for f in ("json", "text")}, fmt) for name in verdict.JUDGES
    )


def build(
    settings: Settings, reasoner, judge=None, seed: int = 0, fmt: JudgeFormat | None = None
) -> Verifier:
    """A chain's Verifier: the reasoner of reasoner seed `seed` on client `reasoner`, the judges,
    their judge mode and the reviser on `judge` (default: the reasoner's client), in the run's reply
    format `fmt` (one per run, so that a fallback to text holds for every chain; default: a new one
    of settings.judge_format)."""
    judge, fmt = judge or reasoner, fmt or JudgeFormat(settings.judge_format)
    lay, config = layout(settings.layout, settings.max_pixels), settings.config
    gate = settings.gate  # None for base: Settings refuses adaptive without judges
    logprobs = gate is not None and gate.logprobs  # only a logprob signal changes the requests
    propose = Reasoner(reasoner, settings.max_tokens, seed, layout=lay, logprobs=logprobs)
    chain, judges, revise = None, (), None
    if settings.judged:
        mode = settings.mode
        if mode.active:
            chain = ModeChain(
                judge,
                mode,
                settings.mode_max_tokens,
                fmt=fmt,
                layout=lay,
                max_pixels=settings.max_pixels,
            )
        judges = judges_of(settings, judge, fmt, chain)
        revise = (
            Reviser(reasoner, judges, settings.max_tokens, seed, layout=lay)
            if settings.revise
            else None
        )
        propose = Speculator(propose, config) if settings.speculate else propose
    clients = (reasoner, judge)
    return Verifier(settings, config, propose, judges, revise, chain, fmt, clients, gate)


def run(
    v: Verifier, question: str, images: Any = None, map_fn: Callable = map, meter=None
) -> loop.Trace:
    """loop.run (verdict.run's loop, with records, usage and revisions) with the Verifier's parts;
    meter: the clients' usage, summed (total_usage), by default. The trace's meta: "judge_mode"
    (ModeChain.record, in a judge mode), "judges" (the reply format asked for and used, the
    fallback, which score fed ŝ), "speculation" (with speculate: what it cost). Speculative
    proposals still running when the chain ends are waited for, so they are counted."""
    meter = meter or (lambda: total_usage(v.clients))
    try:
        trace = loop.run(
            question, v.propose, v.judges, v.config, images, map_fn, meter, v.revise, v.adaptive
        )
    finally:
        speculated = v.propose.finish() if isinstance(v.propose, Speculator) else None
    meta = {"judge_mode": v.chain.record()} if v.chain is not None else {}
    if v.judges:
        fed = "weighted" if v.settings.weighted else "sampled"
        meta["judges"] = {**v.format.record(), "s_hat": fed}
    if speculated is not None:
        meta["speculation"] = v.propose.record(len(trace.steps))
    return replace(trace, meta=meta)


def thread_map(k: int) -> Callable:
    """A map_fn for verdict.run: f over items on at most k threads, results in input order."""
    if not (_count(k)):
        raise ValueError(f"k must be an integer >= 1, got k={k!r}")
    if k == 1:
        return lambda f, items: list(map(f, items))

    def map_fn(f, items):
        items = list(items)
        with ThreadPoolExecutor(max_workers=max(1, min(k, len(items)))) as pool:
            return list(pool.map(f, items))

    return map_fn
