"""VERDICT: VERification via Disagreement-Informed Coupled Thresholding.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. This module implements, in the paper's order:

1. the coordination game among the judges and its equilibrium s*, in closed form (consensus);
2. the consensus confidence s̄* and the consensus dispersion Δ*;
3. the dual acceptance test and the fallback ranking by s̄* − Δ* (paper_rule), and the same rule
   batched beside the baselines of the paper's results table (select);
4. one step of the loop (propose n candidates, score each with m judges, select), and the loop.

The checks of the caller's input come last, in their own section. The module needs only NumPy and
the standard library, and it imports no other module of this project, so it can be copied alone.

Two statements of the paper are wrong, and this module follows the mathematics (the tests pin both):
the consensus does not preserve the plain mean unless all λ are equal (it preserves Σ λ_i s_i), and
Proposition 1's second example has Δ* = 0.0181, not ≈ 0.04 (0.0444 is the raw dispersion).
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

import numpy as np

STUBBORNNESS = (1.5, 1.0, 0.8)  # λ_V, λ_L, λ_C: the paper's stubbornness of each judge
JUDGES = ("visual", "logical", "contextual")  # the judges, in the order of STUBBORNNESS
TAU = 0.6  # τ: a candidate is accepted only if s̄* > τ
EPS = 0.1  # ε: a candidate is accepted only if Δ* < ε
RULES = (
    "verdict",
    "mean",
    "min",
    "max",
    "majority",
    "variance",
    "raw-dual",
    "no-filter",
    "no-rank",
)
FINAL_ANSWER = r"(?i)final answer\s*:"  # a chosen step that matches this ends the chain
DECIMALS = 12  # comparisons are made on values rounded to 12 decimals (see _rounded)


# ----------------------------------------------------------------------------- 1. the game


def consensus(s_hat, lam=STUBBORNNESS) -> np.ndarray:
    """The consensus scores s*: the unique Nash equilibrium of the judges' game.

    [..., m] -> [..., m]

    Judge i chooses its score s_i to maximise its utility
        u_i = −(s_i − s̄_{−i})² − λ_i (s_i − ŝ_i)²,   where s̄_{−i} = (1/(m−1)) Σ_{j≠i} s_j:
    it wants to agree with the others, and its stubbornness λ_i holds it to its own raw score ŝ_i.
    Setting ∂u_i/∂s_i = 0 for every judge gives the paper's linear system
        (1 + λ_i) s_i − (1/(m−1)) Σ_{j≠i} s_j = λ_i ŝ_i.

    The system is solved in closed form (Sherman–Morrison, O(m) per row). With c = 1/(m−1) and
    a_i = 1 + λ_i + c, the sum S = Σ_j s_j satisfies
        S = (Σ_i λ_i ŝ_i / a_i) / (1 − c Σ_i 1/a_i),   and then   s_i = (λ_i ŝ_i + c S) / a_i.
    The denominator is positive, so the solution exists and is unique. Since 1 + c = m c, we have
    a_i − m c = λ_i, and
        1 − c Σ_i 1/a_i = Σ_i (1/m − c/a_i) = (1/m) Σ_i λ_i / a_i,
    so S = m Σ_i w_i ŝ_i / Σ_i w_i with w_i = λ_i / a_i: m times a weighted mean of ŝ. That form
    subtracts nothing, so it stays exact to rounding for every finite λ > 0, however small.

    A judge that abstained (ŝ_i = NaN) takes no part in its row's game: the row is solved over the
    m' judges that answered, with their own λ and c = 1/(m'−1), and the abstainer's s*_i is NaN.
    With m' = 1 nobody is left to agree with and s* = ŝ; with m' = 0 the row is all NaN.

    The invariant is Σ_i λ_i s*_i = Σ_i λ_i ŝ_i, not the plain mean (erratum 1).
    """
    s_hat = _check_scores(s_hat)
    lam = _check_lam(lam, s_hat.shape[-1])
    answered = ~np.isnan(s_hat)  # [..., m]
    s_star = _closed_form(s_hat, lam)  # [..., m], right where every judge answered
    few = answered.sum(-1) < 2  # [...] rows with m' <= 1: no game, ŝ stands
    s_star[few] = s_hat[few]
    some = ~answered.all(-1) & ~few  # [...] rows with 2 <= m' < m: the game of those who answered
    s_star[some] = _closed_form(s_hat[some], np.where(answered[some], lam, 0.0))  # [r, m]
    return s_star


def _closed_form(s_hat: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """The closed form of consensus, with one λ [m] for every row or one λ [r, m] per row.

    A λ_i of 0 marks a judge that did not answer (its ŝ_i is NaN). Its weight w_i is then 0, so it
    takes no part in S, and its s_i = (0 · NaN + c S) / a_i comes out NaN. Every row needs m' >= 2.
    [..., m] -> [..., m]
    """
    k = (lam > 0).sum(-1, keepdims=True)  # [1] or [r, 1]: m', the judges in the game
    c = 1.0 / (k - 1)
    a = 1.0 + lam + c  # [m] or [r, m]
    w = lam / lam.max(-1, keepdims=True) / a  # λ_i / a_i, up to a common factor
    w = w / w.sum(-1, keepdims=True)  # normalised, so that S = m' Σ_i w_i ŝ_i
    S = k * np.einsum("...i,...i->...", np.nan_to_num(s_hat), w)[..., None]  # [..., m] -> [..., 1]
    return (lam * s_hat + c * S) / a  # [..., m]


def consensus_matrix(lam=STUBBORNNESS) -> np.ndarray:
    """The matrix M of s* = M ŝ, when all m = len(lam) judges answered.  -> [m, m]

    M = A⁻¹ diag(λ), where A_ii = 1 + λ_i and A_ij = −1/(m−1) is the paper's system. Every row of M
    sums to 1, so a constant vector of scores is its own consensus.
    """
    return consensus(np.eye(np.size(lam)), lam).T  # column j is the answer to ŝ = e_j


# ----------------------------------------------------------------------------- 2. s̄* and Δ*


def mean(s) -> np.ndarray:
    """s̄ = (1/m) Σ_i s_i over the last axis, over the judges that answered.  [..., m] -> [...]

    NaN (an abstention) is left out, so m counts the judges that answered; a row with none is NaN.
    Of consensus scores this is the consensus confidence s̄*.
    """
    s = _check_values(s)
    answered = ~np.isnan(s)
    ones = np.ones(
        s.shape[-1]
    )  # a product with ones is much faster than .sum(-1) over a short axis
    with np.errstate(invalid="ignore"):  # a row with no answer is 0/0, NaN, as documented
        return (np.where(answered, s, 0.0) @ ones) / (answered @ ones)


def dispersion(s) -> np.ndarray:
    """Δ = (1/m) Σ_i |s_i − s̄| over the last axis, over the judges that answered.

    [..., m] -> [...]

    Of consensus scores this is the consensus dispersion Δ*; of raw scores, the raw dispersion Δ̂.
    """
    s = _check_values(s)
    return mean(np.abs(s - mean(s)[..., None]))  # [..., m] -> [...]


# ----------------------------------------------------------------------------- 3. the dual test


def paper_rule(s_hat, lam=STUBBORNNESS, tau: float = TAU, eps: float = EPS) -> tuple:
    """VERDICT's choice among one step's n candidates, as the paper states it.

    [n, m] -> (index, fallback)

    For each candidate k, from its judges' raw scores ŝ_k = (ŝ_k1, ..., ŝ_km):
        s*_k = consensus(ŝ_k)                       the judges' equilibrium, s*_k = M ŝ_k
        s̄*_k = (1/m) Σ_i s*_ki                      the consensus confidence
        Δ*_k = (1/m) Σ_i |s*_ki − s̄*_k|             the consensus dispersion
        accept k  if and only if  s̄*_k > τ  and  Δ*_k < ε          the dual test
    The step takes the accepted candidate with the highest s̄*_k. If none is accepted, it takes the
    candidate with the highest s̄*_k − Δ*_k: the fallback.

    Ties go to the lowest index, and comparisons are made on values rounded to DECIMALS. A judge
    that abstained (NaN) is left out of its candidate's game and statistics. A candidate that fewer
    than two judges scored is never accepted, and it ranks after every candidate that two or more
    judges scored. select's rule "verdict" is this rule, batched.
    """
    s_hat, lam = _check_step(s_hat, lam, tau, eps, batched=False)
    s_star = consensus(s_hat, lam)  # [n, m]
    s_bar_star = mean(s_star)  # [n]
    delta_star = dispersion(s_star)  # [n]
    judged = [int((~np.isnan(row)).sum()) >= 2 for row in s_hat]  # [n] two or more judges answered
    accepted = [
        k
        for k in range(len(s_hat))
        if judged[k] and _rounded(s_bar_star[k]) > tau and _rounded(delta_star[k]) < eps
    ]
    if accepted:
        return max(accepted, key=lambda k: (_rounded(s_bar_star[k]), -k)), False
    margin = np.nan_to_num(_rounded(s_bar_star - delta_star), nan=-np.inf)  # [n] s̄* − Δ*
    return max(range(len(s_hat)), key=lambda k: (judged[k], margin[k], -k)), True


@dataclass(frozen=True)
class Selection:
    """One step's decision over n candidates scored by m judges.

    `accepted` is the rule's own filter. The consensus statistics are VERDICT's whatever the rule,
    so that traces of different rules can be compared. For batched input [..., n, m], `index`,
    `fallback` and `verified` are arrays of shape [...].
    """

    index: int  # the chosen candidate
    fallback: bool  # True when no candidate passed the rule's filter
    verified: bool  # False when no candidate of the step was scored by two or more judges
    accepted: np.ndarray  # [n] bool
    s_star: np.ndarray  # [n, m] the consensus scores s*, NaN where the judge abstained
    s_bar_star: np.ndarray  # [n] the consensus confidence s̄*
    delta_star: np.ndarray  # [n] the consensus dispersion Δ*


def select(s_hat, lam=STUBBORNNESS, tau: float = TAU, eps: float = EPS, rule: str = "verdict"):
    """Choose one of n candidates from their raw scores ŝ.

    [n, m] -> Selection, or batched: [..., n, m] -> Selection of arrays

    The paper's results table compares VERDICT with baselines that it does not define; each is fixed
    here in one line. "Raw" means the judges' scores ŝ, before the consensus.
    verdict   : accept if s̄* > τ and Δ* < ε; take the accepted one with the highest s̄*;
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
    Abstentions, ties and the strict inequalities on rounded values are as in paper_rule, for every
    rule.
    """
    return select_all(s_hat, lam, tau, eps, rules=(rule,))[rule]


def select_all(s_hat, lam=STUBBORNNESS, tau: float = TAU, eps: float = EPS, rules=RULES) -> dict:
    """select for several rules, on one consensus.  [n, m] or [..., n, m] -> {rule: Selection}"""
    s_hat, lam = _check_step(s_hat, lam, tau, eps)
    s_star = consensus(s_hat, lam)  # [..., n, m]
    judged = (~np.isnan(s_hat)).sum(-1) >= 2  # [..., n] two or more judges answered
    s_bar_star, delta_star = mean(s_star), dispersion(s_star)  # [..., n] each
    s_bar_hat, delta_hat = mean(s_hat), dispersion(s_hat)  # [..., n] the raw mean and dispersion

    def dual(confidence, spread):  # the dual test, strict, on rounded values
        return judged & (_rounded(confidence) > tau) & (_rounded(spread) < eps)

    def filter_and_keys(
        rule: str,
    ) -> tuple:  # (accepted [..., n], ranking keys, first most significant)
        if rule in (
            "verdict",
            "raw-dual",
        ):  # the dual test; rank by the mean, or by mean − Δ if none passes
            confidence, spread = (
                (s_bar_star, delta_star) if rule == "verdict" else (s_bar_hat, delta_hat)
            )
            ok = dual(confidence, spread)
            return ok, (np.where(ok.any(-1, keepdims=True), confidence, confidence - spread),)
        if rule == "no-rank":  # VERDICT's filter, then the sampling order
            return dual(s_bar_star, delta_star), ()
        if rule == "variance":
            std_hat = np.sqrt(mean((s_hat - s_bar_hat[..., None]) ** 2))  # [..., n, m] -> [..., n]
            return judged & (_rounded(std_hat) < eps), (s_bar_hat,)
        return judged, {  # rules with no filter: every judged candidate is eligible
            "mean": (s_bar_hat,),
            "min": (np.fmin.reduce(s_hat, axis=-1),),  # fmin and fmax skip NaN
            "max": (np.fmax.reduce(s_hat, axis=-1),),
            "majority": ((_rounded(s_hat) > tau).sum(-1), s_bar_hat),  # NaN > τ is False
            "no-filter": (s_bar_star,),
        }[rule]

    out = {}
    for rule in rules:
        _check_rule(rule)
        accepted, keys = filter_and_keys(rule)
        index = _best(judged, accepted, *keys)
        fallback, verified = ~accepted.any(-1), judged.any(-1)
        if s_hat.ndim == 2:
            index, fallback, verified = int(index), bool(fallback), bool(verified)
        out[rule] = Selection(index, fallback, verified, accepted, s_star, s_bar_star, delta_star)
    return out


def _rounded(x) -> np.ndarray:
    """x rounded to DECIMALS, so that floating-point error (about 1e-16) cannot decide an exact tie:
    ŝ = (0.6, 0.6, 0.6) is not above τ = 0.6. numpy.round scales by 10^DECIMALS and rounds half to
    even, so at a half-way point it can differ from Python's round: 0.2999999999995 becomes 0.3."""
    return np.round(x, DECIMALS)


