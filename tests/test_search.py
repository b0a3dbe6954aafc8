"""Tests for search.py: golden values with their derivations (best-of-N with each aggregate and step
score, weighted and majority answers, beam search with and without the dual filter, abstentions, the
trace), prefix reuse and the memo's call counts in a sweep, the search-and-learn call shape through
a stand-in of its own code, bad settings, and seeded property loops against verdict.select and
verdict.run."""

import json
import math
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import pytest

from verdict_lab import search as S
import verdict as V
from judges import Judgement
from verdict import Config, State, Stop

pytestmark = pytest.mark.filterwarnings("error")

NAN = float("nan")
SEEDS = range(8)
# Two equally stubborn judges make every consensus a hand calculation. The system 2 s_1 − s_2 = ŝ_1,
# 2 s_2 − s_1 = ŝ_2 gives s* = ((2ŝ_1 + ŝ_2)/3, (ŝ_1 + 2ŝ_2)/3), so s̄* = (ŝ_1 + ŝ_2)/2 and
# Δ* = |s*_1 − s̄*| = |ŝ_1 − ŝ_2|/6. A unanimous step (c, c) has s̄* = c, Δ* = 0: accepted iff
# c > τ = 0.6, key = 1 + c if so, else c.
TWO = Config(lam=(1.0, 1.0))


def test_two_equal_judges_are_a_hand_calculation():
    sel = V.select([[1.0, 0.3], [0.7, 0.52]], TWO.lam)
    np.testing.assert_allclose(sel.s_star, [[2.3 / 3, 1.6 / 3], [1.92 / 3, 1.74 / 3]], atol=1e-12)
    np.testing.assert_allclose(sel.s_bar_star, [0.65, 0.61], atol=1e-12)
    np.testing.assert_allclose(sel.delta_star, [0.7 / 6, 0.18 / 6], atol=1e-12)


def table_judges(table, m=2, log=None):
    """m judges; judge i scores a step table[step][i] (a number: every judge gives it). log gets
    each call."""

    def judge(i):
        def score(state, step):
            if log is not None:
                log.append((i, state.steps, step))
            v = table[step]
            return v if isinstance(v, (int, float)) else v[i]

        return score

    return [judge(i) for i in range(m)]


def scripted_chains(scripts, log=None):
    """chains(i): chain i proposes scripts[i][t] at step t. log gets (i, steps so far, n) for each
    call."""

    def chains(i):
        def propose(state, n):
            if log is not None:
                log.append((i, state.steps, n))
            return [scripts[i][len(state.steps)]]

        return propose

    return chains


def boom(*args):
    raise AssertionError("called")


# ----------------------------------------------------------------------------- step scores


# One step each: M = (1.0, 0.3), R = (0.6, 0.6), A = (0.7, 0.52), with TWO:
#   M: s̄* = 0.65, Δ* = 0.7/6 = 0.116667 ≥ ε: rejected. margin = key = 0.533333.
#   R: s̄* = 0.6 (not > τ, strict), Δ* = 0: rejected. margin = key = 0.6.
#   A: s̄* = 0.61 > τ, Δ* = 0.18/6 = 0.03 < ε: accepted. margin = 0.58, key = 1.61.
# Raw: ŝ̄ = (0.65, 0.6, 0.61); min (0.3, 0.6, 0.52); max (1.0, 0.6, 0.7); judges above τ: (1, 0, 1),
# so raw-majority = (k + ŝ̄)/3 = (0.55, 0.2, 0.536667); raw std (0.35, 0, 0.09):
# raw-variance = (0.65, 1.6, 1.61); Δ̂ = |ŝ_1 − ŝ_2|/2 = (0.35, 0, 0.09): raw-dual accepts A alone:
# (0.65 − 0.35, 0.6 − 0, 1 + 0.61).
MRA = np.array([[1.0, 0.3], [0.6, 0.6], [0.7, 0.52]])
MRA_SCORES = {
    "key": ([0.65 - 0.7 / 6, 0.6, 1.61], "A"),
    "mean": ([0.65, 0.6, 0.61], "M"),
    "margin": ([0.65 - 0.7 / 6, 0.6, 0.58], "R"),
    "raw-mean": ([0.65, 0.6, 0.61], "M"),
    "raw-min": ([0.3, 0.6, 0.52], "R"),
    "raw-max": ([1.0, 0.6, 0.7], "M"),
    "raw-majority": ([1.65 / 3, 0.6 / 3, 1.61 / 3], "M"),
    "raw-variance": ([0.65, 1.6, 1.61], "A"),
    "raw-dual": ([0.3, 0.6, 1.61], "A"),
    "no-rank": ([0.0, 0.0, 1.0], "A"),
}


@pytest.mark.parametrize("name", S.STEP_SCORES)
def test_step_scores_golden(name):
    want, best = MRA_SCORES[name]
    np.testing.assert_allclose(S.step_scores(MRA, name, TWO.lam), want, rtol=0, atol=1e-12)
    assert "MRA"[int(np.argmax(want))] == best


def test_every_rule_has_its_step_score_and_each_picks_as_select_does():
    assert sorted(S.RULE_SCORE) == sorted(V.RULES) and set(S.RULE_SCORE.values()) <= set(
        S.STEP_SCORES
    )
    for rule, name in S.RULE_SCORE.items():
        assert "MRA"[V.select(MRA, TWO.lam, rule=rule).index] == MRA_SCORES[name][1]


def final_chains(table):
    """One chain a step: chain i says "Final answer: <its name>"; judges read TWO's table."""
    scripts = [[f"Final answer: {name}"] for name in table]
    judges = table_judges({f"Final answer: {k}": v for k, v in table.items()})
    return scripted_chains(scripts), judges


@pytest.mark.parametrize("name", S.STEP_SCORES)
def test_best_of_n_picks_by_each_step_score(name):
    chains, judges = final_chains({"M": (1.0, 0.3), "R": (0.6, 0.6), "A": (0.7, 0.52)})
    traces = S.sample_chains("q", chains, judges, 3, TWO)
    search = S.best_of_n(traces, name)
    assert search.answer == MRA_SCORES[name][1]
    np.testing.assert_allclose([c.score for c in search.chains], MRA_SCORES[name][0], atol=1e-12)
    # Every answer differs, so weighted is best; each answer once: majority ties, to the earliest
    # (M).
    assert S.best_of_n(traces, name, answer="weighted").picked == search.picked
    assert S.best_of_n(traces, name, answer="majority").answer == "M"


# ----------------------------------------------------------------------------- aggregates


# Three two-step chains (0, 1, 2), every step unanimous (s̄* = c, Δ* = 0):
#  0: (0.4, 0.8)  mean: last 0.8, min 0.4, prod 0.32;   key (0.4 rejected, 1.8): last 1.8, min 0.4
#  1: (0.7, 0.7)  mean: last 0.7, min 0.7, prod 0.49;   key (1.7, 1.7):          last 1.7, min 1.7
#  2: (1.0, 0.65) mean: last 0.65, min 0.65, prod 0.65; key (2.0, 1.65):         last 1.65, min 1.65
# so mean picks chain 0 by last, 1 by min, 2 by prod; key picks 0 by last, 1 by min.
STEPS3 = [(0.4, 0.8), (0.7, 0.7), (1.0, 0.65)]
AGGREGATES = [
    ("mean", "last", [0.8, 0.7, 0.65], 0),
    ("mean", "min", [0.4, 0.7, 0.65], 1),
    ("mean", "prod", [0.32, 0.49, 0.65], 2),
    ("key", "last", [1.8, 1.7, 1.65], 0),
    ("key", "min", [0.4, 1.7, 1.65], 1),
    ("margin", "min", [0.4, 0.7, 0.65], 1),  # Δ* = 0: margin is the mean
]


