"""Tests for perf/simulation.py and its command (verdict_lab/simulate.py): the batched selection
against verdict.select (oracle), the noise-free and symmetric cases, EVPV's gate, the intervals, and
the reproducibility of the report."""

import json
import math
import os
from dataclasses import replace

import numpy as np
import pytest

from verdict_lab import simulate
from verdict_lab.perf import simulation
import verdict
from test_demo import run_script
from verdict_lab.perf.simulation import (
    ALL_RULES,
    Scenario,
    draw,
    interval,
    measure,
    premises,
    raw_scores,
    select_batch,
)


# ----------------------------------------------------------------------------- oracle


def _random_steps(rng, T, n, m):
    """Scores on the grid {0, 0.1, ..., 1} (so ties, and means exactly at τ = 0.6, are common),
    with abstentions: NaN entries, and some whole candidates with fewer than 2 answers."""
    s_hat = rng.integers(0, 11, size=(T, n, m)) / 10  # [T, n, m]
    s_hat[rng.random((T, n, m)) < 0.2] = np.nan
    few = rng.random((T, n)) < 0.1  # [T, n] candidates left with ≤ 1 answer
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
            return (
                answered[i].sum() >= 2,
                round(val, verdict.DECIMALS),
                -i,
            )  # exact ties: lowest index

        assert got[t] == max(range(3), key=key), (t, step.tolist())


# ----------------------------------------------------------------------------- properties


@pytest.mark.parametrize("seed", range(4))
def test_zero_noise_every_rule_picks_a_correct_candidate(seed):
    # Wrong steps at or below τ, correct ones above (as in the default world, 0.45 and 0.72):
    # no-rank, which takes the first accepted candidate without ranking, needs the filter to
    # separate them.
    rng = np.random.default_rng(seed)
    sc = Scenario(
        sigma=0.0,
        mu0=rng.uniform(0.0, 0.6),
        mu1=rng.uniform(0.61, 1.0),
        lam=tuple(rng.uniform(0.2, 3.0, 3)),
    )
    d = draw(seeds=3, trials=400, seed=seed, n=int(rng.integers(1, 6)))
    for rule, r in measure(d, sc).items():
        assert np.all(r["accuracy"] == 1.0), rule


def test_identical_judges_equal_lam_verdict_chooses_as_the_mean():
    # rho = 1: every judge reports the same score, so Δ* = 0 and (equal λ) s̄* = the raw mean.
    # The filter is then s̄* > τ; whenever it accepts, the top raw mean is accepted and chosen.
    sc = Scenario(rho=1.0, lam=(1.0, 1.0, 1.0), sigma=0.2)
    s_hat, _ = raw_scores(draw(3, 2000, seed=5), sc)
    b = select_batch(s_hat, sc.lam, sc.tau, sc.eps)
    accepts = ~b["verdict"].fallback
    assert accepts.mean() > 0.5  # the property is exercised
    assert np.array_equal(b["verdict"].index[accepts], b["mean"].index[accepts])


@pytest.mark.parametrize("seed", range(3))
def test_exchangeable_judges_equal_lam_agree_whenever_the_means_choice_is_accepted(seed):
    # i.i.d. judges, equal λ: the plain mean is preserved (s̄* = raw mean), so VERDICT, which takes
    # the accepted candidate with the highest s̄*, agrees with the mean whenever the mean's pick
    # passes.
    sc = Scenario(lam=(0.7, 0.7, 0.7), sigma=0.2)
    s_hat, _ = raw_scores(draw(3, 2000, seed=seed), sc)
    b = select_batch(s_hat, sc.lam, sc.tau, sc.eps)
    pick = b["mean"].index  # [T]
    passes = np.take_along_axis(b["verdict"].accepted, pick[:, None], 1)[:, 0]  # [T]
    assert passes.mean() > 0.3
    assert np.array_equal(b["verdict"].index[passes], pick[passes])


# ----------------------------------------------------------------------------- EVPV's gate


