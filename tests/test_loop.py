"""Tests for verdict_lab/loop.py: verdict's step with each call's record, a meter of each step's
cost, revise on reject and the trace's JSON format. The chains are test_verdict.py's."""

import json
import math

import numpy as np
import pytest

import verdict as V
from judges import Judgement
from verdict import Config
from verdict_lab import loop
from test_verdict import NAN, SCRIPT, logical_judge, scripted

run = loop.run


def test_a_meter_records_what_each_step_cost_and_the_totals_sum_it():
    # The meter reads counters the caller keeps; here the proposer spends 10 tokens a call and each
    # judge call 1 token, so every step of SCRIPT costs 10 + 3 candidates · 3 judges = 19 tokens and
    # 1 + 9 = 10 calls. A counter that first appears during step 3 ("late", +0.25 for each of its 9
    # judge calls) counts from 0.
    counters, calls = {"tokens": 1000, "calls": 0}, []
    propose, judges = scripted(calls)

    def spend(f, tokens):
        def call(*args):
            counters["tokens"] += tokens
            counters["calls"] += 1
            if len(calls) == 3:
                # The late counter starts once step 3's proposal is made.
                counters["late"] = counters.get("late", 0.0) + 0.25
            return f(*args)

        return call

    trace = run(
        "q", spend(propose, 10), [spend(j, 1) for j in judges], meter=lambda: dict(counters)
    )
    assert [r.usage for r in trace.steps] == [{"tokens": 19, "calls": 10}] * 2 + [
        {"tokens": 19, "calls": 10, "late": 2.25}
    ]
    d = trace.to_dict()
    assert (
        d["totals"]["usage"] == {"tokens": 57, "calls": 30, "late": 2.25}
        and "late" not in d["steps"][1]["usage"]
    )
    assert list(d["steps"][0])[-1] == "usage" and json.loads(json.dumps(d, allow_nan=False)) == d
    # the same step and loop without a meter keep no usage at all
    assert "usage" not in run("q", *scripted([])).to_dict()["totals"]
    assert loop.step(V.State("q"), propose, judges).usage == {}
    # a meter whose counters do not move still says so: each counter's change is 0
    assert loop.step(V.State("q"), propose, judges, meter=lambda: {"tokens": 7}).usage == {
        "tokens": 0
    }


@pytest.mark.parametrize(
    "reading",
    [[1], {"tokens": "3"}, {"tokens": True}, {"tokens": NAN}, {"tokens": math.inf}, {1: 2}, None],
)
def test_a_meter_returns_a_dict_of_finite_counts(reading):
    with pytest.raises(
        ValueError, match="meter must return a dict of counter names to finite numbers"
    ):
        loop.step(V.State("q"), lambda s, n: ["a"], (), meter=lambda: reading)


def test_trace_dict_golden():
    calls = []
    propose, judges = scripted(calls)
    d = run("q", propose, judges).to_dict()
    assert list(d) == [
        "format",
        "question",
        "config",
        "steps",
        "chain",
        "answer",
        "stopped",
        "totals",
        "meta",
    ]
    assert (
        d["question"] == "q" and d["answer"] == "B" and d["stopped"] == "final" and d["meta"] == {}
    )
    assert d["config"] == {
        "lam": [1.5, 1.0, 0.8],
        "n": 3,
        "tau": 0.6,
        "eps": 0.1,
        "rule": "verdict",
        "max_steps": 8,
        "final": V.FINAL_ANSWER,
    }
    assert d["chain"] == [
        "The red cube is left of the ball.",
        "So the ball is on the right.",
        "Final answer: B",
    ]
    s0 = d["steps"][0]  # Proposition 1's two vectors: the calm one accepted, the conflict rejected
    assert list(s0) == [
        "candidates",
        "s_hat",
        "s_star",
        "s_bar_star",
        "delta_star",
        "accepted",
        "index",
        "fallback",
        "verified",
        "abstentions",
    ]
    assert s0["candidates"] == list(SCRIPT[0]) and s0["s_hat"][1] == [0.9, 0.2, 0.9]
    np.testing.assert_allclose(s0["s_star"][1], [0.787805, 0.485366, 0.753659], atol=1e-6)
    np.testing.assert_allclose(s0["s_bar_star"][:2], [0.66794, 0.67561], atol=1e-5)
    np.testing.assert_allclose(s0["delta_star"][:2], [0.01812, 0.12683], atol=1e-5)
    assert s0["accepted"] == [True, False, False] and s0["index"] == 0
    assert s0["fallback"] is False and s0["verified"] is True and s0["abstentions"] == 0


