"""Tests for verdict.py: oracle (closed form vs np.linalg.solve), seeded properties, golden
values with their derivations (including the paper's two errata), selection, the loop, guards."""

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

import verdict as V
from verdict import Config, consensus, consensus_matrix, dispersion, run, select

# the math warns about nothing, abstentions included
pytestmark = pytest.mark.filterwarnings("error")

NAN = float("nan")
LAM = np.array(V.STUBBORNNESS)
SEEDS = range(8)
TINIEST = 5e-324  # the smallest positive float (subnormal): λ has no floor above it
NOTHING_COUNTED = {  # Trace.totals() of a chain with no steps
    "steps": 0,
    "fallbacks": 0,
    "fallback_rate": 0.0,
    "abstentions": 0,
    "judge_calls": 0,
}


def papers_system(lam):
    """A of the paper's m×m system A s = λ ∘ ŝ: A_ii = 1 + λ_i, A_ij = −1/(m−1)."""
    lam = np.asarray(lam, float)
    m = len(lam)
    return np.full((m, m), -1.0 / (m - 1)) + np.diag(1.0 + lam + 1.0 / (m - 1))


def solve_system(s_hat, lam):
    """The paper's system (1 + λ_i) s_i − (1/(m−1)) Σ_{j≠i} s_j = λ_i ŝ_i, solved by
    np.linalg.solve.

    The equation of the judge k with the largest λ is replaced by the sum of all m equations divided
    by λ_k, a row operation that keeps the solution: column j of A sums to (1 + λ_j) − (m−1)/(m−1) =
    λ_j, so that row reads Σ_j (λ_j/λ_k) s_j = Σ_j (λ_j/λ_k) ŝ_j. A itself is singular at λ = 0 and
    its condition number grows like 1/λ: np.linalg.solve(A, λ ∘ ŝ) is about 0.3% off at λ ≈ 1e-14
    and raises at 1e-17. With the row replaced the system is well conditioned for every λ > 0,
    extreme ratios included (the sum row leans towards judge k, whose own equation it replaces):
    test_the_oracle_is_exact_to_rounding checks it against exact rational arithmetic.
    """
    lam, s_hat = np.asarray(lam, float), np.asarray(s_hat, float)
    A, b, k = papers_system(lam), lam * s_hat, int(np.argmax(lam))
    A[k], b[k] = lam / lam[k], (lam / lam[k]) @ s_hat
    return np.linalg.solve(A, b)


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
def test_the_oracle_solves_the_papers_system(seed):
    # The row replacement in solve_system is a row operation: for ordinary λ, where A is well
    # conditioned, it gives what np.linalg.solve gives on A itself.
    rng = np.random.default_rng(seed)
    for m in range(2, 9):
        lam, s_hat = rng.uniform(0.05, 20, m), rng.random(m)
        np.testing.assert_allclose(
            solve_system(s_hat, lam),
            np.linalg.solve(papers_system(lam), lam * s_hat),
            rtol=0,
            atol=1e-12,
        )


def exact_solve(s_hat, lam):
    """The paper's system solved exactly, by Gaussian elimination on Fractions."""
    m, c = len(lam), Fraction(1, len(lam) - 1)
    rows = [
        [1 + Fraction(lam[i]) if j == i else -c for j in range(m)]
        + [Fraction(lam[i]) * Fraction(s_hat[i])]
        for i in range(m)
    ]
    for p in range(m):  # A is strictly diagonally dominant (1 + λ_i > (m−1)·c = 1): no pivot is 0
        for r in rows[p + 1 :]:
            f = r[p] / rows[p][p]
            r[:] = [x - f * y for x, y in zip(r, rows[p])]
    s = [Fraction(0)] * m
    for i in reversed(range(m)):
        s[i] = (rows[i][m] - sum(rows[i][j] * s[j] for j in range(i + 1, m))) / rows[i][i]
    return np.array([float(x) for x in s])


@pytest.mark.parametrize("seed", range(4))
def test_the_oracle_is_exact_to_rounding(seed):
    rng = np.random.default_rng(seed)
    for scale in (1e3, 1.0, 1e-14, 1e-17, 1e-200, TINIEST, None):
        m = int(rng.integers(2, 6))
        lam = (
            10.0 ** rng.uniform(-323, 300, m)
            if scale is None
            else np.maximum(scale * rng.uniform(1, 20, m), TINIEST)
        )
        s_hat = rng.random(m)
        np.testing.assert_allclose(
            solve_system(s_hat, lam), exact_solve(s_hat, lam), rtol=0, atol=1e-14
        )


def oracle_rows(s_hat, lam):
    """The consensus of each row of s_hat [r, m] by the oracle, over the judges who answered."""
    out = np.full(s_hat.shape, NAN)
    for row, o in zip(s_hat, out):
        who = ~np.isnan(row)
        o[who] = solve_system(row[who], lam[who]) if who.sum() >= 2 else row[who]
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_closed_form_matches_the_oracle_down_to_the_smallest_lambda(seed):
    # No floor on λ: every finite λ > 0 is accepted, so the closed form is checked against the
    # oracle from λ ~ 1e3 down to the smallest subnormal 5e-324, with and without abstentions, and
    # with λ_i drawn independently over 1e-323 .. 1e300, where their ratios are extreme too.
    rng = np.random.default_rng(seed)
    lams = [
        np.maximum(10.0**-k * rng.uniform(1, 20, int(rng.integers(2, 9))), TINIEST)
        for k in range(-3, 324, 9)
    ]
    lams += [np.full(int(rng.integers(2, 9)), TINIEST)]
    lams += [10.0 ** rng.uniform(-323, 300, int(rng.integers(2, 9))) for _ in range(20)]
    for lam in lams:
        s_hat = rng.random((12, len(lam)))
        np.testing.assert_allclose(
            consensus(s_hat, lam), oracle_rows(s_hat, lam), rtol=0, atol=1e-13
        )
        s_hat[rng.random(s_hat.shape) < 0.3] = NAN  # some rows below 2 answers
        np.testing.assert_allclose(
            consensus(s_hat, lam), oracle_rows(s_hat, lam), rtol=0, atol=1e-13
        )