def test_gate_golden_a_premise_that_fools_L_and_C():
    # sigma = 0, every candidate wrong and built on a contradicted premise that fools L and C,
    # always flagged: raw ŝ = (0.45, 0.9, 0.9); the visual gate makes it (0.5, 0.9, 0.9), the step
    # gate (0.5, 0.5, 0.5). Rows of M sum to 1, so s* = 0.9 − (0.9 − ŝ_V) · M[:, 0], where
    # M[:, 0] = (0.7003, 0.2404, 0.2613), whose mean is 0.40067 and mean absolute deviation
    # D = (0.29963 + 0.16027 + 0.13937) / 3 = 0.19976. Hence
    #   none:   s̄* = 0.9 − 0.45 · 0.40067 = 0.7197,  Δ* = 0.45 · D = 0.0899
    #   visual: s̄* = 0.9 − 0.40 · 0.40067 = 0.7397,  Δ* = 0.40 · D = 0.0799
    #           (closer to V: less dispersion)
    #   step:   s̄* = 0.5, Δ* = 0 (a constant vector is a fixed point), rejected by τ = 0.6.
    d = draw(2, 50, seed=7)
    base = Scenario(sigma=0.0, p_correct=0.0, p_premise=1.0, premise_fools=(1, 2), p_detect=1.0)
    want = {
        "none": (0.7197, 0.0899, True),
        "visual": (0.7397, 0.0799, True),
        "step": (0.5, 0.0, False),
    }
    for gate, (s_bar, delta, accepted) in want.items():
        s_hat, _ = raw_scores(d, replace(base, gate=gate))
        b = select_batch(s_hat)["verdict"]
        assert np.allclose(b.s_bar_star, s_bar, atol=1e-4) and np.allclose(
            b.delta_star, delta, atol=1e-4
        ), gate
        assert np.all(b.accepted == accepted), gate


@pytest.mark.parametrize("seed, tau", [(0, 0.5), (1, 0.55), (2, 0.6), (3, 0.75), (4, 0.9)])
def test_perfect_check_and_step_target_never_accept_a_contradicted_step(seed, tau):
    # With p_detect = 1 every contradicted step is flagged (r = 0, α = 0), and the step target sets
    # each answering judge's score to 0.5 exactly. The consensus of a constant vector is that
    # constant, so s̄* = 0.5 (the raw mean too), and a filter that needs s̄* > τ rejects it for
    # every τ ≥ 0.5, whatever the noise, λ, the fooled judges, the false alarms or the abstentions
    # (fewer than 2 answers: never accepted).
    rng = np.random.default_rng(seed)
    fools = tuple(int(j) for j in np.flatnonzero(rng.random(3) < 0.7))
    sc = Scenario(
        sigma=rng.uniform(0.05, 0.3),
        p_premise=rng.uniform(0.2, 1.0),
        premise_fools=fools,
        mu_fool=rng.uniform(0.6, 1.0),
        p_detect=1.0,
        p_false=rng.uniform(0, 0.3),
        q=rng.uniform(0, 0.3),
        lam=tuple(rng.uniform(0.2, 3.0, 3)),
        tau=tau,
        gate="step",
    )
    d = draw(3, 1000, seed=seed)
    assert premises(d, sc)[0].sum() > 100  # the property is exercised
    r = measure(d, sc)
    for rule in (
        "verdict",
        "no-rank",
        "raw-dual",
    ):  # the rules whose filter asks for a mean above τ
        assert np.all(r[rule]["contradicted_accepted"] == 0.0), rule
    # The guarantee is the step target's: gating ŝ_V alone leaves a premise that fools
    # all three judges accepted.
    fooled_all = measure(
        d,
        replace(
            sc,
            premise_fools=(0, 1, 2),
            mu_fool=0.9,
            tau=0.6,
            lam=verdict.STUBBORNNESS,
            gate="visual",
        ),
    )
    assert fooled_all["verdict"]["contradicted_accepted"].mean() > 0.5