# ----------------------------------------------------------------------------- each judge call's
# record


class Recording:
    """A judge whose k-th call scores scores[k] (or table[step]) and records
    {"call": k, "step": step}, as a judges.Judgement."""

    def __init__(self, scores=None, table=None):
        self.scores = scores
        self.table = table
        self.k = 0

    def __call__(self, state, step):
        k = self.k
        self.k += 1
        score = self.scores[k] if self.table is None else self.table[step]
        return Judgement(score, {"call": k, "step": step})


def test_each_judge_calls_record_stays_with_its_score_in_call_order():
    # Two candidates with the same text, judges that score each call differently, a plain callable
    # among them: StepRecord.calls[i][k] is what came with s_hat[i, k], whatever the text; None for
    # the plain callable.
    propose = lambda s, n: ["same", "same", "other"]
    judges = [Recording([0.9, 0.2, 0.5]), lambda s, c: 0.5, Recording([0.8, 0.3, 0.6])]
    rec = loop.step(V.State("q"), propose, judges)
    np.testing.assert_array_equal(rec.s_hat, [[0.9, 0.5, 0.8], [0.2, 0.5, 0.3], [0.5, 0.5, 0.6]])
    records = [
        ({"call": k, "step": c}, None, {"call": k, "step": c}) for k, c in enumerate(propose(0, 3))
    ]
    assert rec.calls == tuple(records) and rec.to_dict()["calls"] == [list(r) for r in records]
    # Calls made out of order (the last candidate first) keep their records beside their own scores.
    backwards = lambda f, items: [f(x) for x in reversed(list(items))][::-1]
    judges = [Recording([0.9, 0.2, 0.5]), lambda s, c: 0.5, Recording([0.8, 0.3, 0.6])]
    rec = loop.step(V.State("q"), propose, judges, map_fn=backwards)
    np.testing.assert_array_equal(rec.s_hat, [[0.5, 0.5, 0.6], [0.2, 0.5, 0.3], [0.9, 0.5, 0.8]])
    assert [[r and r["call"] for r in row] for row in rec.calls] == [
        [2, None, 2],
        [1, None, 1],
        [0, None, 0],
    ]
    judges = [Recording([0.9, 0.2, 0.5]), lambda s, c: 0.5, Recording([0.8, 0.3, 0.6])]
    d = run("q", propose, judges, Config(max_steps=1)).to_dict()
    assert d["format"] == "verdict-trace/6" and json.loads(json.dumps(d, allow_nan=False)) == d


def test_plain_judges_leave_no_records_in_the_trace():
    rec = loop.step(V.State("q"), lambda s, n: ["a", "b"], [lambda s, c: 0.5] * 3)
    assert rec.calls == ((None,) * 3,) * 2 and "calls" not in rec.to_dict()
    alone = loop.step(V.State("q"), lambda s, n: ["a"], ())
    assert alone.calls == () and "calls" not in alone.to_dict()


def test_a_judgement_records_the_state_of_the_step():
    class Asking:
        def __call__(self, state, step):
            return Judgement(
                0.5, {"question": state.question, "steps": list(state.steps), "step": step}
            )

    rec = loop.step(
        V.State("q?", steps=("s1",)), lambda s, n: ["a"], [Asking(), logical_judge, logical_judge]
    )
    assert rec.calls[0][0] == {"question": "q?", "steps": ["s1"], "step": "a"}


