"""When does the coupled consensus beat plain averaging? A Monte-Carlo study of VERDICT's selection.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. The paper credits its gain over the Mean baseline
(+0.68 to +2.57 points) to the disagreement-aware consensus, dual acceptance and fallback ranking,
and reports a stubbornness sensitivity (a 2.90 pp range for λ_V). This module asks under which
structures of judge error the consensus chooses better than the mean, and under which worse. It
runs every rule of verdict.RULES, plus "lam-mean" (the highest Σ λ_i ŝ_i / Σ λ_i over the judges
that answered, no filter), on synthetic steps whose truth is known. Nothing here is a real judge.

The world (one trial = one step; every parameter is a field of Scenario, defaults in brackets):
  n = 3 candidates, each correct independently with probability p_correct [0.5];
  m = 3 judges V, L, C with stubbornness lam [(1.5, 1.0, 0.8)], tau [0.6], eps [0.1];
  judge j's raw score of candidate i is  ŝ_ij = μ_i + sigma · (√rho · z_i + √(1 − rho) · e_ij),
  μ_i = mu1 [0.72] on a correct step and mu0 [0.45] on a wrong one, z_i and e_ij ~ N(0, 1),
  then clipped to [0, 1] (a judge's scale is bounded, and verdict rejects scores outside it).

The five noise models, each the world above with one knob turned (sigma = 0.15 unless swept):
  1. iid        sigma: the judges' noise sd, independent across judges (rho = 0).
  2. fooled-X   p_fool: on a wrong step, judge X (fooled: 0 = V, 1 = L, 2 = C) is fooled with
                probability p_fool and scores it around mu_fool [0.9] instead of mu0 (same noise).
  3. correlated rho: the weight of a noise component z_i shared by all judges of a candidate
                ("agreement bias", as in SGV); two judges' noise has correlation rho.
  4. miscal     judge `miscal` [0 = V] reports 0.5 + kappa · (ŝ − 0.5) + delta before clipping:
                a constant offset delta [0], or a scale compressed towards 0.5 by kappa [1] < 1.
  5. abstain    q: each judge independently returns NaN (abstains) with probability q [0].
  6. premise    EVPV's gate (modes/evpv.py) against a hallucinated premise. A wrong step rests on a
                contradicted visual premise with probability p_premise [0]; the judges it fools
                (premise_fools [()], judge indices) score it around mu_fool. The premise check flags
                such a step (a contradicted claim: r = 0, α(r) = 0) with probability p_detect [0.8],
                and any other step (a false alarm) with probability p_false [0.1]; an unflagged step
                has r = 1, α = 1. gate ["none"]: "visual" sets a flagged step's ŝ_V to
                0.5 + α(r)(ŝ_V − 0.5) = 0.5, "step" every judge's ŝ. Every simulated step makes a
                visual claim (ν_t = 1): a step without one is never gated, so it would only lower
                the false-alarm rate.

Measures, per rule: accuracy = P(the chosen candidate is correct | some candidate is correct);
acceptance = the fraction of candidates passing the rule's filter (rules without a filter accept
every candidate with 2 or more answers); fallback = the fraction of steps where none passes; and
with p_premise > 0, contradicted_accepted = the fraction of contradicted-premise candidates passing
the filter, contradicted_chosen = P(the chosen candidate has a contradicted premise | some candidate
has). Each is the mean over `seeds` independent seeds of `trials` steps, ± the 95% Student-t
half-width over seeds. All rules and all values of a sweep see the same random draws, so differences
between rules are paired. `python -m verdict_lab.simulate` writes docs/simulation_report.md and
docs/simulation.png (perf/simulation_report.py); with --sweep tau=0.01,0.1,0.6 it draws instead the
τ, ε or λ curve of evaluate's --sweep (curve), in its form, to set beside a real model's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

import verdict
from verdict import RULES, STUBBORNNESS
from verdict_lab.harness.sweep import head, parse_sweep
from verdict_lab.modes.evpv import GATE_TARGETS

FORMAT = "verdict-simulation/1"
TARGETS = ("none",) + GATE_TARGETS  # the gate's target in a scenario; "none" for no gate
ALL_RULES = RULES + ("lam-mean",)
# Student t, 0.975 quantile, df = 1..30 (df > 30 uses 2.042: slightly wide)
# fmt: off
T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)
# fmt: on


@dataclass(frozen=True)
class Scenario:
    """One world: how the raw scores are drawn (module docstring) and VERDICT's knobs."""

    p_correct: float = 0.5
    mu1: float = 0.72
    mu0: float = 0.45
    sigma: float = 0.15
    fooled: int = -1  # the fooled judge's index, -1 for none
    p_fool: float = 0.0
    mu_fool: float = 0.9
    rho: float = 0.0
    miscal: int = 0  # the miscalibrated judge's index
    delta: float = 0.0
    kappa: float = 1.0
    q: float = 0.0
    p_premise: float = 0.0
    premise_fools: tuple = ()  # the judges a contradicted premise fools
    p_detect: float = 0.8
    p_false: float = 0.1
    gate: str = "none"  # one of TARGETS
    lam: tuple = STUBBORNNESS
    tau: float = verdict.TAU
    eps: float = verdict.EPS

    def __post_init__(self):
        for name in (
            "p_correct",
            "p_fool",
            "rho",
            "q",
            "p_premise",
            "p_detect",
            "p_false",
        ):  # probabilities
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must lie in [0, 1], got {name}={getattr(self, name)!r}")
        if not (self.sigma >= 0 and self.kappa >= 0):  # a negative sd or scale means nothing
            raise ValueError(
                f"need sigma >= 0 and kappa >= 0, got sigma={self.sigma!r}, kappa={self.kappa!r}"
            )
        if not (
            -1 <= self.fooled < len(self.lam) and 0 <= self.miscal < len(self.lam)
        ):  # judge indices
            raise ValueError(
                f"fooled and miscal must index a judge, got fooled={self.fooled!r}, "
                f"miscal={self.miscal!r}"
            )
        if len(set(self.premise_fools)) != len(self.premise_fools) or not set(
            self.premise_fools
        ) <= set(range(len(self.lam))):
            raise ValueError(
                "premise_fools must list distinct judge indices, got "
                f"premise_fools={self.premise_fools!r}"
            )
        if self.gate not in TARGETS:
            raise ValueError(f"gate must be one of {', '.join(TARGETS)}, got gate={self.gate!r}")


