"""Tests for adaptive verification (verdict_lab/adaptive.py, loop.step's gate, Settings.adaptive):
the three signals' formulas, hand-worked; which steps a scripted server's chain leaves unjudged at
two thresholds, and the judge calls that saves; the trace's record of it."""

import json
import math
import re

import numpy as np
import pytest

import judges
import verdict
from verdict_lab import adaptive, layouts, loop, verifier
from verdict_lab.client import Client
from verdict_lab.loopback import LoopbackServer, chat_response, user_text

FINAL = verdict.FINAL_ANSWER


def said(text: str, p: float = math.nan, low: float | None = None) -> judges.Candidate:
    """A candidate whose tokens have the mean log-probability ln p and the minimum ln low (ln p when
    low is None), or none when p is NaN."""
    if p != p:
        return judges.Candidate(text, None)
    low = p if low is None else low
    return judges.Candidate(text, {"tokens": 2, "mean": math.log(p), "min": math.log(low)})


# ----------------------------------------------------------------------------- the signals


def test_agree_is_the_share_of_the_largest_group_by_text_or_final_answer():
    # "a  b" and "a b" are the same words; two of three agree: v = 2/3.
    assert adaptive.agreement(["a  b", "c", "a b"], FINAL) == pytest.approx(2 / 3)
    # Final steps agree by their answer: "B", "b." are not "B"; "Final answer:  b" is.
    final = ["Final answer: B", "It is B. Final answer: b", "Final answer: B."]
    assert adaptive.agreement(final, FINAL) == pytest.approx(2 / 3)
    assert adaptive.agreement(["x", "y", "z"], FINAL) == pytest.approx(1 / 3)
    # With no logprobs the most likely candidate is the first of the largest group: index 1.
    assert adaptive.most_likely(["c", "a b", "a  b"], FINAL, [math.nan] * 3) == 1
    # v = 2/3 is above θ = 0.5: not judged; it is not above θ = 2/3: judged.
    gate = adaptive.Adaptive("agree", 0.5)
    assert gate.decide(["c", "a b", "a  b"], FINAL) == adaptive.Decision(
        "agree", 0.5, pytest.approx(2 / 3), False, 1
    )
    assert adaptive.Adaptive("agree", 2 / 3).decide(["c", "a b", "a  b"], FINAL).judged
    # θ = 1 judges every step: no v is above 1.
    assert adaptive.Adaptive("agree", 1).decide(["a", "a", "a"], FINAL).judged


def test_the_logprob_signals_read_the_most_likely_candidates_mean_and_least_likely_token():
    # ℓ̄ = ln 0.7, ln 0.9, ln 0.8: the most likely is candidate 1, v_mean = 0.9; its least likely
    # token has p = 0.4, so v_min = 0.4.
    cands = [said("a", 0.7, 0.6), said("b", 0.9, 0.4), said("c", 0.8, 0.8)]
    mean = adaptive.Adaptive("mean-prob", 0.85).decide(cands, FINAL)
    assert (mean.index, mean.value, mean.judged) == (1, pytest.approx(0.9), False)  # 0.9 > 0.85
    # exp(ln 0.9) is 0.9 at 12 decimals, so it is not above θ = 0.9: judged.
    assert adaptive.Adaptive("mean-prob", 0.9).decide(cands, FINAL).judged
    low = adaptive.Adaptive("min-prob", 0.5).decide(cands, FINAL)
    assert (low.index, low.value, low.judged) == (1, pytest.approx(0.4), True)  # 0.4 < 0.5
    # A tie goes to the lowest index; a candidate without logprobs is not a contender.
    tie = [said("a"), said("b", 0.8), said("c", 0.8)]
    assert adaptive.Adaptive("mean-prob", 0.5).decide(tie, FINAL).index == 1
    # No logprobs at all: no value, the step is judged, and the index is agree's.
    none = adaptive.Adaptive("min-prob", 0).decide(["x", "y", "y"], FINAL)
    assert none.judged and none.value != none.value and none.index == 1
    assert none.to_dict() == {"signal": "min-prob", "threshold": 0, "value": None, "judged": True}


