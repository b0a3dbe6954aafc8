"""VERDICT inside test-time search: best-of-N, beam search, and a search-and-learn step scorer.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. The paper verifies one chain step by step (verdict.run);
this module puts the same judges, consensus s*, confidence s̄*, dispersion Δ* and dual test
(s̄* > τ and Δ* < ε) inside the test-time search of huggingface/search-and-learn (commit
6f81cac8b1ca4c4be9fabefc27a856c928f3ae7f):

- step scores: one real number per judged step (step_scores): VERDICT's ordering as `key`, the
  consensus `mean` and `margin`, and the baselines of the paper's table on the raw scores ŝ
  (RULE_SCORE maps each rule of verdict.select to its step score); a chain's score: `last`, `min`
  or `prod` of them (prefix_scores);
- best-of-N: N whole chains (sample_chains, each a verdict.run with one candidate a step), the
  answer picked by the best chain, weighted best-of-N or majority vote (best_of_n, pick);
- beam search: W beams, E expansions each, the best W kept, the dual test as an optional filter
  (beam_search);
- Memo: a judge that answers each (state, step) once, so that a sweep costs only its distinct calls;
- StepScorer: search-and-learn's PRM.score call shape, each step scored by VERDICT.
Pure functions over callables: propose(state, n) and judge(state, step) exactly as verdict.step
takes them; answers are compared as strings or by a canon(answer) the caller gives (the harness: the
option read). A search's record (Search, Chain, Scored) is frozen, and to_dict() is JSON-ready
("format": SEARCH_FORMAT), with the chain shown, its answer, how it stopped and the totals as a
verdict trace has them. The harness runs these as methods (harness/rows.py names them,
harness/chains.py runs them; docs/search.md).
"""

from __future__ import annotations

import math
import numbers
import re
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Iterable, Sequence

import numpy as np

import verdict
from judges import EndpointError
from verdict import EPS, STUBBORNNESS, TAU, Config, State, Stop
from verdict_lab import loop
from verdict_lab.text import one_line

SEARCH_FORMAT = "verdict-search/1"
AGGREGATES = ("last", "min", "prod")  # search-and-learn's agg_strategy (src/sal/utils/score.py)
STEP_SCORES = (
    "key",
    "mean",
    "margin",
    "raw-mean",
    "raw-min",
    "raw-max",
    "raw-majority",
    "raw-variance",
)
STEP_SCORES += ("raw-dual", "no-rank")
# The step scores in [0, 1], the only ones whose product (aggregate "prod") orders chains.
UNIT_SCORES = ("mean", "raw-mean", "raw-min", "raw-max", "raw-majority", "no-rank")
ANSWERS = ("best", "weighted", "majority")
# verdict.select's rule -> the step score whose argmax is that rule's choice (see step_scores)
RULE_SCORE = {"verdict": "key", "no-filter": "mean", "no-rank": "no-rank", "raw-dual": "raw-dual"}
RULE_SCORE |= {rule: f"raw-{rule}" for rule in ("mean", "min", "max", "majority", "variance")}
STEP_SEPARATOR = "\n\n"  # search-and-learn's step boundary (its samplers stop at it)
NAN = float("nan")


# ----------------------------------------------------------------------------- scores