def three_chains(log=None):
    scripts = [[f"c{i} first", f"Final answer: {'xyz'[i]}"] for i in range(3)]
    table = {f"c{i} first": a for i, (a, _) in enumerate(STEPS3)}
    table |= {f"Final answer: {'xyz'[i]}": b for i, (_, b) in enumerate(STEPS3)}
    return scripted_chains(scripts, log), table_judges(table)


@pytest.mark.parametrize("step_score,aggregate,scores,picked", AGGREGATES)
def test_best_of_n_with_each_aggregate(step_score, aggregate, scores, picked):
    traces = S.sample_chains("q", *three_chains(), 3, TWO)
    search = S.best_of_n(traces, step_score, aggregate)
    np.testing.assert_allclose([c.score for c in search.chains], scores, atol=1e-12)
    assert search.picked == picked and search.answer == "xyz"[picked]
    # Each step's chain_score aggregates the chain cut there (chain 0 by prod: 0.4, 0.4 · 0.8).
    prod = S.best_of_n(traces, "mean", "prod").chains[0]
    np.testing.assert_allclose([x.chain_score for x in prod.steps], [0.4, 0.32], atol=1e-12)


def test_prefix_scores_and_nan():
    x = [0.5, NAN, 0.9]
    np.testing.assert_array_equal(S.prefix_scores(x, "last"), x)
    assert np.isnan(S.prefix_scores(x, "min")[1:]).all() and S.prefix_scores(x, "min")[0] == 0.5
    assert np.isnan(S.prefix_scores(x, "prod")[1:]).all()


# ----------------------------------------------------------------------------- answers


# Seven one-step chains by mean and last (unanimous, so the chain score is the step's c):
#   x 0.9 | y 0.5 | y 0.5 | z 0.3 | z 0.3 | z 0.3 | a two-step chain of 0.99 stopped at max_steps 2
# The answers at each N (the 7th never ended at a final answer, so it is no candidate):
#   N=1: x everywhere.  N=2: best x (0.9), weighted x (0.9 > 0.5), majority x (1 : 1, the earliest).
#   N=3: best x, weighted y (0.5 + 0.5 = 1.0 > 0.9), majority y (2).
#   N=4: same, z has 0.3 and 1 chain.
#   N=5: weighted y (1.0 > 0.9 > 0.6), majority y (2 : 2 with z, y appeared first).
#   N=6: weighted y (x 0.9, y 1.0, z 0.9), majority z (3).  N=7: as N=6.
VOTES = [("x", 0.9), ("y", 0.5), ("y", 0.5), ("z", 0.3), ("z", 0.3), ("z", 0.3)]
SWEEP = {1: "xxx", 2: "xxx", 3: "xyy", 4: "xyy", 5: "xyy", 6: "xyz", 7: "xyz"}


def vote_chains(log=None):
    scripts = [[f"{i}: Final answer: {a}"] for i, (a, _) in enumerate(VOTES)] + [
        ["open", "still open"]
    ]
    table = {f"{i}: Final answer: {a}": s for i, (a, s) in enumerate(VOTES)} | {
        "open": 0.99,
        "still open": 0.99,
    }
    return scripted_chains(scripts, log), table_judges(table)


def test_best_weighted_and_majority_over_a_sweep_of_n():
    traces = S.sample_chains("q", *vote_chains(), 7, Config(lam=(1.0, 1.0), max_steps=2))
    assert traces[6].stopped == "max_steps" and traces[6].answer is None
    for n, want in SWEEP.items():
        got = "".join(S.best_of_n(traces[:n], "mean", answer=a).answer for a in S.ANSWERS)
        assert got == want, n
    # the picked chain of an answer group is its earliest: y -> chain 1, z -> chain 3
    assert S.best_of_n(traces, "mean", answer="weighted").picked == 1
    assert S.best_of_n(traces, "mean", answer="majority").picked == 3


def test_majority_needs_no_judge_and_ties_go_to_the_earliest():
    chains, _ = vote_chains()
    traces = S.sample_chains("q", chains, (), 6)
    assert [S.best_of_n(traces[:n], answer="majority").answer for n in range(1, 7)] == list(
        "xxyyyz"
    )
    with pytest.raises(
        ValueError, match=r"answer='best' needs judges, and these chains were not judged"
    ):
        S.best_of_n(traces, answer="best")
    # equal scores: the lowest index, for chains and for answers
    chains, judges = final_chains({"p": 0.7, "q": 0.7})
    traces = S.sample_chains("q", chains, judges, 2, TWO)
    assert [S.best_of_n(traces, answer=a).answer for a in S.ANSWERS] == ["p", "p", "p"]


def test_no_finished_chain_picks_nothing():
    judges = table_judges({"a": 0.9, "b": 0.9})
    traces = S.sample_chains(
        "q", scripted_chains([["a", "b"]]), judges, 1, Config(lam=(1.0, 1.0), max_steps=2)
    )
    search = S.best_of_n(traces)
    assert (
        search.picked is None and search.answer is None and search.chains[0].stopped == "max_steps"
    )
    # A reader is shown the first chain with a step, as a budget-stopped chain shows its last step.
    assert (search.shown, search.chain, search.stopped) == (0, ["a", "b"], "max_steps")
    empty = S.Search(
        "best-of-n", "q", {}, (S.Chain((), "budget", None, NAN), search.chains[0]), None, {}
    )
    assert (empty.shown, empty.chain, empty.stopped) == (1, ["a", "b"], "max_steps")


def test_answers_compared_by_their_canonical_form():
    # "A", "(A)" and "B": as strings, three answers (best and weighted take B's 0.9, majority the
    # earliest); read as options, A has two chains: weighted A (0.5 + 0.5 > 0.9), majority A; best
    # is still B.
    chains, judges = final_chains({"A": 0.5, "(A)": 0.5, "B": 0.9})
    traces = S.sample_chains("q", chains, judges, 3, TWO)
    canon = lambda a: a.strip("()")
    assert [S.best_of_n(traces, "mean", answer=a).answer for a in S.ANSWERS] == ["B", "B", "A"]
    assert [S.best_of_n(traces, "mean", answer=a, canon=canon).picked for a in S.ANSWERS] == [
        2,
        0,
        0,
    ]
    propose = lambda state, n: ["Final answer: (A)", "Final answer: B", "Final answer: A"][:n]
    beam = partial(
        S.beam_search, "q", propose, judges, 3, 1, TWO, step_score="mean", answer="weighted"
    )
    beam = partial(beam, canon=canon)
    assert beam(dual_filter=False).answer == "(A)"  # all three kept; A's group sums 1.0 > 0.9
    assert beam().answer == "B"  # the filter keeps B alone (the only one accepted)


# ----------------------------------------------------------------------------- abstentions