def _best(*keys) -> np.ndarray:
    """The index of the lexicographic maximum of keys, the first key most significant.

    [..., n] -> [...]

    NaN counts as −∞, values are rounded to DECIMALS, and ties go to the lowest index.
    """
    descending = [
        -_rounded(np.nan_to_num(np.asarray(k, float), nan=-np.inf)) for k in reversed(keys)
    ]
    return np.lexsort(descending)[..., 0]  # a stable sort, last key first: [..., n] -> [...]


# ----------------------------------------------------------------------------- 4. the loop


@dataclass(frozen=True)
class Config:
    """The knobs of the loop, with the paper's values. They are checked once, here.

    λ needs m >= 2 values, each finite and > 0; n and max_steps are integers >= 1.
    τ lies in [0, 1]: s̄* <= 1, so τ = 1 accepts nothing, the paper's most restrictive regime.
    ε lies in (0, 1]: Δ* >= 0, so ε <= 0 would accept nothing, and since Δ <= 1/2 any ε above 1/2
    passes every Δ. `final` is a regular expression ("Final answer:", in any case) that ends the
    chain when it is found in a chosen step.
    """

    lam: tuple = STUBBORNNESS
    n: int = 3
    tau: float = TAU
    eps: float = EPS
    rule: str = "verdict"
    max_steps: int = 8
    final: str = FINAL_ANSWER

    def __post_init__(self):
        _check_config(self)


