"""VERDICT: VERification via Disagreement-Informed Coupled Thresholding.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via Disagreement-Aware
Consensus", ECCV 2026. This module implements:

- the coordination-game consensus (the agents' utility and its fixed point), in closed form;
- the consensus confidence s̄*, the dispersion Δ*, the dual acceptance test and the fallback ranking by
  s̄* − Δ*: paper_rule, for one step as the paper states it; select, batched, with the baselines of the
  results table and the ablations (definitions fixed in select, as the paper gives none);
- the step-wise loop (propose n candidates, score each with m judges, select, extend), with an optional
  meter of each step's cost and revise on reject (after ReVISE, which the paper does not have): see step.

Pure NumPy and the standard library. It imports no other module of this project, so the file can be copied
alone into another code base. Two statements of the paper are wrong and are implemented as the mathematics
says (the tests pin both): the consensus does NOT preserve the plain mean unless all λ are equal (it
preserves Σ λ_i s_i), and Proposition 1's second example has Δ* = 0.0181, not ≈ 0.04 (0.0444 is the raw Δ).
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

import numpy as np

STUBBORNNESS = (1.5, 1.0, 0.8)  # λ_V, λ_L, λ_C: visual, logical, contextual (paper, hyperparameters)
JUDGES = ("visual", "logical", "contextual")  # the order of STUBBORNNESS
TAU, EPS = 0.6, 0.1  # τ, ε: the dual test's thresholds (paper, hyperparameters); Config says their ranges
RULES = ("verdict", "mean", "min", "max", "majority", "variance", "raw-dual", "no-filter", "no-rank")
FINAL_ANSWER = r"(?i)final answer\s*:"  # default test for "this step ends the chain"
TRACE_FORMAT = "verdict-trace/5"  # Trace.to_dict's "format"


# ----------------------------------------------------------------------------- guards


def _reals(x, what: str) -> np.ndarray:
    """x as a float array, if every entry is a real number (int, float, NumPy's; NaN allowed): None, a
    string, a bool or a complex number is a caller's bug, never converted (None would become NaN, "0.9"
    0.9 and True 1.0)."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "fiu":  # bool, complex, str, object
            raise ValueError(f"{what} must be real numbers, got an array of {x.dtype}")
        return x.astype(float)
    stack = [x]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        elif not _real(v):
            raise ValueError(f"{what} must be real numbers (NaN to abstain), got {v!r}")
    return np.asarray(x, dtype=float)


def _check_lam(lam, m: int) -> np.ndarray:
    """λ as a float vector of m ≥ 2 entries, each finite and > 0 (no lower floor: see consensus)."""
    if m < 2:  # the game needs at least one other agent to agree with
        raise ValueError(f"need at least m=2 judges, got m={m}")
    lam = _reals(lam, "lam")
    if lam.ndim != 1 or lam.shape[0] != m:
        raise ValueError(f"lam must have one stubbornness per judge (m={m}), got shape {lam.shape}")
    if not np.all(np.isfinite(lam)) or np.any(lam <= 0):  # λ ≤ 0 breaks uniqueness
        raise ValueError(f"every stubbornness must be finite and > 0, got lam={lam.tolist()}")
    return lam


def _check_scores(s_hat) -> np.ndarray:
    """Raw scores as floats in [0, 1]; NaN is allowed and means the judge abstained (m: see _check_lam)."""
    s_hat = _reals(s_hat, "scores")
    if s_hat.ndim == 0:  # a bare number has no judge axis
        raise ValueError(f"scores must have shape [..., m], got shape {s_hat.shape}")
    bad = s_hat[~(np.isnan(s_hat) | ((s_hat >= 0) & (s_hat <= 1)))]
    if bad.size:  # out of range or ±inf: never clamped, it is a bug in the judge
        raise ValueError(f"scores must lie in [0, 1] (NaN = abstain), got {bad[0]!r}")
    return s_hat