def step_scores(
    s_hat, name: str = "key", lam=STUBBORNNESS, tau: float = TAU, eps: float = EPS
) -> np.ndarray:
    """One real number per step from its judges' raw scores ŝ, higher is better.  [n, m] -> [n]

    key          : 1 + s̄* if accepted (s̄* > τ and Δ* < ε), else s̄* − Δ*. As
                   s̄* − Δ* ≤ 1 < 1 + s̄* when s̄* > τ ≥ 0, accepted steps rank above rejected
                   ones: the paper's ordering, one number.
    mean         : s̄*, the consensus mean (the ablation no-filter).
    margin       : s̄* − Δ*, the fallback ranking alone (≥ −1/8: it can be negative).
    raw-mean     : ŝ̄, the raw mean.            raw-min, raw-max: the lowest, the highest ŝ.
    raw-majority : (k + ŝ̄)/(m + 1), k = the judges with ŝ > τ: by k, ties by ŝ̄ (select's
                   majority).
    raw-variance : 1 + ŝ̄ if the raw standard deviation is below ε, else ŝ̄ (select's variance).
    raw-dual     : key on the raw scores: 1 + ŝ̄ if ŝ̄ > τ and Δ̂ < ε, else ŝ̄ − Δ̂.
    no-rank      : 1 if accepted (VERDICT's filter), else 0; ties to the lowest index: the first
                   accepted.
    Abstentions as in verdict.select (NaN leaves its judge out); a step with fewer than 2 answers is
    unjudged and scores NaN, which ranks after every number. Thresholds compare values rounded to
    verdict.DECIMALS. With at least one judged step among them, the argmax (ties to the lowest
    index) of RULE_SCORE[rule] is select(rule)'s choice; with none, select still ranks by the lone
    scores, and NaN ties (index 0).
    """
    _known("step_score", name, STEP_SCORES)
    # select checks ŝ and λ before anything converts them (None, "0.9", True or a complex number is
    # refused, as select refuses it); under rule "verdict" it gives s̄*, Δ* and accepted, each [n].
    sel = verdict.select(s_hat, lam, tau, eps)
    s_hat = np.asarray(s_hat, dtype=float)
    s_bar, delta = sel.s_bar_star, sel.delta_star  # [n] each
    q = lambda x: np.round(x, verdict.DECIMALS)
    verified = (~np.isnan(s_hat)).sum(-1) >= 2  # [n, m] -> [n]
    raw, raw_delta = verdict.mean(s_hat), verdict.dispersion(s_hat)  # [n] each: ŝ̄, Δ̂
    score = {
        "key": lambda: np.where(sel.accepted, 1 + s_bar, s_bar - delta),
        "mean": lambda: s_bar,
        "margin": lambda: s_bar - delta,
        "raw-mean": lambda: raw,
        "raw-min": lambda: np.fmin.reduce(s_hat, axis=-1),  # [n, m] -> [n], NaN skipped
        "raw-max": lambda: np.fmax.reduce(s_hat, axis=-1),
        "raw-majority": lambda: ((q(s_hat) > tau).sum(-1) + raw) / (s_hat.shape[-1] + 1),
        "raw-variance": lambda: (
            raw + (q(np.sqrt(verdict.mean((s_hat - raw[..., None]) ** 2))) < eps)
        ),
        "raw-dual": lambda: np.where(
            (q(raw) > tau) & (q(raw_delta) < eps), 1 + raw, raw - raw_delta
        ),
        "no-rank": lambda: sel.accepted.astype(float),
    }[name]()
    return np.where(verified, score, NAN)  # [n]


def prefix_scores(x, how: str = "last") -> np.ndarray:
    """The score of the chain cut after each step, from its step scores x; the chain's score is the
    last. last: x_t; min: min_{u≤t} x_u; prod: Π_{u≤t} x_u (search-and-learn's aggregate_scores).
    NaN (an unjudged step) propagates: under min and prod the chain is unjudged from that step on,
    under last only at it. [T] -> [T]"""
    _known("aggregate", how, AGGREGATES)
    x = np.asarray(x, dtype=float)
    # Each aggregate maps [T] -> [T].
    return {"last": lambda y: y, "min": np.minimum.accumulate, "prod": np.cumprod}[how](x)


def _order(x) -> np.ndarray:
    """Indices best first: NaN last, rounded to verdict.DECIMALS, ties to the lowest index.
    [k] -> [k]"""
    x = np.round(np.nan_to_num(np.asarray(x, dtype=float), nan=-np.inf), verdict.DECIMALS)
    return np.argsort(-x, kind="stable")


def check(step_score: str = "key", aggregate: str = "last", answer: str = "best", **counts) -> None:
    """The settings of a search checked before any call (the harness checks its method names with
    it). ValueError naming the setting: a count that is no integer >= 1 (a bool is none), an unknown
    name, prod over a score outside [0, 1] (margin, key, raw-variance and raw-dual reach below 0 or
    above 1: their products do not order chains, e.g. key's 1.7^T grows with the chain's length, and
    (−a)(−b) > 0)."""
    for name, v in counts.items():
        if not (isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1):
            raise ValueError(f"{name} must be an integer >= 1, got {name}={v!r}")
    _known("step_score", step_score, STEP_SCORES)
    _known("aggregate", aggregate, AGGREGATES)
    _known("answer rule", answer, ANSWERS)
    if aggregate == "prod" and step_score not in UNIT_SCORES:
        raise ValueError(
            f"aggregate 'prod' needs a step score in [0, 1] ({', '.join(UNIT_SCORES)}), got "
            f"{step_score!r}"
        )


def _known(kind: str, value, known: tuple) -> None:
    """ValueError naming `value` and the choices unless it is one of `known`."""
    if value not in known:
        raise ValueError(f"unknown {kind} {value!r}; expected one of {', '.join(known)}")


