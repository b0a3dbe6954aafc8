"""Tests for verdict.py: oracle (closed form vs np.linalg.solve), seeded properties, golden
values with their derivations (including the paper's two errata), selection, the loop, guards."""
import json
import math

import numpy as np
import pytest

import verdict as V
from verdict import Config, consensus, consensus_matrix, dispersion, run, select

NAN = float("nan")
LAM = np.array(V.STUBBORNNESS)
SEEDS = range(8)


def solve_system(s_hat, lam):
    """The paper's m×m system (1 + λ_i) s_i − (1/(m−1)) Σ_{j≠i} s_j = λ_i ŝ_i, solved directly."""
    m = len(lam)
    A = np.full((m, m), -1.0 / (m - 1)) + np.diag(1.0 + np.asarray(lam) + 1.0 / (m - 1))
    return np.linalg.solve(A, np.asarray(lam) * s_hat)


def rand_case(rng, m=None):
    m = m or int(rng.integers(2, 9))
    return rng.random(m), rng.uniform(0.05, 20, m)


# ----------------------------------------------------------------------------- oracle

@pytest.mark.parametrize("seed", SEEDS)
def test_closed_form_matches_linalg_solve(seed):
    rng = np.random.default_rng(seed)
    for m in range(2, 9):
        lam = rng.uniform(0.05, 20, m)
        s_hat = rng.random((50, m))
        want = np.array([solve_system(row, lam) for row in s_hat])
        np.testing.assert_allclose(consensus(s_hat, lam), want, rtol=0, atol=1e-12)
        M = consensus_matrix(lam)
        np.testing.assert_allclose(s_hat @ M.T, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_abstention_solves_the_game_of_those_who_answered(seed):
    rng = np.random.default_rng(seed)
    s_hat, lam = rand_case(rng, m=int(rng.integers(3, 9)))
    drop = rng.choice(len(lam), size=int(rng.integers(1, len(lam) - 1)), replace=False)
    keep = np.setdiff1d(np.arange(len(lam)), drop)
    masked = s_hat.copy()
    masked[drop] = NAN
    got = consensus(masked, lam)
    assert np.all(np.isnan(got[drop]))
    np.testing.assert_allclose(got[keep], solve_system(s_hat[keep], lam[keep]), atol=1e-12)


def test_batched_over_leading_axes_and_one_judge_left():
    s_hat = np.random.default_rng(0).random((4, 5, 3))
    np.testing.assert_allclose(consensus(s_hat).reshape(-1, 3), consensus(s_hat.reshape(-1, 3)), atol=0)
    # m' = 1: nobody to agree with, the lone score stands; m' = 0: all NaN.
    got = consensus([[NAN, 0.3, NAN], [NAN, NAN, NAN]])
    np.testing.assert_array_equal(np.isnan(got), [[True, False, True], [True, True, True]])
    assert got[0, 1] == 0.3


# ----------------------------------------------------------------------------- properties

@pytest.mark.parametrize("seed", SEEDS)
def test_rows_of_M_sum_to_one(seed):
    _, lam = rand_case(np.random.default_rng(seed))
    np.testing.assert_allclose(consensus_matrix(lam).sum(1), 1.0, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_consensus_stays_within_raw_range(seed):
    rng = np.random.default_rng(seed)
    for _ in range(100):
        s_hat, lam = rand_case(rng)
        s = consensus(s_hat, lam)
        assert s.min() >= s_hat.min() - 1e-12 and s.max() <= s_hat.max() + 1e-12


@pytest.mark.parametrize("seed", SEEDS)
def test_constant_vector_is_a_fixed_point(seed):
    rng = np.random.default_rng(seed)
    _, lam = rand_case(rng)
    v = float(rng.random())
    np.testing.assert_allclose(consensus(np.full(len(lam), v), lam), v, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_lambda_weighted_sum_is_the_invariant(seed):
    # Sum the system over i: Σ(1+λ_i)s_i − Σ_i (1/(m−1))Σ_{j≠i} s_j = Σ s_i + Σ λ_i s_i − Σ s_j = Σ λ_i s_i.
    rng = np.random.default_rng(seed)
    for _ in range(100):
        s_hat, lam = rand_case(rng)
        assert math.isclose(lam @ consensus(s_hat, lam), lam @ s_hat, abs_tol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_plain_mean_preserved_only_when_lambdas_are_equal(seed):
    rng = np.random.default_rng(seed)
    s_hat = rng.random((100, 3))
    equal = np.full(3, rng.uniform(0.05, 20))
    np.testing.assert_allclose(consensus(s_hat, equal).mean(1), s_hat.mean(1), atol=1e-12)
    # Erratum 1: with the paper's λ the mean moves whenever ŝ is not constant.
    moved = np.abs(consensus(s_hat, LAM).mean(1) - s_hat.mean(1))
    assert np.all(moved > 1e-6)


@pytest.mark.parametrize("seed", SEEDS)
def test_consensus_shrinks_dispersion(seed):
    rng = np.random.default_rng(seed)
    for _ in range(100):
        s_hat, lam = rand_case(rng)
        assert dispersion(consensus(s_hat, lam)) < dispersion(s_hat)
    const = np.full(4, 0.3)
    assert dispersion(consensus(const, np.ones(4))) == dispersion(const) == 0.0


@pytest.mark.parametrize("seed", SEEDS)
def test_paper_lambda_shrink_ratio_lies_in_known_band(seed):
    s_hat = np.random.default_rng(seed).random((10_000, 3))
    ratio = dispersion(consensus(s_hat)) / dispersion(s_hat)  # measured band: between 0.36 and 0.46
    assert ratio.min() > 0.36 - 1e-3 and ratio.max() < 0.46 + 1e-3


@pytest.mark.parametrize("seed", SEEDS)
def test_permuting_judges_with_their_lambdas_permutes_result(seed):
    rng = np.random.default_rng(seed)
    s_hat, lam = rand_case(rng)
    p = rng.permutation(len(lam))
    np.testing.assert_allclose(consensus(s_hat[p], lam[p]), consensus(s_hat, lam)[p], atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_infinitely_stubborn_judges_keep_their_scores(seed):
    rng = np.random.default_rng(seed)
    s_hat, lam = rand_case(rng)
    gaps = [np.abs(consensus(s_hat, lam * k) - s_hat).max() for k in (1, 1e2, 1e4, 1e6)]
    assert all(b < a for a, b in zip(gaps, gaps[1:]))
    assert gaps[-1] < 1e-5


# ----------------------------------------------------------------------------- golden values

def test_consensus_matrix_golden():
    # M = A⁻¹ diag(λ) with A = [[2.5, −.5, −.5], [−.5, 2, −.5], [−.5, −.5, 1.8]] (c = 1/2).
    np.testing.assert_allclose(consensus_matrix(V.STUBBORNNESS), [
        [0.7003, 0.1603, 0.1394], [0.2404, 0.5923, 0.1672], [0.2613, 0.2091, 0.5296]], atol=5e-5)


def test_consensus_mean_is_a_fixed_weighted_mean():
    # s̄* = (1/m) 1ᵀ M ŝ: the column means of M. Exact values: a = (3, 2.5, 2.3), S = (Σλŝ/a)/(1 − ½Σ1/a),
    # and the weights come out as 0.4007 / 0.3206 / 0.2787 (not 1/3 each: erratum 1).
    w = consensus_matrix(V.STUBBORNNESS).mean(0)
    np.testing.assert_allclose(w, [0.4007, 0.3206, 0.2787], atol=5e-5)
    s_hat = np.random.default_rng(1).random((20, 3))
    np.testing.assert_allclose(consensus(s_hat).mean(1), s_hat @ w, atol=1e-12)


def test_proposition_1_and_erratum_2():
    # (0.9, 0.2, 0.9): s* = (0.78780, 0.48537, 0.75366), s̄* = 0.67561, Δ* = 0.12683 > ε: rejected.
    # (0.7, 0.6, 0.7): s* = (0.68397, 0.64077, 0.67909), s̄* = 0.66794, Δ* = 0.01812 < ε: accepted.
    # The paper's "Δ* ≈ 0.04" for the second vector is its RAW dispersion 0.0444 (erratum 2),
    # and its "shared mean 2/3" is not preserved by the consensus (0.6756 ≠ 0.6667, erratum 1).
    conflict, calm = consensus([0.9, 0.2, 0.9]), consensus([0.7, 0.6, 0.7])
    np.testing.assert_allclose(conflict, [0.787805, 0.485366, 0.753659], atol=1e-6)
    np.testing.assert_allclose(calm, [0.683972, 0.640767, 0.679094], atol=1e-6)
    assert round(float(dispersion(conflict)), 4) == 0.1268
    assert round(float(dispersion(calm)), 4) == 0.0181
    assert round(float(dispersion([0.7, 0.6, 0.7])), 4) == 0.0444
    assert round(float(conflict.mean()), 4) == 0.6756 and round(float(calm.mean()), 4) == 0.6679
    sel = select([[0.9, 0.2, 0.9], [0.7, 0.6, 0.7]])
    assert sel.accepted.tolist() == [False, True] and sel.index == 1 and not sel.fallback


# ----------------------------------------------------------------------------- selection

def test_rules_disagree_on_a_hand_made_case():
    s_hat = np.array([
        [0.95, 0.95, 0.05],   # 0: two judges love it, one vetoes: highest max, majority 2
        [0.70, 0.62, 0.66],   # 1: calm and above τ: VERDICT accepts it
        [0.90, 0.20, 0.90],   # 2: Proposition 1's conflict: highest raw mean and s̄*
        [0.66, 0.64, 0.65],   # 3: calmest, highest minimum
    ])
    # raw means: .65, .66, .6667, .65;  raw Δ: .4, .0267, .3111, .0067;  mins: .05, .62, .2, .64
    # s̄*: .6991, .6632, .6756, .6508;  Δ*: .1505, .0123, .1268, .0031
    # Note s̄*[0] = .6991 > s̄*[2]: the weighted mean favours the visual judge's 0.95.
    want = {
        "verdict": 1,    # accepted: 1 and 3 (s̄* > .6, Δ* < .1); higher s̄* is 1
        "mean": 2,       # highest raw mean .6667
        "min": 3,        # highest minimum .64
        "max": 0,        # highest maximum .95 (ties with nothing)
        "majority": 1,   # judges above τ: 2, 3, 2, 3 -> tie 1 vs 3 broken by raw mean .66 > .65
        "variance": 1,   # std < ε: 1 (std .0327) and 3 (std .0082); higher raw mean is 1
        "raw-dual": 1,   # raw mean > .6 and raw Δ < .1: 1 and 3; higher raw mean is 1
        "no-filter": 0,  # highest s̄* overall
        "no-rank": 1,    # first accepted in sampling order
    }
    for rule, index in want.items():
        sel = select(s_hat, rule=rule)
        assert sel.index == index, rule
    assert set(want) == set(V.RULES)


def test_fallback_ranks_by_mean_minus_dispersion():
    s_hat = [[0.9, 0.2, 0.9],     # s̄* − Δ* = 0.6756 − 0.1268 = 0.5488
             [0.55, 0.5, 0.55],   # s̄* = 0.5340 < τ: rejected; s̄* − Δ* = 0.5340 − 0.0091 = 0.5249
             [0.95, 0.1, 0.3]]    # s̄* − Δ* is lower still
    sel = select(s_hat)
    assert sel.fallback and not sel.accepted.any() and sel.verified
    assert sel.index == 0
    np.testing.assert_allclose(sel.s_bar_star - sel.delta_star, [0.548780, 0.524913, 0.345122], atol=1e-6)


def test_ties_go_to_the_lowest_index():
    s_hat = [[0.7, 0.7, 0.7]] * 3
    for rule in V.RULES:
        assert select(s_hat, rule=rule).index == 0, rule
    assert select([[0.2, 0.2], [0.5, 0.5], [0.5, 0.5]], lam=(1.0, 1.0)).index == 1


def test_exact_ties_are_decided_by_the_mathematics_not_by_rounding():
    # ŝ = (0.6, 0.6, 0.6) is a fixed point: s̄* = 0.6 exactly, which is not > τ = 0.6 (strict).
    for lam in [(1.0, 1.0, 1.0), V.STUBBORNNESS]:
        sel = select([[0.6, 0.6, 0.6]], lam)
        assert not sel.accepted[0] and sel.fallback
    # Equal λ: both candidates have s̄* = 0.7 exactly and Δ* equal, so the lower index wins.
    assert select([[0.8, 0.7, 0.6], [0.6, 0.8, 0.7]], lam=(1.0, 1.0, 1.0)).index == 0
    assert select([[0.8, 0.7, 0.6], [0.6, 0.8, 0.7]], lam=(1.0, 1.0, 1.0), rule="mean").index == 0


def test_fully_answered_rows_do_not_depend_on_the_rest_of_the_batch():
    s_hat = np.random.default_rng(3).random((50, 3))
    with_gap = np.vstack([s_hat, [[0.4, NAN, 0.9]]])
    assert np.array_equal(consensus(with_gap)[:50], consensus(s_hat))


@pytest.mark.parametrize("seed", range(4))
def test_batched_select_equals_select_step_by_step(seed):
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 6)), int(rng.integers(2, 5))
    s_hat = rng.integers(0, 11, size=(400, n, m)) / 10                # a grid: ties and exact τ are common
    s_hat[rng.random(s_hat.shape) < 0.2] = NAN                        # abstentions, some below 2 answers
    lam = rng.uniform(0.2, 3.0, m)
    for rule in V.RULES:
        batch = select(s_hat, lam, 0.6, 0.1, rule)
        for t in range(len(s_hat)):
            one = select(s_hat[t], lam, 0.6, 0.1, rule)
            assert (batch.index[t], batch.fallback[t], batch.verified[t]) == (one.index, one.fallback, one.verified)
            assert np.array_equal(batch.accepted[t], one.accepted), (rule, t)


def test_abstentions():
    # One judge missing: the candidate is still verified (2 answers) and can be accepted.
    sel = select([[0.8, NAN, 0.8], [0.5, 0.5, 0.5]])
    assert sel.accepted.tolist() == [True, False] and sel.index == 0 and sel.verified
    assert np.isnan(sel.s_star[0, 1]) and sel.s_bar_star[0] == pytest.approx(0.8)
    # A candidate with one answer is never accepted and ranks after every verified one, for every rule.
    lone = [[1.0, NAN, NAN], [0.3, 0.2, 0.3]]
    for rule in V.RULES:
        sel = select(lone, rule=rule)
        assert sel.index == 1 and not sel.accepted[0], rule
    # No candidate verified: not verified, fallback, and the rule still returns a valid index.
    sel = select([[NAN, 0.9, NAN], [NAN, NAN, NAN], [0.4, NAN, NAN]])
    assert not sel.verified and sel.fallback and sel.index == 0
    assert select([[NAN] * 3] * 2).index == 0


# ----------------------------------------------------------------------------- the loop

SCRIPT = {  # step -> candidate -> (ŝ_V, ŝ_L, ŝ_C)
    0: {"The red cube is left of the ball.": (0.7, 0.6, 0.7),          # accepted (Δ* .0181)
        "The cube is red and large.": (0.9, 0.2, 0.9),                 # conflict: rejected (Δ* .1268)
        "Cubes are usually left.": (0.3, 0.4, 0.2)},
    1: {"So the ball is on the right.": (0.5, 0.55, 0.5),              # s̄* .5134 - Δ* .0098 = .5036
        "So the ball is far away.": (0.9, 0.1, 0.2),                   # s̄* .4879 - Δ* .1791 = .3088
        "Hmm.": (NAN, NAN, 0.9)},                                      # one judge only: ranks last
    2: {"Final answer: B": (0.8, 0.8, 0.75),
        "Final answer: A": (0.2, 0.3, 0.4),
        "Final answer: C": (0.1, 0.1, 0.1)},
}


def scripted(step_calls):
    def propose(state, n):
        step_calls.append((len(state.steps), n))
        return list(SCRIPT[len(state.steps)])[:n]

    def judge(i):
        return lambda state, step: SCRIPT[len(state.steps)][step][i]
    return propose, [judge(0), judge(1), judge(2)]


def test_loop_follows_a_hand_derived_chain():
    calls = []
    propose, judges = scripted(calls)
    trace = run("Is the ball left or right of the cube? A. left B. right", propose, judges, image="scene.png")
    assert calls == [(0, 3), (1, 3), (2, 3)]
    assert trace.chain == ["The red cube is left of the ball.", "So the ball is on the right.", "Final answer: B"]
    assert [r.selection.fallback for r in trace.steps] == [False, True, False]
    assert trace.steps[0].selection.accepted.tolist() == [True, False, False]
    assert trace.stopped == "final" and trace.answer == "B"
    d = trace.to_dict()
    assert d["format"] == "verdict-trace/2"
    assert d["totals"] == {"steps": 3, "fallbacks": 1, "fallback_rate": 1 / 3, "abstentions": 2, "judge_calls": 27}
    assert d["steps"][1]["s_hat"][2] == [None, None, 0.9]
    assert json.loads(json.dumps(d, allow_nan=False)) == d


def test_loop_stops_at_max_steps_and_final_is_configurable():
    propose = lambda state, n: [f"step {len(state.steps)} DONE"] * n
    judges = [lambda s, c: 0.7] * 3
    trace = run("q", propose, judges, Config(max_steps=4))
    assert trace.stopped == "max_steps" and len(trace.steps) == 4 and trace.answer is None
    trace = run("q", propose, judges, Config(final=r"DONE"))
    assert trace.stopped == "final" and len(trace.steps) == 1 and trace.answer == ""


def test_loop_uses_map_fn_for_all_judge_calls_in_order():
    seen = []

    def recording_map(f, items):
        items = list(items)
        seen.append(len(items))
        return [f(x) for x in reversed(items)][::-1]  # evaluates out of order, returns in order
    calls = []
    propose, judges = scripted(calls)
    plain = run("q", propose, judges)
    mapped = run("q", propose, judges, map_fn=recording_map)
    assert seen == [9, 9, 9] and mapped.chain == plain.chain


def test_step_is_the_body_of_the_loop():
    calls = []
    propose, judges = scripted(calls)
    trace = run("q", propose, judges)
    state = V.State("q")
    for rec in trace.steps:  # each recorded step is what `step` makes of the state before it
        again = V.step(state, propose, judges)
        assert again.candidates == rec.candidates and again.chosen == rec.chosen
        np.testing.assert_array_equal(again.s_hat, rec.s_hat)
        state = state.extend(rec.chosen)


def test_no_judges_is_the_base_reasoner_alone():
    propose = lambda state, n: [f"step {len(state.steps)} of {n}"] * n + ["ignored"]
    trace = run("q", propose, (), Config(n=1, max_steps=2))
    assert trace.chain == ["step 0 of 1", "step 1 of 1"] and trace.stopped == "max_steps"
    rec = trace.steps[0]
    assert rec.s_hat.shape == (2, 0) and rec.selection.index == 0 and not rec.selection.verified
    assert not rec.selection.fallback and rec.abstentions == 0
    d = trace.to_dict()
    assert d["totals"] == {"steps": 2, "fallbacks": 0, "fallback_rate": 0.0, "abstentions": 0, "judge_calls": 0}
    assert d["steps"][0]["s_bar_star"] == [None, None] and json.loads(json.dumps(d, allow_nan=False)) == d


def test_stop_ends_the_chain_and_keeps_the_completed_steps():
    calls = []
    propose, judges = scripted(calls)
    seen = []

    def budgeted(state, step):  # the visual judge's 5th call (step 2, candidate 2) stops the chain
        seen.append(step)
        if len(seen) == 5:
            raise V.Stop("budget")
        return judges[0](state, step)
    trace = run("q", propose, [budgeted, judges[1], judges[2]])
    assert trace.stopped == "budget" and len(trace.steps) == 1 and trace.answer is None
    assert trace.chain == ["The red cube is left of the ball."]
    stopped_in_proposal = run("q", lambda s, n: (_ for _ in ()).throw(V.Stop("no more calls")), judges)
    assert stopped_in_proposal.stopped == "no more calls" and stopped_in_proposal.steps == ()


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("call, message", [
    (lambda: consensus([0.5]), "m=2"),
    (lambda: consensus([0.5, 0.5], [1.0]), "one stubbornness per judge"),
    (lambda: consensus([0.5, 0.5, 0.5], [1.0, 0.0, 1.0]), "finite and > 0"),
    (lambda: consensus([0.5, 0.5, 0.5], [1.0, -2.0, 1.0]), "finite and > 0"),
    (lambda: consensus([0.5, 0.5, 0.5], [1.0, math.inf, 1.0]), "finite and > 0"),
    (lambda: consensus([0.5, 1.2, 0.5]), "1.2"),
    (lambda: consensus([0.5, -0.1, 0.5]), "-0.1"),
    (lambda: consensus([0.5, math.inf, NAN]), "inf"),
    (lambda: consensus(0.5), "shape"),
    (lambda: select([0.5, 0.5, 0.5]), "shape"),
    (lambda: select(np.zeros((0, 3))), "n=0"),
    (lambda: select([[0.5, 0.5, 0.5]], tau=NAN), "tau"),
    (lambda: select([[0.5, 0.5, 0.5]], eps=math.inf), "eps"),
    (lambda: select([[0.5, 0.5, 0.5]], rule="median"), "median"),
    (lambda: select([[0.5, 0.5]]), "one stubbornness per judge"),
    (lambda: consensus_matrix([2.0]), "m=2"),
    (lambda: Config(rule="best"), "best"),
    (lambda: Config(n=0), "n=0"),
    (lambda: Config(max_steps=0), "max_steps"),
    (lambda: Config(tau=NAN), "tau"),
    (lambda: Config(final="("), "final"),
    (lambda: Config(lam=(1.0, 0.0, 1.0)), "finite and > 0"),
    (lambda: run("q", lambda s, n: ["a"], [lambda s, c: 0.5] * 2), "2 judges but 3"),
    (lambda: run("q", lambda s, n: [], [lambda s, c: 0.5] * 3), "non-empty"),
    (lambda: run("q", lambda s, n: ["a"], [lambda s, c: 1.5] * 3), "1.5"),
])
def test_bad_input_names_the_problem(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)