def test_tiny_lambda_golden():
    # Equal λ: S = m ŝ̄ (the plain mean is kept), a = λ + m c, so s_i* = (λ ŝ_i + c m ŝ̄)/(λ + m c)
    # = ŝ̄ + λ (ŝ_i − ŝ̄)/(λ + m c): every score moves to the mean as λ → 0. ŝ = (0.9, 0.2, 0.5): ŝ̄
    # = 8/15, m c = 3/2. (With the textbook denominator 1 − c Σ 1/a_i, s* is 0.08% off at λ = 1e-14
    # and inf at 1e-17.)
    s_hat = np.array([0.9, 0.2, 0.5])
    for lam in (1e-14, 1e-17, 1e-300, TINIEST):
        want = 8 / 15 + lam * (s_hat - 8 / 15) / (lam + 1.5)
        np.testing.assert_allclose(consensus(s_hat, [lam] * 3), want, rtol=0, atol=1e-15)
    # m = 2, c = 1: det A = λ_1 + λ_2 + λ_1 λ_2 and s_1 = ((1 + λ_2) λ_1 ŝ_1 + λ_2 ŝ_2) / det → (λ_1
    # ŝ_1 + λ_2 ŝ_2) / (λ_1 + λ_2): with λ = (1e-17, 2e-17) and ŝ = (0.9, 0.3) both scores are 0.5
    # (to 1e-17).
    np.testing.assert_allclose(
        consensus([0.9, 0.3], [1e-17, 2e-17]), [0.5, 0.5], rtol=0, atol=1e-15
    )
    # An agreeing candidate is accepted at any λ > 0: it is a fixed point (s̄* = 0.7, Δ* = 0).
    sel = select([[0.7, 0.7, 0.7], [0.9, 0.2, 0.5]], [1e-17] * 3)
    assert sel.accepted.tolist() == [True, False] and not sel.fallback and sel.index == 0
    np.testing.assert_allclose(sel.s_bar_star, [0.7, 8 / 15], rtol=0, atol=1e-15)


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
    np.testing.assert_allclose(
        consensus(s_hat).reshape(-1, 3), consensus(s_hat.reshape(-1, 3)), atol=0
    )
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
    # Sum the system over i: Σ(1+λ_i)s_i − Σ_i (1/(m−1))Σ_{j≠i} s_j = Σ s_i + Σ λ_i s_i − Σ s_j = Σ
    # λ_i s_i.
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
    np.testing.assert_allclose(
        consensus_matrix(V.STUBBORNNESS),
        [[0.7003, 0.1603, 0.1394], [0.2404, 0.5923, 0.1672], [0.2613, 0.2091, 0.5296]],
        atol=5e-5,
    )


def test_consensus_mean_is_a_fixed_weighted_mean():
    # s̄* = (1/m) 1ᵀ M ŝ: the column means of M. Exact values: a = (3, 2.5, 2.3), S = (Σλŝ/a)/(1 −
    # ½Σ1/a), and the weights come out as 0.4007 / 0.3206 / 0.2787 (not 1/3 each: erratum 1).
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
    s_hat = np.array(
        [
            [0.95, 0.95, 0.05],  # 0: two judges love it, one vetoes: highest max, majority 2
            [0.70, 0.62, 0.66],  # 1: calm and above τ: VERDICT accepts it
            [0.90, 0.20, 0.90],  # 2: Proposition 1's conflict: highest raw mean and s̄*
            [0.66, 0.64, 0.65],  # 3: calmest, highest minimum
        ]
    )
    # raw means: .65, .66, .6667, .65;  raw Δ: .4, .0267, .3111, .0067;  mins: .05, .62, .2, .64
    # s̄*: .6991, .6632, .6756, .6508;  Δ*: .1505, .0123, .1268, .0031
    # Note s̄*[0] = .6991 > s̄*[2]: the weighted mean favours the visual judge's 0.95.
    want = {
        "verdict": 1,  # accepted: 1 and 3 (s̄* > .6, Δ* < .1); higher s̄* is 1
        "mean": 2,  # highest raw mean .6667
        "min": 3,  # highest minimum .64
        "max": 0,  # highest maximum .95 (ties with nothing)
        "majority": 1,  # judges above τ: 2, 3, 2, 3 -> tie 1 vs 3 broken by raw mean .66 > .65
        "variance": 1,  # std < ε: 1 (std .0327) and 3 (std .0082); higher raw mean is 1
        "raw-dual": 1,  # raw mean > .6 and raw Δ < .1: 1 and 3; higher raw mean is 1
        "no-filter": 0,  # highest s̄* overall
        "no-rank": 1,  # first accepted in sampling order
    }
    for rule, index in want.items():
        sel = select(s_hat, rule=rule)
        assert sel.index == index, rule
    assert set(want) == set(V.RULES)


