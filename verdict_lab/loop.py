"""The lab's loop: verdict's step, with what a long run keeps beside the paper's decision.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. verdict.step makes the paper's decision; this module
wraps it from outside and adds:

- each judge call's record: a judge that returns a judges.Judgement (a float that carries what the
  call recorded: its replies, the sampled and the weighted score, the reason) leaves that record in
  Step.calls, laid out like ŝ;
- each step's cost, read from a meter (a callable returning {counter: number}, such as the clients'
  usage) before and after the step;
- revise on reject (after ReVISE, which the paper does not have): when no candidate passes the
  rule's filter, a reviser writes one more step, the same judges score it, and it is taken if it
  passes;
- adaptive verification (adaptive.Adaptive; the paper's limitations suggest it): a step whose
  signal reaches its threshold is not judged and takes the reasoner's most likely candidate,
  recorded as unverified with the signal, its value and the threshold (Step.adaptive);
- the trace's JSON format, versioned (TRACE_FORMAT).

A plain callable judge works too: its calls record None.
"""

from __future__ import annotations

import math
import numbers
import re
import threading
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

import numpy as np

import verdict
from verdict_lab.adaptive import Adaptive, Decision

TRACE_FORMAT = "verdict-trace/6"  # the "format" of Trace.to_dict


@dataclass(frozen=True)
class Revision:
    """The revised step written when every candidate failed the rule's filter.

    It holds the step's text, its raw scores ŝ [m] by the same judges, and `selection`, the rule
    applied to it alone ([1, m]).
    """

    candidate: str
    s_hat: np.ndarray  # [m], NaN where the judge abstained
    selection: verdict.Selection  # over the revision alone: accepted [1], s_star [1, m], ...
    usage: dict = field(default_factory=dict)  # what writing and judging it cost, or {}
    calls: tuple = ()  # [m] each judge call's record, or None from a plain callable

    @property
    def taken(self) -> bool:
        return bool(self.selection.accepted[0])

    def to_dict(self) -> dict:
        selection = self.selection
        return {
            "candidate": self.candidate,
            "s_hat": _jsonable(self.s_hat),
            "s_star": _jsonable(selection.s_star[0]),
            "s_bar_star": _jsonable(selection.s_bar_star)[0],
            "delta_star": _jsonable(selection.delta_star)[0],
            "taken": self.taken,
            **({"usage": dict(self.usage)} if self.usage else {}),
            **({"calls": list(self.calls)} if any(c is not None for c in self.calls) else {}),
        }


@dataclass(frozen=True)
class Step:
    """One step of a chain: verdict's record of it, and what the lab keeps beside it.

    `calls` is laid out like ŝ: calls[i][k] is the record of judge k's call on candidate i. The
    revision (None unless a reviser wrote one) is chosen instead of the fallback when it passed the
    rule's filter.
    """

    record: verdict.StepRecord
    calls: tuple = ()  # [n][m] dict, or None from a plain callable; () with no judges
    usage: dict = field(default_factory=dict)  # each counter's change over the step, or {}
    revision: Revision | None = None
    adaptive: Decision | None = None  # whether adaptive verification judged the step, and why

    @property
    def candidates(self) -> tuple:
        return self.record.candidates

    @property
    def s_hat(self) -> np.ndarray:
        return self.record.s_hat

    @property
    def selection(self) -> verdict.Selection:
        return self.record.selection

    @property
    def revised(self) -> bool:
        """True when the revision was taken in place of the fallback."""
        return self.revision is not None and self.revision.taken

    @property
    def chosen(self) -> str:
        return self.revision.candidate if self.revised else self.record.chosen

    @property
    def fallback(self) -> bool:
        """True when the choice came from the fallback ranking: no candidate, nor a revision,
        passed."""
        return self.record.fallback and not self.revised

    @property
    def abstentions(self) -> int:
        revised = self.revision.s_hat if self.revision else ()
        return self.record.abstentions + int(np.isnan(revised).sum())

    def to_dict(self) -> dict:
        selection = self.selection
        calls = [list(row) for row in self.calls]
        return {
            "candidates": list(self.candidates),
            "s_hat": _jsonable(self.s_hat),
            "s_star": _jsonable(selection.s_star),
            "s_bar_star": _jsonable(selection.s_bar_star),
            "delta_star": _jsonable(selection.delta_star),
            "accepted": [bool(x) for x in selection.accepted],
            "index": selection.index,
            "fallback": selection.fallback,
            "verified": selection.verified,
            "abstentions": self.abstentions,
            **({"usage": dict(self.usage)} if self.usage else {}),
            **({"revision": self.revision.to_dict()} if self.revision else {}),
            **({"calls": calls} if any(c is not None for row in calls for c in row) else {}),
            **({"adaptive": self.adaptive.to_dict()} if self.adaptive else {}),
        }