@pytest.mark.parametrize("seed", SEEDS)
def test_pick_is_its_definition(seed):
    # Brute force: among the chains with an answer, best = max by (score, −index), NaN as −∞;
    # weighted = the answer with the largest sum of its non-NaN scores (none: −∞), ties to the
    # answer seen first; majority = the largest count, likewise; values rounded to verdict.DECIMALS
    # (0.1 + 0.2 ties with 0.3). Long lists of ties check that the sort is stable (numpy's default
    # sort is not, beyond 16 elements).
    rng = np.random.default_rng(seed)
    r = lambda v: -math.inf if v != v else round(v, V.DECIMALS)
    for _ in range(30):
        k = int(rng.integers(1, 60))
        scores = rng.choice([NAN, 0.0, 0.3, 0.1 + 0.2, 0.5, 1.0], k).tolist()
        answers = rng.choice(["a", "b", "c", None], k).tolist()
        chains = [S.Chain((), "final" if a else "max_steps", a, v) for a, v in zip(answers, scores)]
        done = [i for i in range(k) if answers[i] is not None]
        if not done:
            assert S.pick(chains) is None
            continue
        assert S.pick(chains, "best") == max(done, key=lambda i: (r(scores[i]), -i))
        groups = {}
        for i in done:
            groups.setdefault(answers[i], []).append(i)
        sums = {a: [scores[i] for i in g if scores[i] == scores[i]] for a, g in groups.items()}
        value = {a: r(math.fsum(v)) if v else -math.inf for a, v in sums.items()}
        assert (
            S.pick(chains, "weighted")
            == groups[max(groups, key=lambda a: (value[a], -groups[a][0]))][0]
        )
        assert (
            S.pick(chains, "majority")
            == groups[max(groups, key=lambda a: (len(groups[a]), -groups[a][0]))][0]
        )


def test_abstentions_golden():
    # chain 0: (NaN, 0.9) then (0.8, 0.8) -> "p". Its first step has one answer: unjudged, NaN.
    # chain 1: (0.5, 0.5) twice -> "q": step scores 0.5, 0.5.
    # mean/last: chain 0 scores 0.8 (its last step is judged) > 0.5: p.
    # mean/min and mean/prod: chain 0 is NaN from its first step on, and ranks after chain 1: q
    # (min 0.5, prod 0.25). Weighted by min: p's only chain is NaN, so p ranks after q.
    table = {"p0": (NAN, 0.9), "Final answer: p": 0.8, "q0": 0.5, "Final answer: q": 0.5}
    chains = scripted_chains([["p0", "Final answer: p"], ["q0", "Final answer: q"]])
    traces = S.sample_chains("q", chains, table_judges(table), 2, TWO)
    last, by_min = S.best_of_n(traces, "mean", "last"), S.best_of_n(traces, "mean", "min")
    prod = S.best_of_n(traces, "mean", "prod")
    assert (last.answer, by_min.answer, prod.answer) == ("p", "q", "q")
    assert last.chains[0].score == pytest.approx(0.8) and prod.chains[1].score == pytest.approx(
        0.25
    )
    assert math.isnan(by_min.chains[0].score) and math.isnan(prod.chains[0].score)
    assert S.best_of_n(traces, "mean", "min", "weighted").answer == "q"
    assert last.counts == {"reasoner_calls": 4, "judge_calls": 8, "abstentions": 1}
    step = last.to_dict()["chains"][0]["steps"][0]
    assert step["s_hat"] == [None, 0.9] and step["step_score"] is None and step["accepted"] is False
    # alone, an unjudged chain is still picked: NaN ranks last, not out
    assert S.best_of_n(traces[:1], "mean", "min").answer == "p"
    # an unjudged answer ranks after one whose chains sum to 0 (q's judges both say 0: mean 0)
    traces = S.sample_chains(
        "q", chains, table_judges(table | {"q0": 0.0, "Final answer: q": 0.0}), 2, TWO
    )
    assert [S.best_of_n(traces, "mean", "min", a).answer for a in S.ANSWERS] == ["q", "q", "p"]


def test_an_abstention_among_three_judges_leaves_a_game_of_two():
    # paper λ, ŝ = (NaN, 0.7, 0.7): the two who answered agree, a fixed point:
    # s̄* = 0.7, Δ* = 0, accepted.
    judges = table_judges({"Final answer: A": (NAN, 0.7, 0.7)}, m=3)
    traces = S.sample_chains("q", scripted_chains([["Final answer: A"]]), judges, 1)
    x = S.best_of_n(traces).chains[0].steps[0]
    assert x.accepted and x.step_score == pytest.approx(1.7) and np.isnan(x.s_star[0])


# ----------------------------------------------------------------------------- beam search


# TWO judges, every step unanimous (key = 1 + c if c > 0.6, else c); W = 2, E = 2, key, last.
#   depth 0, the root by W·E = 4: a 0.9 (1.9), b 0.8 (1.8), c 0.7 (1.7), d 0.5 (0.5)   -> keep a, b
#   depth 1: a -> aa 0.3 (0.3), "Final answer: A" 0.65 (1.65); b -> ba 0.95 (1.95), bb 0.62 (1.62)
#            keep ba and FA: A finishes with 1.65, ba lives
#   depth 2: ba -> "Final answer: B" 0.61 (1.61), bab 0.99 (1.99): keep both: B finishes with 1.61
#   depth 3: bab -> "Thus Final answer: B" 0.4 (rejected: 0.4), "Final answer: D" 0.7 (1.7)
#            filter on: only D is accepted, so only D is kept; off: both are kept, B again with 0.4.
# Finished, filter on:  A 1.65, B 1.61, D 1.7 -> best D (chain 2), weighted D,
#                       majority A (1 each: earliest).
# Finished, filter off: A 1.65, B 1.61, B 0.4, D 1.7 -> best D (chain 3), weighted B (2.01 > 1.7),
#                       majority B.
TREE = {
    (): ["a", "b", "c", "d"],
    ("a",): ["aa", "Final answer: A"],
    ("b",): ["ba", "bb"],
    ("b", "ba"): ["Final answer: B", "bab"],
    ("b", "ba", "bab"): ["Thus Final answer: B", "Final answer: D"],
}
TREE_SCORES = {
    "a": 0.9,
    "b": 0.8,
    "c": 0.7,
    "d": 0.5,
    "aa": 0.3,
    "Final answer: A": 0.65,
    "ba": 0.95,
}
TREE_SCORES |= {"bb": 0.62, "Final answer: B": 0.61, "bab": 0.99, "Thus Final answer: B": 0.4}
TREE_SCORES |= {"Final answer: D": 0.7}


def tree(log=None):
    def propose(state, n):
        if log is not None:
            log.append((state.steps, n))
        return TREE[state.steps][:n]

    return propose, table_judges(TREE_SCORES)