def test_fallback_ranks_by_mean_minus_dispersion():
    # s̄* − Δ* is lower still
    s_hat = [
        [0.9, 0.2, 0.9],  # s̄* − Δ* = 0.6756 − 0.1268 = 0.5488
        [0.55, 0.5, 0.55],  # s̄* = 0.5340 < τ: rejected; s̄* − Δ* = 0.5340 − 0.0091 = 0.5249
        [0.95, 0.1, 0.3],
    ]
    sel = select(s_hat)
    assert sel.fallback and not sel.accepted.any() and sel.verified
    assert sel.index == 0
    np.testing.assert_allclose(
        sel.s_bar_star - sel.delta_star, [0.548780, 0.524913, 0.345122], atol=1e-6
    )


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


def test_select_all_defaults_are_the_papers():
    # τ = 0.6 and ε = 0.1: on the hand-made case ε = 1.1 would accept candidate 0 (highest s̄*
    # .6991) and τ = 1.6 would accept nothing.
    s_hat = [[0.95, 0.95, 0.05], [0.70, 0.62, 0.66], [0.90, 0.20, 0.90], [0.66, 0.64, 0.65]]
    for rule, sel in V.select_all(s_hat).items():
        one = select(s_hat, V.STUBBORNNESS, 0.6, 0.1, rule)
        assert (sel.index, sel.fallback, sel.accepted.tolist()) == (
            one.index,
            one.fallback,
            one.accepted.tolist(),
        )
    assert V.select_all(s_hat)["verdict"].accepted.tolist() == [False, True, False, True]


def test_fallback_keys_subtract_the_dispersion():
    # Both candidates are rejected. With the paper's λ (s* = M ŝ, M above):
    #   0: (0.9, 0.2, 0.9):    s̄* .67561, Δ* .12683 > ε;  s̄* − Δ* = .54878;
    #                          raw mean .66667, raw Δ .31111: .35556
    #   1: (0.58, 0.57, 0.58): s̄* .57679 < τ, Δ* .00181; s̄* − Δ* = .57498;
    #                          raw mean .57667 < τ, raw Δ .00444: .57222
    # Ranking by s̄* (or s̄* + Δ*, or the raw mean) alone would pick 0.
    s_hat = [[0.9, 0.2, 0.9], [0.58, 0.57, 0.58]]
    for rule in ("verdict", "raw-dual"):
        sel = select(s_hat, rule=rule)
        assert sel.fallback and not sel.accepted.any() and sel.index == 1, rule
    assert select(s_hat, rule="no-filter").index == 0 and select(s_hat, rule="mean").index == 0


def test_accepted_candidates_rank_by_their_mean_not_their_order():
    # Both accepted: (0.7, 0.6, 0.7) s̄* .66794, Δ* .01812 (raw .66667, .04444, std .04714) and
    # (0.8, 0.8, 0.75) s̄* .78606, Δ* .00836 (raw .78333, .02222, std .02357). The second is better.
    s_hat = [[0.7, 0.6, 0.7], [0.8, 0.8, 0.75]]
    for rule in ("verdict", "raw-dual", "variance"):
        sel = select(s_hat, rule=rule)
        assert sel.accepted.tolist() == [True, True] and sel.index == 1 and not sel.fallback, rule
    assert select(s_hat, rule="no-rank").index == 0  # sampling order


def test_thresholds_are_strict():
    # m = 2, λ = (1, 1): c = 1, a = 3, S = ŝ_1 + ŝ_2 (equal λ keep the mean), s_i* = (ŝ_i + S)/3.
    # ŝ = (0.9, 0.6): s* = (0.8, 0.7), s̄* = 0.75, Δ* = 0.05; raw mean 0.75, raw Δ 0.15.
    # A value equal to its threshold fails it; one just past it passes.
    one = [[0.9, 0.6]]
    accepted = lambda rule, tau, eps: bool(select(one, (1.0, 1.0), tau, eps, rule).accepted[0])
    for rule in ("verdict", "no-rank"):
        assert not accepted(rule, 0.75, 0.5) and accepted(rule, 0.7499, 0.5), rule  # s̄* > τ
        assert not accepted(rule, 0.5, 0.05) and accepted(rule, 0.5, 0.0501), rule  # Δ* < ε
    assert not accepted("raw-dual", 0.75, 0.5) and accepted("raw-dual", 0.7499, 0.5)  # mean > τ
    assert not accepted("raw-dual", 0.5, 0.15) and accepted("raw-dual", 0.5, 0.1501)  # Δ̂ < ε
    # variance: std of (0.5, 0.7) is exactly 0.1 = ε, so it is not below ε (0.1² =
    # 0.010000000000000002 in floating point, which let a variance of 0.01 pass).
    assert not select([[0.5, 0.7]], (1.0, 1.0), 0.6, 0.1, "variance").accepted[0]
    assert select([[0.5, 0.7]], (1.0, 1.0), 0.6, 0.1001, "variance").accepted[0]
    # majority counts scores strictly above τ: (0.6, 0.6, 0.65) has 1 (3 with ≥), (0.9, 0.7, 0.1)
    # has 2.
    assert select([[0.6, 0.6, 0.65], [0.9, 0.7, 0.1]], rule="majority").index == 1
    # Rounded to 12 decimals: 6 × 0.1 = 0.6000000000000001 is not above τ = 0.6.
    assert select([[0.1 * 6, 0.1 * 6, 0.65], [0.9, 0.7, 0.1]], rule="majority").index == 1


def test_majority_counts_first_then_the_raw_mean():
    # judges above τ = 0.6: 2, 3, 3; raw means .85, .61, .70. The count decides before the mean
    # (0 has the highest mean), and the mean breaks the tie between 1 and 2 (not the index).
    s_hat = [[1.0, 1.0, 0.55], [0.61, 0.61, 0.61], [0.7, 0.7, 0.7]]
    assert select(s_hat, rule="majority").index == 2
    assert select(s_hat, rule="mean").index == 0