# ----------------------------------------------------------------------------- records


def _json(v: Any) -> Any:
    """v JSON-ready: NaN -> None, an array -> a list (NaN -> None), anything else as it is."""
    if isinstance(v, np.ndarray):
        return [_json(x) for x in v.tolist()]
    return None if isinstance(v, float) and v != v else v


@dataclass(frozen=True)
class Scored:
    """One candidate step, scored: its ŝ and consensus, its step score, and the chain score of the
    path that ends with it. `beam`: the live beam it extends (0 in a best-of-N chain); `kept`: among
    the best W."""

    candidate: str
    s_hat: np.ndarray  # [m] raw scores, NaN = abstained
    s_star: np.ndarray  # [m] consensus scores
    s_bar_star: float  # s̄*
    delta_star: float  # Δ*
    accepted: bool  # the dual test, s̄* > τ and Δ* < ε, with 2 or more answers
    step_score: float  # NaN: unjudged
    chain_score: float  # prefix_scores of the path's step scores, at this step
    final: bool  # the step matches config.final
    beam: int = 0
    kept: bool = True
    calls: tuple = ()  # [m] each judge call's record (judges.Judgement.record), or None

    def to_dict(self) -> dict:
        d = {f.name: _json(getattr(self, f.name)) for f in fields(self) if f.name != "calls"}
        return {
            **d,
            **({"calls": list(self.calls)} if any(c is not None for c in self.calls) else {}),
        }


@dataclass(frozen=True)
class Chain:
    """A whole chain (best-of-N) or a beam: its steps, why it ended ("final", "max_steps" or a
    Stop's message), its answer (the text after the final-answer marker, as verdict.Trace.answer;
    None unless it ended there) and its score (its last step's chain_score; NaN with no step)."""

    steps: tuple  # [T] Scored
    stopped: str
    answer: str | None
    score: float

    def to_dict(self) -> dict:
        return {
            "chain": [x.candidate for x in self.steps],
            "stopped": self.stopped,
            "answer": self.answer,
            "score": _json(self.score),
            "steps": [x.to_dict() for x in self.steps],
        }


@dataclass(frozen=True)
class Search:
    """A search's record: its settings, its chains (beam search: finished beams first, in the order
    they finished, then those live at the end), every depth's expansions (beam search only), the
    chain whose answer is picked (None when no chain reached a final answer) and its counts."""

    method: str  # "best-of-n" or "beam"
    question: str
    settings: dict
    chains: tuple  # [N] Chain
    picked: int | None
    # Its keys: reasoner_calls, judge_calls (each asked, whether or not a Memo answered) and
    # abstentions.
    counts: dict
    depths: tuple = ()  # [D][k] Scored

    @property
    def answer(self) -> str | None:
        return None if self.picked is None else self.chains[self.picked].answer

    @property
    def shown(self) -> int:
        """The chain a reader is shown as the search's output: the picked one; when no chain reached
        a final answer, the first chain with a step (as a chain stopped by a budget shows its last
        step), else 0."""
        if self.picked is not None:
            return self.picked
        return next((i for i, c in enumerate(self.chains) if c.steps), 0)

    @property
    def chain(self) -> list:
        """The shown chain's steps (verdict.Trace.chain's counterpart); [] when it has none."""
        return [x.candidate for x in self.chains[self.shown].steps] if self.chains else []

    @property
    def stopped(self) -> str:
        """Why the shown chain ended: "final", "max_steps" or a Stop's message."""
        return self.chains[self.shown].stopped if self.chains else "max_steps"

    def totals(self) -> dict:
        """Counts over the search (verdict.Trace.totals' counterpart): steps, the reasoner's
        proposals (a best-of-N chain's steps, a beam's expansions at each depth); judge_calls and
        abstentions; chains, those that reached a final answer (finished) and, with beam search, the
        candidates scored."""
        return {
            "steps": self.counts["reasoner_calls"],
            "judge_calls": self.counts["judge_calls"],
            "abstentions": self.counts["abstentions"],
            "chains": len(self.chains),
            "finished": sum(c.answer is not None for c in self.chains),
            **({"expansions": sum(map(len, self.depths))} if self.method == "beam" else {}),
        }

    def to_dict(self) -> dict:
        """A JSON-serialisable dict; NaN becomes null; "chosen" marks the picked chain; "chain",
        "answer", "stopped" and "totals" as in verdict.Trace.to_dict, of the shown chain."""
        return {
            "format": SEARCH_FORMAT,
            "method": self.method,
            "question": self.question,
            "settings": dict(self.settings),
            "chains": [
                {**c.to_dict(), "chosen": i == self.picked} for i, c in enumerate(self.chains)
            ],
            "depths": [[x.to_dict() for x in xs] for xs in self.depths],
            "picked": self.picked,
            "chain": self.chain,
            "answer": self.answer,
            "stopped": self.stopped,
            "counts": dict(self.counts),
            "totals": self.totals(),
        }


