"""VERDICT scored as a step classifier: every rule's decision on human-labelled steps, and the
metrics of the step-level benchmarks (macro F1, accuracy per class, AUROC, first error).

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, section 3 (the consensus s* = M ŝ, s̄*, Δ*, the dual test
s̄* > τ ∧ Δ* < ε) and Proposition 1: on the same judge scores, does the dual test tell a valid step
from an invalid one better than a plain mean? Pure functions over ŝ [N, m] (one row per labelled
step, NaN where a judge abstained) and labels [N] in {1, 0, −1} (correct, neutral, incorrect):

- decide: the accept decision of each rule of RULES on each step (accept = "the step is correct");
- step_scores: each rule's continuous score (search.step_scores, the search's step scores);
- macro_f1: VisualProcessBench's metric, the mean of the F1 of the correct and the incorrect class,
  with accuracy on each class;
- auroc: the threshold-free area under the ROC curve (rank-based, ties averaged);
- first_error: ProcessBench's view, the first step a rule rejects against the first labelled −1;
- report: all of them per source and overall; sweep: F1 over (τ, ε, λ) from the same ŝ.
Nothing here makes a call: a sweep is free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import verdict
from verdict_lab import search

# The rules scored: VERDICT's dual test, its consensus mean alone, and the baselines of
# verdict.select on the raw scores ŝ. Each accepts a step when two or more judges answered and:
RULES = ("verdict", "no-filter", "mean", "min", "max", "majority", "variance", "raw-dual")
DEFINITIONS = {
    "verdict": "s̄* > τ and Δ* < ε (the dual test)",
    "no-filter": "s̄* > τ (the consensus mean, no dispersion test)",
    "mean": "raw mean > τ",
    "min": "lowest raw score > τ",
    "max": "highest raw score > τ",
    "majority": "more than half of the judges that answered score > τ",
    "variance": "raw mean > τ and raw standard deviation < ε",
    "raw-dual": "raw mean > τ and raw dispersion Δ̂ < ε (the dual test on ŝ)",
}
SCORE_OF = {rule: search.RULE_SCORE[rule] for rule in RULES}  # each rule's continuous score
SCORES = ("key", "mean", "margin", "raw-mean", "raw-min", "raw-max", "raw-majority")
SCORES += ("raw-variance", "raw-dual")
NEUTRAL = ("drop", "correct", "incorrect")  # what a neutral (0) label counts as; drop: nothing


def _r(x) -> np.ndarray:
    """x rounded as verdict compares it (verdict.DECIMALS): ŝ = (0.6, 0.6, 0.6) is not above 0.6."""
    return np.round(x, verdict.DECIMALS)


@dataclass(frozen=True)
class Stats:
    """The statistics every rule reads, of ŝ [N, m] under one λ; each field [N]."""

    s_bar_star: np.ndarray  # s̄*, the consensus confidence
    delta_star: np.ndarray  # Δ*, the consensus dispersion
    raw_mean: np.ndarray  # ŝ̄
    raw_delta: np.ndarray  # Δ̂ = (1/m) Σ |ŝ_i − ŝ̄|
    raw_std: np.ndarray  # the raw standard deviation
    raw_min: np.ndarray
    raw_max: np.ndarray
    answered: np.ndarray  # m', the judges that answered
    s_hat: np.ndarray  # [N, m]


def stats(s_hat, lam=verdict.STUBBORNNESS) -> Stats:
    """Stats of ŝ [N, m] (verdict.consensus, mean, dispersion: abstentions left out as there)."""
    s_hat = np.asarray(s_hat, dtype=float).reshape(-1, len(lam))  # [N, m]
    s_star = verdict.consensus(s_hat, lam)  # [N, m]
    raw_mean = verdict.mean(s_hat)  # [N]
    with np.errstate(invalid="ignore"):  # a row no judge answered stays NaN
        raw_std = np.sqrt(verdict.mean((s_hat - raw_mean[:, None]) ** 2))  # [N, m] -> [N]
    lowest = np.fmin.reduce(s_hat, axis=-1) if len(s_hat) else np.empty(0)  # NaN skipped
    highest = np.fmax.reduce(s_hat, axis=-1) if len(s_hat) else np.empty(0)
    return Stats(
        verdict.mean(s_star),
        verdict.dispersion(s_star),
        raw_mean,
        verdict.dispersion(s_hat),
        raw_std,
        lowest,
        highest,
        (~np.isnan(s_hat)).sum(-1),
        s_hat,
    )


def decide(st: Stats, tau: float, eps: float) -> dict:
    """{rule: accept [N] bool} for every rule of RULES (DEFINITIONS). A step that fewer than two
    judges scored is never accepted, as in verdict.select. Inequalities are strict, on rounded
    values; NaN compares False."""
    judged = st.answered >= 2  # [N]
    with np.errstate(invalid="ignore"):
        above = (_r(st.s_hat) > tau).sum(-1)  # [N, m] -> [N], the judges above τ
        out = {
            "verdict": (_r(st.s_bar_star) > tau) & (_r(st.delta_star) < eps),
            "no-filter": _r(st.s_bar_star) > tau,
            "mean": _r(st.raw_mean) > tau,
            "min": _r(st.raw_min) > tau,
            "max": _r(st.raw_max) > tau,
            "majority": 2 * above > st.answered,
            "variance": (_r(st.raw_mean) > tau) & (_r(st.raw_std) < eps),
            "raw-dual": (_r(st.raw_mean) > tau) & (_r(st.raw_delta) < eps),
        }
    return {rule: judged & out[rule] for rule in RULES}


def step_scores(s_hat, lam, tau: float, eps: float) -> dict:
    """{name: [N]} each continuous score of SCORES (search.step_scores: higher is more likely a
    correct step; NaN where fewer than two judges answered). [N, m] -> {name: [N]}"""
    s_hat = np.asarray(s_hat, dtype=float).reshape(-1, len(lam))
    if not len(s_hat):  # select needs a candidate
        return {name: np.empty(0) for name in SCORES}
    return {name: search.step_scores(s_hat, name, lam, tau, eps) for name in SCORES}


# ----------------------------------------------------------------------------- the metrics


def counted(labels, neutral: str = "drop") -> tuple:
    """(kept [N] bool, correct [N] bool) of labels in {1, 0, −1}: which steps a metric counts, and
    which of them are correct. drop leaves neutral steps out; correct and incorrect count them so.
    """
    if neutral not in NEUTRAL:
        raise ValueError(f"neutral must be one of {', '.join(NEUTRAL)}, got {neutral!r}")
    labels = np.asarray(labels, dtype=int)
    kept = labels != 0 if neutral == "drop" else np.ones(labels.shape, bool)
    correct = (labels == 1) | ((labels == 0) & (neutral == "correct"))
    return kept, correct


def _f1(tp: int, fp: int, fn: int) -> float:
    """F1 = 2tp / (2tp + fp + fn); 0 when the class is neither present nor predicted."""
    return 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else 0.0


def macro_f1(labels, accept, neutral: str = "drop") -> dict:
    """VisualProcessBench's score of one rule: accepted steps are predicted correct, rejected ones
    incorrect, and
        F1_c = 2 TP_c / (2 TP_c + FP_c + FN_c)  for the class c of correct and of incorrect steps,
        macro F1 = (F1_correct + F1_incorrect) / 2,
    over the steps `counted` keeps; with the accuracy on each class (the share of correct steps
    accepted, of incorrect steps rejected; NaN for an empty class).  [N], [N] -> dict"""
    kept, correct = counted(labels, neutral)
    y, a = correct[kept], np.asarray(accept, bool)[kept]  # [K] each
    tp, fp, fn, tn = (int(((y == t) & (a == p)).sum()) for t, p in _CELLS)
    f1_c, f1_i = _f1(tp, fp, fn), _f1(tn, fn, fp)
    return {
        "macro_f1": (f1_c + f1_i) / 2,
        "f1_correct": f1_c,
        "f1_incorrect": f1_i,
        "acc_correct": tp / (tp + fn) if tp + fn else math.nan,
        "acc_incorrect": tn / (tn + fp) if tn + fp else math.nan,
        "n_correct": tp + fn,
        "n_incorrect": tn + fp,
    }


# (label correct, accepted) of the cells TP, FP, FN, TN, the correct class being the positive one.
_CELLS = ((True, True), (False, True), (True, False), (False, False))


def auroc(score, positive) -> float:
    """The area under the ROC curve of `score` for the `positive` class:
        AUROC = (R₊ − n₊(n₊ + 1)/2) / (n₊ n₋),
    R₊ the sum of the positives' ranks (1 = lowest, tied scores sharing their mean rank): the
    probability that a random positive outscores a random negative, ties counting one half. NaN
    scores rank lowest (an unjudged step is never believed); NaN when a class is empty.
    [N], [N] -> float"""
    s = np.nan_to_num(np.asarray(score, dtype=float), nan=-np.inf)  # [N]
    pos = np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if not (n_pos and n_neg):  # one class only: no pair to order
        return math.nan
    order = np.argsort(s, kind="stable")
    ranks = np.empty(len(s))
    ranks[order] = np.arange(1, len(s) + 1)
    _, first, count = np.unique(s[order], return_index=True, return_counts=True)  # tied runs
    for i, k in zip(first, count):  # each run of ties takes its mean rank
        ranks[order[i : i + k]] = i + (k + 1) / 2
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def first_error(samples, labels, accept, neutral: str = "drop") -> dict:
    """ProcessBench's view of one rule. In each sample (steps in order), the true first error is
    its first counted step that is not correct, and the predicted one the first counted step the
    rule rejects (either may be none). acc_erroneous: the share of samples with an error whose
    predicted first error is the true one; acc_correct: the share of samples with none where the
    rule rejects none; f1 their harmonic mean (NaN when a share is). [N] each -> dict"""
    kept, correct = counted(labels, neutral)
    accept = np.asarray(accept, bool)
    truth, guess = {}, {}
    for i, sample in enumerate(samples):
        truth.setdefault(sample, None), guess.setdefault(sample, None)
        if kept[i] and not correct[i] and truth[sample] is None:
            truth[sample] = i
        if kept[i] and not accept[i] and guess[sample] is None:
            guess[sample] = i
    wrong = [s for s in truth if truth[s] is not None]
    right = [s for s in truth if truth[s] is None]
    a_e = sum(guess[s] == truth[s] for s in wrong) / len(wrong) if wrong else math.nan
    a_c = sum(guess[s] is None for s in right) / len(right) if right else math.nan
    if math.isnan(a_e) or math.isnan(a_c):  # no sample of one kind: no harmonic mean
        f1 = math.nan
    else:
        f1 = 2 * a_e * a_c / (a_e + a_c) if a_e + a_c else 0.0
    return {
        "acc_erroneous": a_e,
        "acc_correct": a_c,
        "f1": f1,
        "n_erroneous": len(wrong),
        "n_correct": len(right),
    }


# ----------------------------------------------------------------------------- per source


def report(samples, sources, labels, s_hat, lam, tau, eps, neutral: str = "drop") -> dict:
    """Every rule's metrics and every score's AUROC, overall and per source (sorted), from one pass
    of judging. samples, sources, labels [N], s_hat [N, m] -> {group: {rules, scores, steps}}"""
    labels = np.asarray(labels, dtype=int)
    accept = decide(stats(s_hat, lam), tau, eps)
    scores = step_scores(s_hat, lam, tau, eps)
    groups = {"overall": np.ones(len(labels), bool)}
    groups |= {s: np.asarray(sources) == s for s in sorted(set(sources))}
    out = {}
    for name, mask in groups.items():
        kept, correct = counted(labels[mask], neutral)
        auc = {k: auroc(v[mask][kept], correct[kept]) for k, v in scores.items()}
        group_samples = [s for s, m in zip(samples, mask) if m]
        errors = lambda rule: first_error(group_samples, labels[mask], accept[rule][mask], neutral)
        rules = {
            rule: {
                **macro_f1(labels[mask], accept[rule][mask], neutral),
                "auroc": auc[SCORE_OF[rule]],
                "first_error": errors(rule),
            }
            for rule in RULES
        }
        steps = {k: int((labels[mask] == v).sum()) for k, v in (("+1", 1), ("0", 0), ("-1", -1))}
        out[name] = {"rules": rules, "scores": auc, "steps": steps, "counted": int(kept.sum())}
    for rule in RULES:
        out["overall"]["rules"][rule]["macro_f1_by_source"] = by_source(out, rule)
    return out


def by_source(groups: dict, rule: str) -> float:
    """The other reading of "overall": the mean of the sources' macro F1s, each weighted by its
    counted steps K_g,  Σ_g K_g F1_g / Σ_g K_g  (NaN with no counted step). report's "overall" is
    macro F1 over all counted steps pooled, which is not a mean of the sources' figures."""
    k = [(g["counted"], g["rules"][rule]["macro_f1"]) for n, g in groups.items() if n != "overall"]
    total = sum(c for c, _ in k)
    return sum(c * f for c, f in k) / total if total else math.nan


