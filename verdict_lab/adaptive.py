"""Adaptive verification: judge a step only where the reasoner is unsure of it.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, limitations: "the 3.80× sequential wall-clock overhead is
non-trivial, though … reducible by verifying adaptively only at high-uncertainty steps". The paper
does not say how to measure uncertainty; this module offers three signals that the server already
gives with the n candidates, each compared with a threshold θ in [0, 1]. A step whose signal v is
above θ (v > θ) is not judged: it takes the reasoner's most likely candidate and is recorded as
unverified, with v and θ. Every other step is VERDICT's, its dual test and fallback unchanged. No v
is above 1, so θ = 1 judges every step: full VERDICT, on the same requests.

With n candidates c_1 … c_n, and for a candidate c_i with T_i generated tokens of log-probability
ℓ_{i,t} (judges.Reasoner(logprobs=True) gives them, as judges.token_stats):

- agree:     v = max_k |{i : key(c_i) = k}| / n, the share of the candidates in the largest group
             that agree; key(c) is the final answer (the text after config.final) when c is a final
             step, else c's words joined by single spaces. θ = 0.9: judge unless all n agree (for
             n ≤ 10).
- mean-prob: v = exp(ℓ̄_{i*}), ℓ̄_i = (1/T_i) Σ_t ℓ_{i,t}: the geometric mean of the most likely
             candidate's token probabilities (i* = argmax_i ℓ̄_i).
- min-prob:  v = exp(min_t ℓ_{i*,t}): the probability of that candidate's least likely token.

The most likely candidate i* is the one with the highest ℓ̄_i; with no logprobs, the first of the
largest agreeing group (the first candidate when no two agree). A logprob signal with no usable
logprobs for any candidate has no value (NaN): the step is judged. The setting "off" judges every
step and asks for no logprobs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

SIGNALS = ("agree", "mean-prob", "min-prob")  # the signals, as the setting names them
OFF = "off"  # the setting that judges every step (the paper's VERDICT)
THRESHOLDS = {"agree": 0.9, "mean-prob": 0.9, "min-prob": 0.5}  # each signal's default θ
LOGPROBS = ("mean-prob", "min-prob")  # the signals that need the reasoner's token logprobs


@dataclass(frozen=True)
class Decision:
    """Whether one step was judged, and what decided it: `signal`'s value v against `threshold` θ
    (judged unless v > θ; v is NaN when the signal had no value), and the candidate an unjudged step
    takes (`index`, the most likely)."""

    signal: str
    threshold: float
    value: float  # v, NaN when the server gave no logprobs
    judged: bool
    index: int  # the most likely candidate, taken when the step is not judged

    def to_dict(self) -> dict:
        """The trace's record: the signal, θ, v (None for NaN) and whether the step was judged."""
        value = None if self.value != self.value else self.value
        return {
            "signal": self.signal,
            "threshold": self.threshold,
            "value": value,
            "judged": self.judged,
        }


@dataclass(frozen=True)
class Adaptive:
    """The setting: a signal of SIGNALS and its threshold θ in [0, 1]. decide(candidates, final)
    gives each step's Decision."""

    signal: str
    threshold: float

    def __post_init__(self):
        if self.signal not in SIGNALS:
            raise ValueError(
                f"adaptive must be {OFF} or one of {', '.join(SIGNALS)}, got {self.signal!r}"
            )
        theta = self.threshold
        # A threshold outside [0, 1] (or NaN) would compare with no v the same way twice.
        if not (
            isinstance(theta, (int, float)) and not isinstance(theta, bool) and 0 <= theta <= 1
        ):
            raise ValueError(f"adaptive_threshold must be in [0, 1], got {theta!r}")

    @property
    def logprobs(self) -> bool:
        """Whether the reasoner must ask for its tokens' logprobs."""
        return self.signal in LOGPROBS

    def decide(self, candidates: Sequence[str], final: str) -> Decision:
        """The step's Decision: v by the signal, judged unless v > θ.  [n] candidates -> Decision"""
        if not candidates:  # verdict.step refuses a step with no candidate before this is asked
            raise ValueError("adaptive: a step needs at least one candidate")
        means = [_stat(c, "mean") for c in candidates]  # [n] ℓ̄_i, NaN without logprobs
        index = most_likely(candidates, final, means)
        if self.signal == "agree":
            value = agreement(candidates, final)
        elif means[index] != means[index]:  # no candidate has logprobs: the signal has no value
            value = math.nan
        else:
            value = math.exp(
                means[index] if self.signal == "mean-prob" else _stat(candidates[index], "min")
            )
        # Compared at verdict.DECIMALS, as the dual test is, so that exp(ln 0.9) is not above
        # θ = 0.9; NaN > θ is False, so a step with no value is judged.
        judged = not round(value, 12) > round(self.threshold, 12)
        return Decision(self.signal, float(self.threshold), value, judged, index)


def gate_of(signal: str, threshold: float | None = None) -> Adaptive | None:
    """The setting from its two fields: None for "off", else Adaptive(signal, θ), θ the signal's
    default (THRESHOLDS) when None."""
    if signal == OFF:
        return None
    default = THRESHOLDS.get(signal, 0.0)  # an unknown signal is named by Adaptive's check
    return Adaptive(signal, default if threshold is None else threshold)


def key(candidate: str, final: str) -> str:
    """What two candidates must share to agree: the final answer of a final step (the text after
    the marker `final`, a regular expression, in lower case), else the step's words, single-spaced.
    """
    at = re.search(final, candidate)
    if at is not None:
        return "final: " + " ".join(candidate[at.end() :].split()).lower()
    return " ".join(candidate.split())


def agreement(candidates: Sequence[str], final: str) -> float:
    """v of the agree signal: max_k |{i : key(c_i) = k}| / n."""
    keys = [key(c, final) for c in candidates]  # [n]
    return max(keys.count(k) for k in keys) / len(keys)


def most_likely(candidates: Sequence[str], final: str, means: Sequence[float]) -> int:
    """i* = argmax_i ℓ̄_i over the candidates with logprobs (the lowest index on a tie); with none,
    the first candidate of the largest agreeing group."""
    known = [(m, -i) for i, m in enumerate(means) if m == m]
    if known:
        return -max(known)[1]
    keys = [key(c, final) for c in candidates]  # [n]
    counts = [keys.count(k) for k in keys]  # [n]
    return counts.index(max(counts))


def _stat(candidate: str, name: str) -> float:
    """A candidate's token statistic ("mean" or "min", judges.token_stats), NaN when it carries
    none."""
    stats = getattr(candidate, "logprobs", None)
    return float(stats[name]) if isinstance(stats, dict) and name in stats else math.nan