def _settings(config: Config, **kw) -> dict:
    keep = {
        "lam": list(config.lam),
        "tau": config.tau,
        "eps": config.eps,
        "max_steps": config.max_steps,
    }
    return {**kw, **keep, "final": config.final}


def _answer(step: str, final: str) -> str | None:
    found = re.search(final, step)
    return None if found is None else step[found.end() :].strip()


def _expansions(
    record, path: list, step_score: str, aggregate: str, cfg: Config, beam: int = 0
) -> list:
    """A verdict.StepRecord's candidates as Scored steps after `path` (the Scored steps before
    them)."""
    s_hat, k = record.s_hat, len(record.candidates)  # [k, m]
    if s_hat.shape[1]:
        # The shapes: [k, m] -> s* [k, m], and s̄*, Δ*, accepted [k].
        sel = verdict.select(s_hat, cfg.lam, cfg.tau, cfg.eps)
        x = step_scores(s_hat, step_score, cfg.lam, cfg.tau, cfg.eps)  # [k]
        s_star, s_bar, delta, accepted = sel.s_star, sel.s_bar_star, sel.delta_star, sel.accepted
    else:  # no judges (majority vote needs none): nothing is scored
        s_star, accepted, s_bar = s_hat, np.zeros(k, bool), np.full(k, NAN)
        delta, x = s_bar, s_bar
    before = [p.step_score for p in path]
    chain = [float(prefix_scores(before + [v], aggregate)[-1]) for v in x]  # [k]
    calls = record.calls or ((),) * k
    row = zip(
        record.candidates,
        s_hat,
        s_star,
        s_bar.tolist(),
        delta.tolist(),
        accepted.tolist(),
        x.tolist(),
    )
    return [
        Scored(*r, chain[i], bool(re.search(cfg.final, r[0])), beam, calls=calls[i])
        for i, r in enumerate(row)
    ]


def _counts(records: Iterable) -> dict:
    records = list(records)
    return {
        "reasoner_calls": len(records),
        "judge_calls": sum(r.s_hat.size for r in records),
        "abstentions": sum(int(np.isnan(r.s_hat).sum()) for r in records),
    }


# ----------------------------------------------------------------------------- answers


def pick(
    chains: Sequence[Chain], answer: str = "best", canon: Callable[[str], Any] | None = None
) -> int | None:
    """The chain whose answer is picked, among the chains that ended at a final answer (None if
    none did).

    best     : the highest chain score (search-and-learn's naive pred).
    weighted : the answer whose chains' scores sum highest (pred_weighted@n; NaN scores are left out
               of the sum, an answer with no scored chain ranks last); the earliest chain of that
               answer.
    majority : the most common answer (pred_maj@n), no judge needed; the earliest chain of that
               answer.
    Answers are compared as strings, or by canon(answer) when given (search-and-learn compares
    canonical forms; the harness, the option or value each answer is read as). NaN ranks last; ties
    go to the lowest index, for answers to the one that first appears."""
    if answer not in ANSWERS:
        raise ValueError(f"unknown answer rule {answer!r}; expected one of {', '.join(ANSWERS)}")
    done = [i for i, c in enumerate(chains) if c.answer is not None]
    if not done:
        return None
    if answer == "best":
        return done[_order([chains[i].score for i in done])[0]]
    groups: dict = {}  # answer -> its chains, in order of first appearance
    for i in done:
        groups.setdefault(
            chains[i].answer if canon is None else canon(chains[i].answer), []
        ).append(i)
    if answer == "majority":
        value = [len(g) for g in groups.values()]
    else:
        scored = [
            [chains[i].score for i in g if chains[i].score == chains[i].score]
            for g in groups.values()
        ]
        value = [math.fsum(s) if s else NAN for s in scored]
    return list(groups.values())[_order(value)[0]][0]


# ----------------------------------------------------------------------------- best-of-N