@dataclass(frozen=True)
class State:
    """What every proposer and judge sees: the question, its images and the steps chosen so far.

    The images are whatever the caller passed (paths, bytes, PIL images): this module never opens
    them.
    """

    question: str
    images: tuple = ()
    steps: tuple = ()

    def extend(self, step: str) -> "State":
        return replace(self, steps=self.steps + (step,))


@dataclass(frozen=True)
class StepRecord:
    """One step of the loop: the candidates, their raw scores ŝ and the decision over them.

    With no judges (the base reasoner alone), ŝ has shape [n, 0] and candidate 0 is taken,
    unverified.
    """

    candidates: tuple  # [n] str
    s_hat: np.ndarray  # [n, m], NaN where the judge abstained
    selection: Selection

    @property
    def chosen(self) -> str:
        return self.candidates[self.selection.index]

    @property
    def fallback(self) -> bool:
        return self.selection.fallback

    @property
    def abstentions(self) -> int:
        return int(np.isnan(self.s_hat).sum())


def step(
    state: State,
    propose: Callable[[State, int], Sequence[str]],
    judges: Sequence[Callable[[State, str], float]],
    config: Config | None = None,  # None: the paper's settings, Config()
    map_fn: Callable[..., Iterable] = map,
) -> StepRecord:
    """One VERDICT step: propose config.n candidates, score each with every judge, and select.

    propose(state, n) returns a list of candidate steps (at least one). judge(state, step) returns a
    real number in [0, 1], or NaN to abstain; anything else (None, "0.9", True, 1.5) is a ValueError
    that names the judge. The judges are in the order of config.lam. The n·m judge calls go through
    map_fn once, candidate-major (candidate 0's m judges first), and map_fn must return the results
    in that order, as map and Executor.map do. config.rule selects. With no judges, candidate 0 is
    taken, unverified.
    """
    config = Config() if config is None else config
    if judges and len(judges) != len(config.lam):
        raise ValueError(
            f"got {len(judges)} judges but {len(config.lam)} stubbornness values in config.lam"
        )
    candidates = _check_candidates(propose(state, config.n))
    if not judges:  # the base reasoner alone: candidate 0, unverified
        n = len(candidates)
        s_hat = np.empty((n, 0))
        nan = np.full(n, np.nan)
        return StepRecord(
            candidates, s_hat, Selection(0, False, False, np.ones(n, bool), s_hat, nan, nan)
        )
    calls = [(candidate, judge) for candidate in candidates for judge in judges]  # [n·m]
    scores = list(map_fn(lambda call: call[1](state, call[0]), calls))  # [n·m]
    m = len(judges)
    s_hat = np.array([_check_judged(s, i % m, judges[i % m]) for i, s in enumerate(scores)])
    s_hat = s_hat.reshape(len(candidates), m)  # [n·m] -> [n, m]
    return StepRecord(
        candidates, s_hat, select(s_hat, config.lam, config.tau, config.eps, config.rule)
    )