def test_min_and_max_take_the_extreme_raw_score():
    # mins .1, .5, .4 and maxes .9, .5, .95; NaN (abstention) is skipped, not a minimum.
    s_hat = [[0.1, 0.9, 0.5], [0.5, NAN, 0.5], [0.4, 0.95, 0.6]]
    assert select(s_hat, rule="min").index == 1 and select(s_hat, rule="max").index == 2


def test_best_is_lexicographic_with_nan_last_and_ties_to_the_lowest_index():
    assert V._best([0, 1, 1], [5, 1, 2]) == 2  # the first key decides; the second among ties
    # a later key never overrides an earlier one
    assert V._best([1, 1, 0], [0.2, 0.5, 9], [9, 0, 9]) == 1
    # a decided first key is final, NaN or not
    assert V._best([1, 0, 0], [NAN, 5, 5], [0, 0, 1]) == 0
    assert V._best([NAN, 0.0]) == 1 and V._best([NAN, -5.0]) == 1  # NaN counts as −∞
    assert V._best([NAN, NAN]) == 0 and V._best([0.4, 0.4, 0.4]) == 0
    assert V._best([0.3, 0.1 + 0.2]) == 0  # 0.30000000000000004 rounds to a tie with 0.3
    assert V._best([0.3, 0.3 + 1e-11]) == 1  # a difference at 11 decimals still counts
    # batched: per row
    np.testing.assert_array_equal(V._best(np.array([[0, 1], [1, 0], [2, 2]])), [1, 0, 0])


def test_fully_answered_rows_do_not_depend_on_the_rest_of_the_batch():
    s_hat = np.random.default_rng(3).random((50, 3))
    with_gap = np.vstack([s_hat, [[0.4, NAN, 0.9]]])
    assert np.array_equal(consensus(with_gap)[:50], consensus(s_hat))


@pytest.mark.parametrize("seed", range(4))
def test_batched_select_equals_select_step_by_step(seed):
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 6)), int(rng.integers(2, 5))
    s_hat = rng.integers(0, 11, size=(400, n, m)) / 10  # a grid: ties and exact τ are common
    s_hat[rng.random(s_hat.shape) < 0.2] = NAN  # abstentions, some below 2 answers
    lam = rng.uniform(0.2, 3.0, m)
    for rule in V.RULES:
        batch = select(s_hat, lam, 0.6, 0.1, rule)
        for t in range(len(s_hat)):
            one = select(s_hat[t], lam, 0.6, 0.1, rule)
            assert (batch.index[t], batch.fallback[t], batch.verified[t]) == (
                one.index,
                one.fallback,
                one.verified,
            )
            assert np.array_equal(batch.accepted[t], one.accepted), (rule, t)


def round12(x: float) -> float:
    """x rounded to 12 decimals as the core rounds (verdict._rounded: numpy.round). Python's round
    is correctly rounded and can land on the other side of a half-way point: 0.2999999999995 is
    0.3 to numpy and 0.299999999999 to Python."""
    return float(np.round(x, V.DECIMALS))


def reference_candidate(row, lam, tau, solve=solve_system):
    """One candidate's statistics, in plain Python over the judges who answered (DESIGN §4); s* is
    their own game, solved by `solve` (the oracle; tests/test_claims.py passes verdict.consensus).
    """
    raw = [float(x) for x in row if not math.isnan(x)]
    star = (
        [float(x) for x in solve(raw, [lam_i for x, lam_i in zip(row, lam) if not math.isnan(x)])]
        if len(raw) >= 2
        else raw
    )
    mean = lambda v: sum(v) / len(v) if v else NAN
    mad = lambda v: mean([abs(x - mean(v)) for x in v])
    return {
        "verified": len(raw) >= 2,
        "s_bar_star": mean(star),
        "delta_star": mad(star),
        "s_bar": mean(raw),
        "delta": mad(raw),
        "std": math.sqrt(mean([(x - mean(raw)) ** 2 for x in raw])) if raw else NAN,
        "min": min(raw, default=NAN),
        "max": max(raw, default=NAN),
        "above": sum(round12(x) > tau for x in raw),
    }


def reference_rule(rule, c, tau, eps):
    """(accepted, ranking key if some candidate is accepted, ranking key if none is) of candidate c,
    from the definitions in select's docstring; comparisons on values rounded to 12 decimals."""
    dual = c["verified"] and round12(c["s_bar_star"]) > tau and round12(c["delta_star"]) < eps
    if rule == "verdict":
        return dual, (c["s_bar_star"],), (c["s_bar_star"] - c["delta_star"],)
    if rule == "no-rank":
        return dual, (), ()
    if rule == "raw-dual":
        raw_dual = c["verified"] and round12(c["s_bar"]) > tau and round12(c["delta"]) < eps
        return raw_dual, (c["s_bar"],), (c["s_bar"] - c["delta"],)
    if rule == "variance":
        return c["verified"] and round12(c["std"]) < eps, (c["s_bar"],), (c["s_bar"],)
    key = {
        "mean": (c["s_bar"],),
        "min": (c["min"],),
        "max": (c["max"],),
        "majority": (c["above"], c["s_bar"]),
        "no-filter": (c["s_bar_star"],),
    }[rule]
    return c["verified"], key, key


