"""Tests for perf/overhead.py: the step modes' calls and skips, adaptive judging's exactness, the
token figures and the result's fields, the tables and the picture, all against the simulated server
with no sleeping."""

import math
import re
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

import judges
import verdict
from verdict_lab.client import Client
from verdict_lab.perf import overhead
from verdict_lab.loopback import LoopbackServer, chat_response
from verdict_lab.layouts import role_of
from judges import load_prompt
from verdict_lab.perf.overhead import ADAPTIVE, BASE, CONC, CONC_SCORE, SEQ, in_layouts, run_chains
from verdict_lab.perf.simserver import LatencyModel, SimulatedServer

LIMITS = (256, None, None)


def sim(final_at: int = 2):
    return LoopbackServer(SimulatedServer(LatencyModel(time_scale=0.0), final_at=final_at))


@pytest.mark.parametrize("layout", ["shared", "per-role"])
@pytest.mark.parametrize(
    "mode, judge_requests, skipped",
    [(SEQ, 9 * 3, 0), (CONC, 9 * 3, 0), (CONC_SCORE, 9 * 3, 0), (ADAPTIVE, 9 * 2, 9)],
)
def test_run_chains_counts(mode, judge_requests, skipped, layout):
    # 3 steps, the last a final answer the candidates agree on: adaptive skips its 9 judge calls.
    with sim() as srv:
        out = run_chains(
            Client(srv.url, "sim"), replace(mode, layout=layout), ["Q? A. x B. y"], 3, LIMITS
        )
        chats = srv.chats
    assert len(out.seconds) == len(out.usage) == 3 and all(t >= 0 for t in out.seconds)
    assert (
        (out.replies, out.skipped) == (judge_requests, skipped)
        and len(out.chains) == 1
        and len(out.chains[0]) == 3
    )
    reasoner = [c for c in chats if "stop" in c]
    # Sequential asks for its candidates one by one.
    assert len(reasoner) == (9 if mode is SEQ else 3)
    assert all(c.get("n") == (1 if mode is SEQ else 3) for c in reasoner)
    # With no image, the content is a string.
    second = [c["messages"][-1]["content"] for c in chats if "stop" not in c]
    # The judge prompts of step 2.
    second = [text for text in second if "<step>\nObservation 1." in text]
    # 3 judges × 3 distinct candidates; per-role, the judges differ by their system message only.
    assert len(second) == 9 and len(set(second)) == (9 if layout == "shared" else 3)
    # each step's usage is the change of the client's counters: every request of the
    # step, and its prompt tokens
    assert sum(u["replies"] for u in out.usage) == len(chats) and all(
        u["cache_reports"] == u["replies"] for u in out.usage
    )


@pytest.mark.parametrize("layout", ["shared", "per-role"])
def test_adaptive_judging_builds_the_chains_of_judging_everything(layout):
    # The simulator is deterministic, so both modes see the same candidates: adaptive skips exactly
    # the steps whose candidates are one string (the final answers), and every chain is the one full
    # judging builds.
    with sim(final_at=1) as srv:
        client = Client(srv.url, "sim")
        questions = [f"Q{k}? A. x B. y" for k in range(3)]
        full = run_chains(client, replace(CONC_SCORE, layout=layout), questions, 3, LIMITS)
        adaptive = run_chains(client, replace(ADAPTIVE, layout=layout), questions, 3, LIMITS)
    assert adaptive.chains == full.chains and adaptive.skipped == 3 * 2 * 9 and full.skipped == 0
    assert all(chain[1:] == ["Final answer: B"] * 2 for chain in full.chains)


@pytest.mark.parametrize("seed", range(5))
def test_any_rule_extends_the_chain_by_the_one_string_the_candidates_are(seed):
    # The reason adaptive judging is exact: whatever the scores (abstentions too), every rule picks
    # an index, and every index holds the same string.
    rng = np.random.default_rng(seed)
    s_hat = rng.random((4, 3))  # [n, m]
    s_hat[rng.random((4, 3)) < 0.3] = np.nan
    candidates = ["Final answer: B"] * 4
    for rule, sel in verdict.select_all(s_hat).items():
        assert candidates[sel.index] == "Final answer: B" and 0 <= sel.index < 4, rule