@pytest.mark.parametrize("seed", range(3))
def test_gate_moves_only_its_targets_flagged_scores_and_nan_stays_nan(seed):
    rng = np.random.default_rng(seed)
    sc = Scenario(
        p_premise=0.5,
        premise_fools=(0, 2),
        p_detect=rng.uniform(0.3, 1),
        p_false=rng.uniform(0.1, 0.5),
        q=0.2,
    )
    d = draw(2, 500, seed=seed)
    flagged = premises(d, sc)[1]  # [N, n]
    none, visual, step = (raw_scores(d, replace(sc, gate=g))[0] for g in ("none", "visual", "step"))
    assert 0.1 < flagged.mean() < 0.9
    nan = np.isnan(none)
    assert np.array_equal(nan, np.isnan(visual)) and np.array_equal(
        nan, np.isnan(step)
    )  # abstentions untouched
    for gated in (visual, step):  # an unflagged candidate keeps every score, bit for bit
        assert np.array_equal(gated[~flagged], none[~flagged], equal_nan=True)
    assert np.array_equal(
        visual[flagged][:, 1:], none[flagged][:, 1:], equal_nan=True
    )  # visual: L and C untouched
    assert np.all((visual[flagged][:, 0] == 0.5) | nan[flagged][:, 0])  # ŝ_V -> 0.5 (α = 0)
    assert np.all((step[flagged] == 0.5) | nan[flagged])  # every ŝ -> 0.5


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
        assert (
            simulate.main(
                ["--trials", "60", "--seeds", "3", "--seed", str(seed), "--out", str(out)]
            )
            == 0
        )
        outs.append(
            ((out / "simulation_report.md").read_bytes(), (out / "simulation.png").read_bytes())
        )
    assert outs[0] == outs[1]
    assert outs[0][0] != outs[2][0]  # and the seed matters
    text = outs[0][0].decode()
    assert f"Format: `{simulation.FORMAT}`" in text and "--trials 60 --seeds 3 --seed 11" in text
    assert "## EVPV's gate" in text and all(
        f"| premise V+L+C, gate {g} |" in text for g in ("none", "visual", "step")
    )
    assert outs[0][1].startswith(b"\x89PNG")


# ----------------------------------------------------------------------------- guards


@pytest.mark.parametrize(
    "bad, name",
    [
        ({"q": 1.5}, "q"),
        ({"p_fool": -0.1}, "p_fool"),
        ({"sigma": -1.0}, "sigma"),
        ({"fooled": 3}, "fooled"),
        ({"rho": 2.0}, "rho"),
        ({"p_detect": 1.5}, "p_detect"),
        ({"premise_fools": (0, 3)}, "premise_fools"),
        ({"premise_fools": (1, 1)}, "premise_fools"),
        ({"gate": "judges"}, "gate='judges'"),
    ],
)
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
        raw_scores(draw(2, 5), Scenario(lam=(1.0, 1.0)))
    with pytest.raises(ValueError, match="2 per-seed"):
        interval([0.5])


# ----------------------------------------------------------------------------- the command's files


@pytest.mark.parametrize(
    "flags, files",
    [
        (["--sweep", "tau=0.1,0.6"], ["sim_tau.json", "sim_tau.png"]),
        ([], ["simulation.png", "simulation_report.md"]),
    ],
)
def test_the_command_writes_in_the_current_directory_and_prints_its_table(tmp_path, flags, files):
    p = run_script(
        "verdict_lab.simulate", [*flags, "--trials", "30", "--seeds", "2"], str(tmp_path)
    )
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(tmp_path)) == files
    if flags:  # the curve's table: a row per τ, the numbers of sim_tau.json
        s = json.loads((tmp_path / "sim_tau.json").read_text())
        acc = lambda k, m: f"{s['accuracy'][k][m]['Avg']['mean']:.2f}"
        assert "| τ | base | mean | verdict | VERDICT − Mean |" in p.stdout, p.stdout
        for k, t in zip(s["settings"], s["ticks"]):
            assert (
                f"| {t} | {acc(k, 'base')} ±" in p.stdout and f"| {acc(k, 'verdict')} ±" in p.stdout
            )
    else:
        assert p.stdout.startswith("| noise model")
    wrote = {"sim_tau.json": "sim_tau.json and sim_tau.png"}.get(
        files[0], " and ".join(files[::-1])
    )
    assert p.stdout.splitlines()[-1] == f"wrote {wrote}"  # in the current directory