def sweep(labels, s_hat, taus, epss, lams, neutral: str = "drop") -> dict:
    """Overall macro F1 of every rule at every (τ, ε, λ) of the grid, from the same ŝ, with no call:
    {"verdict": F1 [λ, τ, ε], "best": {rule: the best F1 and where}}. λ moves only the consensus
    rules (verdict, no-filter); ε only the rules with a spread test."""
    f1 = np.full((len(lams), len(taus), len(epss), len(RULES)), np.nan)  # [λ, τ, ε, rule]
    for a, lam in enumerate(lams):
        st = stats(s_hat, lam)
        for b, tau in enumerate(taus):
            for c, eps in enumerate(epss):
                accept = decide(st, tau, eps)
                f1[a, b, c] = [macro_f1(labels, accept[r], neutral)["macro_f1"] for r in RULES]
    best = {}
    for k, rule in enumerate(RULES):
        a, b, c = np.unravel_index(np.nanargmax(f1[..., k]), f1.shape[:3])  # first best
        best[rule] = {
            "macro_f1": float(f1[a, b, c, k]),
            "tau": taus[b],
            "eps": epss[c],
            "lam": list(lams[a]),
        }
    return {
        "taus": list(taus),
        "epss": list(epss),
        "lams": [list(v) for v in lams],
        "verdict": f1[..., 0].tolist(),
        "best": best,
    }


def as_arrays(rows: list) -> tuple:
    """(samples [N], sources [N], labels [N], ŝ [N, m]) of process.py's rows (one per sample), step
    by step."""
    samples = [f"{r['data']}/{r['id']}" for r in rows for _ in r["labels"]]
    sources = [r["source"] for r in rows for _ in r["labels"]]
    labels = np.array([y for r in rows for y in r["labels"]], dtype=int)
    s_hat = np.array(
        [[np.nan if x is None else x for x in v] for r in rows for v in r["s_hat"]], dtype=float
    ).reshape(len(labels), len(verdict.JUDGES))
    return samples, sources, labels, s_hat