class Stop(Exception):
    """Raised by a proposer or a judge to end the chain early (a budget of calls, say).

    run returns the steps completed before it, with `stopped` set to the exception's message; the
    step it cut short is dropped.
    """


@dataclass(frozen=True)
class Trace:
    """A whole chain. `stopped` is "final", "max_steps" or a Stop's message.

    `meta` holds whatever the caller adds.
    """

    question: str
    steps: tuple  # [T] StepRecord
    config: Config
    stopped: str
    meta: dict = field(default_factory=dict)

    @property
    def chain(self) -> list:
        return [record.chosen for record in self.steps]

    @property
    def answer(self) -> str | None:
        """The text after the final-answer marker in the last chosen step, if the chain ended
        there."""
        if self.stopped != "final":
            return None
        last = self.steps[-1].chosen
        return last[re.search(self.config.final, last).end() :].strip()

    def totals(self) -> dict:
        """Counts over the steps: steps, fallbacks, fallback rate, abstentions and judge calls."""
        fallbacks = sum(record.fallback for record in self.steps)
        return {
            "steps": len(self.steps),
            "fallbacks": fallbacks,
            "fallback_rate": fallbacks / len(self.steps) if self.steps else 0.0,
            "abstentions": sum(record.abstentions for record in self.steps),
            "judge_calls": sum(record.s_hat.size for record in self.steps),
        }