def reference_select(cands, rule, tau, eps):
    """(index, fallback, verified, accepted) of one step from its candidates' statistics, one
    candidate at a time: the best accepted candidate; if none, the best verified one by the fallback
    key; if none, the best of all. NaN keys rank last, ties go to the lowest index."""
    judged = [reference_rule(rule, c, tau, eps) for c in cands]
    accepted = [ok for ok, _, _ in judged]
    pool = (
        [i for i, ok in enumerate(accepted) if ok]
        or [i for i, c in enumerate(cands) if c["verified"]]
        or list(range(len(cands)))
    )
    rank = lambda i: tuple(
        -math.inf if math.isnan(k) else round12(k) for k in judged[i][1 if any(accepted) else 2]
    )
    index = pool[0]
    for i in pool[1:]:
        if rank(i) > rank(index):
            index = i
    return index, not any(accepted), any(c["verified"] for c in cands), accepted


@pytest.mark.parametrize("seed", SEEDS)
def test_every_rule_matches_an_independent_reference(seed):
    # Scores on a grid of tenths (or twentieths) with τ and ε on the same grid, so ties, scores
    # equal to τ and dispersions equal to ε are common; abstentions leave some candidates with 0 or
    # 1 answers; equal λ make ties in s̄* too. Seeds 6 and 7 draw continuous scores.
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(2, 7)), int(rng.integers(2, 6))
    grid = (10, 20, 10, 20, 10, 20, None, None)[seed]
    s_hat = rng.integers(0, grid + 1, size=(150, n, m)) / grid if grid else rng.random((150, n, m))
    s_hat[rng.random(s_hat.shape) < 0.25] = NAN
    lam = np.ones(m) if seed % 2 == 0 else rng.uniform(0.2, 3.0, m)
    tau, eps = float(rng.choice([0.5, 0.6, 0.7])), float(rng.choice([0.05, 0.1, 0.15]))
    cands = [[reference_candidate(row, lam, tau) for row in step] for step in s_hat]
    for rule, sel in V.select_all(s_hat, lam, tau, eps).items():
        for t, cs in enumerate(cands):
            index, fallback, verified, accepted = reference_select(cs, rule, tau, eps)
            assert (sel.index[t], sel.fallback[t], sel.verified[t]) == (
                index,
                fallback,
                verified,
            ), (rule, t)
            assert sel.accepted[t].tolist() == accepted, (rule, t)
    # the inputs reach what the rules decide at: a mean at τ, a dispersion at ε, tied means
    if grid:
        r = round12
        assert any(r(c["s_bar"]) == tau for cs in cands for c in cs)
        assert any(r(c["delta"]) == eps or r(c["std"]) == eps for cs in cands for c in cs)
        assert any(
            len({r(c["s_bar"]) for c in cs if c["verified"]}) < sum(c["verified"] for c in cs)
            for cs in cands
        )


def test_abstentions():
    # One judge missing: the candidate is still verified (2 answers) and can be accepted.
    sel = select([[0.8, NAN, 0.8], [0.5, 0.5, 0.5]])
    assert sel.accepted.tolist() == [True, False] and sel.index == 0 and sel.verified
    assert np.isnan(sel.s_star[0, 1]) and sel.s_bar_star[0] == pytest.approx(0.8)
    # A candidate with one answer is never accepted and ranks after every verified one, for every
    # rule.
    lone = [[1.0, NAN, NAN], [0.3, 0.2, 0.3]]
    for rule in V.RULES:
        sel = select(lone, rule=rule)
        assert sel.index == 1 and not sel.accepted[0], rule
    # No candidate verified: not verified, fallback, and the rule still returns a valid index.
    sel = select([[NAN, 0.9, NAN], [NAN, NAN, NAN], [0.4, NAN, NAN]])
    assert not sel.verified and sel.fallback and sel.index == 0
    assert select([[NAN] * 3] * 2).index == 0


def test_paper_rule_on_proposition_1_and_a_fallback():
    assert V.paper_rule([[0.9, 0.2, 0.9], [0.7, 0.6, 0.7]]) == (1, False)  # Δ* .1268 no, .0181 yes
    assert V.paper_rule([[0.9, 0.2, 0.9], [0.58] * 3]) == (1, True)  # s̄* − Δ*: .5488 < .58
    # s̄* = τ is not > τ; tie: first
    assert V.paper_rule([[0.6, 0.6, 0.6], [0.6, 0.6, 0.6]]) == (
        0,
        True,
    )
    # one answer ranks after two
    assert V.paper_rule([[NAN, NAN, 0.9], [0.2, 0.3, 0.2]]) == (
        1,
        True,
    )
    # no answer (s̄* NaN as −∞) ranks last
    assert V.paper_rule([[NAN] * 3, [0.0, NAN, NAN]]) == (
        1,
        True,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_paper_rule_is_the_batched_verdict_rule(seed):
    # Scores on a grid of tenths (exact ties in s̄*, in Δ*, and at τ), repeated rows, NaN
    # abstentions (some candidates with fewer than 2 answers), equal or random λ, τ and ε over their
    # whole ranges.
    rng = np.random.default_rng(seed)
    for _ in range(300):
        n, m = int(rng.integers(1, 7)), int(rng.integers(2, 5))
        s_hat = rng.integers(0, 11, (n, m)) / 10
        s_hat[rng.random((n, m)) < 0.2] = NAN
        if n > 1 and rng.random() < 0.3:
            s_hat[rng.integers(n)] = s_hat[rng.integers(n)]
        lam = np.ones(m) if rng.random() < 0.3 else rng.uniform(0.2, 3.0, m)
        tau, eps = rng.integers(0, 10) / 10, rng.choice([0.01, 0.05, 0.1, 0.2, 0.5, 1.0])
        sel = select(s_hat, lam, tau, eps)
        assert V.paper_rule(s_hat, lam, tau, eps) == (sel.index, sel.fallback), (
            s_hat,
            lam,
            tau,
            eps,
        )


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"tau": 5}, "tau must be in [0, 1]"),
        ({"tau": 1.5}, "tau=1.5"),
        ({"tau": 2.0}, "tau=2.0"),
        ({"tau": -0.5}, "tau=-0.5"),
        ({"tau": NAN}, "tau=nan"),
        ({"tau": "0.6"}, "tau='0.6'"),
        ({"eps": -1}, "eps must be in (0, 1] (Δ* >= 0: eps <= 0 accepts nothing), got eps=-1"),
        ({"eps": 0}, "eps=0"),
        ({"eps": 1.5}, "eps=1.5"),
        ({"eps": math.inf}, "eps=inf"),
        ({"n": True}, "n must be an integer >= 1, got n=True"),
        ({"n": 2.0}, "n=2.0"),
        ({"max_steps": -1}, "max_steps must be an integer >= 1, got max_steps=-1"),
        ({"lam": (1.0, NAN, 1.0)}, "finite and > 0"),
        ({"lam": (1.0,)}, "m=2"),
    ],
)
def test_config_refuses_a_setting_out_of_range(kw, message):
    with pytest.raises(ValueError) as info:
        Config(**kw)
    assert message in str(info.value)