def test_a_judgement_is_a_score_in_range_with_a_dict_or_none():
    class Bad:
        def __init__(self, answer):
            self.answer = answer

        def __repr__(self):
            return "Bad()"

        def __call__(self, state, step):
            return self.answer

    for answer, message in [
        (Judgement(1.5, {}), r"^judge 0 \(Bad\(\)\) returned 1.5; a judge returns"),
        (Judgement(0.5, "why"), r"^judge 0 \(Bad\(\)\) returned the record 'why'; a"),
    ]:
        with pytest.raises(ValueError, match=message):
            loop.step(V.State("q"), lambda s, n: ["a"], [Bad(answer), logical_judge, logical_judge])
    # A Judgement with no record, and a plain number, record None.
    plain = loop.step(V.State("q"), lambda s, n: ["a"], [Bad(Judgement(0.5)), Bad(0.5), Bad(1)])
    assert plain.calls == ((None, None, None),)
    rec = loop.step(
        V.State("q"), lambda s, n: ["a"], [Recording([math.nan]), logical_judge, logical_judge]
    )
    assert math.isnan(rec.s_hat[0, 0]) and rec.abstentions == 1  # an abstention keeps its record
    assert rec.calls[0] == ({"call": 0, "step": "a"}, None, None)


# ----------------------------------------------------------------------------- revise on reject

# Proposition 1: CONFLICT has Δ* = 0.1268, rejected; AGREE has s̄* = 0.6679 and Δ* = 0.0181,
# accepted.
CONFLICT, AGREE = (0.9, 0.2, 0.9), (0.7, 0.6, 0.7)
# "Final answer: S" has raw Δ = 0.1333 > ε, but Δ* < ε: VERDICT takes it, raw-dual does not.
REJECTED = {
    "a": CONFLICT,
    "b": (0.5, 0.5, 0.5),
    "Final answer: R": AGREE,
    "Final answer: W": CONFLICT,
    "Final answer: S": (0.9, 0.6, 0.9),
}


def revise_agents(revised: str | None, counters: dict | None = None):
    """Candidates "a" (conflicting, the fallback: 0.6423 − 0.1268 = 0.5155 beats b's 0.5 − 0) and
    "b" (constant 0.5, below τ), judges scoring REJECTED, and a reviser that writes `revised`; seen
    collects what it was given. Every call adds 1 to counters["calls"]: the proposal, each
    judgement, the revision."""
    counters, seen = counters if counters is not None else {"calls": 0}, []

    def count(f):
        def call(*args):
            counters["calls"] += 1
            return f(*args)

        return call

    judges = [
        count(lambda s, c, i=i: REJECTED[c][i] if s.question == "q" else NAN) for i in range(3)
    ]
    revise = count(lambda state, record: seen.append((state, record)) or revised)
    return count(lambda s, n: ["a", "b"]), judges, revise, seen


def test_a_revision_that_passes_the_dual_test_is_chosen_instead_of_the_fallback():
    counters = {"calls": 0}
    propose, judges, revise, seen = revise_agents("Final answer: R", counters)
    rec = loop.step(V.State("q"), propose, judges, meter=lambda: dict(counters), revise=revise)
    # The n candidates and their selection stand as they were: all rejected, with the fallback
    # to "a" (index 0).
    assert rec.candidates == ("a", "b") and rec.selection.fallback and rec.selection.index == 0
    ((state, given),) = seen
    assert state == V.State("q") and given.revision is None and given.candidates == ("a", "b")
    # The reviser is given the best rejected candidate, as the fallback ranks it.
    assert given.selection.fallback and given.chosen == "a"
    v = rec.revision
    # The revision is judged in the step's state (other states get NaN).
    np.testing.assert_array_equal(v.s_hat, AGREE)
    assert v.selection.s_bar_star[0] == pytest.approx(0.6679, abs=5e-5) and v.selection.delta_star[
        0
    ] == pytest.approx(0.0181, abs=5e-5)
    assert v.taken and rec.revised and not rec.fallback and rec.chosen == "Final answer: R"
    # Costs: the proposal 1 + 2×3 judgements, then the revision 1 + its 3 judgements.
    assert v.usage == {"calls": 4} and rec.usage == {"calls": 11}
    d = rec.to_dict()
    assert (
        d["fallback"]
        and d["index"] == 0
        and d["revision"]["taken"]
        and d["revision"]["usage"] == {"calls": 4}
    )
    assert d["revision"]["candidate"] == "Final answer: R" and d["revision"]["s_hat"] == list(AGREE)
    assert d["revision"]["s_star"] == pytest.approx(V.consensus(AGREE).tolist())
    assert d["revision"]["delta_star"] == pytest.approx(0.0181, abs=5e-5)
    assert d["revision"]["s_bar_star"] == pytest.approx(0.6679, abs=5e-5)
    assert json.loads(json.dumps(d, allow_nan=False)) == d