def _first(propose: Callable) -> Callable:
    """propose's first candidate only: a best-of-N chain takes the one step it samples."""

    def one(state: State, n: int):
        steps = propose(state, n)
        # Anything but a list or tuple goes on as it is, for verdict.step to check.
        return list(steps)[:1] if isinstance(steps, (list, tuple)) else steps

    return one


def sample_chains(
    question: str,
    chains: Callable[[int], Callable[[State, int], Sequence[str]]],
    judges: Sequence[Callable],
    n: int,
    config: Config = Config(),
    image: Any = None,
    map_fn: Callable[..., Iterable] = map,
) -> tuple:
    """N whole chains: chain i = verdict.run(question, chains(i), judges, config with n = 1, image,
    map_fn). -> [N] verdict.Trace

    Each step asks chain i's proposer propose(state, 1) for one step (its first candidate if it
    returns more) and every judge scores it (m calls through map_fn), until the step matches
    config.final or after config.max_steps steps; a Stop ends that chain only (as in verdict.run).
    config.n and config.rule are not used. chains(i) gives chain i its own proposer and depends on i
    alone, so chains 0..N−1 are the same for every N ≥ them, and a sweep over N samples once at the
    largest N and passes prefixes traces[:N] to best_of_n. Seed scheme: chains(i) seeds chain i with
    seed + i (vLLM's n = N gives child i seed + i, DESIGN §5) and keeps it for every step; the
    prompt changes from step to step, so the steps differ. judges=() samples unjudged chains (for
    answer="majority")."""
    if not callable(chains):
        raise ValueError(f"chains must be a callable i -> propose, got {chains!r}")
    check(n=n)
    if judges and len(judges) != len(config.lam):  # one stubbornness per judge, before any call
        raise ValueError(
            f"got {len(judges)} judges but {len(config.lam)} stubbornness values in config.lam"
        )
    one = replace(config, n=1, rule="verdict")
    return tuple(
        loop.run(question, _first(chains(i)), judges, one, image, map_fn) for i in range(n)
    )


def best_of_n(
    traces: Sequence,
    step_score: str = "key",
    aggregate: str = "last",
    answer: str = "best",
    canon: Callable[[str], Any] | None = None,
):
    """Best-of-N over sampled chains (sample_chains), a pure function: no call is made, so any N ≤
    the sample, every step score, aggregate and answer rule reuse one sample. Each step's ŝ gives
    its consensus and step score with its trace's config (λ, τ, ε); a chain's score is
    prefix_scores(...)[-1]; pick (with canon) chooses among the chains that ended at a final answer.
    Counts: the calls the traces record (a step cut short by a Stop is not recorded, as in
    verdict.run)."""
    check(step_score, aggregate, answer, n=len(traces))
    if answer != "majority" and any(r.s_hat.shape[1] == 0 for t in traces for r in t.steps):
        raise ValueError(f"answer={answer!r} needs judges, and these chains were not judged (m=0)")
    chains = []
    for t in traces:
        path: list = []
        for r in t.steps:
            path += _expansions(r, path, step_score, aggregate, t.config)
        chains.append(
            Chain(tuple(path), t.stopped, t.answer, path[-1].chain_score if path else NAN)
        )
    cfg = traces[0].config
    settings = _settings(
        cfg, n=len(traces), step_score=step_score, aggregate=aggregate, answer=answer
    )
    counts = _counts(r for t in traces for r in t.steps)
    picked = pick(chains, answer, canon)
    return Search("best-of-n", traces[0].question, settings, tuple(chains), picked, counts)


# ----------------------------------------------------------------------------- beam search


def _keep(xs: list, width: int, dual_filter: bool) -> set:
    """The indices of the best `width` expansions by chain score. With the filter, when one or more
    passed the dual test only those are eligible (so fewer than W may be kept); when none did, all
    are (the fallback ranking, as in VERDICT)."""
    eligible = [k for k, x in enumerate(xs) if x.accepted] if dual_filter else []
    eligible = eligible or list(range(len(xs)))
    return {eligible[i] for i in _order([xs[k].chain_score for k in eligible])[:width]}


