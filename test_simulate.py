"""Tests for simulate.py: the batched selection against verdict.select (oracle), the noise-free and
symmetric cases, the intervals, and the reproducibility of the report."""
import math

import numpy as np
import pytest

import simulate
import verdict
from simulate import ALL_RULES, Scenario, draw, interval, measure, scores, select_batch


# ----------------------------------------------------------------------------- oracle

def _random_steps(rng, T, n, m):
    """Scores on the grid {0, 0.1, ..., 1} (so ties, and means exactly at τ = 0.6, are common),
    with abstentions: NaN entries, and some whole candidates with fewer than 2 answers."""
    s_hat = rng.integers(0, 11, size=(T, n, m)) / 10                 # [T, n, m]
    s_hat[rng.random((T, n, m)) < 0.2] = np.nan
    few = rng.random((T, n)) < 0.1                                     # [T, n] candidates left with ≤ 1 answer
    s_hat[few, 1:] = np.nan
    s_hat[rng.random(T) < 0.3] = rng.choice([0.5, 0.6, 0.7], size=(n, m))  # some steps: heavy ties
    return s_hat


def test_lam_mean_equals_a_plain_loop():
    # lam-mean is not in verdict.RULES: check it against the definition written out per step.
    rng = np.random.default_rng(4)
    lam = np.array([1.5, 1.0, 0.8])
    s_hat = _random_steps(rng, 2000, 3, 3)
    got = select_batch(s_hat, lam)["lam-mean"].index
    for t, step in enumerate(s_hat):
        answered = ~np.isnan(step)
        def key(i):  # (≥ 2 answers, λ-weighted mean of the answers, lowest index first)
            w = lam[answered[i]]
            val = float(np.sum(w * step[i][answered[i]]) / w.sum()) if w.size else -math.inf
            return (answered[i].sum() >= 2, round(val, verdict.DECIMALS), -i)  # exact ties: lowest index
        assert got[t] == max(range(3), key=key), (t, step.tolist())


# ----------------------------------------------------------------------------- properties

@pytest.mark.parametrize("seed", range(4))
def test_zero_noise_every_rule_picks_a_correct_candidate(seed):
    # Wrong steps at or below τ, correct ones above (as in the default world, 0.45 and 0.72): no-rank,
    # which takes the first accepted candidate without ranking, needs the filter to separate them.
    rng = np.random.default_rng(seed)
    sc = Scenario(sigma=0.0, mu0=rng.uniform(0.0, 0.6), mu1=rng.uniform(0.61, 1.0), lam=tuple(rng.uniform(0.2, 3.0, 3)))
    d = draw(seeds=3, trials=400, seed=seed, n=int(rng.integers(1, 6)))
    for rule, r in measure(d, sc).items():
        assert np.all(r["accuracy"] == 1.0), rule


def test_identical_judges_equal_lam_verdict_chooses_as_the_mean():
    # rho = 1: every judge reports the same score, so Δ* = 0 and (equal λ) s̄* = the raw mean.
    # The filter is then s̄* > τ; whenever it accepts, the top raw mean is accepted and chosen.
    sc = Scenario(rho=1.0, lam=(1.0, 1.0, 1.0), sigma=0.2)
    s_hat, _ = scores(draw(3, 2000, seed=5), sc)
    b = select_batch(s_hat, sc.lam, sc.tau, sc.eps)
    accepts = ~b["verdict"].fallback
    assert accepts.mean() > 0.5  # the property is exercised
    assert np.array_equal(b["verdict"].index[accepts], b["mean"].index[accepts])


@pytest.mark.parametrize("seed", range(3))
def test_exchangeable_judges_equal_lam_agree_whenever_the_means_choice_is_accepted(seed):
    # i.i.d. judges, equal λ: the plain mean is preserved (s̄* = raw mean), so VERDICT, which takes
    # the accepted candidate with the highest s̄*, agrees with the mean whenever the mean's pick passes.
    sc = Scenario(lam=(0.7, 0.7, 0.7), sigma=0.2)
    s_hat, _ = scores(draw(3, 2000, seed=seed), sc)
    b = select_batch(s_hat, sc.lam, sc.tau, sc.eps)
    pick = b["mean"].index                                                       # [T]
    passes = np.take_along_axis(b["verdict"].accepted, pick[:, None], 1)[:, 0]   # [T]
    assert passes.mean() > 0.3
    assert np.array_equal(b["verdict"].index[passes], pick[passes])


def test_intervals_shrink_as_trials_grow():
    sc = Scenario(sigma=0.2, fooled=2, p_fool=0.3, q=0.05)
    small, large = measure(draw(8, 100, seed=6), sc), measure(draw(8, 10_000, seed=6), sc)
    for rule in ALL_RULES:
        for what in ("accuracy", "acceptance", "fallback"):
            hw_small, hw_large = interval(small[rule][what])[1], interval(large[rule][what])[1]
            assert hw_large <= hw_small, (rule, what)
        assert interval(large[rule]["accuracy"])[1] < interval(small[rule]["accuracy"])[1] / 3, rule


def test_interval_golden():
    # values (0, 1): mean 0.5, sd = √0.5, half-width = t(0.975, df=1) · sd / √2 = 12.706 · 0.5.
    assert interval([0.0, 1.0]) == pytest.approx((0.5, 6.353))
    assert interval([0.3] * 5) == (0.3, 0.0)


def test_fixed_seed_gives_an_identical_report(tmp_path):
    outs = []
    for k, seed in enumerate((11, 11, 12)):
        out = tmp_path / str(k)
        out.mkdir()
        assert simulate.main(["--trials", "60", "--seeds", "3", "--seed", str(seed), "--out", str(out)]) == 0
        outs.append(((out / "simulation_report.md").read_bytes(), (out / "simulation.png").read_bytes()))
    assert outs[0] == outs[1]
    assert outs[0][0] != outs[2][0]  # and the seed matters
    text = outs[0][0].decode()
    assert f"Format: `{simulate.FORMAT}`" in text and "--trials 60 --seeds 3 --seed 11" in text
    assert outs[0][1].startswith(b"\x89PNG")


# ----------------------------------------------------------------------------- guards

@pytest.mark.parametrize("bad, name", [({"q": 1.5}, "q"), ({"p_fool": -0.1}, "p_fool"), ({"sigma": -1.0}, "sigma"),
                                       ({"fooled": 3}, "fooled"), ({"rho": 2.0}, "rho")])
def test_scenario_guards_name_the_bad_value(bad, name):
    with pytest.raises(ValueError, match=name):
        Scenario(**bad)


def test_other_guards():
    with pytest.raises(ValueError, match="seeds"):
        draw(seeds=1, trials=10)
    with pytest.raises(ValueError, match="shape"):
        select_batch(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="scores must lie in"):  # verdict's own check, not clamped
        select_batch(np.full((2, 3, 3), 1.5))
    with pytest.raises(ValueError, match="lam"):
        scores(draw(2, 5), Scenario(lam=(1.0, 1.0)))
    with pytest.raises(ValueError, match="2 per-seed"):
        interval([0.5])