@dataclass(frozen=True)
class Trace:
    """A whole chain of Steps; `stopped` and `meta` as in verdict.Trace."""

    question: str
    steps: tuple  # [T] Step
    config: verdict.Config
    stopped: str
    meta: dict = field(default_factory=dict)

    def core(self) -> verdict.Trace:
        """verdict.Trace of these steps: a Step answers what it asks of a step (chosen, fallback,
        abstentions, s_hat), a taken revision counted as the step's choice."""
        return verdict.Trace(self.question, self.steps, self.config, self.stopped, self.meta)

    @property
    def chain(self) -> list:
        return self.core().chain

    @property
    def answer(self) -> str | None:
        return self.core().answer

    def totals(self) -> dict:
        """verdict.Trace's counts, with the revisions' judge calls and abstentions. "revisions" and
        "revised" count the revisions written and taken (a taken revision is no fallback),
        "usage" sums each counter of the steps' usage, when a meter was given, and "adaptive" counts
        the steps adaptive verification judged and left unverified, when it decided any."""
        totals = self.core().totals()
        revisions = [s.revision for s in self.steps if s.revision is not None]
        totals["judge_calls"] += sum(v.s_hat.size for v in revisions)
        usage = {k: sum(s.usage.get(k, 0) for s in self.steps) for s in self.steps for k in s.usage}
        decided = [s.adaptive for s in self.steps if s.adaptive is not None]
        adaptive = decided and {
            "signal": decided[0].signal,
            "threshold": decided[0].threshold,
            "judged": sum(d.judged for d in decided),
            "unverified": sum(not d.judged for d in decided),
        }
        return {
            **totals,
            "revisions": len(revisions),
            "revised": sum(v.taken for v in revisions),
            **({"usage": usage} if usage else {}),
            **({"adaptive": adaptive} if adaptive else {}),
        }

    def to_dict(self) -> dict:
        """A JSON-ready dict; NaN becomes null."""
        return {
            "format": TRACE_FORMAT,
            "question": self.question,
            "config": {**asdict(self.config), "lam": list(self.config.lam)},
            "steps": [s.to_dict() for s in self.steps],
            "chain": self.chain,
            "answer": self.answer,
            "stopped": self.stopped,
            "totals": self.totals(),
            "meta": self.meta,
        }


def _jsonable(x: np.ndarray) -> list:
    """x as nested lists, NaN as None."""
    if x.ndim == 1:
        return [None if v != v else v for v in x.tolist()]
    return [_jsonable(row) for row in x]


def step(
    state: verdict.State,
    propose: Callable[[verdict.State, int], Sequence[str]],
    judges: Sequence[Callable],
    config: verdict.Config = verdict.Config(),
    map_fn: Callable[..., Iterable] = map,
    meter: Callable[[], dict] | None = None,
    revise: Callable[[verdict.State, Step], str | None] | None = None,
    adaptive: Adaptive | None = None,
) -> Step:
    """verdict.step, with each call's record, the step's usage by `meter`, revise on reject, and
    adaptive verification.

    The usage is each counter's change over the step: after[k] − before[k] (0 before for a new key).
    When no candidate passes the rule's filter and `revise` is given, revise(state, the step so far)
    returns one revised step, or None. The same judges score it (m calls) and config.rule is applied
    to it alone: it is chosen if it passes the filter (for VERDICT: s̄* > τ and Δ* < ε), else the
    fallback stands. With `adaptive` (and judges), adaptive.decide reads the proposed candidates
    first: a step it does not judge is verdict.step's record with no judges (ŝ [n, 0], unverified),
    except that it takes the most likely candidate and marks none accepted; it makes no judge call,
    is no fallback and so is never revised. Step.adaptive keeps the Decision either way.
    """
    before = _reading(meter)
    decision = None
    if adaptive is None or not judges:
        record, calls = _recorded(state, propose, judges, config, map_fn)
    else:
        record, calls, decision = _gated(state, propose, judges, config, map_fn, adaptive)
    done = Step(record, calls, _usage(meter, before), adaptive=decision)
    if revise is None or not record.selection.fallback:  # with no judges there is no fallback
        return done
    at = _reading(meter)
    text = revise(state, done)
    if text is None:  # the reviser declined, and the fallback stands
        return replace(done, usage=_usage(meter, before))
    if not isinstance(text, str):
        raise ValueError(f"revise must return a string or None, got {text!r}")
    one = replace(config, n=1)
    judged, judged_calls = _recorded(state, lambda s, n: [text], judges, one, map_fn)
    revision = Revision(text, judged.s_hat[0], judged.selection, _usage(meter, at), judged_calls[0])
    return replace(done, usage=_usage(meter, before), revision=revision)


