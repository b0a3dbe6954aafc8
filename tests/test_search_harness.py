"""The searches in the harness (verdict_lab.evaluate --rules bon8+last+key,...): each method's
choice on a scripted server against a hand-worked expectation (best-of-N with each aggregate and
step score, weighted best-of-N, majority, beam search with and without the filter), what each row
records of its compute, the seed scheme, the requests a sweep over N sends (counted from the
script), the summary's table and picture of accuracy against compute, and bad settings refused
before any call."""

import json
import re

import pytest
from PIL import Image

import verdict
from verdict_lab import evaluate
from verdict_lab.harness import chains, tables
from verdict_lab.layouts import role_of
from verdict_lab.loopback import chat_response, user_text
from test_evaluate import argv

# With λ = (1, 1, 1) every consensus is a hand calculation. The system
# (1 + λ)s_i − (1/2)Σ_{j≠i} s_j = λŝ_i is 2.5 s_i − S/2 = ŝ_i; summed, S = Σŝ, so
# s_i = 0.4 ŝ_i + 0.2 Σŝ: s̄* = ŝ̄ and s_i − s̄* = 0.4 (ŝ_i − ŝ̄), so Δ* = 0.4 Δ̂ (Δ: the mean
# absolute deviation). A unanimous step (c, c, c): s̄* = c, Δ* = 0.
FLAT = "--lam 1,1,1 --judge-format text --seeds 1"


def steps_of(text: str) -> tuple:
    """The steps so far, as the prompts show them ("Step 1: ..." lines)."""
    return tuple(re.findall(r"(?m)^Step \d+: (.*)$", text))


class World:
    """A scripted server. Best-of-N and majority: chain i (the reasoner seed chains.chain_seed(s,
    i), each request n = 1) proposes scripts[i][t].format(s=s) at step t; a request for n > 1
    candidates (VERDICT's) gets chain j's step t as candidate j. Beam search (given a tree):
    tree[steps so far][:n]. Judge k scores a step scores[step][k] (a number: all three give it)."""

    def __init__(self, scripts=(), scores=None, tree=None):
        self.scripts, self.scores, self.tree = list(scripts), dict(scores or {}), tree

    def __call__(self, body, path):
        role, text = role_of(body["messages"]), user_text(body)
        steps = steps_of(text)
        if role == "reasoner":
            n, reasoner_seed = (
                body.get("n", 1),
                body["seed"] // 1000,
            )  # sampling seed: reasoner seed·1000 + j
            s, i = reasoner_seed % chains.CHAIN_SEEDS, reasoner_seed // chains.CHAIN_SEEDS
            if self.tree is not None:
                return 200, chat_response(self.tree[steps][:n], prompt_tokens=20)
            out = [self.scripts[j][len(steps)].format(s=s) for j in (range(n) if n > 1 else [i])]
            return 200, chat_response(out, prompt_tokens=20)
        step = re.search(r"<step>\n(.*?)\n</step>", text, re.S).group(1)
        v = self.scores[re.sub(r" \(seed \d+\)", "", step)]
        score = v if isinstance(v, (int, float)) else v[verdict.JUDGES.index(role)]
        return 200, chat_response([f"Checked.\nScore: {score}"], prompt_tokens=30)


def write_item(path, answer="B"):
    """One four-option item."""
    item = {
        "id": "q0",
        "question": "Which one?",
        "options": {k: f"opt {k}" for k in "ABCD"},
        "answer": answer,
    }
    path.write_text(json.dumps(item) + "\n")
    return str(path)


def run(tmp_path, loopback, world, rules, more="", answer="B"):
    """evaluate on `world` with --rules `rules`: (exit status, {(method, seed): its row}, the
    server)."""
    srv, data, out = loopback(world), write_item(tmp_path / "q.jsonl", answer), tmp_path / "out"
    code = evaluate.main(argv(data, srv.url, out, f"{FLAT} --rules {rules} {more}"))
    rows = {}
    if (out / "results.jsonl").exists():
        for line in (out / "results.jsonl").read_text().splitlines():
            r = json.loads(line)
            rows[r["method"], r["seed"]] = r
    return code, rows, srv