def test_config_ranges_are_exactly_where_the_rule_can_accept():
    # Inside the ranges a unanimous candidate (s̄* = 1, Δ* = 0) passes; at τ = 1 or ε = 0 nothing
    # ever does. τ = 1 is allowed: the paper's restrictive regime, where every step falls back.
    assert (
        Config(tau=1).tau == 1.0
        and not select([[1.0, 1.0, 1.0]], tau=Config(tau=1).tau).accepted[0]
    )
    for tau, eps in [(0, 1), (0.999999, 1e-9), (V.TAU, V.EPS)]:
        cfg = Config(tau=tau, eps=eps, n=np.int64(2), max_steps=np.int32(1))
        assert select([[1.0, 1.0, 1.0]], cfg.lam, cfg.tau, cfg.eps).accepted[0]
        assert (type(cfg.tau), type(cfg.eps), type(cfg.n), type(cfg.max_steps)) == (
            float,
            float,
            int,
            int,
        )
    assert (
        not select([[1.0, 1.0, 1.0]], tau=1.0).accepted[0]
        and not select([[0.7] * 3], eps=0.0).accepted[0]
    )
    assert (Config().tau, Config().eps) == (V.TAU, V.EPS) == (0.6, 0.1)


# ----------------------------------------------------------------------------- the loop