@pytest.mark.parametrize(
    "signal, theta, message",
    [
        ("entropy", 0.5, "adaptive must be off or one of agree, mean-prob, min-prob"),
        ("agree", 1.5, "adaptive_threshold must be in \\[0, 1\\], got 1.5"),
        ("mean-prob", math.nan, "adaptive_threshold must be in \\[0, 1\\]"),
        ("mean-prob", True, "adaptive_threshold must be in \\[0, 1\\], got True"),
    ],
)
def test_a_bad_signal_or_threshold_is_named(signal, theta, message):
    with pytest.raises(ValueError, match=message):
        adaptive.Adaptive(signal, theta)


def test_settings_check_the_setting_and_give_the_signals_default_threshold():
    assert verifier.Settings().gate is None
    assert verifier.Settings(adaptive="mean-prob").gate == adaptive.Adaptive("mean-prob", 0.9)
    assert verifier.Settings(adaptive="agree").gate == adaptive.Adaptive("agree", 0.9)
    assert verifier.Settings(adaptive="agree", adaptive_threshold=0.5).gate.threshold == 0.5
    with pytest.raises(ValueError, match="adaptive must be off for base"):
        verifier.Settings(rule="base", adaptive="agree")
    with pytest.raises(ValueError, match="adaptive_threshold needs an adaptive signal"):
        verifier.Settings(adaptive_threshold=0.5)
    with pytest.raises(ValueError, match="adaptive_threshold must be in"):
        verifier.Settings(adaptive="min-prob", adaptive_threshold=-0.1)


# ----------------------------------------------------------------------------- a scripted chain

# The reasoner's candidates at each step, each with the probability p of its tokens (both tokens
# have log-probability ln p, so ℓ̄ = ln p and exp(ℓ̄) = p). mean-prob's v is each step's highest p.
CANDIDATES = {
    1: [("The cube is red.", 0.95), ("The cube is blue.", 0.80), ("The cube is big.", 0.70)],
    2: [("The ball is left.", 0.60), ("The ball is right.", 0.70), ("The ball is near.", 0.85)],
    3: [("Final answer: A", 0.75), ("Final answer: B", 0.70), ("Final answer: A.", 0.50)],
}
# Every judge gives these candidates 9 (ŝ = 1, accepted) and any other 3 (ŝ = 1/3, rejected).
GOOD = {"The cube is red.", "The ball is left.", "Final answer: B"}


def scripted_server(body, path):
    """The reasoner's n candidates for the step its prompt asks for, with logprobs when asked; a
    judge's {"score": d} for the candidate in its <step> fence."""
    text = user_text(body)
    if layouts.role_of(body["messages"]) == "reasoner":
        t = 1 + len(re.findall(r"(?m)^Step \d+:", text))
        texts, ps = zip(*CANDIDATES[t])
        lps = [{"content": [{"token": w, "logprob": math.log(p)} for w in "xy"]} for p in ps]
        return chat_response(list(texts), logprobs=lps if body.get("logprobs") else None)
    step = re.findall(r"<step>\s*(.*?)\s*</step>", text, re.S)[-1]  # the candidate comes last
    return chat_response(json.dumps({"score": 9 if step in GOOD else 3}))


def chain(**settings) -> tuple:
    """(trace, judge requests, reasoner requests) of one chain on the scripted server."""
    with LoopbackServer(scripted_server) as srv:
        v = verifier.build(verifier.Settings(**settings), Client(srv.url, "m"))
        trace = verifier.run(v, "Where is the ball?\nA. left\nB. right")
        roles = [layouts.role_of(body["messages"]) for body in srv.chats]
    return trace, sum(r != "reasoner" for r in roles), roles.count("reasoner")