@dataclass(frozen=True)
class Draws:
    """The randomness of seeds × trials steps, shared by every scenario (common random numbers)."""

    seeds: int
    trials: int
    u_correct: np.ndarray  # [N, n]     N = seeds · trials, seed-major
    z: np.ndarray  # [N, n]     noise shared by the judges of a candidate
    e: np.ndarray  # [N, n, m]  each judge's own noise
    u_fool: np.ndarray  # [N, n]
    u_abstain: np.ndarray  # [N, n, m]
    u_premise: np.ndarray  # [N, n]
    u_check: np.ndarray  # [N, n]


def draw(seeds: int, trials: int, seed: int = 0, n: int = 3, m: int = 3) -> Draws:
    """Independent streams default_rng([seed, k]) for k < seeds, `trials` steps each (the premise
    draws come last in each stream, so the other draws do not depend on the premise model)."""
    if seeds < 2 or trials < 1 or n < 1:  # an interval needs 2 seeds; a step needs a candidate
        raise ValueError(
            f"need seeds >= 2, trials >= 1, n >= 1, got seeds={seeds}, trials={trials}, n={n}"
        )
    blocks = []
    for k in range(seeds):  # a loop over seeds (for independent streams), never over trials
        r = np.random.default_rng([seed, k])
        blocks.append(
            (
                r.random((trials, n)),
                r.standard_normal((trials, n)),
                r.standard_normal((trials, n, m)),
                r.random((trials, n)),
                r.random((trials, n, m)),
                r.random((trials, n)),
                r.random((trials, n)),
            )
        )
    return Draws(seeds, trials, *(np.concatenate(b) for b in zip(*blocks)))