def run(
    question: str,
    propose: Callable[[verdict.State, int], Sequence[str]],
    judges: Sequence[Callable],
    config: verdict.Config = verdict.Config(),
    image: Any = None,
    map_fn: Callable[..., Iterable] = map,
    meter: Callable[[], dict] | None = None,
    revise: Callable[[verdict.State, Step], str | None] | None = None,
    adaptive: Adaptive | None = None,
) -> Trace:
    """verdict.run's loop over this module's step: the same chain, the same stops, with the records,
    the usage, the revisions and the adaptive decisions kept."""
    state = verdict.State(question, verdict.as_images(image))
    steps = []
    for _ in range(config.max_steps):
        try:
            done = step(state, propose, judges, config, map_fn, meter, revise, adaptive)
        except verdict.Stop as e:
            return Trace(question, tuple(steps), config, str(e))
        steps.append(done)
        state = state.extend(done.chosen)
        if re.search(config.final, done.chosen):
            return Trace(question, tuple(steps), config, "final")
    return Trace(question, tuple(steps), config, "max_steps")


class _Keeping:
    """A judge as given, that keeps each of its return values by the candidate it judged."""

    def __init__(self, judge: Callable, k: int, kept: dict, lock: threading.Lock):
        self.judge, self.k, self.kept, self.lock = judge, k, kept, lock

    def __repr__(self) -> str:
        return repr(self.judge)  # verdict.step's messages name the judge given

    def __call__(self, state, step: str):
        result = self.judge(state, step)
        with self.lock:
            self.kept.setdefault((step, self.k), []).append(result)
        return result


def _recorded(state, propose, judges, config, map_fn) -> tuple:
    """verdict.step, and the record each of its judge calls returned.  -> (StepRecord, [n][m])

    Each judge is wrapped to keep its return values by candidate, so that verdict.step calls the
    judges through map_fn as given. A record is what a return value carries (judges.Judgement's
    record; None from a plain callable), and it stays beside its own score: of two candidates with
    the same text, each takes the record that came with its ŝ.
    """
    kept, lock = {}, threading.Lock()  # (candidate, k) -> the judge's return values
    keeping = [_Keeping(judge, k, kept, lock) for k, judge in enumerate(judges)]
    record = verdict.step(state, propose, keeping, config, map_fn)
    rows = [
        [_take(kept[c, k], record.s_hat[i, k]) for k in range(len(judges))]
        for i, c in enumerate(record.candidates)
    ]  # [n][m]
    for row in rows:
        for k, r in enumerate(row):
            if not (r is None or isinstance(r, dict)):
                raise ValueError(
                    f"judge {k} ({judges[k]!r}) returned the record {r!r}; "
                    "a record is a dict or None"
                )
    return record, tuple(tuple(row) for row in rows) if judges else ()


def _gated(state, propose, judges, config, map_fn, adaptive: Adaptive) -> tuple:
    """One step under adaptive verification.  -> (StepRecord, [n][m] records or (), Decision)

    verdict.step with no judges proposes the candidates and checks them; the judged path hands the
    same candidates to verdict.step with the judges, so both paths propose once.
    """
    bare = verdict.step(state, propose, (), config)  # ŝ [n, 0], candidate 0, unverified
    candidates = bare.candidates
    decision = adaptive.decide(candidates, config.final)
    if decision.judged:
        record, calls = _recorded(state, lambda s, n: candidates, judges, config, map_fn)
        return record, calls, decision
    # Not judged: the most likely candidate, and no candidate is marked accepted.
    n = len(candidates)
    selection = replace(bare.selection, index=decision.index, accepted=np.zeros(n, bool))
    return replace(bare, selection=selection), (), decision


def _take(results: list, s: float):
    """The record of the first of `results` whose score is s (NaN matching NaN), removed."""
    j = next(j for j, x in enumerate(results) if float(x) == s or (s != s and float(x) != float(x)))
    return getattr(results.pop(j), "record", None)


def _reading(meter: Callable[[], dict] | None) -> dict:
    """meter(), checked: a dict of counter names to finite real numbers (no bool); {} with no
    meter."""
    if meter is None:
        return {}
    counters = meter()

    def ok(k, v) -> bool:
        number = isinstance(v, numbers.Real) and not isinstance(v, bool)
        return isinstance(k, str) and number and math.isfinite(v)

    if not (isinstance(counters, dict) and all(ok(k, v) for k, v in counters.items())):
        raise ValueError(
            f"meter must return a dict of counter names to finite numbers, got {counters!r}"
        )
    return counters


def _usage(meter: Callable[[], dict] | None, before: dict) -> dict:
    """Each counter's change since `before`: after[k] − before[k] (0 for a new key); {} with no
    meter."""
    return {k: v - before.get(k, 0) for k, v in _reading(meter).items()}