def test_token_figures_count_the_steps_after_each_chains_first():
    names = ("prompt_tokens", "computed_prompt_tokens", "replies", "cache_reports")
    # One completion token per reply.
    u = lambda *values: {**dict(zip(names, values)), "completion_tokens": values[2]}
    runs = [
        # Chain 1: its first step is left out.
        [u(1000, 1000, 1, 1), u(300, 60, 1, 1), u(320, 40, 1, 1)],
        # Chain 2.
        [u(900, 900, 1, 1), u(500, 100, 2, 2), u(280, 20, 1, 1)],
    ]
    # after the first step: 4 steps, (300 + 320 + 500 + 280) / 4 = 350 prompt tokens,
    # (60 + 40 + 100 + 20) / 4 = 55 computed, (1 + 1 + 2 + 1) / 4 = 1.25 completion tokens
    assert overhead.token_figures(runs, 3) == (350.0, 55.0, 1.25, 1.0)
    # One reply did not report its cached tokens: the computed figure is unknown.
    runs[1][1] = u(500, 100, 2, 1)
    assert overhead.token_figures(runs, 3) == (350.0, None, 1.25, 4 / 5)
    # With no step after a first one, there is nothing to say.
    assert overhead.token_figures([[u(1, 1, 1, 1)]], 1)[1] is None
    # Per whole chain, first steps too: (1000 + 60 + 40 + 900 + 100 + 20) / 2 chains = 1,060; with
    # the reply that did not report, unknown.
    chains = lambda usage: overhead.Chains([], usage, [["a step"]], 0, 0)
    runs[1][1] = u(500, 100, 2, 2)
    assert overhead.chain_computed([chains(runs[0]), chains(runs[1])]) == 1060.0
    runs[1][1] = u(500, 100, 2, 1)
    assert overhead.chain_computed([chains(runs[0]), chains(runs[1])]) is None


def test_overhead_results_and_tables(tmp_path):
    image = Image.new("RGB", (64, 64), "red")
    with sim() as srv:
        modes = in_layouts((CONC, CONC_SCORE, ADAPTIVE))
        result = overhead.overhead(
            Client(srv.url, "sim"), modes, ["Q? A. x B. y"], 3, 2, LIMITS, [image]
        )
    assert list(result) == list(modes) and modes[:3] == tuple(
        replace(BASE, layout=lay) for lay in overhead.ORDER
    )
    base = result[BASE]
    assert (
        base.ratio == pytest.approx(1.0)
        and base.warm == pytest.approx(1.0)
        and base.judge_requests == 0
    )
    for m, r in result.items():
        # The cache served some.
        assert r.reported == 1.0 and r.computed is not None and 0 < r.computed < r.prompt
        assert math.isfinite(r.ratio) and len(r.chains) == 2 and len(r.chains[0]) == 1  # [reps][Q]
        assert r.server_ms is None  # the simulator reports no llama-server timings
    assert result[CONC].judge_requests == pytest.approx(9.0) and result[
        ADAPTIVE
    ].skipped == pytest.approx(3.0)
    # The image is cached after each chain's first step in every mode; judging adds its own tokens.
    assert result[CONC].computed > result[BASE].computed
    times, tokens = overhead.time_table(result), overhead.token_table(result)
    assert len(times) == len(tokens) == 2 + len(result) and times[2].startswith(
        "| base (reasoner alone, n = 1) | per-role |"
    )
    # No floor: nothing counted. Per whole chain, the cold first step computes its whole prompt,
    # image and all.
    assert re.search(rf"\| 1\.00× \| — \| — \| [\d,]+ \| — \| {base.per_chain:,.0f} \|$", tokens[2])
    # per-role computes the item's image once per role on a chain's cold first step, role-first once
    for m in (CONC, CONC_SCORE):
        per_role, first = (
            result[replace(m, layout="per-role")],
            result[replace(m, layout="role-first")],
        )
        assert per_role.per_chain > first.per_chain
    assert all(row.count("|") == 8 for row in times[2:]) and all(
        row.count("|") == 12 for row in tokens[2:]
    )
    # The simulator is deterministic: adaptive's chains are full judging's, and each mode repeats
    # itself.
    assert overhead.agreement(result, ADAPTIVE, CONC_SCORE) == (2, 2) and overhead.agreement(
        result, CONC, CONC, 1
    ) == (1, 1)
    other = {
        **result,
        CONC: replace(result[CONC], chains=[[["another step"]], [list(result[CONC].chains[1][0])]]),
    }
    # A chain that differs is counted as such.
    assert overhead.agreement(other, ADAPTIVE, CONC) == (1, 2)
    path = tmp_path / "overhead.png"
    overhead.picture([("simulated", result), ("again", result)], str(path))
    img = Image.open(path)
    colours = {c for _, c in img.convert("RGB").getcolors(1 << 20)}
    assert img.size == (880, 360) and set(overhead.COLOURS.values()) | {(214, 39, 40)} <= colours


def test_server_ms_sums_llama_servers_timings_per_step():
    names = ("replies", "timings_reports", "timings_prompt_ms", "timings_predicted_ms")
    u = lambda *values: dict(zip(names, values))
    runs = [
        [u(1, 1, 30.0, 100.0), u(10, 10, 90.0, 500.0)],
        [u(1, 1, 20.0, 80.0), u(10, 10, 60.0, 520.0)],
    ]
    # every step of every repetition: 4 steps, (30 + 90 + 20 + 60) / 4 = 50 ms on prompts,
    # 1,200 / 4 = 300 generating
    assert overhead.server_ms(runs) == (50.0, 300.0)
    runs[1][1] = u(10, 9, 60.0, 520.0)  # a reply without timings: the figure is unknown
    assert overhead.server_ms(runs) is None and overhead.server_ms([[]]) is None