def run(
    question: str,
    propose: Callable[[State, int], Sequence[str]],
    judges: Sequence[Callable[[State, str], float]],
    config: Config | None = None,  # None: the paper's settings, Config()
    image: Any = None,
    map_fn: Callable[..., Iterable] = map,
    on_step: Callable[[StepRecord], Any] | None = None,
) -> Trace:
    """The step-wise loop: step, then extend the chain with the chosen step, until a chosen step
    matches config.final or config.max_steps steps are taken.

    image is None, one image, or a list or tuple of images, passed through in State.images. With no
    judges (judges=()) the base reasoner runs alone. A proposer or judge that raises Stop ends the
    chain, and the trace keeps the steps completed before it. on_step(record), when given, sees each
    step as soon as it is decided (to print it, say).
    """
    config = Config() if config is None else config
    state = State(question, as_images(image))
    records = []
    for _ in range(config.max_steps):
        try:
            record = step(state, propose, judges, config, map_fn)
        except Stop as e:
            return Trace(question, tuple(records), config, str(e))
        records.append(record)
        if on_step is not None:
            on_step(record)
        state = state.extend(record.chosen)
        if re.search(config.final, record.chosen):
            return Trace(question, tuple(records), config, "final")
    return Trace(question, tuple(records), config, "max_steps")