def test_hand_worked_steps_left_unjudged_at_two_thresholds_and_the_calls_saved():
    # Full VERDICT judges all 3 steps: 3 candidates × 3 judges = 9 calls each, 27 in all.
    # mean-prob's v per step is 0.95, 0.85, 0.75 (each step's most likely candidate: #0, #2, #0).
    full, full_calls, _ = chain()
    assert full.chain == ["The cube is red.", "The ball is left.", "Final answer: B"]
    assert full_calls == full.totals()["judge_calls"] == 27 and "adaptive" not in full.totals()
    # θ = 0.9: step 1 (0.95 > 0.9) is not judged and takes its most likely candidate, #0; steps 2
    # (0.85) and 3 (0.75) are judged as VERDICT judges them: 18 calls, 9 saved.
    hi, hi_calls, hi_reasoner = chain(adaptive="mean-prob", adaptive_threshold=0.9)
    assert hi.chain == ["The cube is red.", "The ball is left.", "Final answer: B"]
    assert [s.adaptive.judged for s in hi.steps] == [False, True, True]
    assert [s.adaptive.value for s in hi.steps] == pytest.approx([0.95, 0.85, 0.75])
    assert hi_calls == hi.totals()["judge_calls"] == 18 and hi_reasoner == 3
    # θ = 0.8: steps 1 and 2 (0.85 > 0.8) are not judged; step 2 takes its most likely candidate,
    # #2 "The ball is near.", which the judges would have rejected; step 3 is judged: 9 calls, 18
    # saved.
    lo, lo_calls, _ = chain(adaptive="mean-prob", adaptive_threshold=0.8)
    assert lo.chain == ["The cube is red.", "The ball is near.", "Final answer: B"]
    assert [s.adaptive.judged for s in lo.steps] == [False, False, True]
    assert lo_calls == lo.totals()["judge_calls"] == 9
    assert lo.totals()["adaptive"] == {
        "signal": "mean-prob",
        "threshold": 0.8,
        "judged": 1,
        "unverified": 2,
    }
    # An unjudged step is unverified, no fallback and accepts nothing; the trace says why.
    d = json.loads(json.dumps(lo.to_dict(), allow_nan=False))
    assert d["format"] == loop.TRACE_FORMAT == "verdict-trace/6"
    step2 = d["steps"][1]
    assert (step2["verified"], step2["fallback"], step2["index"]) == (False, False, 2)
    assert step2["accepted"] == [False] * 3 and step2["s_hat"] == [[], [], []]
    assert step2["adaptive"] == {
        "signal": "mean-prob",
        "threshold": 0.8,
        "value": pytest.approx(0.85),
        "judged": False,
    }
    # A judged step keeps the dual test: candidate #1 "Final answer: B" alone is accepted.
    assert d["steps"][2]["accepted"] == [False, True, False] and d["steps"][2]["verified"]
    assert lo.totals()["fallbacks"] == 0


def test_agree_needs_no_logprobs_and_leaves_the_reasoners_requests_as_they_were():
    # agree at θ = 0 skips every step (v >= 1/n > 0): no judge call at all, and the reasoner's
    # requests carry no logprobs, so they are byte-identical to full VERDICT's.
    trace, calls, _ = chain(adaptive="agree", adaptive_threshold=0)
    assert calls == 0 and trace.totals()["adaptive"]["unverified"] == 3
    with LoopbackServer(scripted_server) as srv:
        v = verifier.build(verifier.Settings(adaptive="agree"), Client(srv.url, "m"))
        verifier.run(v, "Where is the ball?\nA. left\nB. right")
        assert all("logprobs" not in body for body in srv.chats if "stop" in body)


def test_a_step_of_plain_callables_is_gated_the_same_way():
    # loop.step with plain functions: the proposer's candidates carry logprobs; ŝ is [n, 0] when
    # the step is not judged, and the judges are never called.
    called = []
    judge = lambda state, step: called.append(step) or 1.0
    propose = lambda state, n: [said("a", 0.5), said("b", 0.99), said("c", 0.2)]
    gate = adaptive.Adaptive("mean-prob", 0.95)  # 0.99 > 0.95
    done = loop.step(verdict.State("q"), propose, [judge] * 3, adaptive=gate)
    assert done.chosen == "b" and done.s_hat.shape == (3, 0) and not called
    assert not done.selection.verified and not done.fallback and done.calls == ()
    judged = loop.step(
        verdict.State("q"), propose, [judge] * 3, adaptive=adaptive.Adaptive("mean-prob", 1.0)
    )
    assert judged.adaptive.judged and len(called) == 9 and np.all(judged.s_hat == 1.0)