def _grow_beams(
    root: State,
    propose: Callable[[State, int], Sequence[str]],
    judges: Sequence[Callable],
    width: int,
    cfg: Config,
    map_fn: Callable[..., Iterable],
    step_score: str,
    aggregate: str,
    dual_filter: bool,
) -> tuple:
    """beam_search's depths, grown from `root` with E = cfg.n candidates a live beam.
    -> (finished Chains, live (state, path) beams, [D] Scored, step records, a Stop's message)"""
    live = [(root, [])]
    depths = []
    done = []
    records = []
    stopped = None
    for depth in range(cfg.max_steps):
        try:
            at = replace(cfg, n=width * cfg.n) if depth == 0 else cfg
            new = [loop.step(state, propose, judges, at, map_fn) for state, _ in live]
        except Stop as e:
            stopped = str(e)
            break
        records += new
        xs = [
            x
            for b, r in enumerate(new)
            for x in _expansions(r, live[b][1], step_score, aggregate, cfg, b)
        ]
        kept = _keep(xs, width, dual_filter)
        xs = [replace(x, kept=k in kept) for k, x in enumerate(xs)]
        depths.append(tuple(xs))
        nxt = []
        for x in filter(lambda x: x.kept, xs):
            state, path = live[x.beam]
            if x.final:
                answer = _answer(x.candidate, cfg.final)
                done.append(Chain(tuple(path + [x]), "final", answer, x.chain_score))
            else:
                nxt.append((state.extend(x.candidate), path + [x]))
        live = nxt
        if not live:
            break
    return done, live, depths, records, stopped


def beam_search(
    question: str,
    propose: Callable[[State, int], Sequence[str]],
    judges: Sequence[Callable],
    width: int,
    expand: int,
    config: Config = Config(),
    image: Any = None,
    map_fn: Callable[..., Iterable] = map,
    step_score: str = "key",
    aggregate: str = "last",
    answer: str = "best",
    dual_filter: bool = True,
    canon: Callable[[str], Any] | None = None,
) -> Search:
    """Beam search with W = width beams, each expanded by E = expand candidates a step.

    Depth 0 expands the root by W·E candidates (search-and-learn samples n = W·E at its first step),
    every later depth each live beam by E: one verdict.step(state, propose, judges, n) per beam, E·m
    judge calls through map_fn (propose may return another number of candidates, as verdict.step
    allows). Of the depth's expansions the best W by chain score are kept (_keep: with dual_filter,
    only accepted ones when one or more is accepted). A kept expansion that matches config.final is
    a finished beam (kept to the end, never pruned); the other kept ones are the live beams of the
    next depth. The search ends when no beam is live, after config.max_steps depths, or at a Stop
    (the depth cut short is dropped). The answer: pick (with canon) over the finished beams.
    search-and-learn keeps n // beam_width of n each step (beam_search.py): W = n // beam_width and
    E = beam_width there, with no filter. config.n and config.rule are not used."""
    check(step_score, aggregate, answer, width=width, expand=expand)
    if len(judges) != len(config.lam):  # beam search ranks by the judges: m = len(config.lam) >= 2
        raise ValueError(
            f"beam search needs {len(config.lam)} judges (one per lam), got {len(judges)}"
        )
    cfg = replace(config, n=expand, rule="verdict")
    root = State(question, verdict.as_images(image))
    done, live, depths, records, stopped = _grow_beams(
        root, propose, judges, width, cfg, map_fn, step_score, aggregate, dual_filter
    )
    rest = [
        Chain(tuple(p), stopped or "max_steps", None, p[-1].chain_score if p else NAN)
        for _, p in live
    ]
    chains, settings = tuple(done + rest), dict(width=width, expand=expand, dual_filter=dual_filter)
    settings = _settings(
        config, **settings, step_score=step_score, aggregate=aggregate, answer=answer
    )
    picked = pick(chains, answer, canon)
    return Search("beam", question, settings, chains, picked, _counts(records), tuple(depths))


# ----------------------------------------------------------------------------- memo and step scorer