def picks(rows: dict) -> dict:
    """{method: the answer its seed-0 row read}."""
    return {m: r["pred"] for (m, seed), r in rows.items() if seed == 0}


# ----------------------------------------------------------------------- best-of-N, each step score

# Three one-step chains (every step a final answer), λ = 1: chain 0 says A, scored
# M = (1.0, 0.2, 1.0); chain 1 B, R = (0.6, 0.6, 0.6); chain 2 C, G = (0.66, 0.5, 0.66).
#   M: ŝ̄ = 0.7333, Δ̂ = (0.2667 + 0.5333 + 0.2667)/3 = 0.3556, Δ* = 0.1422 ≥ ε: rejected;
#      key = margin = 0.7333 − 0.1422 = 0.5911; min 0.2, max 1.0; two judges above τ:
#      raw-majority (2 + 0.7333)/4 = 0.6833; raw std 0.377 ≥ ε: raw-variance 0.7333; raw-dual:
#      Δ̂ ≥ ε, 0.7333 − 0.3556 = 0.3778; no-rank 0.
#   R: s̄* = 0.6, not > τ: rejected; key = margin = mean = min = max = raw-dual = 0.6;
#      raw-majority 0.6/4 = 0.15; raw std 0 < ε: raw-variance 1.6; no-rank 0.
#   G: ŝ̄ = 0.6067, Δ̂ = (0.0533 + 0.1067 + 0.0533)/3 = 0.0711, Δ* = 0.0284: accepted; key 1.6067,
#      margin 0.5782; min 0.5, max 0.66; raw-majority (2 + 0.6067)/4 = 0.6517; raw std 0.0754 < ε:
#      raw-variance 1.6067; raw-dual: ŝ̄ > τ and Δ̂ < ε: 1.6067; no-rank 1.
# The highest of each: key G (C), mean M (A), margin R (B), raw-mean M, raw-min R, raw-max M,
# raw-majority M, raw-variance G, raw-dual G, no-rank G.
ONE_STEP = World(
    [["Final answer: A"], ["Final answer: B"], ["Final answer: C"]],
    {
        "Final answer: A": (1.0, 0.2, 1.0),
        "Final answer: B": 0.6,
        "Final answer: C": (0.66, 0.5, 0.66),
    },
)
BY_SCORE = {"key": "C", "mean": "A", "margin": "B", "raw-mean": "A", "raw-min": "B", "raw-max": "A"}
BY_SCORE |= {"raw-majority": "A", "raw-variance": "C", "raw-dual": "C", "no-rank": "C"}


def test_best_of_n_picks_by_each_step_score(tmp_path, loopback):
    rules = ",".join(f"bon3+last+{score}" for score in BY_SCORE)
    code, rows, srv = run(tmp_path, loopback, ONE_STEP, f"base,{rules}")
    assert code == 0 and picks(rows) == {"base": "A"} | {
        f"bon3+last+{k}": v for k, v in BY_SCORE.items()
    }
    # every method asked the same 3 proposals and 9 judge calls: sent once, by the first to ask
    assert len(srv.chats) == 3 + 9 and sum(r["sent"] for r in rows.values()) == 12
    assert (
        rows["base", 0]["sent"] == 1 and rows["bon3+last+key", 0]["sent"] == 2 + 9
    )  # chain 0 is base's
    trace = rows["bon3+last+key", 0]["trace"]
    assert (
        trace["format"] == "verdict-search/1"
        and trace["picked"] == 2
        and trace["chain"] == ["Final answer: C"]
    )
    assert [c["score"] for c in trace["chains"]] == pytest.approx(
        [0.7333 - 0.1422, 0.6, 1.6067], abs=1e-4
    )