def _check_step(s_hat, lam, tau, eps, batched: bool = True) -> tuple:
    """(ŝ [..., n, m], λ [m]) of a choice, checked; τ and ε must be finite (Config checks their ranges)."""
    s_hat = _check_scores(s_hat)
    if s_hat.ndim < 2 or (s_hat.ndim > 2 and not batched):
        raise ValueError(f"scores must have shape [n, m], got shape {s_hat.shape}")
    if s_hat.shape[-2] == 0:  # nothing to choose from
        raise ValueError("select needs at least one candidate, got n=0")
    if not (math.isfinite(tau) and math.isfinite(eps)):
        raise ValueError(f"tau and eps must be finite, got tau={tau!r}, eps={eps!r}")
    return s_hat, _check_lam(lam, s_hat.shape[-1])


def _real(x, kind: type = numbers.Real) -> bool:
    """x is a number of that kind and not a bool (np.bool_ is no numbers.Real; True is a numbers.Integral)."""
    return isinstance(x, kind) and not isinstance(x, bool)


def _nanmean(x: np.ndarray) -> np.ndarray:
    """Mean over the last axis of the non-NaN entries; NaN where a row has none.  [..., m] -> [...]"""
    answered = ~np.isnan(x)
    ones = np.ones(x.shape[-1])  # a product with ones: much faster than .sum(-1) over a short axis
    with np.errstate(invalid="ignore"):  # a row with no answer is 0/0 = NaN, as documented
        return (np.where(answered, x, 0.0) @ ones) / (answered @ ones)


# ----------------------------------------------------------------------------- consensus


def consensus_matrix(lam=STUBBORNNESS) -> np.ndarray:
    """The matrix M with s* = M ŝ, for m = len(lam) judges who all answered.  -> [m, m]
    M = A⁻¹ diag(λ), A_ii = 1 + λ_i, A_ij = −1/(m−1) (the paper's system); each row sums to 1 (M 1 = 1)."""
    return consensus(np.eye(np.size(lam)), lam).T  # column j is the response to ŝ = e_j


def consensus(s_hat, lam=STUBBORNNESS) -> np.ndarray:
    """Consensus scores s*: the unique Nash equilibrium of the judges' coordination game. [..., m] -> [..., m]

    Agent i maximises u_i = −(s_i − s̄_{−i})² − λ_i (s_i − ŝ_i)², s̄_{−i} = (1/(m−1)) Σ_{j≠i} s_j,
    so at the fixed point (1 + λ_i) s_i − (1/(m−1)) Σ_{j≠i} s_j = λ_i ŝ_i.

    Closed form (Sherman–Morrison, O(m) per row): with c = 1/(m−1) and a_i = 1 + λ_i + c,
        S = Σ_j s_j = (Σ_i λ_i ŝ_i / a_i) / (1 − c Σ_i 1/a_i),    s_i = (λ_i ŝ_i + c S) / a_i.
    The denominator is computed in a form that subtracts nothing. Since 1 + c = m c, a_i − m c = λ_i:
        1 − c Σ_i 1/a_i = Σ_i (1/m − c/a_i) = Σ_i (a_i − m c) / (m a_i) = (1/m) Σ_i λ_i/a_i  > 0,
    so S = m · Σ_i w_i ŝ_i / Σ_i w_i with w_i = λ_i/a_i: m times a weighted mean of ŝ, the solution exists
    and is unique. The textbook form loses about −log10 λ digits as λ → 0 (s* is 0.1% off at λ = 1e-14);
    here every term is positive and w is scaled by 1/max λ, so every finite λ > 0 gives s* to rounding.

    Abstentions: a NaN in ŝ removes that judge from its row's game. The row is solved over the m' judges
    that answered (their own λ, c = 1/(m'−1)); the abstainer's s* is NaN. With m' = 1 there is nobody to
    agree with and s* = ŝ; with m' = 0 the row is all NaN.
    Invariant (not the plain mean, see erratum 1): Σ_i λ_i s*_i = Σ_i λ_i ŝ_i.
    """
    s_hat = _check_scores(s_hat)
    lam = _check_lam(lam, s_hat.shape[-1])
    answered = ~np.isnan(s_hat)  # [..., m]
    s_star = _closed_form(s_hat, lam)  # [..., m] right where every judge answered
    few = answered.sum(-1) < 2  # [...] m' ≤ 1: no game, ŝ stands (NaN if none)
    s_star[few] = s_hat[few]
    some = ~answered.all(-1) & ~few  # [...] 2 ≤ m' < m: the game of those who answered
    s_star[some] = _closed_form(s_hat[some], np.where(answered[some], lam, 0.0))  # [r, m]
    return s_star