@pytest.mark.parametrize(
    "dual_filter,answers,picked",
    [
        (True, ["A", "B", "D"], {"best": 2, "weighted": 2, "majority": 0}),
        (False, ["A", "B", "B", "D"], {"best": 3, "weighted": 1, "majority": 1}),
    ],
)
def test_beam_search_golden(dual_filter, answers, picked):
    log = []
    search = S.beam_search("q", *tree(log), 2, 2, TWO, dual_filter=dual_filter)
    assert [c.answer for c in search.chains] == answers
    assert all(c.stopped == "final" for c in search.chains) and search.answer == "D"
    np.testing.assert_allclose(search.chains[0].score, 1.65, atol=1e-12)
    assert [[x.kept for x in xs] for xs in search.depths] == [
        [True, True, False, False],
        [False, True, True, False],
        [True, True],
        [not dual_filter, True],
    ]
    assert [x.beam for x in search.depths[1]] == [0, 0, 1, 1] and search.chains[1].steps[
        0
    ].candidate == "b"
    for a, i in picked.items():
        assert S.beam_search("q", *tree(), 2, 2, TWO, answer=a, dual_filter=dual_filter).picked == i
    assert log == [((), 4), (("a",), 2), (("b",), 2), (("b", "ba"), 2), (("b", "ba", "bab"), 2)]
    assert search.counts == {
        "reasoner_calls": 5,
        "judge_calls": (4 + 4 + 2 + 2) * 2,
        "abstentions": 0,
    }


def test_judge_calls_go_through_map_fn():
    # Beam search: one map_fn call per live beam, with its E·m (depth 0: W·E·m) calls,
    # candidate-major. StepScorer: one map_fn call over every step of every output (each step's m
    # calls run inside it).
    sizes = []

    def recording_map(f, items):
        items = list(items)
        sizes.append(len(items))
        return [f(x) for x in reversed(items)][::-1]  # evaluates out of order, returns in order

    plain = S.beam_search("q", *tree(), 2, 2, TWO)
    mapped = S.beam_search("q", *tree(), 2, 2, TWO, map_fn=recording_map)
    assert sizes == [8, 4, 4, 4, 4] and mapped.to_dict() == plain.to_dict()
    sizes.clear()
    prm = S.StepScorer(table_judges(SAL_TABLE), TWO, map_fn=recording_map)
    assert prm.score(["q1", "q2"], SAL_OUTPUTS) == S.StepScorer(table_judges(SAL_TABLE), TWO).score(
        ["q1", "q2"], SAL_OUTPUTS
    )
    assert sizes == [5]
    with ThreadPoolExecutor(4) as pool:
        threaded = S.StepScorer(table_judges(SAL_TABLE), TWO, map_fn=pool.map).score(
            ["q1", "q2"], SAL_OUTPUTS
        )
    assert threaded == prm.score(["q1", "q2"], SAL_OUTPUTS)


def test_beam_search_ends_at_max_steps_and_at_stop():
    # max_steps = 2: depth 1 finishes A and leaves ba live, unfinished.
    search = S.beam_search("q", *tree(), 2, 2, Config(lam=(1.0, 1.0), max_steps=2))
    assert [(c.stopped, c.answer) for c in search.chains] == [("final", "A"), ("max_steps", None)]
    assert [x.candidate for x in search.chains[1].steps] == ["b", "ba"] and search.answer == "A"
    # a Stop at depth 2 drops that depth; the live beam ends with its message
    propose, judges = tree()

    def stopping(state, n):
        if len(state.steps) == 2:
            raise Stop("budget")
        return propose(state, n)

    search = S.beam_search("q", stopping, judges, 2, 2, TWO)
    assert [(c.stopped, c.answer) for c in search.chains] == [("final", "A"), ("budget", None)]
    assert len(search.depths) == 2 and search.counts["reasoner_calls"] == 3


def test_beam_of_one_under_min_is_not_verdicts_greedy_choice():
    # W = 1, E = 2. Depth 0: x 0.7 (key 1.7), y 0.5 -> x. Depth 1: "Final answer: 1" 0.8 (1.8),
    # "Final answer: 2" 0.9 (1.9). verdict.run takes 2 (the higher s̄*); so does the beam by last;
    # by min both chains score min(1.7, ·) = 1.7, a tie, which goes to the lower index: 1.
    steps = {(): ["x", "y"], ("x",): ["Final answer: 1", "Final answer: 2"]}
    propose = lambda state, n: steps[state.steps]
    judges = table_judges({"x": 0.7, "y": 0.5, "Final answer: 1": 0.8, "Final answer: 2": 0.9})
    assert V.run("q", propose, judges, Config(lam=(1.0, 1.0), n=2)).answer == "2"
    assert S.beam_search("q", propose, judges, 1, 2, TWO).answer == "2"
    assert S.beam_search("q", propose, judges, 1, 2, TWO, aggregate="min").answer == "1"


# ----------------------------------------------------------------------------- the trace


def test_search_dict_golden():
    d = S.beam_search("q", *tree(), 2, 2, TWO).to_dict()
    assert list(d) == [
        "format",
        "method",
        "question",
        "settings",
        "chains",
        "depths",
        "picked",
        "chain",
        "answer",
        "stopped",
        "counts",
        "totals",
    ]
    assert (
        d["format"] == "verdict-search/1"
        and d["method"] == "beam"
        and d["answer"] == "D"
        and d["picked"] == 2
    )
    assert d["settings"] == {
        "width": 2,
        "expand": 2,
        "dual_filter": True,
        "step_score": "key",
        "lam": [1.0, 1.0],
        "tau": 0.6,
        "eps": 0.1,
        "max_steps": 8,
        "final": V.FINAL_ANSWER,
        "aggregate": "last",
        "answer": "best",
    }
    assert [c["chosen"] for c in d["chains"]] == [False, False, True]
    assert (
        d["chains"][2]["chain"] == ["b", "ba", "bab", "Final answer: D"]
        and d["chains"][2]["answer"] == "D"
    )
    # As a verdict trace has them, of the shown (the picked) chain; totals: 5 proposals,
    # 4 + 4 + 2 + 2 scored.
    assert d["chain"] == d["chains"][2]["chain"] and d["stopped"] == "final"
    assert d["totals"] == {
        "steps": 5,
        "judge_calls": 24,
        "abstentions": 0,
        "chains": 3,
        "finished": 3,
        "expansions": 12,
    }
    x = d["depths"][3][0]  # "Thus Final answer: B": 0.4 by both, rejected
    assert list(x) == [
        "candidate",
        "s_hat",
        "s_star",
        "s_bar_star",
        "delta_star",
        "accepted",
        "step_score",
        "chain_score",
        "final",
        "beam",
        "kept",
    ]
    assert (
        x["s_hat"] == [0.4, 0.4]
        and x["accepted"] is False
        and x["final"] is True
        and x["kept"] is False
    )
    assert x["step_score"] == pytest.approx(0.4) and x["s_star"] == pytest.approx([0.4, 0.4])
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    b = S.best_of_n(S.sample_chains("q", *three_chains(), 3, TWO)).to_dict()
    assert b["method"] == "best-of-n" and b["depths"] == [] and b["settings"]["n"] == 3
    assert b["totals"] == {
        "steps": 6,
        "judge_calls": 12,
        "abstentions": 0,
        "chains": 3,
        "finished": 3,
    }
    assert json.loads(json.dumps(b, allow_nan=False)) == b


class Reasoned:
    """A judge whose score comes with a record, a judges.Judgement, as judges.Judge's does."""

    def __init__(self, score):
        self.score = score
        self.calls = 0

    def __call__(self, state, step):
        self.calls += 1
        return Judgement(self.score, {"reason": f"{step} ok"})