def premises(d: Draws, sc: Scenario) -> tuple[np.ndarray, np.ndarray]:
    """Which candidates rest on a contradicted premise, and which the premise check flags.
    -> [N, n], [N, n]"""
    contradicted = (d.u_correct >= sc.p_correct) & (
        d.u_premise < sc.p_premise
    )  # [N, n] wrong steps only
    flagged = d.u_check < np.where(contradicted, sc.p_detect, sc.p_false)  # [N, n]
    return contradicted, flagged


def raw_scores(d: Draws, sc: Scenario) -> tuple[np.ndarray, np.ndarray]:
    """Raw scores ŝ (NaN = abstained), after the gate, and the truth of every candidate.
    -> [N, n, m], [N, n]"""
    if d.e.shape[2] != len(sc.lam):  # one stubbornness per judge
        raise ValueError(f"draws have m={d.e.shape[2]} judges but lam={sc.lam} has {len(sc.lam)}")
    correct = d.u_correct < sc.p_correct  # [N, n]
    contradicted, flagged = premises(d, sc)  # [N, n], [N, n]
    noise = math.sqrt(sc.rho) * d.z[..., None] + math.sqrt(1 - sc.rho) * d.e  # [N, n, m]
    x = np.where(correct, sc.mu1, sc.mu0)[..., None] + sc.sigma * noise  # [N, n, m]
    if sc.fooled >= 0:  # the fooled judge scores some wrong steps around mu_fool
        f = sc.fooled
        hit = ~correct & (d.u_fool < sc.p_fool)  # [N, n]
        x[..., f] = np.where(hit, sc.mu_fool + sc.sigma * noise[..., f], x[..., f])  # [N, n]
    for f in sc.premise_fools:  # a contradicted premise fools these judges
        x[..., f] = np.where(
            contradicted, sc.mu_fool + sc.sigma * noise[..., f], x[..., f]
        )  # [N, n]
    if sc.kappa != 1 or sc.delta != 0:  # one judge miscalibrated (skipped otherwise: exact scores)
        x[..., sc.miscal] = 0.5 + sc.kappa * (x[..., sc.miscal] - 0.5) + sc.delta  # [N, n]
    s_hat = np.clip(x, 0.0, 1.0)  # [N, n, m]
    if (
        sc.gate != "none"
    ):  # a flagged step: r = 0, α(0) = 0, so ŝ ← 0.5 + 0·(ŝ − 0.5) = 0.5 (exactly)
        j = slice(0, 1) if sc.gate == "visual" else slice(None)  # V's column, or every judge's
        s_hat[..., j] = np.where(flagged[..., None], 0.5, s_hat[..., j])  # [N, n, m']
    s_hat[d.u_abstain < sc.q] = np.nan  # [N, n, m] NaN stays NaN
    return s_hat, correct


# ----------------------------------------------------------------------------- batched selection


def select_batch(
    s_hat, lam=STUBBORNNESS, tau: float = verdict.TAU, eps: float = verdict.EPS
) -> dict:
    """Every rule of ALL_RULES on T steps at once.  [T, n, m] -> {rule: verdict.Selection (batched)}

    verdict.select_all is batched over leading axes; lam-mean (the λ-weighted raw mean with no
    filter, the paper's weights without the game) is added here with verdict's own ranking helper.
    """
    s_hat = np.asarray(s_hat, dtype=float)
    if s_hat.ndim != 3:  # steps × candidates × judges
        raise ValueError(f"scores must have shape [T, n, m], got shape {s_hat.shape}")
    out = verdict.select_all(s_hat, lam, tau, eps)
    lam = np.asarray(lam, dtype=float)
    answered = ~np.isnan(s_hat)  # [T, n, m]
    verified = answered.sum(2) >= 2  # [T, n]
    with np.errstate(invalid="ignore"):  # [T, n, m] -> [T, n]
        lam_mean = np.where(answered, s_hat * lam, 0).sum(2) / np.where(answered, lam, 0).sum(2)
    out["lam-mean"] = replace(out["mean"], index=verdict._best(verified, verified, lam_mean))
    return out