SCRIPT = {  # step -> candidate -> (ŝ_V, ŝ_L, ŝ_C)
    0: {
        "The red cube is left of the ball.": (0.7, 0.6, 0.7),  # accepted (Δ* .0181)
        "The cube is red and large.": (0.9, 0.2, 0.9),  # conflict: rejected (Δ* .1268)
        "Cubes are usually left.": (0.3, 0.4, 0.2),
    },
    1: {
        "So the ball is on the right.": (0.5, 0.55, 0.5),  # s̄* .5134 - Δ* .0098 = .5036
        "So the ball is far away.": (0.9, 0.1, 0.2),  # s̄* .4879 - Δ* .1791 = .3088
        "Hmm.": (NAN, NAN, 0.9),
    },  # one judge only: ranks last
    2: {
        "Final answer: B": (0.8, 0.8, 0.75),
        "Final answer: A": (0.2, 0.3, 0.4),
        "Final answer: C": (0.1, 0.1, 0.1),
    },
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
    trace = run(
        "Is the ball left or right of the cube? A. left B. right",
        propose,
        judges,
        image="scene.png",
    )
    assert calls == [(0, 3), (1, 3), (2, 3)]
    assert trace.question == "Is the ball left or right of the cube? A. left B. right"
    assert trace.chain == [
        "The red cube is left of the ball.",
        "So the ball is on the right.",
        "Final answer: B",
    ]
    assert [r.selection.fallback for r in trace.steps] == [False, True, False]
    assert trace.steps[0].selection.accepted.tolist() == [True, False, False]
    assert trace.stopped == "final" and trace.answer == "B"
    assert trace.totals() == {
        "steps": 3,
        "fallbacks": 1,
        "fallback_rate": 1 / 3,
        "abstentions": 2,
        "judge_calls": 27,
    }
    np.testing.assert_array_equal(trace.steps[1].s_hat[2], [NAN, NAN, 0.9])


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
    assert not rec.selection.fallback and rec.abstentions == 0 and rec.selection.verified is False
    assert rec.selection.s_star.shape == (2, 0) and rec.selection.accepted.dtype == bool
    assert rec.selection.s_bar_star.dtype == float and np.isnan(rec.selection.delta_star).all()
    assert trace.totals() == {**NOTHING_COUNTED, "steps": 2}


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
    assert trace.question == "q" and trace.config == Config()
    stopped_in_proposal = run(
        "q", lambda s, n: (_ for _ in ()).throw(V.Stop("no more calls")), judges
    )
    assert stopped_in_proposal.stopped == "no more calls" and stopped_in_proposal.steps == ()
    assert stopped_in_proposal.totals() == NOTHING_COUNTED


def test_the_loop_passes_the_question_images_and_chosen_steps():
    seen = []

    def propose(state, n):
        seen.append(state)
        return [f"step {len(state.steps)}", "Final answer: A" if state.steps else "other"]

    judge = lambda state, step: 0.9 if step.startswith("step") else 0.1
    trace = run("Which?", propose, [judge] * 3, Config(max_steps=3), image=["a.png", "b.png"])
    assert [s.question for s in seen] == ["Which?"] * 3 and [s.images for s in seen] == [
        ("a.png", "b.png")
    ] * 3
    assert [s.steps for s in seen] == [(), ("step 0",), ("step 0", "step 1")]
    assert (
        trace.question == "Which?"
        and trace.stopped == "max_steps"
        and trace.config == Config(max_steps=3)
    )
    assert (
        V.as_images(None) == ()
        and V.as_images("a.png") == ("a.png",)
        and V.as_images(b"x") == (b"x",)
    )
    assert V.as_images(["a", "b"]) == ("a", "b") and V.as_images(("a",)) == ("a",)


def test_step_selects_with_the_configured_rule():
    # (0.95, 0.95, 0.05) has the highest maximum; VERDICT rejects it (Δ* .1505) and takes (0.7,
    # 0.62, 0.66).
    scores = {"veto": (0.95, 0.95, 0.05), "calm": (0.70, 0.62, 0.66)}
    propose = lambda state, n: ["veto", "calm"]
    judges = [lambda s, c, i=i: scores[c][i] for i in range(3)]
    assert V.step(V.State("q"), propose, judges).chosen == "calm"
    assert V.step(V.State("q"), propose, judges, Config(rule="max")).chosen == "veto"


def test_config_normalises_lam_and_accepts_the_smallest_values():
    cfg = Config(lam=[1, Fraction(1, 2), np.float32(2)], n=1, max_steps=1)
    assert cfg.lam == (1.0, 0.5, 2.0) and all(type(x) is float for x in cfg.lam)
    assert Config(lam=(TINIEST, TINIEST, TINIEST)).lam == (TINIEST,) * 3


def test_inputs_are_read_as_floats():
    # Python ints, Fractions and numpy scalars are numbers like any other.
    exact = [Fraction(9, 10), Fraction(1, 5), Fraction(9, 10)]
    lam = [Fraction(3, 2), 1, Fraction(4, 5)]
    np.testing.assert_array_equal(consensus(exact, lam), consensus([0.9, 0.2, 0.9], V.STUBBORNNESS))
    assert dispersion([Fraction(7, 10), Fraction(3, 5), Fraction(7, 10)]) == dispersion(
        [0.7, 0.6, 0.7]
    )
    assert select([[1, 1, 1], [0, 1, 0]]).index == 0
    # s̄ of Fractions and ints, NaN among them: (1/2 + 1/4) / 2 = 0.375 and 1.
    np.testing.assert_array_equal(
        V.mean([[Fraction(1, 2), NAN, Fraction(1, 4)], [1, 1, 1]]), [0.375, 1]
    )


# ----------------------------------------------------------------------------- judges' return
# values


def logical_judge(state, step):
    return 0.5


BAD = [
    None,
    "0.9",
    True,
    False,
    np.True_,
    [0.5],
    np.array([0.5]),
    Decimal("0.5"),
    complex(0.5, 0),
    1.5,
    -0.1,
    math.inf,
    -math.inf,
    2,
    10**400,
    np.float64(1.5),
]


@pytest.mark.parametrize("value", BAD, ids=[type(v).__name__ + str(i) for i, v in enumerate(BAD)])
def test_a_judge_returns_a_real_number_or_nan(value):
    # None, strings, bools and non-real numbers are bugs in the judge, not abstentions; out of range
    # is never clamped. The error names the judge by index and repr (a function's repr holds its
    # name).
    judges = [lambda s, c: 0.5, lambda s, c: value, logical_judge]
    with pytest.raises(ValueError) as info:
        run("q", lambda s, n: ["a"], judges)
    assert str(info.value) == (
        f"judge 1 ({judges[1]!r}) returned {value!r}; a judge returns a real number in [0, 1], "
        "or NaN to abstain"
    )
    with pytest.raises(ValueError, match=r"^judge 2 \(<function .*contextual at "):

        def contextual(state, step):
            return value

        run("q", lambda s, n: ["a", "b"], [logical_judge, logical_judge, contextual])


def test_a_named_judge_is_named():
    class Judge:
        def __repr__(self):
            return "Judge('visual')"

        def __call__(self, state, step):
            return None

    with pytest.raises(
        ValueError,
        match=r"^judge 0 \(Judge\('visual'\)\) returned None; a judge returns a real number",
    ):
        run("q", lambda s, n: ["a", "b"], [Judge(), logical_judge, logical_judge])


def test_judges_may_return_any_real_number_or_nan():
    values = [
        0,
        1,
        0.25,
        np.float32(0.5),
        np.float64(0.75),
        np.int64(1),
        Fraction(1, 4),
        NAN,
        np.float32("nan"),
    ]
    judges = [lambda s, c, v=v: v for v in values]
    rec = V.step(V.State("q"), lambda s, n: ["a"], judges, Config(lam=(1.0,) * len(values)))
    assert rec.s_hat.dtype == float and rec.abstentions == 2
    np.testing.assert_array_equal(rec.s_hat, [[0, 1, 0.25, 0.5, 0.75, 1, 0.25, NAN, NAN]])


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "call, message",
    [
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
        (lambda: select(np.zeros((0, 3))), "select needs at least one candidate, got n=0"),
        (lambda: select([[0.5, 0.5, 0.5]], tau=NAN), "tau"),
        (lambda: select([[0.5, 0.5, 0.5]], eps=math.inf), "eps"),
        (
            lambda: select([[0.5, 0.5, 0.5]], rule="median"),
            "unknown rule 'median'; expected one of verdict, mean, min",
        ),
        (lambda: select([[0.5, 0.5]]), "one stubbornness per judge"),
        (lambda: V.paper_rule(np.full((2, 2, 3), 0.5)), "shape [n, m]"),
        (lambda: V.paper_rule(np.zeros((0, 3))), "at least one candidate"),
        (lambda: V.paper_rule([[0.5, 0.5, 0.5]], eps=NAN), "eps"),
        (lambda: consensus_matrix([2.0]), "m=2"),
        (lambda: Config(rule="best"), "unknown rule 'best'; expected one of verdict, mean, min"),
        (lambda: Config(n=0), "n=0"),
        (lambda: Config(max_steps=0), "max_steps"),
        (lambda: Config(tau=NAN), "tau"),
        (lambda: Config(final="("), "final"),
        (lambda: Config(lam=(1.0, 0.0, 1.0)), "finite and > 0"),
        (lambda: run("q", lambda s, n: ["a"], [lambda s, c: 0.5] * 2), "2 judges but 3"),
        (lambda: run("q", lambda s, n: [], [lambda s, c: 0.5] * 3), "non-empty"),
        (lambda: run("q", lambda s, n: ["a"], [lambda s, c: 1.5] * 3), "1.5"),
        # None, a string, a bool or a complex number among the scores is a caller's bug, never
        # converted
        (
            lambda: select([[None, 0.5, 0.5]]),
            "scores must be real numbers (NaN to abstain), got None",
        ),
        (lambda: select([["0.9", 0.5, 0.5]]), "got '0.9'"),
        (lambda: select([[True, 0.5, 0.5]]), "got True"),
        (lambda: select([[0.5j, 0.5, 0.5]]), "got 0.5j"),
        (
            lambda: select(np.array([[True, False, True]])),
            "scores must be real numbers, got an array of bool",
        ),
        (lambda: select(np.array([["0.9", "0.5"]])), "got an array of <U3"),
        (
            lambda: consensus([0.5, 0.5], [1.0, "2"]),
            "lam must be real numbers (NaN to abstain), got '2'",
        ),
        (
            lambda: Config(lam=(True, 1.0, 1.0)),
            "lam must be real numbers (NaN to abstain), got True",
        ),
        # propose returns a list of strings: a string is not its characters, nor a dict its keys
        (
            lambda: run("q", lambda s, n: "Final answer: A", [lambda s, c: 0.5] * 3),
            "got str: 'Final answer: A'",
        ),
        (lambda: run("q", lambda s, n: {"a": 1}, [lambda s, c: 0.5] * 3), "got dict"),
        (
            lambda: run("q", lambda s, n: None, [lambda s, c: 0.5] * 3),
            "propose must return a list of strings, got NoneType",
        ),
        # s̄ and Δ of anything: a judge axis, and finite values (consensus values may leave [0, 1])
        (lambda: V.dispersion(0.5), "scores must have shape [..., m], got shape ()"),
        (lambda: V.mean(0.5), "scores must have shape [..., m], got shape ()"),
        (lambda: V.dispersion([math.inf, 0, 0]), "scores must be finite (NaN = abstain), got"),
        (lambda: V.mean([0.0, -math.inf]), "must be finite"),
        (lambda: V.dispersion([None, 0.5]), "got None"),
        # an integer no float holds is refused as any other bad number, never an OverflowError
        (lambda: consensus([10**400, 0, 0]), "scores must be real numbers a float can hold"),
        (lambda: select([[0.5] * 3], (10**400, 1, 1)), "lam must be real numbers a float can"),
        (lambda: V.paper_rule([[0.5] * 3], tau=10**400), "tau and eps must be finite, got tau=1"),
        (lambda: V.select_all([[0.5] * 3], eps=-(10**400)), "must be finite, got tau=0.6, eps=-1"),
        (lambda: Config(lam=(1, 10**400, 1)), "lam must be real numbers a float can hold"),
        (lambda: Config(tau=10**400), "tau must be in [0, 1]"),
    ],
)
def test_bad_input_names_the_problem(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)