def test_the_revision_keeps_its_own_calls_records_and_the_reviser_sees_the_steps():
    judges = [Recording(table={c: v[i] for c, v in REJECTED.items()}) for i in range(3)]
    seen = []
    revise = lambda state, record: seen.append(record) or "Final answer: R"
    rec = loop.step(V.State("q"), lambda s, n: ["a", "b"], judges, revise=revise)
    assert seen[0].calls == (({"call": 0, "step": "a"},) * 3, ({"call": 1, "step": "b"},) * 3)
    assert rec.revised and rec.calls == seen[0].calls
    assert rec.revision.calls == ({"call": 2, "step": "Final answer: R"},) * 3
    d = rec.to_dict()
    assert (
        d["revision"]["calls"] == [{"call": 2, "step": "Final answer: R"}] * 3
        and len(d["calls"]) == 2
    )
    propose, plain, revise, _ = revise_agents("Final answer: R")
    assert (
        "calls" not in loop.step(V.State("q"), propose, plain, revise=revise).to_dict()["revision"]
    )


def test_a_revision_that_fails_leaves_the_fallback():
    propose, judges, revise, seen = revise_agents("Final answer: W")
    trace = run("q", propose, judges, Config(max_steps=1), revise=revise)
    rec = trace.steps[0]
    assert (
        rec.revision.candidate == "Final answer: W" and not rec.revision.taken and not rec.revised
    )
    assert (
        rec.fallback and rec.chosen == "a" and trace.chain == ["a"] and trace.stopped == "max_steps"
    )
    t = trace.totals()
    assert (t["fallbacks"], t["revisions"], t["revised"], t["judge_calls"]) == (1, 1, 0, 2 * 3 + 3)
    revision = trace.to_dict()["steps"][0]["revision"]
    assert revision["taken"] is False and "usage" not in revision  # no meter, no usage


def test_the_revision_is_held_to_the_configured_thresholds():
    # τ = 0.7: the revision's s̄* = 0.6679 no longer passes, so the fallback stands.
    propose, judges, revise, _ = revise_agents("Final answer: R")
    rec = loop.step(V.State("q"), propose, judges, Config(tau=0.7), revise=revise)
    assert rec.revision is not None and not rec.revised and rec.chosen == "a"
    # ε = 0.015: its Δ* = 0.0181 no longer passes either.
    rec = loop.step(V.State("q"), propose, judges, Config(eps=0.015), revise=revise)
    assert not rec.revised and rec.fallback
    # raw-dual reads the raw scores: mean 0.6667 > 0.6 and raw Δ 0.0444 < 0.1, so it passes too.
    rec = loop.step(V.State("q"), propose, judges, Config(rule="raw-dual"), revise=revise)
    assert rec.revised and rec.chosen == "Final answer: R"
    # The rule's own filter decides: (0.9, 0.6, 0.9) passes VERDICT's (Δ* shrinks below ε) but
    # not raw-dual's.
    propose, judges, revise, _ = revise_agents("Final answer: S")
    assert loop.step(V.State("q"), propose, judges, revise=revise).revised
    assert not loop.step(
        V.State("q"), propose, judges, Config(rule="raw-dual"), revise=revise
    ).revised


def test_a_revision_that_ends_the_chain_ends_it():
    propose, judges, revise, _ = revise_agents("Final answer: R")
    trace = run("q", propose, judges, revise=revise)
    assert trace.stopped == "final" and trace.answer == "R" and trace.chain == ["Final answer: R"]
    t = trace.totals()
    assert (t["fallbacks"], t["fallback_rate"], t["revisions"], t["revised"], t["judge_calls"]) == (
        0,
        0.0,
        1,
        1,
        9,
    )