def as_images(image) -> tuple:
    """None -> (); a list or tuple of images -> a tuple of them; anything else -> a 1-tuple."""
    if image is None:
        return ()
    return tuple(image) if isinstance(image, (list, tuple)) else (image,)


# ----------------------------------------------------------------------------- the input checks
# Each check raises ValueError with a message that names the offending value. A bad value is a bug
# in the caller, so it is never converted, clamped or read as an abstention.


def _check_values(s) -> np.ndarray:
    """Scores, raw or consensus, as finite floats with at least one axis. NaN means no answer."""
    s = _reals(s, "scores")
    if s.ndim == 0:  # a bare number has no judge axis
        raise ValueError(f"scores must have shape [..., m], got shape {s.shape}")
    if np.isinf(s).any():
        raise ValueError(f"scores must be finite (NaN = abstain), got {s[np.isinf(s)][0]!r}")
    return s


def _check_scores(s_hat) -> np.ndarray:
    """Raw scores as floats in [0, 1], with at least one axis. NaN means the judge abstained."""
    s_hat = _check_values(s_hat)
    bad = s_hat[~(np.isnan(s_hat) | ((s_hat >= 0) & (s_hat <= 1)))]
    if bad.size:  # out of range or infinite: a bug in the judge
        raise ValueError(f"scores must lie in [0, 1] (NaN = abstain), got {bad[0]!r}")
    return s_hat


def _check_lam(lam, m: int) -> np.ndarray:
    """λ as a float vector of m >= 2 entries, each finite and > 0 (there is no lower floor)."""
    if m < 2:  # the game needs at least one other judge to agree with
        raise ValueError(f"need at least m=2 judges, got m={m}")
    lam = _reals(lam, "lam")
    if lam.ndim != 1 or lam.shape[0] != m:
        raise ValueError(f"lam must have one stubbornness per judge (m={m}), got shape {lam.shape}")
    if not np.all(np.isfinite(lam)) or np.any(lam <= 0):  # λ <= 0 would break the uniqueness
        raise ValueError(f"every stubbornness must be finite and > 0, got lam={lam.tolist()}")
    return lam