def test_judge_records_reach_the_trace_through_a_memo():
    judges = S.memoise([Reasoned(0.7), Reasoned(0.9)])
    search = S.beam_search("q", lambda s, n: ["Final answer: A"] * n, judges, 1, 2, TWO)
    x = search.to_dict()["depths"][0][1]
    assert x["calls"] == [{"reason": "Final answer: A ok"}] * 2
    # the two expansions are the same (state, step): each judge was called once
    assert [j.judge.calls for j in judges] == [1, 1] and search.counts["judge_calls"] == 4


def test_a_memo_asks_a_key_once_across_threads_and_keeps_no_error():
    calls, fail = [], [True]

    def judge(state, step):
        calls.append(step)
        if fail.pop() if fail else False:
            raise RuntimeError("the server failed")
        return 0.4

    memo = S.Memo(judge)
    with pytest.raises(RuntimeError):
        memo(State("q"), "s")
    assert memo.calls == 0  # the error was not kept: the next call asks again
    with ThreadPoolExecutor(
        4
    ) as pool:  # each call finds the answer, or waits for the one being asked
        said = list(pool.map(lambda _: memo(State("q"), "s"), range(8)))
    assert said == [0.4] * 8 and calls == ["s", "s"] and memo.calls == 1


# ------------------------------------------------------------------------ prefix reuse and the memo


def test_chains_of_a_smaller_n_are_a_prefix_and_a_sweep_reuses_one_sample():
    logs = {n: [] for n in (2, 4)}
    for n, log in logs.items():
        chains, judges = vote_chains(log)
        S.sample_chains("q", chains, judges, n, TWO)
    assert logs[4][: len(logs[2])] == logs[2] and len(logs[2]) == 2 and len(logs[4]) == 4
    chains, judges = vote_chains()
    traces = S.sample_chains("q", chains, judges, 6, TWO)
    for n in range(1, 7):
        again = S.sample_chains("q", *vote_chains(), n, TWO)
        for a in S.ANSWERS:
            assert (
                S.best_of_n(traces[:n], "mean", answer=a).to_dict()
                == S.best_of_n(again, "mean", answer=a).to_dict()
            )


def test_a_memo_makes_a_sweep_cost_its_distinct_calls():
    # Three chains; chain 1 repeats chain 0's first step, so (state, step) = ((), "c0 first") is
    # asked twice. A sweep N = 1, 2, 3 asks 2 + 4 + 6 = 12 steps of 2 judges = 24 calls. The
    # distinct (state, step) are ((), c0 first), ((c0 first,), x), ((c0 first,), y), ((), c2 first),
    # ((c2 first,), z): 5, so 10 calls.
    scripts = [
        ["c0 first", "Final answer: x"],
        ["c0 first", "Final answer: y"],
        ["c2 first", "Final answer: z"],
    ]
    log = []
    table = {"c0 first": 0.7, "c2 first": 0.8, "Final answer: x": 0.9, "Final answer: y": 0.6}
    judges = S.memoise(table_judges(table | {"Final answer: z": 0.5}, log=log))
    asked = 0
    for n in (1, 2, 3):
        search = S.best_of_n(S.sample_chains("q", scripted_chains(scripts), judges, n, TWO))
        asked += search.counts["judge_calls"]
    assert asked == 24 and len(log) == 5 * 2 and sum(j.calls for j in judges) == 10
    assert len(set(log)) == len(log)  # no call twice
    # the same judges, without the memo, make every call
    log.clear()
    S.sample_chains(
        "q",
        scripted_chains(scripts),
        table_judges(table | {"Final answer: z": 0.5}, log=log),
        3,
        TWO,
    )
    assert len(log) == 12


def test_a_memo_keys_unhashable_images_by_identity():
    image, log = np.zeros((2, 2)), []
    judges = S.memoise(table_judges({"Final answer: A": 0.7}, log=log))
    for _ in range(2):
        S.sample_chains("q", scripted_chains([["Final answer: A"]]), judges, 1, TWO, image=image)
    S.sample_chains(
        "q", scripted_chains([["Final answer: A"]]), judges, 1, TWO, image=np.zeros((2, 2))
    )
    assert len(log) == 4  # 2 judges for the first image, 2 more for the equal but distinct array
    assert repr(judges[0]).startswith("Memo(<function table_judges.")


# ----------------------------------------------------------------------------- search-and-learn


# A stand-in with search-and-learn's call shape and rules, as read at 6f81cac: an output's step
# scores are aggregated by the last, the least or their product (src/sal/utils/score.py); best-of-N
# takes, per question, the output whose aggregate is largest (src/sal/search/best_of_n.py); weighted
# best-of-N, the answer whose outputs' aggregates sum highest (src/sal/utils/math.py).
AGGREGATE = {"last": lambda steps: steps[-1], "min": min, "prod": math.prod}


def stand_in_best_of_n(problems, completions, prm, agg_strategy):
    """(step scores, aggregates, the picked output per question) from prm.score's
    [question][output][step]."""
    scores = prm.score(problems, completions)
    aggregates = [[AGGREGATE[agg_strategy](steps) for steps in outs] for outs in scores]
    picked = [outs[int(np.argmax(a))] for outs, a in zip(completions, aggregates)]
    return scores, aggregates, picked


def largest_summed_answer(answers, scores):
    """The answer whose scores sum highest (the first such answer on a tie)."""
    total = {}
    for answer, score in zip(answers, scores):
        total[answer] = total.get(answer, 0.0) + score
    return max(total, key=total.get)


# q1's outputs: out0 = steps (0.9, 0.8), out1 = (0.5, 0.85) (unanimous, step score mean);
#   last: 0.8 < 0.85 -> out1; min: 0.8 > 0.5 -> out0; prod: 0.72 > 0.425 -> out0.
# q2's one output "c\n\n" is one step (the trailing "\n\n" is the stop string, no step): [[0.6]].
SAL_TABLE = {"a": 0.9, "Final answer: 1": 0.8, "b": 0.5, "Final answer: 2": 0.85, "c": 0.6}
SAL_OUTPUTS = [["a\n\nFinal answer: 1", "b\n\nFinal answer: 2"], ["c\n\n"]]


def test_step_scorer_has_prm_scores_shape_and_search_and_learn_picks_with_it():
    log = []
    prm = S.StepScorer(table_judges(SAL_TABLE, log=log), TWO, step_score="mean")
    scores = prm.score(["q1", "q2"], SAL_OUTPUTS)
    assert [[len(o) for o in q] for q in scores] == [[2, 2], [1]]  # [question][output][step]
    np.testing.assert_allclose(
        sum(scores, [])[0] + sum(scores, [])[1], [0.9, 0.8, 0.5, 0.85], atol=1e-12
    )
    assert scores[1][0] == [pytest.approx(0.6)] and all(
        type(v) is float for q in scores for o in q for v in o
    )
    # each step is judged given the question and the steps before it: 5 steps, 2 judges
    assert (0, ("a",), "Final answer: 1") in log and (1, (), "c") in log and len(log) == 5 * 2
    for agg, want in (("last", 1), ("min", 0), ("prod", 0)):
        _, agg_scores, pred = stand_in_best_of_n(["q1", "q2"], SAL_OUTPUTS, prm, agg)
        assert pred == [SAL_OUTPUTS[0][want], "c\n\n"]
    assert largest_summed_answer(["1", "2", "2"], [0.8, 0.5, 0.4]) == "2"