def test_revise_is_asked_only_when_no_candidate_passes():
    propose, judges, revise, seen = revise_agents("Final answer: R")
    accepted = loop.step(V.State("q"), lambda s, n: ["Final answer: R", "a"], judges, revise=revise)
    assert accepted.revision is None and not accepted.selection.fallback and seen == []
    alone = loop.step(V.State("q"), propose, (), revise=revise)  # no judges: nothing is rejected
    assert alone.revision is None and seen == []
    declined = revise_agents(None)
    rec = loop.step(V.State("q"), declined[0], declined[1], revise=declined[2])
    assert rec.revision is None and rec.fallback and rec.chosen == "a" and len(declined[3]) == 1
    assert "revision" not in rec.to_dict()
    # a declined revision's call is still the step's cost: proposal 1, judgements 6, the reviser 1
    counters = {"calls": 0}
    declined = revise_agents(None, counters)
    rec = loop.step(
        V.State("q"), declined[0], declined[1], meter=lambda: dict(counters), revise=declined[2]
    )
    assert rec.usage == {"calls": 8} and rec.revision is None


def test_revision_abstentions_are_counted_and_a_bad_revision_is_an_error():
    propose, judges, revise, _ = revise_agents("Final answer: R")
    judges[1] = lambda s, c: NAN if c == "Final answer: R" else REJECTED[c][1]
    rec = loop.step(V.State("q"), propose, judges, revise=revise)
    assert rec.abstentions == 1 and rec.revision.selection.verified
    with pytest.raises(ValueError, match="revise must return a string or None, got 3"):
        loop.step(V.State("q"), propose, judges, revise=lambda state, record: 3)


def test_a_stop_in_revise_drops_the_step():
    propose, judges, _, _ = revise_agents(None)
    trace = run(
        "q", propose, judges, revise=lambda state, record: (_ for _ in ()).throw(V.Stop("budget"))
    )
    assert trace.stopped == "budget" and trace.steps == ()


def test_candidates_with_the_same_text_and_score_get_a_record_each_in_the_order_made():
    # The judges are wrapped to keep their records by candidate, and verdict.step calls them through
    # map_fn as given: two candidates with the same text and score get one record each, in call
    # order (test_each_judge_calls_record_stays_with_its_score_in_call_order: different scores).
    made = []

    def judge(state, step):
        made.append(step)
        return Judgement(0.9, {"call": len(made), "step": step})

    done = loop.step(V.State("q"), lambda s, n: ["a", "a", "b"], [judge] * 3)
    assert made == ["a"] * 6 + ["b"] * 3
    assert [[r["call"] for r in row] for row in done.calls] == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]


@pytest.mark.parametrize("threads", [1, 4])
def test_a_judge_call_crosses_between_the_core_and_the_lab_three_times(loopback, threads):
    # The seam runs one way: from verdict.step's call of a judge to the HTTP send, the stack goes
    # verdict.py -> the lab's judge wrappers -> judges.py (Judge, Endpoint) -> the lab's session,
    # under the harness's map and under a thread pool alike.
    import traceback

    import requests

    from verdict_lab import verifier
    from verdict_lab.client import Client
    from verdict_lab.layouts import role_of
    from verdict_lab.loopback import chat_response

    def handler(body, path):
        if role_of(body["messages"]) == "reasoner":
            return chat_response([f"Final answer: {x}" for x in "ABC"][: body.get("n", 1)])
        return chat_response('{"score": 7}')

    stacks, send = [], requests.adapters.HTTPAdapter.send

    def spy(self, request, **kw):
        if b'"response_format"' in (request.body or b""):
            stacks.append(traceback.extract_stack())
        return send(self, request, **kw)

    srv = loopback(handler)
    requests.adapters.HTTPAdapter.send = spy
    try:
        v = verifier.build(verifier.Settings(max_steps=1), Client(srv.url, "m"))
        map_fn = map if threads == 1 else verifier.thread_map(threads)
        verifier.run(v, "Which? A. x B. y", map_fn=map_fn)
    finally:
        requests.adapters.HTTPAdapter.send = send
    assert len(stacks) == 9  # 3 candidates x 3 judges

    def side(filename: str) -> str | None:
        name = filename.replace("\\", "/")
        if "/verdict_lab/" in name:
            return "lab"
        return "core" if name.endswith(("/verdict.py", "/judges.py")) else None

    for stack in stacks:
        sides = [side(f.filename) for f in stack]
        path = sides[sides.index("core") :]  # from the first frame in the core
        path = [s for s in path if s is not None]
        runs = [s for i, s in enumerate(path) if i == 0 or s != path[i - 1]]
        assert runs == ["core", "lab", "core", "lab"]