def test_agreement_pairs_repetitions_and_questions():
    chains = lambda *reps: overhead.Result(*[0.0] * 9, None, list(reps))
    a, b = replace(CONC, name="a"), replace(CONC, name="b")
    result = {a: chains([["x"], ["y"]], [["x"], ["z"]]), b: chains([["x"], ["y"]], [["x"], ["y"]])}
    # repetition 0: both questions agree; repetition 1: the second question's chains differ
    assert overhead.agreement(result, a, b) == (3, 4)
    assert overhead.agreement(result, b, b, 1) == (2, 2) and overhead.agreement(
        result, a, a, 1
    ) == (1, 2)


def test_in_layouts_puts_every_base_first():
    modes = in_layouts((SEQ, CONC), ("shared", "per-role"))
    assert [(m.name, m.layout) for m in modes] == [
        (BASE.name, "per-role"),
        (BASE.name, "shared"),
        (BASE.name, "role-first"),
        (SEQ.name, "per-role"),
        (SEQ.name, "shared"),
        (CONC.name, "per-role"),
        (CONC.name, "shared"),
    ]
    assert len(in_layouts((SEQ, CONC))) == 3 + 2 * 3


def scripted_counts(body, path):
    """A server whose token counts are known: /tokenize gives a word per token; the reasoner's
    request reports 100 prompt tokens, 90 of them cached (10 computed), a judge's 200, 150 cached
    (50 computed)."""
    if path.endswith("/tokenize"):
        return {"tokens": list(range(len(body["content"].split())))}
    judge = role_of(body["messages"]) in verdict.JUDGES
    texts = (
        ['{"score": 7}']
        if judge
        else [f"Candidate {i} adds one more." for i in range(body.get("n", 1))]
    )
    response = chat_response(texts, prompt_tokens=200 if judge else 100)
    response["usage"]["prompt_tokens_details"] = {"cached_tokens": 150 if judge else 90}
    return response


def test_the_floor_is_the_base_step_plus_the_judge_tasks_tokens():
    with LoopbackServer(scripted_counts) as srv:
        modes = (CONC_SCORE, ADAPTIVE)
        result = overhead.overhead(
            Client(srv.url, "x"),
            modes,
            ["Q? A. x B. y"],
            3,
            1,
            LIMITS,
            count=overhead.tokenizer(srv.url),
        )
        without = overhead.overhead(
            Client(srv.url, "x"), (CONC_SCORE,), ["Q? A. x B. y"], 2, 1, LIMITS
        )
    cands = [f"Candidate {i} adds one more." for i in range(3)]
    judge = judges.Judge(None, "logical")  # json (the default), the score alone (reasons=False)
    reply = judge.reply_line()
    assert reply == load_prompt("logical")["reply"]
    tasks = sum(
        len(judges.Judge(None, name).task(c).split()) for c in cands for name in verdict.JUDGES
    )
    # The 9 judge tasks: a candidate of 5 words and the reply line each.
    assert 9 * 20 < tasks < 9 * 60
    # Per step after the first: the base computes 100 - 90 = 10, VERDICT
    # 10 + 9 judges × (200 - 150) = 460. The base is its own floor: 1.00×.
    assert result[BASE].computed == 10 and result[BASE].floor == 10
    assert result[CONC_SCORE].computed == 460 and result[CONC_SCORE].floor == 10 + tasks
    assert result[ADAPTIVE].floor == 10 + tasks  # the candidates differ: every step is judged
    rows = "\n".join(overhead.token_table(result))
    assert f"| 1,900 | 460 | 76% | 46.00× | {10 + tasks:,} | {460 / (10 + tasks):.2f}× |" in rows
    # With nothing counted, there is no floor.
    assert without[CONC_SCORE].floor is None and without[CONC_SCORE].computed == 460
    # No floor, no multiple.
    assert "| 46.00× | — | — | 33 |" in "\n".join(overhead.token_table(without))


def test_adaptive_steps_that_agree_have_the_base_floor():
    def same(body, path):  # every candidate the same string: adaptive judges nothing
        if path.endswith("/tokenize"):
            return {"tokens": [0] * len(body["content"].split())}
        out = chat_response(["One."] * body.get("n", 1), prompt_tokens=100)
        out["usage"]["prompt_tokens_details"] = {"cached_tokens": 90}
        return out

    with LoopbackServer(same) as srv:
        result = overhead.overhead(
            Client(srv.url, "x"),
            (ADAPTIVE,),
            ["Q?"],
            2,
            1,
            LIMITS,
            count=overhead.tokenizer(srv.url),
        )
    assert result[ADAPTIVE].floor == result[BASE].floor == 10 and result[ADAPTIVE].skipped == 9


def test_the_ratio_is_the_median_with_its_spread_over_repetitions():
    with sim() as srv:
        result = overhead.overhead(
            Client(srv.url, "sim"), (CONC_SCORE,), ["Q? A. x B. y"], 2, 3, LIMITS
        )
    lo, hi = result[CONC_SCORE].spread
    assert lo <= result[CONC_SCORE].ratio <= hi and result[BASE].spread == (1.0, 1.0)
    assert f"| {result[CONC_SCORE].ratio:.2f}× ({lo:.2f}–{hi:.2f}) |" in "\n".join(
        overhead.time_table(result)
    )