# ------------------------------------------------------------------------ best-of-N, each aggregate

# Three two-step chains, every step unanimous
# (s̄* = c, Δ* = 0, accepted iff c > 0.6; key 1 + c if so):
#            steps         answer   mean: last   min    prod    key: steps    last   min
#   chain 0  (0.4, 0.8)    A              0.8    0.4    0.32    (0.4, 1.8)    1.8    0.4
#   chain 1  (0.7, 0.7)    B              0.7    0.7    0.49    (1.7, 1.7)    1.7    1.7
#   chain 2  (1.0, 0.65)   C              0.65   0.65   0.65    (2.0, 1.65)   1.65   1.65
# mean picks A by last, B by min, C by prod; key A by last, B by min; margin = mean here (Δ* = 0);
# raw-min = mean (unanimous).
TWO_STEPS = World(
    [[f"Look {i} (seed {{s}}).", f"Final answer: {'ABC'[i]}"] for i in range(3)],
    {"Look 0.": 0.4, "Look 1.": 0.7, "Look 2.": 1.0, "Final answer: A": 0.8, "Final answer: B": 0.7}
    | {"Final answer: C": 0.65},
)
BY_AGGREGATE = {
    "bon3+last+mean": "A",
    "bon3+min+mean": "B",
    "bon3+prod+mean": "C",
    "bon3+last+key": "A",
}
BY_AGGREGATE |= {"bon3+min+key": "B", "bon3+min+margin": "B", "bon3+prod+raw-min": "C"}


def test_best_of_n_picks_by_each_aggregate(tmp_path, loopback):
    code, rows, srv = run(tmp_path, loopback, TWO_STEPS, ",".join(BY_AGGREGATE))
    assert code == 0 and picks(rows) == BY_AGGREGATE
    assert len(srv.chats) == 3 * 2 * (
        1 + 3
    )  # 3 chains of 2 steps, each step 1 proposal and 3 judge calls
    scores = [c["score"] for c in rows["bon3+prod+mean", 0]["trace"]["chains"]]
    assert scores == pytest.approx([0.32, 0.49, 0.65])


# --------------------------------------------------------------------------- weighted, and majority

# Six one-step chains, unanimous (a chain's score is its c, by mean and last):
# A 0.9 | B 0.5 | (B) 0.5 | C 0.3 | C 0.3 | C 0.3. Answers are compared as the option they are read
# as, so "(B)" is B:
#   N = 1: A everywhere.
#   N = 3: best A (0.9), weighted B (0.5 + 0.5 = 1.0 > 0.9), majority B (2 of 3).
#   N = 6: best A, weighted B (A 0.9, B 1.0, C 0.9), majority C (3). Compared as strings, N = 3
#   would give weighted A (0.9 > 0.5) and majority A (three answers once each: the earliest).
VOTES = World(
    [["Final answer: A"], ["Final answer: B"], ["Final answer: (B)"]]
    + [[f"{w}Final answer: C"] for w in ("", "So. ", "Thus. ")],
    {"Final answer: A": 0.9, "Final answer: B": 0.5, "Final answer: (B)": 0.5}
    | {f"{w}Final answer: C": 0.3 for w in ("", "So. ", "Thus. ")},
)
BY_VOTE = {"maj1": "A", "maj3": "B", "maj6": "C", "bon3+last+mean": "A", "wbon3+last+mean": "B"}
BY_VOTE |= {"bon6+last+mean": "A", "wbon6+last+mean": "B", "wbon6+min+raw-mean": "B"}