def _check_step(s_hat, lam, tau, eps, batched: bool = True) -> tuple:
    """(ŝ [..., n, m], λ [m]) of one choice, checked. τ and ε must be finite (Config checks their
    range)."""
    s_hat = _check_scores(s_hat)
    if s_hat.ndim < 2 or (s_hat.ndim > 2 and not batched):
        raise ValueError(f"scores must have shape [n, m], got shape {s_hat.shape}")
    if s_hat.shape[-2] == 0:  # nothing to choose from
        raise ValueError("select needs at least one candidate, got n=0")
    if not (_is_finite(tau) and _is_finite(eps)):
        raise ValueError(f"tau and eps must be finite, got tau={tau!r:.40}, eps={eps!r:.40}")
    return s_hat, _check_lam(lam, s_hat.shape[-1])


def _check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; expected one of {', '.join(RULES)}")


def _check_config(config: Config) -> None:
    """Config's fields, checked, and normalised in place (λ to a tuple of floats, n to an int)."""
    lam = tuple(float(x) for x in _check_lam(config.lam, len(config.lam)))
    object.__setattr__(config, "lam", lam)
    for name, kind, ok, what in (
        ("n", int, lambda x: x >= 1, "an integer >= 1"),
        ("max_steps", int, lambda x: x >= 1, "an integer >= 1"),
        ("tau", float, lambda x: 0 <= x <= 1, "in [0, 1] (s̄* <= 1: tau = 1 accepts nothing)"),
        ("eps", float, lambda x: 0 < x <= 1, "in (0, 1] (Δ* >= 0: eps <= 0 accepts nothing)"),
    ):
        v = getattr(config, name)
        number = numbers.Integral if kind is int else numbers.Real
        if not (_is_real(v, number) and ok(v)):  # NaN fails the range too
            raise ValueError(f"{name} must be {what}, got {name}={v!r:.40}")
        object.__setattr__(config, name, kind(v))
    _check_rule(config.rule)
    try:
        re.compile(config.final)
    except re.error as e:
        raise ValueError(
            f"final is not a valid regular expression: {config.final!r} ({e})"
        ) from None


def _check_candidates(candidates) -> tuple:
    """A proposer's candidates as a tuple of strings, at least one."""
    if not isinstance(candidates, (list, tuple)):  # a string would be read as its characters
        raise ValueError(
            "propose must return a list of strings, "
            f"got {type(candidates).__name__}: {candidates!r:.80}"
        )
    if not candidates or not all(isinstance(c, str) for c in candidates):
        raise ValueError(
            f"propose must return a non-empty list of strings, got {tuple(candidates)!r}"
        )
    return tuple(candidates)


def _check_judged(s, i: int, judge: Callable) -> float:
    """Judge i's score: a real number in [0, 1], or NaN to abstain, as a float."""
    if not (
        _is_real(s) and (s != s or 0 <= s <= 1)
    ):  # s != s is NaN, tested without float() of a huge int
        raise ValueError(
            f"judge {i} ({judge!r}) returned {s!r}; a judge returns a real number in [0, 1], "
            "or NaN to abstain"
        )
    return float(s)


def _reals(x, what: str) -> np.ndarray:
    """x as a float array, if every entry is a real number (NaN allowed).

    None, a string, a bool or a complex number is refused, never converted: None would become NaN,
    "0.9" would become 0.9 and True 1.0.
    """
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "fiu":  # bool, complex, str, object
            raise ValueError(f"{what} must be real numbers, got an array of {x.dtype}")
        return x.astype(float)
    stack = [x]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        elif not _is_real(v):
            raise ValueError(f"{what} must be real numbers (NaN to abstain), got {v!r}")
    try:
        return np.asarray(x, dtype=float)
    except OverflowError:  # an integer such as 10**400, which no float holds
        raise ValueError(f"{what} must be real numbers a float can hold, got {x!r:.80}") from None


def _is_finite(x) -> bool:
    """x is a real number (not a bool) that a float holds finitely: 10**400 is not."""
    try:
        return _is_real(x) and math.isfinite(x)
    except OverflowError:
        return False


def _is_real(x, kind: type = numbers.Real) -> bool:
    """x is a number of that kind and not a bool (True is a numbers.Integral)."""
    return isinstance(x, kind) and not isinstance(x, bool)