def measure(d: Draws, sc: Scenario) -> dict:
    """Every rule's accuracy, acceptance and fallback on each seed.

    -> {rule: {measure: [seeds]}}
    """
    S, T = d.seeds, d.trials
    s_hat, correct = raw_scores(d, sc)  # [N, n, m], [N, n]
    contradicted = premises(d, sc)[0]  # [N, n]
    exists = correct.any(1).reshape(S, T)  # [S, T]
    chosen = lambda mask, ch: np.take_along_axis(mask, ch.index[:, None], 1).reshape(
        S, T
    )  # [N, n] -> [S, T]
    share = lambda hits, of: hits.sum(1) / np.maximum(of.sum(1), 1)  # [S, ·], [S, ·] -> [S]
    out = {}
    for rule, ch in select_batch(s_hat, sc.lam, sc.tau, sc.eps).items():
        out[rule] = {
            "accuracy": share(chosen(correct, ch), exists),  # [S]
            "acceptance": ch.accepted.reshape(S, -1).mean(1),  # [S]
            "fallback": ch.fallback.reshape(S, T).mean(1),  # [S]
        }
        if sc.p_premise > 0:
            bad, any_bad = (
                contradicted.reshape(S, -1),
                contradicted.any(1).reshape(S, T),
            )  # [S, T·n], [S, T]
            out[rule]["contradicted_accepted"] = share(ch.accepted.reshape(S, -1) & bad, bad)
            out[rule]["contradicted_chosen"] = share(chosen(contradicted, ch), any_bad)
    return out


def interval(x) -> tuple[float, float]:
    """Mean and 95% half-width (Student t) of per-seed values.  [S] -> (mean, half-width)"""
    x = np.asarray(x, dtype=float)
    if x.ndim != 1 or x.size < 2:  # a spread needs two seeds
        raise ValueError(f"need a 1-D array of at least 2 per-seed values, got shape {x.shape}")
    return float(x.mean()), float(T975[min(x.size - 1, 30) - 1] * x.std(ddof=1) / math.sqrt(x.size))


@dataclass(frozen=True)
class Sweep:
    """One noise model: `field` of `base` takes each of `values` ("lam_V" sets lam[0])."""

    name: str
    label: str  # the x-axis label (ASCII: pillow's default font has no Greek)
    field: str
    values: tuple
    headline: float  # the value quoted in the summary tables
    base: Scenario = Scenario()

    def at(self, v: float) -> Scenario:
        if self.field == "lam_V":
            return replace(self.base, lam=(v,) + tuple(self.base.lam[1:]))
        return replace(self.base, **{self.field: v})


P_FOOL = (0.0, 0.2, 0.4, 0.6, 0.8)
LAM_V = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0)
SWEEPS = (
    Sweep(
        "iid", "sigma (noise sd of every judge)", "sigma", (0.05, 0.1, 0.15, 0.2, 0.25, 0.3), 0.15
    ),
    *(
        Sweep(
            f"fooled-{j}",
            f"p_fool (judge {j} fooled on wrong steps)",
            "p_fool",
            P_FOOL,
            0.4,
            Scenario(fooled=i),
        )
        for i, j in enumerate("VLC")
    ),
    Sweep(
        "correlated", "rho (weight of the shared noise)", "rho", (0.0, 0.25, 0.5, 0.75, 0.9), 0.5
    ),
    Sweep("offset-V", "delta (offset of judge V)", "delta", (-0.2, -0.1, 0.0, 0.1, 0.2), 0.1),
    Sweep("compress-V", "kappa (scale of judge V)", "kappa", (1.0, 0.75, 0.5, 0.25, 0.0), 0.5),
    Sweep("abstain", "q (abstention probability)", "q", (0.0, 0.1, 0.2, 0.3, 0.5), 0.2),
    Sweep("lam_V, iid", "lambda_V (iid, sigma = 0.15)", "lam_V", LAM_V, 1.5),
    Sweep(
        "lam_V, fooled-V",
        "lambda_V (judge V fooled, p = 0.4)",
        "lam_V",
        LAM_V,
        1.5,
        Scenario(fooled=0, p_fool=0.4),
    ),
    Sweep(
        "lam_V, fooled-C",
        "lambda_V (judge C fooled, p = 0.4)",
        "lam_V",
        LAM_V,
        1.5,
        Scenario(fooled=2, p_fool=0.4),
    ),
)