def test_step_scorer_under_search_and_learns_beam_iterations_with_a_memo():
    # beam_search.py scores [[current_text]] per beam and keeps score[0], the scores of every step
    # so far; the text grows by one step (ending "\n\n") per iteration, so every prefix is scored
    # again.
    log = []
    prm = S.StepScorer(
        S.memoise(table_judges({"a": 0.9, "b": 0.7, "Final answer: 3": 0.8}, log=log)), TWO
    )
    texts = ["a\n\n", "a\n\nb\n\n", "a\n\nb\n\nFinal answer: 3"]
    all_scores = [prm.score(["q"], [[t]])[0][0] for t in texts]
    np.testing.assert_allclose(all_scores[-1], [1.9, 1.7, 1.8], atol=1e-12)  # key: all accepted
    assert [len(s) for s in all_scores] == [1, 2, 3] and len(log) == 3 * 2  # not (1 + 2 + 3) · 2
    assert S.split_steps("a\n\nb\n\n") == ["a", "b"] and "a\n\nb\n\n".split("\n\n") == [
        "a",
        "b",
        "",
    ]
    assert (
        S.split_steps("") == [""]
        and S.split_steps("\n\n") == [""]
        and S.split_steps("a\n\n\n\nb") == ["a", "", "b"]
    )


def test_step_scorer_never_returns_nan_and_passes_images():
    seen = []

    def judge(state, step):
        seen.append(state.images)
        return NAN if step == "bad" else 0.8

    prm = S.StepScorer([judge, judge], TWO)
    scores = prm.score(["q1", "q2"], [["bad", "good"], []], images=["img.png", None])
    assert (
        scores == [[[-1.0], [pytest.approx(1.8)]], []]
        and int(np.argmax([s[-1] for s in scores[0]])) == 1
    )
    assert set(seen) == {("img.png",)}
    assert S.StepScorer([judge, judge], TWO, unjudged=0.0).score(["q"], [["bad"]]) == [[[0.0]]]
    assert prm.score([], []) == []


# ----------------------------------------------------------------------------- bad settings


BOOMS = [boom, boom]  # judges and proposers that fail the test if anything calls them
BEAM = partial(S.beam_search, "q", boom, BOOMS, 2, 2, TWO)
BAD = [  # (a search with bad settings, the ValueError's message)
    (
        partial(S.sample_chains, "q", lambda i: boom, BOOMS, 0, TWO),
        "n must be an integer >= 1, got n=0",
    ),
    (
        partial(S.sample_chains, "q", lambda i: boom, BOOMS, True, TWO),
        "n must be an integer >= 1, got n=True",
    ),
    (
        partial(S.sample_chains, "q", lambda i: boom, BOOMS, 2.0, TWO),
        "n must be an integer >= 1, got n=2.0",
    ),
    (partial(S.sample_chains, "q", 3, BOOMS, 1), "chains must be a callable i -> propose, got 3"),
    (
        partial(S.sample_chains, "q", lambda i: boom, BOOMS, 1),
        "got 2 judges but 3 stubbornness values",
    ),
    (
        partial(S.beam_search, "q", boom, BOOMS, 0, 2, TWO),
        "width must be an integer >= 1, got width=0",
    ),
    (
        partial(S.beam_search, "q", boom, BOOMS, 2, 0, TWO),
        "expand must be an integer >= 1, got expand=0",
    ),
    (
        partial(S.beam_search, "q", boom, (), 2, 2, TWO),
        "beam search needs 2 judges (one per lam), got 0",
    ),
    (
        partial(BEAM, step_score="median"),
        "unknown step_score 'median'; expected one of key, mean, margin",
    ),
    (partial(BEAM, aggregate="mean"), "unknown aggregate 'mean'; expected one of last, min, prod"),
    (
        partial(BEAM, answer="vote"),
        "unknown answer rule 'vote'; expected one of best, weighted, majority",
    ),
    (
        partial(BEAM, aggregate="prod"),
        "aggregate 'prod' needs a step score in [0, 1] (mean, raw-mean, raw-min",
    ),
    (partial(BEAM, step_score="raw-dual", aggregate="prod"), "needs a step score in [0, 1]"),
    (partial(S.best_of_n, ()), "n must be an integer >= 1, got n=0"),
    (
        lambda: S.best_of_n(S.sample_chains("q", *three_chains(), 1, TWO), "margin", "prod"),
        "got 'margin'",
    ),
    (
        lambda: S.best_of_n(S.sample_chains("q", *three_chains(), 1, TWO), "nope"),
        "unknown step_score 'nope'",
    ),
    (
        partial(S.pick, [], "naive"),
        "unknown answer rule 'naive'; expected one of best, weighted, majority",
    ),
    (partial(S.StepScorer, BOOMS, TWO, "prm"), "unknown step_score 'prm'"),
    # the public functions name the choices too, never a bare KeyError
    (
        partial(S.step_scores, [[0.5, 0.5, 0.5]], "median"),
        "unknown step_score 'median'; expected one of key, mean, margin",
    ),
    (
        partial(S.prefix_scores, [0.5], "sum"),
        "unknown aggregate 'sum'; expected one of last, min, prod",
    ),
    # an integer no float holds is a ValueError, never an OverflowError
    (partial(S.step_scores, [[0.5, 0.5, 0.5]], tau=10**400), "tau and eps must be finite"),
    (partial(S.step_scores, [[10**400, 0.5, 0.5]]), "real numbers a float can hold"),
    (partial(S.StepScorer, BOOMS), "StepScorer needs 3 judges (one per lam), got 2"),
    (partial(S.StepScorer(BOOMS, TWO).score, ["q"], []), "got 1 questions, 0 outputs, 1 images"),
]