def test_a_huge_number_is_shown_cut_and_s_bar_and_delta_of_consensus_values_beyond_0_1():
    with pytest.raises(ValueError) as info:
        V.paper_rule([[0.5] * 3], tau=10**400)
    assert str(info.value) == f"tau and eps must be finite, got tau={'1' + '0' * 39}, eps=0.1"
    with pytest.raises(ValueError) as info:
        Config(eps=10**400)
    assert str(info.value).endswith(f"got eps={'1' + '0' * 39}")
    # mean and dispersion take any finite values: consensus of other scores may leave [0, 1].
    np.testing.assert_allclose(V.mean([[2.0, -1.0, NAN]]), [0.5])
    np.testing.assert_allclose(V.dispersion([[2.0, -1.0, NAN]]), [1.5])
    assert V.dispersion([NAN, NAN]) != V.dispersion([NAN, NAN])  # no answer: NaN


def test_on_step_sees_each_step_as_soon_as_it_is_decided():
    # on_step(record) runs after step t is decided and before step t + 1 is proposed.
    events = []
    propose, judges = scripted([])

    def proposing(state, n):
        events.append(("propose", len(state.steps)))
        return propose(state, n)

    trace = run("q", proposing, judges, on_step=lambda rec: events.append(("step", rec.chosen)))
    chosen = [r.chosen for r in trace.steps]
    assert (
        events == [e for t, c in enumerate(chosen) for e in (("propose", t), ("step", c))]
        and len(chosen) == 3
    )


def test_some_messages_in_full():
    with pytest.raises(ValueError, match=r"^select needs at least one candidate, got n=0$"):
        select(np.zeros((2, 0, 3)))
    rules = "verdict, mean, min, max, majority, variance, raw-dual, no-filter, no-rank"
    with pytest.raises(ValueError, match=f"^unknown rule 'median'; expected one of {rules}$"):
        V.select_all([[0.5, 0.5]], (1, 1), rules=("mean", "median"))