def _closed_form(s_hat: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """The closed form of `consensus`, with λ [m] for all rows or λ [r, m] per row.  [..., m] -> [..., m]
    λ_i = 0 marks a judge who did not answer (ŝ_i = NaN): its weight w_i is 0, so it takes no part in S,
    m' counts the λ_i > 0, and its s_i = (0·NaN + c S)/a_i is NaN. Every row needs m' ≥ 2."""
    k = (lam > 0).sum(-1, keepdims=True)  # [1] or [r, 1]: m', the judges in the game
    c = 1.0 / (k - 1)
    a = 1.0 + lam + c  # [m] or [r, m]
    w = lam / lam.max(-1, keepdims=True) / a  # λ_i/a_i up to a common factor
    w = w / w.sum(-1, keepdims=True)  # normalised: S = m' Σ_i w_i ŝ_i
    S = k * np.einsum("...i,...i->...", np.nan_to_num(s_hat), w)[..., None]  # [..., m] -> [..., 1]
    return (lam * s_hat + c * S) / a  # [..., m]


def dispersion(s) -> np.ndarray:
    """Δ = (1/m) Σ_i |s_i − s̄| over the last axis, NaN (abstentions) left out.  [..., m] -> [...]"""
    s = np.asarray(s, dtype=float)
    return _nanmean(np.abs(s - _nanmean(s)[..., None]))


# ----------------------------------------------------------------------------- selection


@dataclass(frozen=True)
class Selection:
    """One step's decision over n candidates scored by m judges. `accepted` is the rule's own filter; the
    consensus statistics are VERDICT's whatever the rule, so traces of different rules compare. For batched
    input [..., n, m], `index`, `fallback` and `verified` are arrays of shape [...]."""

    index: int  # the chosen candidate
    fallback: bool  # True when no candidate passed the rule's filter
    verified: bool  # False when no candidate had 2 or more answering judges
    accepted: np.ndarray  # [n] bool
    s_star: np.ndarray  # [n, m] consensus scores s*, NaN where the judge abstained
    s_bar_star: np.ndarray  # [n] consensus mean s̄*
    delta_star: np.ndarray  # [n] consensus dispersion Δ*


DECIMALS = 12  # comparisons are on values rounded to 12 decimals: ŝ = (0.6, 0.6, 0.6) is not > τ = 0.6


def _q(x) -> np.ndarray:
    """x rounded to DECIMALS, so that floating-point error (about 1e-16) cannot decide an exact tie."""
    return np.round(x, DECIMALS)


def _best(*keys) -> np.ndarray:
    """Index of the lexicographic maximum of keys, first key most significant, per row.  [..., n] -> [...]
    NaN counts as −∞; values are rounded to DECIMALS; ties go to the lowest index."""
    desc = [-_q(np.nan_to_num(np.asarray(k, float), nan=-np.inf)) for k in reversed(keys)]  # [..., n] each
    return np.lexsort(desc)[..., 0]  # a stable ascending sort on −key, last key first: [..., n] -> [...]


def paper_rule(s_hat, lam=STUBBORNNESS, tau: float = TAU, eps: float = EPS) -> tuple:
    """VERDICT's choice among one step's n candidates, as the paper states it.  [n, m] -> (index, fallback)

    For each candidate k, from its judges' raw scores ŝ_k = (ŝ_k1, ..., ŝ_km):
        s*_k = consensus(ŝ_k)                       the judges' equilibrium, s*_k = M ŝ_k
        s̄*_k = (1/m) Σ_i s*_ki                      consensus confidence
        Δ*_k = (1/m) Σ_i |s*_ki − s̄*_k|             consensus dispersion
        accept k  ⟺  s̄*_k > τ  and  Δ*_k < ε        the dual test
    Choose argmax_{k accepted} s̄*_k; if none is accepted, the fallback argmax_k (s̄*_k − Δ*_k). Ties go to
    the lowest index; comparisons are on values rounded to DECIMALS. An abstention (NaN) leaves its judge
    out of the candidate's game and statistics (m' judges answered, so 1/m' for 1/m); with m' < 2 a candidate
    is never accepted and ranks after every candidate with m' ≥ 2. select's rule "verdict" is this, batched.
    """
    s_hat, lam = _check_step(s_hat, lam, tau, eps, batched=False)
    s_star = consensus(s_hat, lam)  # [n, m]
    s_bar, delta = _nanmean(s_star), dispersion(s_star)  # [n] each, NaN where m' = 0
    judged = [int((~np.isnan(row)).sum()) >= 2 for row in s_hat]  # [n] m' ≥ 2
    accepted = [k for k in range(len(s_hat)) if judged[k] and _q(s_bar[k]) > tau and _q(delta[k]) < eps]
    if accepted:
        return max(accepted, key=lambda k: (_q(s_bar[k]), -k)), False
    margin = np.nan_to_num(_q(s_bar - delta), nan=-np.inf)  # [n] s̄* − Δ*, NaN as −∞
    return max(range(len(s_hat)), key=lambda k: (judged[k], margin[k], -k)), True


def select(s_hat, lam=STUBBORNNESS, tau: float = TAU, eps: float = EPS, rule: str = "verdict") -> Selection:
    """Choose one of n candidates from their raw scores ŝ.  [n, m] -> Selection  (batched: [..., n, m])

    verdict   : accept iff s̄* > τ and Δ* < ε; take the accepted one with the highest s̄*;
                if none is accepted, the highest s̄* − Δ* (the fallback). paper_rule spells it out.
    mean      : the highest raw mean.
    min       : the highest minimum raw score.
    max       : the highest maximum raw score.
    majority  : the most judges with a raw score above τ; ties broken by the raw mean.
    variance  : among candidates whose raw standard deviation is below ε, the highest raw mean;
                if none qualifies, the highest raw mean overall.
    raw-dual  : VERDICT's dual rule on the raw scores (raw mean > τ, raw Δ < ε; fallback mean − Δ).
    no-filter : the highest s̄*, with no filter.
    no-rank   : the first accepted candidate in sampling order (VERDICT's filter), else the first.
    Abstentions (NaN), ties and the strict inequalities on rounded values: as in paper_rule, for every rule.
    """
    return select_all(s_hat, lam, tau, eps, rules=(rule,))[rule]


def _check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; expected one of {', '.join(RULES)}")


def select_all(s_hat, lam=STUBBORNNESS, tau: float = TAU, eps: float = EPS, rules=RULES) -> dict:
    """`select` for several rules, with one consensus.  [n, m] or [..., n, m] -> {rule: Selection}"""
    s_hat, lam = _check_step(s_hat, lam, tau, eps)
    s_star = consensus(s_hat, lam)  # [..., n, m]
    verified = (~np.isnan(s_hat)).sum(-1) >= 2  # [..., n] 2 or more judges answered
    s_bar_star, delta_star = _nanmean(s_star), dispersion(s_star)  # [..., n] each
    s_bar, delta = _nanmean(s_hat), dispersion(s_hat)  # [..., n] raw mean ŝ̄ and dispersion Δ̂
    dual = lambda mean, disp: verified & (_q(mean) > tau) & (_q(disp) < eps)  # strict, on rounded values

    def filter_and_keys(rule: str) -> tuple:  # (accepted [..., n], ranking keys, most significant first)
        if rule in ("verdict", "raw-dual"):  # the dual test; rank by the mean if any passes, else by mean − Δ
            mean, disp = (s_bar_star, delta_star) if rule == "verdict" else (s_bar, delta)
            ok = dual(mean, disp)
            return ok, (np.where(ok.any(-1, keepdims=True), mean, mean - disp),)
        if rule == "no-rank":  # VERDICT's filter, then sampling order
            return dual(s_bar_star, delta_star), ()
        if rule == "variance":
            std = np.sqrt(_nanmean((s_hat - s_bar[..., None]) ** 2))  # [..., n, m] -> [..., n]
            return verified & (_q(std) < eps), (s_bar,)
        return verified, {  # rules with no filter: every verified candidate is eligible
            "mean": (s_bar,),
            "min": (np.fmin.reduce(s_hat, axis=-1),),  # fmin/fmax skip NaN
            "max": (np.fmax.reduce(s_hat, axis=-1),),
            "majority": ((_q(s_hat) > tau).sum(-1), s_bar),  # NaN > τ is False
            "no-filter": (s_bar_star,),
        }[rule]

    out = {}
    for rule in rules:
        _check_rule(rule)
        accepted, keys = filter_and_keys(rule)
        index, fallback, judged = _best(verified, accepted, *keys), ~accepted.any(-1), verified.any(-1)
        if s_hat.ndim == 2:
            index, fallback, judged = int(index), bool(fallback), bool(judged)
        out[rule] = Selection(index, fallback, judged, accepted, s_star, s_bar_star, delta_star)
    return out


# ----------------------------------------------------------------------------- the loop


@dataclass(frozen=True)
class Config:
    """The knobs of the loop, with the paper's values, checked once, here (demo.py and evaluate.py build
    theirs from their flags); ValueError names a value out of range. λ: m ≥ 2, each finite and > 0; n,
    max_steps: integers ≥ 1; τ in [0, 1]: s̄* ≤ 1, so τ = 1 accepts nothing, the paper's restrictive regime
    (every step by the fallback; τ > 1: a typo; τ < 0: no bar); ε in (0, 1]: Δ* ≥ 0, so ε ≤ 0 accepts
    nothing (Δ ≤ 1/2: ε > 1/2 passes every Δ; ε > 1: a typo). `final`: a regular expression ("Final answer:",
    any case) that ends the chain when re.search finds it in a chosen step."""

    lam: tuple = STUBBORNNESS
    n: int = 3
    tau: float = TAU
    eps: float = EPS
    rule: str = "verdict"
    max_steps: int = 8
    final: str = FINAL_ANSWER

    def __post_init__(self):
        object.__setattr__(self, "lam", tuple(float(x) for x in _check_lam(self.lam, len(self.lam))))
        for name, kind, ok, what in (
            ("n", int, lambda x: x >= 1, "an integer >= 1"),
            ("max_steps", int, lambda x: x >= 1, "an integer >= 1"),
            ("tau", float, lambda x: 0 <= x <= 1, "in [0, 1] (s̄* <= 1: tau = 1 accepts nothing)"),
            ("eps", float, lambda x: 0 < x <= 1, "in (0, 1] (Δ* >= 0: eps <= 0 accepts nothing)"),
        ):
            v = getattr(self, name)
            if not (_real(v, numbers.Integral if kind is int else numbers.Real) and ok(v)):  # NaN fails too
                raise ValueError(f"{name} must be {what}, got {name}={v!r}")
            object.__setattr__(self, name, kind(v))
        _check_rule(self.rule)
        try:
            re.compile(self.final)
        except re.error as e:
            raise ValueError(f"final is not a valid regular expression: {self.final!r} ({e})") from None


def as_images(image) -> tuple:
    """None -> (); a list or tuple of images -> a tuple of them; anything else -> a 1-tuple."""
    return () if image is None else tuple(image) if isinstance(image, (list, tuple)) else (image,)


@dataclass(frozen=True)
class State:
    """What every proposer and judge sees: the question, its images (whatever the caller passed: paths,
    bytes, PIL images; this module never opens them), the steps chosen so far."""

    question: str
    images: tuple = ()
    steps: tuple = ()

    def extend(self, step: str) -> "State":
        return replace(self, steps=self.steps + (step,))


@dataclass(frozen=True)
class Judgement:
    """One judge call's score and its record. A judge with a method judgement(state, step) returning one
    (judges.Judge has) is called through it, so what came with each score (a reason, the reply format, ...)
    reaches StepRecord.calls in call order. A plain callable judge(state, step) -> ŝ records None."""

    score: float  # ŝ: a real number in [0, 1], or NaN to abstain
    record: dict | None = None  # what the trace keeps about this call, JSON-ready; None: nothing


@dataclass(frozen=True)
class Revision:
    """The revised step written when every candidate failed the rule's filter (see step): its text, its raw
    scores ŝ [m] by the same judges, and `selection`, the rule applied to it alone ([1, m])."""

    candidate: str
    s_hat: np.ndarray  # [m], NaN = abstained
    selection: Selection  # over the one revision: accepted [1], s_star [1, m], s_bar_star [1], delta_star [1]
    usage: dict = field(default_factory=dict)  # what writing and judging it cost (the step's meter), or {}
    calls: tuple = ()  # [m] each judge call's record (Judgement.record; None from a plain callable)

    @property
    def taken(self) -> bool:
        return bool(self.selection.accepted[0])

    def to_dict(self) -> dict:
        sel = self.selection
        return {
            "candidate": self.candidate,
            "s_hat": _jsonable(self.s_hat),
            "s_star": _jsonable(sel.s_star[0]),
            "s_bar_star": _jsonable(sel.s_bar_star)[0],
            "delta_star": _jsonable(sel.delta_star)[0],
            "taken": self.taken,
            **({"usage": dict(self.usage)} if self.usage else {}),
            **({"calls": list(self.calls)} if any(c is not None for c in self.calls) else {}),
        }


@dataclass(frozen=True)
class StepRecord:
    """One step of the loop: the candidates, their raw scores ŝ and the decision over them (`selection`);
    with no judges (the base reasoner alone) ŝ is [n, 0] and candidate 0 is taken, unverified. `revision`
    (None unless a reviser wrote one) is chosen instead of the fallback when it passed the filter. `calls`
    is laid out like s_hat, the order of the calls: calls[i][k] came with judge k's score of candidate i."""

    candidates: tuple  # [n] str
    s_hat: np.ndarray  # [n, m], NaN = abstained
    selection: Selection
    usage: dict = field(default_factory=dict)  # counter -> its change over this step (step's meter), or {}
    revision: Revision | None = None
    calls: tuple = ()  # [n][m] dict or None (a plain callable's); () with no judges

    @property
    def revised(self) -> bool:
        """True when the revision was taken in place of the fallback."""
        return self.revision is not None and self.revision.taken

    @property
    def chosen(self) -> str:
        return self.revision.candidate if self.revised else self.candidates[self.selection.index]

    @property
    def fallback(self) -> bool:
        """True when the choice came from the fallback ranking (no candidate, nor a revision, passed)."""
        return self.selection.fallback and not self.revised

    @property
    def abstentions(self) -> int:
        revised = self.revision.s_hat if self.revision else ()
        return int(np.isnan(self.s_hat).sum() + np.isnan(revised).sum())

    def to_dict(self) -> dict:
        sel, calls = self.selection, [list(r) for r in self.calls]
        return {
            "candidates": list(self.candidates),
            "s_hat": _jsonable(self.s_hat),
            "s_star": _jsonable(sel.s_star),
            "s_bar_star": _jsonable(sel.s_bar_star),
            "delta_star": _jsonable(sel.delta_star),
            "accepted": [bool(x) for x in sel.accepted],
            "index": sel.index,
            "fallback": sel.fallback,
            "verified": sel.verified,
            "abstentions": self.abstentions,
            **({"usage": dict(self.usage)} if self.usage else {}),
            **({"revision": self.revision.to_dict()} if self.revision else {}),
            **({"calls": calls} if any(c is not None for r in calls for c in r) else {}),
        }


class Stop(Exception):
    """Raised by a proposer or a judge to end the chain early (a call budget, say). `run` returns the
    steps completed before it, with `stopped` = the exception's message; a step cut short is dropped."""


@dataclass(frozen=True)
class Trace:
    """A whole chain; `stopped`: "final", "max_steps" or a Stop's message; `meta`: what the caller adds."""

    question: str
    steps: tuple  # [T] StepRecord
    config: Config
    stopped: str
    meta: dict = field(default_factory=dict)

    @property
    def chain(self) -> list:
        return [r.chosen for r in self.steps]

    @property
    def answer(self) -> str | None:
        """The text after the final-answer marker in the last chosen step, if the chain ended there."""
        if self.stopped != "final":
            return None
        last = self.steps[-1].chosen
        return last[re.search(self.config.final, last).end() :].strip()

    def totals(self) -> dict:
        """Counts over the steps; "usage" sums each counter of the steps' usage (with a meter). A taken
        revision is no fallback; "revisions" and "revised" count those written and taken; judge_calls too."""
        fallbacks = sum(r.fallback for r in self.steps)
        revisions = [r.revision for r in self.steps if r.revision is not None]
        usage = {k: sum(r.usage.get(k, 0) for r in self.steps) for rec in self.steps for k in rec.usage}
        return {
            "steps": len(self.steps),
            "fallbacks": fallbacks,
            "fallback_rate": fallbacks / len(self.steps) if self.steps else 0.0,
            "abstentions": sum(r.abstentions for r in self.steps),
            "judge_calls": sum(r.s_hat.size for r in self.steps) + sum(v.s_hat.size for v in revisions),
            "revisions": len(revisions),
            "revised": sum(v.taken for v in revisions),
            **({"usage": usage} if usage else {}),
        }

    def to_dict(self) -> dict:
        """A JSON-serialisable dict; NaN becomes null."""
        return {
            "format": TRACE_FORMAT,
            "question": self.question,
            "config": {**asdict(self.config), "lam": list(self.config.lam)},
            "steps": [r.to_dict() for r in self.steps],
            "chain": self.chain,
            "answer": self.answer,
            "stopped": self.stopped,
            "totals": self.totals(),
            "meta": self.meta,
        }


def _jsonable(x: np.ndarray) -> list:
    return [None if v != v else v for v in x.tolist()] if x.ndim == 1 else [_jsonable(r) for r in x]


def _judged(answer: Any, i: int, judge: Callable) -> Judgement:
    """Judge i's answer, checked: a Judgement of a float and a dict or None. Its score is a real number in
    [0, 1], or NaN to abstain. None, a string, a bool or an out-of-range number is a bug in the judge, never
    an abstention or a clamped score."""
    if not isinstance(answer, Judgement):
        raise ValueError(f"judge {i} ({judge!r}): judgement returned {answer!r}, not a verdict.Judgement")
    s, record = answer.score, answer.record
    if not (_real(s) and (0 <= s <= 1 or s != s)):  # s != s: NaN (no float() of a huge int)
        raise ValueError(
            f"judge {i} ({judge!r}) returned {s!r}; a judge returns a real number in [0, 1], "
            f"or NaN to abstain"
        )
    if not (record is None or isinstance(record, dict)):
        raise ValueError(f"judge {i} ({judge!r}) returned the record {record!r}; a record is a dict or None")
    return Judgement(float(s), record)


def _reading(meter: Callable[[], dict] | None) -> dict:
    """meter(), checked: a dict of counter name -> finite real number (no bool); {} with no meter."""
    if meter is None:
        return {}
    counters = meter()
    ok = lambda k, v: isinstance(k, str) and _real(v) and math.isfinite(v)
    if not (isinstance(counters, dict) and all(ok(k, v) for k, v in counters.items())):
        raise ValueError(f"meter must return a dict of counter names to finite numbers, got {counters!r}")
    return counters


def _scored(state: State, candidates: Sequence[str], judges: Sequence[Callable], map_fn: Callable) -> tuple:
    """ŝ of every candidate by every judge, and each call's record: k×m calls through map_fn, candidate-major.
    -> (ŝ [k, m], records [k][m])"""

    def call(cj: tuple) -> Any:  # a judge's own judgement(state, step) if it has one, else its plain score
        ask = getattr(cj[1], "judgement", None)
        return Judgement(cj[1](state, cj[0])) if ask is None else ask(state, cj[0])

    calls = [(c, j) for c in candidates for j in judges]  # candidate-major: [k·m]
    m, answers = len(judges), list(map_fn(call, calls))
    answers = [_judged(a, i % m, judges[i % m]) for i, a in enumerate(answers)]  # [k·m] Judgement
    records = tuple(tuple(a.record for a in answers[i : i + m]) for i in range(0, len(answers), m))  # [k][m]
    return np.array([a.score for a in answers]).reshape(len(candidates), m), records  # [k·m] -> [k, m]


def _usage(meter: Callable[[], dict] | None, before: dict) -> dict:
    """Each counter's change since `before`: after[k] − before[k] (0 for a new key); {} with no meter."""
    return {k: v - before.get(k, 0) for k, v in _reading(meter).items()}


def step(
    state: State,
    propose: Callable[[State, int], Sequence[str]],
    judges: Sequence[Callable[[State, str], float]],
    config: Config = Config(),
    map_fn: Callable[..., Iterable] = map,
    meter: Callable[[], dict] | None = None,
    revise: Callable[[State, StepRecord], str | None] | None = None,
) -> StepRecord:
    """One VERDICT step: propose config.n candidates, score each with every judge (n×m calls, through
    map_fn, candidate-major), select with config.rule. With no judges, candidate 0 is taken unverified.
    With a meter (a callable returning {counter: number}, e.g. a client's usage), the record's usage is
    each counter's change over the step: after[k] − before[k] (0 before for a new key).

    Revise on reject: when no candidate passes the rule's filter (selection.fallback) and `revise` is given,
    revise(state, the record so far) returns one revised step or None. The same judges score it (m calls)
    and config.rule is applied to it alone: it is chosen if it passes the filter (VERDICT: s̄* > τ and
    Δ* < ε), else the fallback stands. The record keeps the candidates' selection, and the revision apart.

    propose(state, n) -> list of candidate steps (at least one). judge(state, step) -> a real number in
    [0, 1] (int, float, numpy floating), or NaN to abstain; anything else (None, "0.9", True, 1.5) raises
    ValueError naming the judge. judges are in the order of config.lam; one with a method judgement(state,
    step) is called through it (see Judgement). map_fn(f, items) must return the results in the order of
    items (as map and Executor.map do)."""
    before = _reading(meter)
    if judges and len(judges) != len(config.lam):  # one stubbornness per judge
        raise ValueError(f"got {len(judges)} judges but {len(config.lam)} stubbornness values in config.lam")
    candidates = propose(state, config.n)
    if not isinstance(candidates, (list, tuple)):  # a string would be its characters, a dict its keys
        raise ValueError(
            f"propose must return a list of strings, got {type(candidates).__name__}: {candidates!r:.80}"
        )
    candidates = tuple(candidates)
    if not candidates or not all(isinstance(c, str) for c in candidates):
        raise ValueError(f"propose must return a non-empty list of strings, got {candidates!r}")
    if not judges:  # the base reasoner alone: candidate 0, unverified
        n, s_hat, calls = len(candidates), np.empty((len(candidates), 0)), ()
        selection = Selection(
            0, False, False, np.ones(n, bool), s_hat, np.full(n, np.nan), np.full(n, np.nan)
        )
    else:
        s_hat, calls = _scored(state, candidates, judges, map_fn)  # [n, m], [n][m]
        selection = select(s_hat, config.lam, config.tau, config.eps, config.rule)
    record = StepRecord(candidates, s_hat, selection, _usage(meter, before), calls=calls)
    if revise is None or not selection.fallback:  # (with no judges there is no fallback)
        return record
    at, text, revision = _reading(meter), revise(state, record), None
    if text is not None:  # (None: the reviser declined, and the fallback stands)
        if not isinstance(text, str):
            raise ValueError(f"revise must return a string or None, got {text!r}")
        r_hat, r_calls = _scored(state, [text], judges, map_fn)  # [1, m], [1][m]
        checked = select(r_hat, config.lam, config.tau, config.eps, config.rule)
        revision = Revision(text, r_hat[0], checked, _usage(meter, at), r_calls[0])
    return replace(record, usage=_usage(meter, before), revision=revision)


def run(
    question: str,
    propose: Callable[[State, int], Sequence[str]],
    judges: Sequence[Callable[[State, str], float]],
    config: Config = Config(),
    image: Any = None,
    map_fn: Callable[..., Iterable] = map,
    meter: Callable[[], dict] | None = None,
    revise: Callable[[State, StepRecord], str | None] | None = None,
) -> Trace:
    """The step-wise loop: `step`, extending the chain with each chosen step, until the chosen step matches
    `config.final` or after `config.max_steps` steps. image: None, one image, or a list/tuple of images,
    passed through in State.images. judges=() runs the base reasoner alone (candidate 0, unverified). A
    proposer or judge that raises Stop ends the chain: the trace keeps the steps completed before it.
    meter, revise: as in step, every step; Trace.totals()["usage"] sums the steps' usage."""
    state, records = State(question, as_images(image)), []
    for _ in range(config.max_steps):
        try:
            record = step(state, propose, judges, config, map_fn, meter, revise)
        except Stop as e:
            return Trace(question, tuple(records), config, str(e))
        records.append(record)
        state = state.extend(record.chosen)
        if re.search(config.final, record.chosen):
            return Trace(question, tuple(records), config, "final")
    return Trace(question, tuple(records), config, "max_steps")