def test_weighted_best_of_n_and_majority_compare_the_answers_read(tmp_path, loopback):
    code, rows, srv = run(tmp_path, loopback, VOTES, ",".join(BY_VOTE))
    assert code == 0 and picks(rows) == BY_VOTE
    assert (
        rows["wbon3+last+mean", 0]["prediction"] == "B"
    )  # the group's earliest chain: chain 1's answer
    assert rows["maj6", 0]["trace"]["picked"] == 3 and rows["maj6", 0]["judge_calls"] == 0
    assert (
        len(srv.chats) == 6 + 6 * 3
    )  # six proposals, each judged by three: every method shares them


# ----------------------------------------------------------------------------- beam search

# W = 2, E = 2, last, λ = 1; every step unanimous but "Final answer: A", M = (1.0, 0.2, 1.0):
# s̄* 0.7333, Δ* 0.1422, rejected (key = margin 0.5911).
#   depth 0 (the root, W·E = 4 candidates): a 0.9, b 0.8, c 0.7, d 0.5: both keep a and b (a rank
#   by either score above the rest, and a, b, c are accepted).
#   depth 1: a -> "Final answer: A" M, aa 0.62; b -> "Final answer: B" 0.61, bb 0.3.
#     mean:         A 0.7333, aa 0.62, B 0.61, bb 0.3 -> keep A (finished) and aa.
#     mean+filter:  accepted aa and B only -> keep aa and B (finished, 0.61).
#     key:          aa 1.62, B 1.61, A 0.5911, bb 0.3 -> keep aa and B, with or without the filter.
#   depth 2: aa -> "Final answer: C" 0.65 (accepted), "Final answer: D" 0.4 (rejected).
#     no filter: keep both (W = 2): C and D finish.
#     filter:    C alone is accepted, so C alone is kept.
# Finished: mean A 0.7333, C 0.65, D 0.4 -> A;  mean+filter B 0.61, C 0.65 -> C;
#           key B 1.61, C 1.65, D 0.4 -> C;   key+filter B 1.61, C 1.65 -> C.
TREE = {
    (): ["a", "b", "c", "d"],
    ("a",): ["Final answer: A", "aa"],
    ("b",): ["Final answer: B", "bb"],
    ("a", "aa"): ["Final answer: C", "Final answer: D"],
}
BEAM = World(
    tree=TREE,
    scores={"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.5, "Final answer: A": (1.0, 0.2, 1.0), "aa": 0.62}
    | {"Final answer: B": 0.61, "bb": 0.3, "Final answer: C": 0.65, "Final answer: D": 0.4},
)
BY_BEAM = {"beam2x2+last+mean": "A", "beam2x2+last+mean+filter": "C", "beam2x2+last+key": "C"}
BY_BEAM |= {"beam2x2+last+key+filter": "C"}


def test_beam_search_with_and_without_the_filter(tmp_path, loopback):
    code, rows, srv = run(tmp_path, loopback, BEAM, ",".join(BY_BEAM), answer="C")
    assert code == 0 and picks(rows) == BY_BEAM
    kept = lambda m: [
        [x["candidate"] for x in xs if x["kept"]] for xs in rows[m, 0]["trace"]["depths"]
    ]
    assert kept("beam2x2+last+mean") == [["a", "b"], ["Final answer: A", "aa"], TREE[("a", "aa")]]
    assert kept("beam2x2+last+mean+filter") == [
        ["a", "b"],
        ["aa", "Final answer: B"],
        ["Final answer: C"],
    ]
    finished = [c["answer"] for c in rows["beam2x2+last+mean+filter", 0]["trace"]["chains"]]
    assert finished == ["B", "C"]
    # The proposals: the root (n = 4), a and b (n = 2 each), aa; the judges: 4 + 4 + 2
    # candidates, by three.
    assert [c.get("n") for c in srv.chats if role_of(c["messages"]) == "reasoner"] == [4, 2, 2, 2]
    assert len(srv.chats) == 4 + (4 + 4 + 2) * 3
    r = rows["beam2x2+last+key", 0]
    assert (r["reasoner_calls"], r["judge_calls"], r["calls"]) == (4, 30, 34)


# ----------------------------------------------------------------------------- compute and seeds


def test_each_row_records_its_compute_and_methods_share_requests(tmp_path, loopback):
    # base: 1 proposal, 20 prompt + 3 completion tokens. verdict (n = 3): one request for 3
    # candidates (20 + 9), 9 judge calls of 30 + 3 tokens. maj3: 3 proposals, chain 0's base's
    # (cached). bon3: the same 3 proposals and verdict's 9 judge calls (the same states and steps):
    # nothing left to send.
    code, rows, srv = run(
        tmp_path, loopback, ONE_STEP, "base,verdict,maj3,bon3+last+key", answer="C"
    )
    assert code == 0 and picks(rows) == {
        "base": "A",
        "verdict": "C",
        "maj3": "A",
        "bon3+last+key": "C",
    }
    keys = ("reasoner_calls", "reasoner_tokens", "judge_calls", "calls", "sent", "tokens")
    got = {m: tuple(r[k] for k in keys) for (m, _), r in rows.items()}
    assert got == {
        "base": (1, 23, 0, 1, 1, 23),
        "verdict": (1, 29, 9, 10, 10, 29 + 9 * 33),
        "maj3": (3, 69, 0, 3, 2, 69),
        "bon3+last+key": (3, 69, 9, 12, 0, 69 + 9 * 33),
    }
    assert len(srv.chats) == 13 == sum(r["sent"] for r in rows.values())
    md = (tmp_path / "out" / "summary.md").read_text()
    assert (
        "\n".join(
            [
                "| Method | Avg | reasoner tokens/item | judge calls/item | reasoner calls/item | "
                "calls/item | sent/item |",
                "|---|---|---|---|---|---|---|",
                "| base | 0.00 | 23 | 0.0 | 1.0 | 1.0 | 1.0 |",
                "| verdict | 100.00 | 29 | 9.0 | 1.0 | 10.0 | 10.0 |",
                "| maj3 | 0.00 | 69 | 0.0 | 3.0 | 3.0 | 2.0 |",
                "| bon3+last+key | 100.00 | 69 | 9.0 | 3.0 | 12.0 | 0.0 |",
            ]
        )
        in md
    )
    assert "VERDICT greedy, step by step, with n = 3" in md


def test_the_picture_puts_base_and_verdict_on_the_axes_of_the_searches(tmp_path, loopback):
    code, rows, _ = run(
        tmp_path, loopback, ONE_STEP, "base,verdict,maj1,maj3,bon1+last+key,bon3+last+key"
    )
    assert code == 0
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert Image.open(tmp_path / "out" / "compute.png").size == (980, 470)
    points = tables.compute_picture(s, str(tmp_path / "c.png"), note="scripted")
    at = {(k, m): xy for k, m, xy in points}
    assert {m for _, m in at} == set(s["methods"]) and {k for k, _ in at} == {0, 1}
    # left, reasoner tokens: base 23 = maj1 = bon1 < verdict 29 < maj3 = bon3 69; right, judge
    # calls: base and majority at 0, verdict and bon3 at 9, bon1 at 3
    x = lambda k, m: at[k, m][0]
    assert (
        x(0, "base")
        == x(0, "maj1")
        == x(0, "bon1+last+key")
        < x(0, "verdict")
        < x(0, "maj3")
        == x(0, "bon3+last+key")
    )
    assert (
        x(1, "base")
        == x(1, "maj3")
        < x(1, "bon1+last+key")
        < x(1, "verdict")
        == x(1, "bon3+last+key")
    )
    labels = list(tables._families(s))
    assert labels == ["base (the reasoner alone)", "VERDICT (n = 3)", "majN", "bonN+last+key"]


def test_chain_i_has_its_own_seed_and_smaller_n_are_prefixes(tmp_path, loopback):
    code, rows, srv = run(tmp_path, loopback, ONE_STEP, "base,maj2,maj3", more="--seeds 2")
    assert code == 0
    seeds = [c["seed"] for c in srv.chats if role_of(c["messages"]) == "reasoner"]
    # Row seed s, chain i: reasoner seed s + 1000·i, sampling seed 1000× that; chain 0 is
    # base's request.
    assert sorted(seeds) == sorted(
        (s + chains.CHAIN_SEEDS * i) * 1000 for s in (0, 1) for i in range(3)
    )
    assert rows["maj3", 1]["trace"]["meta"]["reasoner_seeds"] == [1, 1001, 2001]
    assert [(m, s, r["sent"]) for (m, s), r in rows.items()] == [
        (m, s, sent) for s in (0, 1) for m, sent in (("base", 1), ("maj2", 1), ("maj3", 1))
    ]
    assert chains.chain_seed(2, 3) == 3002


# ----------------------------------------------------------------------------- a sweep over N

# Four two-step chains, unanimous: A (0.4, 0.8), B (0.7, 0.7), C (1.0, 0.65), D (0.5, 0.9), each
# chain's steps naming its row seed (so the two seeds share nothing). Picks: bon1 and bon2 by
# key/last A (1.8 > 1.7); bon4 D (key/last 1.9); wbon4 by mean/min B (A 0.4, B 0.7, C 0.65, D 0.5);
# bon4 by mean/prod C (0.32, 0.49, 0.65, 0.45); majority: four answers once each, the earliest: A.
SWEEP_WORLD = World(
    [[f"Look {i} (seed {{s}}).", f"Final answer: {'ABCD'[i]}"] for i in range(4)],
    {"Look 0.": 0.4, "Look 1.": 0.7, "Look 2.": 1.0, "Look 3.": 0.5, "Final answer: A": 0.8}
    | {"Final answer: B": 0.7, "Final answer: C": 0.65, "Final answer: D": 0.9},
)
BY_N = {
    "base": "A",
    "maj1": "A",
    "maj2": "A",
    "maj4": "A",
    "bon1+last+key": "A",
    "bon2+last+key": "A",
}
BY_N |= {"bon4+last+key": "D", "wbon4+min+mean": "B", "bon4+prod+mean": "C"}


def sweep_counts(seeds: int, n_max: int, steps: int, m: int = 3) -> dict:
    """The requests of the sweep BY_N, from the script. A chain is `steps` proposals (n = 1) and m
    judge calls on each; chain i of every N is the same chain (its seed is s + 1000·i), and every
    judged method scores the same steps. So the sweep sends the n_max chains once per seed: seeds ·
    n_max · steps · (1 + m). With no sharing, each row pays for its own: base and majN steps·(1 or
    N), a judged N steps·N·(1 + m)."""
    per_seed = steps * (1 + 1 + 2 + 4) + steps * (1 + m) * (1 + 2 + 4 + 4 + 4)
    return {"sweep": seeds * n_max * steps * (1 + m), "separate": seeds * per_seed}


def test_a_sweep_over_n_costs_its_distinct_requests_only(tmp_path, loopback):
    want = sweep_counts(seeds=2, n_max=4, steps=2)
    assert want == {"sweep": 64, "separate": 272}
    code, rows, srv = run(tmp_path, loopback, SWEEP_WORLD, ",".join(BY_N), more="--seeds 2")
    assert (
        code == 0
        and picks(rows) == BY_N
        and {r["pred"] for (m, s), r in rows.items() if s == 1} <= set("ABCD")
    )
    assert len(srv.chats) == want["sweep"] == sum(r["sent"] for r in rows.values())
    bodies = [json.dumps(c, sort_keys=True) for c in srv.chats]
    assert len(set(bodies)) == len(bodies)  # no request twice
    assert sum(r["calls"] for r in rows.values()) == want["separate"]  # what each row cost, alone
    # in --rules' order, each row sends what no row before it asked: maj2 chain 1's proposals, maj4
    # chains 2 and 3's; bon1 chain 0's judge calls, bon2 chain 1's, bon4 chains 2 and 3's; the rest
    # nothing
    sent = {m: r["sent"] for (m, s), r in rows.items() if s == 0}
    assert sent == {
        "base": 2,
        "maj1": 0,
        "maj2": 2,
        "maj4": 4,
        "bon1+last+key": 6,
        "bon2+last+key": 6,
    } | {
        "bon4+last+key": 12,
        "wbon4+min+mean": 0,
        "bon4+prod+mean": 0,
    }
    # Run again: every row is kept, nothing is asked; adding maj3 asks nothing either
    # (chains 0..2 are known).
    before = len(srv.chats)
    data, out = tmp_path / "q.jsonl", tmp_path / "out"
    assert (
        evaluate.main(argv(data, srv.url, out, f"{FLAT} --seeds 2 --rules {','.join(BY_N)}")) == 0
    )
    assert (
        evaluate.main(argv(data, srv.url, out, f"{FLAT} --seeds 2 --rules maj3,{','.join(BY_N)}"))
        == 0
    )
    assert len(srv.chats) == before


# ----------------------------------------------------------------------------- bad settings


@pytest.mark.parametrize(
    "rules, says",
    [
        ("bon0+last+key", "N must be an integer >= 1, got N=0"),
        ("wbon-2+last+key", "N must be an integer >= 1, got N=-2"),
        ("maj0", "N must be an integer >= 1, got N=0"),
        ("beam0x2+last+key", "W must be an integer >= 1, got W=0"),
        ("beam2x0+last+key+filter", "E must be an integer >= 1, got E=0"),
        ("bon4+median+key", "unknown aggregate 'median'"),
        ("bon4+last+nope", "unknown step_score 'nope'"),
        ("beam2x2+last+prm+filter", "unknown step_score 'prm'"),
        ("bon4+prod+key", "aggregate 'prod' needs a step score in [0, 1]"),
        ("bon4+last", "a bon method is spelled like bon8+last+key"),
        ("bon04+last+key", "is spelled 'bon4+last+key'"),
        ("beam6x6+last+key", "W·E must be at most 31"),
        ("bon1001+last+key", "N must be at most 1000"),
        ("base,median", "--rules must list distinct methods from base"),
        ("maj2,maj2", "--rules must list distinct methods"),
    ],
)
def test_bad_search_settings_fail_before_any_call(tmp_path, loopback, capsys, rules, says):
    code, rows, srv = run(tmp_path, loopback, ONE_STEP, rules)
    err = capsys.readouterr().err
    assert code == 2 and srv.chats == [] and rows == {}
    assert says in err and err.count("\n") == 1 and err.startswith("verdict_lab.evaluate: error: ")


def test_a_search_runs_at_most_a_thousand_seeds(tmp_path, loopback, capsys):
    code, _, srv = run(tmp_path, loopback, ONE_STEP, "maj2", more="--seeds 1001")
    assert (
        code == 2
        and srv.chats == []
        and "a search runs at most 1000 --seeds, got 1001" in capsys.readouterr().err
    )


def test_the_scripted_compute_sweep_writes_its_table_and_labelled_picture(tmp_path, capsys):
    from verdict_lab.perf import search_demo

    picture = tmp_path / "search_compute.png"
    assert (
        search_demo.main(
            ["--out", str(tmp_path / "run"), "--seeds", "1", "--picture", str(picture)]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert (
        out.splitlines()[0].startswith("| Method | Avg | reasoner tokens/item")
        and "| bon8+last+key |" in out
    )
    assert "(scripted server)" in err and "SCRIPTED server" in search_demo.NOTE
    assert Image.open(picture).size == (980, 470) and (tmp_path / "run" / "compute.png").exists()
    assert "Accuracy against compute" in (tmp_path / "run" / "summary.md").read_text()