@pytest.mark.parametrize("call,message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_settings_name_the_value_before_any_call(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)


def test_bad_judges_and_proposers_fail_as_in_verdict():
    with pytest.raises(ValueError, match=r"judge 1 \(.*\) returned '0.9'"):
        S.beam_search("q", lambda s, n: ["a"], [lambda s, c: 0.5, lambda s, c: "0.9"], 1, 1, TWO)
    with pytest.raises(ValueError, match="propose must return a non-empty list of strings"):
        S.sample_chains("q", lambda i: lambda s, n: [], [lambda s, c: 0.5] * 2, 1, TWO)


# ----------------------------------------------------------------------------- seeded properties


def draw(*key) -> np.random.Generator:
    """A generator fixed by the key, so a world's answers depend on what is asked, not on call
    order."""
    return np.random.default_rng([zlib.crc32(repr(key).encode())])


def world(seed, m=3, p_nan=0.0, p_final=0.25):
    """A proposer (propose(state, n), or chains(i) seeded seed + i) and m judges, deterministic."""

    def proposer(salt):
        def propose(state, n):
            g = draw("p", salt, state.steps)
            t, ends = len(state.steps), g.random(n) < p_final  # [n] which candidates end the chain
            return [
                f"{t}.{k}" + (f" Final answer: {'ABC'[g.integers(3)]}" if ends[k] else "")
                for k in range(n)
            ]

        return propose

    def judge(i):
        def score(state, step):
            g = draw("j", seed, i, state.steps, step)
            # Two decimals, so that ties happen.
            return NAN if g.random() < p_nan else round(float(g.random()), 2)

        return score

    return proposer(seed), (lambda i: proposer(seed + i)), [judge(i) for i in range(m)]


@pytest.mark.parametrize("seed", SEEDS)
def test_each_rules_step_score_picks_what_select_picks(seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        n, m = int(rng.integers(1, 6)), int(rng.integers(2, 5))
        s_hat = np.round(rng.random((n, m)), 1)  # ties
        s_hat[rng.random((n, m)) < 0.25] = NAN
        lam, tau, eps = (
            rng.uniform(0.2, 3, m),
            float(rng.uniform(0, 1)),
            float(rng.uniform(0.01, 0.5)),
        )
        verified = (~np.isnan(s_hat)).sum(1) >= 2
        selections = V.select_all(s_hat, lam, tau, eps)
        for rule, name in S.RULE_SCORE.items():
            want = selections[rule].index
            x = np.round(
                np.nan_to_num(S.step_scores(s_hat, name, lam, tau, eps), nan=-np.inf), V.DECIMALS
            )
            got = int(np.argmax(x))  # the first maximum: ties to the lowest index
            # With no judged candidate, select ranks by the lone scores, while every step score is
            # NaN: index 0.
            assert got == (want if verified.any() else 0), (rule, s_hat)


@pytest.mark.parametrize("seed", SEEDS)
def test_best_of_one_is_the_single_chain(seed):
    _, chains, judges = world(seed, p_nan=0.1)
    single = V.run("q", chains(0), judges, Config(n=1, max_steps=5))
    search = S.best_of_n(S.sample_chains("q", chains, judges, 1, Config(max_steps=5)))
    (chain,) = search.chains
    assert [x.candidate for x in chain.steps] == single.chain and chain.stopped == single.stopped
    assert search.answer == single.answer and search.picked == (
        0 if single.answer is not None else None
    )
    np.testing.assert_array_equal(
        [x.s_hat for x in chain.steps], [r.s_hat[0] for r in single.steps]
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_best_picks_the_highest_scored_finished_chain(seed):
    _, chains, judges = world(seed, p_nan=0.15)
    traces = S.sample_chains("q", chains, judges, 6, Config(max_steps=4))
    for step_score in ("key", "mean", "raw-min"):
        for aggregate in ("last", "min"):
            search = S.best_of_n(traces, step_score, aggregate)
            done = [i for i, c in enumerate(search.chains) if c.answer is not None]
            key = lambda i: (
                -math.inf if math.isnan(search.chains[i].score) else search.chains[i].score,
                -i,
            )
            assert search.picked == (max(done, key=key) if done else None)
            # With one chain per answer, weighted = best.
            if len({search.chains[i].answer for i in done}) == len(done):
                assert (
                    S.best_of_n(traces, step_score, aggregate, "weighted").picked == search.picked
                )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dual_filter", [True, False])
def test_a_beam_of_one_is_verdicts_greedy_chain_under_key_and_last(seed, dual_filter):
    # W = 1, E = n, key, last: each depth keeps the argmax of key over the n candidates, which is
    # verdict's choice whenever one or more candidates is judged (m' >= 2). With none judged,
    # verdict ranks them by their lone scores, while every key is NaN and the beam takes
    # candidate 0: the chains part there.
    propose, _, judges = world(seed, p_nan=0.3)
    for n in (1, 2, 3):
        greedy = V.run("q", propose, judges, Config(n=n, max_steps=6))
        search = S.beam_search(
            "q", propose, judges, 1, n, Config(max_steps=6), dual_filter=dual_filter
        )
        (chain,) = search.chains
        for t, record in enumerate(greedy.steps):
            taken = [x.candidate for x in search.depths[t] if x.kept]
            if not record.selection.verified:  # the documented divergence
                assert taken == [record.candidates[0]]
                break
            assert taken == [record.chosen] and chain.steps[t].candidate == record.chosen
        else:
            assert [
                x.candidate for x in chain.steps
            ] == greedy.chain and search.answer == greedy.answer
            assert chain.stopped == greedy.stopped


@pytest.mark.parametrize("seed", SEEDS)
def test_beam_search_keeps_at_most_w_and_counts_its_calls(seed):
    propose, _, judges = world(seed, p_nan=0.1)
    for w, e in ((1, 1), (2, 3), (3, 2)):
        search = S.beam_search("q", propose, judges, w, e, Config(max_steps=4))
        sizes = [len(xs) for xs in search.depths]
        assert all(sum(x.kept for x in xs) <= w for xs in search.depths) and sizes[0] == w * e
        assert search.counts["judge_calls"] == 3 * sum(sizes)
        assert all(c.answer is not None for c in search.chains if c.stopped == "final")
        # the filter: when a depth has an accepted expansion, every kept one is accepted
        for xs in search.depths:
            if any(x.accepted for x in xs):
                assert all(x.accepted for x in xs if x.kept)


# ----------------------------------------------------------------------------- the step scorer's
# inputs, its aggregate, its threads and its failures


@pytest.mark.parametrize(
    "questions,outputs,images,says",
    [
        (["q"], ["abc"], None, "each question's outputs must be a list of strings, got str: 'abc'"),
        ("q", [["a"]], None, "questions must be a list of strings, got str: 'q'"),
        (["q"], [["a"]], "img.png", "images must be a list, got str: 'img.png'"),
        (["q"], (o for o in [["a"]]), None, "outputs must be a list of lists of strings, got gen"),
        (["q"], [[7]], None, "questions and outputs must be strings, got 7"),
    ],
)
def test_step_scorer_takes_no_string_or_generator_for_a_list(questions, outputs, images, says):
    # Before: outputs=["abc"] scored three outputs "a", "b", "c"; a generator was consumed and
    # scored as [].
    with pytest.raises(ValueError) as info:
        S.StepScorer(BOOMS, TWO).score(questions, outputs, images)
    assert says in str(info.value)


@pytest.mark.parametrize("bad", [None, "0.9", True, 0.5j])
def test_step_scores_refuse_what_select_refuses_before_converting(bad):
    # Before: None became an abstention, "0.9" 0.9 and True 1.0; a complex number was a TypeError.
    with pytest.raises(ValueError, match="scores must be real numbers"):
        S.step_scores([[bad, 0.5]], "mean", TWO.lam)
    with pytest.raises(ValueError, match="scores must be real numbers"):
        V.select([[bad, 0.5]], TWO.lam)


@pytest.mark.parametrize("bad", [NAN, math.inf, None, "low", True])
def test_step_scorer_refuses_an_unjudged_score_that_is_no_finite_number(bad):
    # Before: NaN, None or a string came back as a step's score; a NaN wins np.argmax.
    with pytest.raises(ValueError, match=r"unjudged must be a finite real number, got"):
        S.StepScorer(BOOMS, TWO, unjudged=bad)


def test_step_scorer_takes_the_aggregate_and_refuses_prod_over_a_score_outside_0_1():
    # Under prod, key's steps of 1.9, 1.9, 1.87 multiply to 6.75 and beat one step of 1.89: a longer
    # chain wins by length. The aggregate comes from the caller (search-and-learn's agg_strategy).
    with pytest.raises(ValueError, match="aggregate 'prod' needs a step score in \\[0, 1\\]"):
        S.StepScorer(BOOMS, TWO, step_score="key", aggregate="prod")
    with pytest.raises(ValueError, match=r"in \[0, 1\] under aggregate 'prod' .*, got -1.0"):
        S.StepScorer(BOOMS, TWO, step_score="mean", aggregate="prod")
    with pytest.raises(ValueError, match="unknown aggregate 'mean'"):
        S.StepScorer(BOOMS, TWO, aggregate="mean")
    # Under prod an unjudged step of 0 zeroes its output's product.
    judge = lambda s, c: NAN if c == "bad" else 0.8
    prm = S.StepScorer([judge] * 2, TWO, "mean", unjudged=0, aggregate="prod")
    assert prm.score(["q"], [["good\n\nbad"]]) == [[[pytest.approx(0.8), 0.0]]]
    assert S.StepScorer(BOOMS, TWO).unjudged == -1.0


def concurrency_probe(k):
    """(judge, peak): a judge whose calls wait until k of them run at once (or 10 s pass), and a
    list holding the most calls seen running at once."""
    lock, ready = threading.Lock(), threading.Event()
    running, peak = [0], [0]

    def judge(state, step):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] >= k:
                ready.set()
        ready.wait(10)
        with lock:
            running[0] -= 1
        return 0.8

    return judge, peak


def test_step_scorer_judges_steps_concurrently_by_default_and_bounded(monkeypatch):
    judge, peak = concurrency_probe(2)
    outputs = [["a\n\nb\n\nc\n\nd", "e\n\nf"]]
    scores = S.StepScorer([judge, judge], TWO).score(["q"], outputs)
    assert peak[0] >= 2 and [len(o) for o in scores[0]] == [4, 2]
    pools = []

    class Pool(ThreadPoolExecutor):
        def __init__(self, max_workers):
            pools.append(max_workers)
            super().__init__(max_workers)

    from verdict_lab import verifier  # StepScorer maps through verifier.thread_map

    monkeypatch.setattr(verifier, "ThreadPoolExecutor", Pool)
    S.StepScorer(table_judges(SAL_TABLE), TWO).score(["q1", "q2"], SAL_OUTPUTS)  # 5 steps
    S.StepScorer(table_judges(SAL_TABLE), TWO, concurrency=2).score(["q1", "q2"], SAL_OUTPUTS)
    S.StepScorer(table_judges(SAL_TABLE), TWO, concurrency=1).score(["q1", "q2"], SAL_OUTPUTS)
    assert pools == [5, 2]  # at most `concurrency` threads (8), never more than the steps
    with pytest.raises(ValueError, match="concurrency must be an integer >= 1, got concurrency=0"):
        S.StepScorer(BOOMS, TWO, concurrency=0)


def test_a_judge_that_fails_after_its_retries_makes_its_step_unjudged_and_is_counted(capsys):
    from judges import EndpointError

    def judge(state, step):
        if step == "down":
            raise EndpointError("http://127.0.0.1:9/v1", 503, "overloaded")
        return 0.8

    prm = S.StepScorer(S.memoise([judge, judge]), TWO)
    scores = prm.score(["q1", "q2"], [["ok\n\ndown", "down"], ["ok"]])
    assert scores == [[[pytest.approx(1.8), -1.0], [-1.0]], [[pytest.approx(1.8)]]]
    assert prm.counts == {"steps": 4, "unjudged": 2, "failed": 2}
    err = capsys.readouterr().err
    assert (
        err.count("StepScorer: a judge failed (http://127.0.0.1:9/v1: HTTP 503: overloaded)") == 1
    )
    # A judge's bug is not a failure of the server: it still raises, as in verdict.step.
    with pytest.raises(ValueError, match="returned '0.9'"):
        S.StepScorer([lambda s, c: "0.9"] * 2, TWO).score(["q"], [["a"]])


# search-and-learn's scripts/test_time_compute.py, as read at 6f81cac, with only its model calls
# replaced: it imports load_prm from sal.models.reward_models when it starts, builds
# prm = load_prm(config), and best_of_n reads prm.score and config.agg_strategy.
TEST_TIME_COMPUTE = """
import json, sys
import numpy as np
from sal.config import Config
from sal.models.reward_models import load_prm

config = Config(prm_path=sys.argv[1], agg_strategy=sys.argv[2], prm_batch_size=2)
prm = load_prm(config)
outputs = [["a\\n\\nFinal answer: 1", "b\\n\\nFinal answer: 2"]]
scores = prm.score(["q"], outputs)
agg = {"last": lambda s: s[-1], "min": min, "prod": lambda s: float(np.prod(s))}
agg = [agg[config.agg_strategy](s) for s in scores[0]]
print(json.dumps({"scores": scores, "pred": outputs[0][int(np.argmax(agg))]}))
"""


@pytest.fixture
def sal_stand_in(monkeypatch):
    """A stand-in of search-and-learn's sal.config.Config and sal.models.reward_models.load_prm
    (which knows only its own prm_path strings), put in sys.modules."""
    import dataclasses
    import types

    @dataclasses.dataclass
    class Config:
        prm_path: str = "RLHFlow/Llama3.1-8B-PRM-Deepseek-Data"
        agg_strategy: str = "last"
        prm_batch_size: int = 4

    def load_prm(config):
        raise NotImplementedError(config.prm_path)

    mods = {name: types.ModuleType(name) for name in ("sal", "sal.config", "sal.models")}
    mods["sal.models.reward_models"] = types.ModuleType("sal.models.reward_models")
    mods["sal.config"].Config = Config
    mods["sal.models.reward_models"].load_prm = load_prm
    for name, mod in mods.items():
        monkeypatch.setitem(__import__("sys").modules, name, mod)
    return mods


def test_register_sal_makes_test_time_compute_use_verdict_without_an_edit(
    sal_stand_in, tmp_path, monkeypatch, capsys
):
    import runpy
    import sys

    script = tmp_path / "test_time_compute.py"
    script.write_text(TEST_TIME_COMPUTE)
    made = []

    def make_judges():
        made.append(1)
        return S.memoise(table_judges(SAL_TABLE))

    before = S.register_sal(make_judges, step_score="mean", config=TWO)
    assert before.__name__ == "load_prm"
    for agg, pred in (("last", "b\n\nFinal answer: 2"), ("min", "a\n\nFinal answer: 1")):
        monkeypatch.setattr(sys, "argv", [str(script), "verdict", agg])
        runpy.run_path(str(script), run_name="__main__")
        out = json.loads(capsys.readouterr().out)
        np.testing.assert_allclose(sum(out["scores"][0], []), [0.9, 0.8, 0.5, 0.85], atol=1e-12)
        assert out["pred"] == pred
    assert len(made) == 2
    prm = sal_stand_in["sal.models.reward_models"].load_prm(
        sal_stand_in["sal.config"].Config(prm_path="verdict", agg_strategy="prod")
    )
    assert (prm.aggregate, prm.concurrency, prm.unjudged) == ("prod", 4, 0.0)
    # Another prm_path goes to the load_prm search-and-learn had.
    monkeypatch.setattr(sys, "argv", [str(script), "RLHFlow/Llama3.1-8B-PRM-Deepseek-Data", "last"])
    with pytest.raises(NotImplementedError):
        runpy.run_path(str(script), run_name="__main__")
    # key under prod is refused when the PRM is built, before any judge call.
    S.register_sal(make_judges, config=TWO)
    monkeypatch.setattr(sys, "argv", [str(script), "verdict", "prod"])
    with pytest.raises(ValueError, match="aggregate 'prod' needs a step score in"):
        runpy.run_path(str(script), run_name="__main__")