FOOLS = ((0,), (1, 2), (0, 1, 2))  # whom a contradicted premise fools: V alone, L and C, all three
GATE_KNOBS = (
    ("p_false", "p_false (premise check's false alarms)", (0.0, 0.05, 0.1, 0.2, 0.3), 0.1),
    ("p_detect", "p_detect (contradicted premises flagged)", (0.0, 0.25, 0.5, 0.75, 1.0), 0.8),
)


def fools_name(fools: tuple) -> str:
    return "+".join("VLC"[i] for i in fools)


def gate_name(field: str, fools: tuple, target: str) -> str:
    return f"{field}, {fools_name(fools)} fooled, gate {target}"


# A gate's sweeps of each knob; with no gate neither knob matters, so "none" is measured at the
# headline only.
GATE_SWEEPS = tuple(
    Sweep(
        gate_name(field, f, g),
        label,
        field,
        values if g != "none" else (headline,),
        headline,
        Scenario(p_premise=0.4, premise_fools=f, gate=g),
    )
    for field, label, values, headline in GATE_KNOBS
    for f in FOOLS
    for g in TARGETS
    if g != "none" or field == GATE_KNOBS[0][0]
)


def run(trials: int = 2500, seeds: int = 20, seed: int = 0) -> dict:
    """Every sweep at every value.  -> {sweep name: [(value, measure(...)), ...]}"""
    d = draw(seeds, trials, seed)
    return {sw.name: [(v, measure(d, sw.at(v))) for v in sw.values] for sw in SWEEPS + GATE_SWEEPS}


def curve(
    text: str, trials: int = 2500, seeds: int = 20, seed: int = 0, base: Scenario = Scenario()
) -> dict:
    """evaluate.py's sweep drawn from the noise model: `text` is its --sweep ("tau=0.01,0.1,0.6",
    any knob of harness/sweep.KNOBS), `base` the world. -> a "verdict-sweep/1" summary
    (harness/sweep.py's), whose per-seed accuracies (%) are a correct candidate chosen given one
    exists, base being candidate 0 (the reasoner alone); harness.sweep.picture draws it as it draws
    a real model's."""
    settings, d = parse_sweep(text), draw(seeds, trials, seed)
    cell = lambda xs: {
        "mean": float(np.mean(xs)),
        "std": float(np.std(xs, ddof=1)),
        "per_seed": list(xs),
    }
    acc, methods = (
        {},
        ["base", "mean", "verdict"],
    )  # the paper's figures: VERDICT, Mean and the base model
    for st in settings:
        lam = tuple(
            st.value if "lam_" + j == st.axis else x for j, x in zip("VLC", base.lam)
        )  # one λ
        at = (
            replace(base, lam=lam)
            if st.axis.startswith("lam_")
            else replace(base, **{st.axis: st.value})
        )
        got, correct = measure(d, at), d.u_correct < at.p_correct  # {rule: {measure: [S]}}, [N, n]
        exists = correct.any(1).reshape(seeds, trials)  # [S, T]
        first = (correct[:, 0].reshape(seeds, trials) & exists).sum(1) / exists.sum(
            1
        )  # [S] candidate 0
        per = {
            "base": first,
            "mean": got["mean"]["accuracy"],
            "verdict": got["verdict"]["accuracy"],
        }  # [S]
        acc[st.label] = {m: {"Avg": cell([100 * float(x) for x in per[m]])} for m in methods}
    margin = {
        k: {"Avg": v["verdict"]["Avg"]["mean"] - v["mean"]["Avg"]["mean"]} for k, v in acc.items()
    }
    return head(
        settings,
        methods,
        ["Avg"],
        list(range(seeds)),
        f"python -m verdict_lab.simulate --sweep {text} --trials {trials} --seeds {seeds} "
        f"--seed {seed}",
        note=(
            f"SIMULATED (the simulation's iid world, sigma = {base.sigma}), "
            "steps of one decision each"
        ),
        accuracy=acc,
        margin=margin,
    )