class Memo:
    """A judge that answers each (state, step, note) once, then from its cache, so that a sweep
    (best-of-N at several N, beam search at several widths, search-and-learn re-scoring every
    prefix) makes only its distinct calls, and a chain's identical candidates cost each judge one
    call. It returns what the judge returned, so a judges.Judgement keeps its record. Key: the
    question, the images (by identity when unhashable, e.g. PIL images or arrays: the cache keeps
    the state, so the identities stay valid), the steps so far, the step and the note. On threads, a
    call asking for a key that is being asked waits for that answer, or its error (an error is not
    kept: the next call asks again). `calls`: the calls answered (the cache's size)."""

    def __init__(self, judge: Callable):
        self.judge, self.name, self.cache = judge, getattr(judge, "name", None), {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Memo({self.judge!r})"

    @property
    def calls(self) -> int:
        return len(self.cache)

    def __call__(self, state: State, step: str, *note) -> float:
        key = (state, step, note)
        try:
            hash(key)
        except TypeError:  # unhashable images
            key = (state.question, tuple(map(id, state.images)), state.steps, step, note)
        with self._lock:
            first = key not in self.cache
            if first:
                self.cache[key] = (state, Future())
            answer = self.cache[key][1]
        if first:
            try:
                answer.set_result(self.judge(state, step, *note))
            except BaseException as e:  # the calls waiting get it too
                with self._lock:
                    del self.cache[key]
                answer.set_exception(e)
        return answer.result()


def memoise(judges: Sequence[Callable]) -> tuple:
    """Each judge wrapped in its own Memo, in order (verdict checks what they return, as before)."""
    return tuple(Memo(j) for j in judges)


def split_steps(output: str, sep: str = STEP_SEPARATOR) -> list:
    """An output's steps as search-and-learn cuts them: output.split("\\n\\n") (RLHFlow's PRM),
    except that a trailing empty piece (the stop string "\\n\\n" its samplers keep,
    include_stop_str_in_output) is no step, as Math-Shepherd's PRM counts its step tags; so an
    output always has at least one step."""
    pieces = output.split(sep)
    return pieces[:-1] if len(pieces) > 1 and pieces[-1] == "" else pieces


# A judge that raises one of these has failed after its retries (judges.EndpointError, a connection
# or file error, a budget's Stop): StepScorer makes its step unjudged and goes on.
JUDGE_FAILURES = (EndpointError, OSError, Stop)


def _listed(v, what: str) -> list:
    """v as a list when it is a list or a tuple; ValueError otherwise. A string would be read one
    character at a time, and a generator consumed, so neither is taken."""
    if not isinstance(v, (list, tuple)):
        raise ValueError(f"{what}, got {type(v).__name__}: {v!r:.80}")
    return list(v)


class StepScorer:
    """search-and-learn's PRM, scored by VERDICT. At commit 6f81cac, src/sal/models/reward_models.py
    declares PRM.score(self, questions: list[str], outputs: list[list[str]]) -> list[list[float]],
    but every PRM there returns one level more, and its callers read it so: scores[i][j][t],
    question i, output j, step t (search/best_of_n.py aggregates each scores[i][j];
    search/beam_search.py asks with [[text]] per beam and keeps score[0]). The same here, as Python
    floats; images=None is this class's addition.

    Step t of output j of question i is split_steps(output)[t], judged by the m judges given
    State(question, images[i], steps[:t]); its score is step_scores(ŝ, step_score) with config's λ,
    τ, ε. `aggregate` is the caller's agg_strategy (last, min or prod), taken so that prod over a
    score outside [0, 1] is refused here (check), before any call. An unjudged step (fewer than 2
    answers, or a judge that failed after its retries) scores `unjudged` and never NaN:
    search-and-learn's np.argmax would take a NaN as the best. It must be a finite real number:
    −1 by default, below every step score; in [0, 1] under prod (0 zeroes the output's product).

    Each step's m calls are one verdict.step (which checks every judge's answer). The steps run on
    at most `concurrency` threads (8), or through map_fn when one is given (map: one at a time). A
    judge raising one of JUDGE_FAILURES makes its step unjudged: the step is counted in
    counts["failed"], the first failure is said once on stderr, and the search goes on. `counts`:
    the steps scored, those unjudged, those failed. Wrap the judges in memoise(...) to judge each
    (state, step) once: search-and-learn's beam search re-scores every prefix at every iteration
    (a Memo keeps no failure, so a failed step is asked again next time)."""

    def __init__(
        self,
        judges,
        config: Config = Config(),
        step_score="key",
        unjudged=-1.0,
        map_fn=None,
        aggregate="last",
        concurrency=8,
    ):
        check(step_score, aggregate, concurrency=concurrency)
        if len(judges) != len(config.lam):
            raise ValueError(
                f"StepScorer needs {len(config.lam)} judges (one per lam), got {len(judges)}"
            )
        # NaN, inf, None, a string or a bool would come back as a score.
        finite = verdict._is_real(unjudged) and math.isfinite(unjudged)
        if not finite or (aggregate == "prod" and not 0 <= unjudged <= 1):
            where = " in [0, 1] under aggregate 'prod' (0 zeroes a product)" * (aggregate == "prod")
            raise ValueError(f"unjudged must be a finite real number{where}, got {unjudged!r}")
        self.judges, self.step_score, self.aggregate = tuple(judges), step_score, aggregate
        self.unjudged, self.map_fn, self.concurrency = float(unjudged), map_fn, concurrency
        self.config = replace(config, n=1, rule="verdict")
        self.counts = {"steps": 0, "unjudged": 0, "failed": 0}
        self._lock, self._said = threading.Lock(), False

    def _s_hat(self, item: tuple) -> np.ndarray:
        """One step's m judge calls -> ŝ [m]; all NaN when a judge failed after its retries."""
        state, step = item
        try:
            return verdict.step(state, lambda s, n: [step], self.judges, self.config, map).s_hat[0]
        except JUDGE_FAILURES as e:
            with self._lock:
                self.counts["failed"] += 1
                first, self._said = not self._said, True
            if first:
                print(
                    f"StepScorer: a judge failed ({one_line(str(e)) or type(e).__name__}); "
                    "its step scores unjudged, and each later failure is counted in .counts",
                    file=sys.stderr,
                )
            return np.full(len(self.judges), NAN)

    def _map(self, items: list) -> list:
        """_s_hat over items, in input order: through map_fn, else on `concurrency` threads."""
        from verdict_lab.verifier import thread_map  # verifier imports much that search does not

        return list((self.map_fn or thread_map(self.concurrency))(self._s_hat, items))

    def score(self, questions, outputs, images=None) -> list:
        """[question][output] str -> [question][output][step] float; images: None, or one per
        question. ValueError for anything but a list (or tuple) of question strings, of lists of
        output strings, of images."""
        questions = _listed(questions, "questions must be a list of strings")
        outputs = [
            _listed(o, "each question's outputs must be a list of strings")
            for o in _listed(outputs, "outputs must be a list of lists of strings")
        ]
        images = (
            [None] * len(questions) if images is None else _listed(images, "images must be a list")
        )
        if not (len(outputs) == len(questions) == len(images)):
            raise ValueError(
                f"got {len(questions)} questions, {len(outputs)} outputs, {len(images)} images"
            )
        for v in questions + [o for outs in outputs for o in outs]:
            if not isinstance(v, str):
                raise ValueError(f"questions and outputs must be strings, got {v!r:.80}")
        items = [
            (State(q, verdict.as_images(im), tuple(steps[:t])), steps[t])
            for q, outs, im in zip(questions, outputs, images)
            for steps in map(split_steps, outs)
            for t in range(len(steps))
        ]
        m, cfg = len(self.judges), self.config
        s_hat = np.array(self._map(items)).reshape(len(items), m)  # [K, m]
        # One step score per item, [K].
        x = step_scores(s_hat, self.step_score, cfg.lam, cfg.tau, cfg.eps) if items else np.zeros(0)
        with self._lock:
            self.counts["steps"] += len(items)
            self.counts["unjudged"] += int(np.isnan(x).sum())
        it = iter(np.where(np.isnan(x), self.unjudged, x).tolist())
        return [[[next(it) for _ in split_steps(out)] for out in outs] for outs in outputs]


def sal_prm(judges, search_config, config: Config = Config(), **kw) -> StepScorer:
    """A StepScorer set from search-and-learn's own Config (`search_config`): its agg_strategy is
    the aggregate (so prod over a score outside [0, 1] is refused now, not ranked wrongly later),
    its prm_batch_size the threads; under prod an unjudged step scores 0. `judges`, VERDICT's
    `config` and the other keywords (step_score, unjudged, map_fn) go to StepScorer."""
    kw.setdefault("aggregate", search_config.agg_strategy)
    kw.setdefault("concurrency", search_config.prm_batch_size)
    if kw["aggregate"] == "prod":  # an unjudged step then zeroes its output's product
        kw.setdefault("unjudged", 0.0)
    return StepScorer(judges, config, **kw)


def register_sal(make_judges: Callable[[], Sequence[Callable]], prm_path="verdict", **kw):
    """Make search-and-learn's load_prm(config) return sal_prm(make_judges(), config, **kw) when
    config.prm_path == prm_path, and call the load_prm it had otherwise; returns that one. Call it
    from your own script before scripts/test_time_compute.py runs (runpy.run_path), which imports
    load_prm when it starts: then `--prm_path verdict` scores with VERDICT, with no edit to
    search-and-learn (docs/search.md)."""
    import sal.models.reward_models as rm  # search-and-learn itself, only when asked

    if not callable(make_judges):
        raise ValueError(f"make_judges must be a callable () -> judges, got {make_judges!r}")
    before = rm.load_prm

    def load_prm(search_config):
        if search_config.prm_path != prm_path:
            return before(search_config)
        return sal_prm(make_judges(), search_config, **kw)

    rm.load_prm = load_prm
    return before
