"""Tests for modes/judge.py (ModeChain, ModeJudge): the judge modes (SGV's prior, EVPV's fact sheet
and gate), against a scripted loopback server; one `live` test talks to $VERDICT_LIVE_URL."""

import json
import math
import re
import threading
from dataclasses import replace

import numpy as np
import pytest

import judges
import verdict
from verdict_lab import loop
from judges import Judge, Reasoner, make_judges
from verdict_lab import layouts, verifier
from verdict_lab.cache import Cache
from verdict_lab.client import Client
from verdict_lab.formats import TEXT, JudgeFormat
from verdict_lab.layouts import DEFAULT_LAYOUT, role_of
from verdict_lab.loopback import chat_response, user_text
from verdict_lab.modes import JudgeMode, evpv
from verdict_lab.modes.judge import ModeChain, ModeJudge
from verdict_lab.verifier import Settings, judges_of, thread_map

nan = math.nan

PRIOR = (
    "- A correct solution finds the ball right of the cube.\n"
    "- Beware: apparent size is not distance."
)

SHEET = {
    "objects": [
        {"fact": "a red cube", "uncertain": False},
        {"fact": "a blue ball", "uncertain": False},
    ],
    "numbers": [],
    "relations": [{"fact": "the blue ball is right of the red cube", "uncertain": False}],
    "structure": [{"fact": "the cube stands on the floor", "uncertain": True}],
}

SHEET_LINES = (
    "- objects: a red cube\n- objects: a blue ball\n"
    "- relations: the blue ball is right of the red cube\n"
    "- structure: the cube stands on the floor (uncertain)"
)

CANDIDATES = [
    "The ball is right of the cube.",
    "The ball is left of the cube.",
    "The cube is large.",
    "The ball is blue.",
    "The ball is hidden.",
]

CHECKS = {  # candidate -> the premise check's reply
    "The ball is right of the cube.": (
        '{"claims": [{"claim": "ball right of cube", "label": "supported"}]}'
    ),
    "The ball is left of the cube.": '{"claims": [{"claim": "a ball", "label": "Supported"}, '
    '{"claim": "ball left of cube", "label": "contradicted"}]}',
    "The cube is large.": '{"claims": [{"claim": "the cube is large", "label": "uncertain"}]}',
    "The ball is blue.": "The ball is indeed blue.",  # not JSON: the check is unreadable
    "The ball is hidden.": '{"claims": []}',  # no visual claim: ν_t = 0
}


REFUSE = (  # llama-server's 400 for a response_format type it does not know
    400,
    {
        "error": {
            "code": 400,
            "type": "invalid_request_error",
            "message": (
                'response_format type must be one of "text" or "json_object", but got: json_schema'
            ),
        }
    },
)


def chain_of(
    client, mode: JudgeMode = JudgeMode(), fmt: str = "json", layout: str = DEFAULT_LAYOUT, **kw
):
    """One chain's ModeChain: its requests laid out by `layout` (layouts.layout), under a
    JudgeFormat of its own (json by default: the mode's JSON requests send their schemas)."""
    return ModeChain(client, mode, fmt=JudgeFormat(fmt), layout=layouts.layout(layout), **kw)


def judges_in(chain, client=None, layout: str = DEFAULT_LAYOUT, **kw) -> list:
    """The three judges (make_judges; text replies, as the scripted server writes "Score: x"), each
    wrapped in `chain`'s judge mode (ModeJudge), or plain when chain is None."""
    js = make_judges(client or chain.client, reply=TEXT, layout=layouts.layout(layout), **kw)
    return js if chain is None else [ModeJudge(j, chain) for j in js]


def run_judges(chain, **settings) -> tuple:
    """The judges a run builds for `chain` (verifier.judges_of), in the chain's own format."""
    s = Settings(judge_format=chain.format.requested, **settings)
    return judges_of(s, chain.client, chain.format, chain)


def role(body) -> str:
    """Which call a request is (by the instructions it carries)."""
    name = role_of(body["messages"])
    assert name is not None, body
    return name


def modes_handler(sheets=(json.dumps(SHEET),), scores=None):
    """Every role of a mode run: n candidates, the prior, the fact sheets in order (the last
    repeats), the premise checks of CHECKS, and Score: scores[judge] (0.8 for all by default) from
    every judge but the visual one on "hidden"."""
    sheets, scores = list(sheets), scores or dict.fromkeys(verdict.JUDGES, 0.8)

    def handler(body, path):
        r, text = role(body), user_text(body)
        if r == "reasoner":
            return chat_response(CANDIDATES[: body["n"]])
        if r == "prior":
            return chat_response(PRIOR, prompt_tokens=30, completion_tokens=20)
        if r == "premises":
            return chat_response(
                sheets.pop(0) if len(sheets) > 1 else sheets[0],
                prompt_tokens=40,
                completion_tokens=60,
            )
        if r == "premise_check":
            return chat_response(
                next(v for k, v in CHECKS.items() if f"<step>\n{k}\n</step>" in text),
                prompt_tokens=50,
                completion_tokens=10,
            )
        return chat_response(
            "I cannot tell."
            if r == "visual" and "The ball is hidden." in text
            else f"Fine.\nScore: {scores[r]}"
        )

    return handler


def test_judge_mode_names_parse_and_guards():
    assert JudgeMode().name == "plain" and not JudgeMode().active
    assert JudgeMode.parse("premises, prior") == JudgeMode(prior=True, premises=True)
    assert JudgeMode.parse("prior+premises+gate").name == "prior+premises+gate"
    assert JudgeMode.parse("") == JudgeMode.parse("plain") == JudgeMode()
    # The gate word names its target; plain "gate" is the default target, step (EVPV gates the
    # step's reward).
    assert evpv.GATE_TARGET == "step" and JudgeMode(premises=True, gate=True).gate_target == "step"
    assert (
        JudgeMode.parse("premises+gate")
        == JudgeMode.parse("gate-step,premises")
        == JudgeMode(premises=True, gate=True)
    )
    visual = JudgeMode.parse("premises+gate-visual")
    assert (
        visual == JudgeMode(premises=True, gate=True, gate_target="visual")
        and visual.name == "premises+gate-visual"
    )
    assert [visual.gates(j) for j in verdict.JUDGES] == [True, False, False]
    assert [JudgeMode(premises=True, gate=True).gates(j) for j in verdict.JUDGES] == [True] * 3
    assert not JudgeMode(premises=True).gates("visual")
    # Every mode's name parses back to it.
    for words in (
        "plain",
        "prior",
        "premises",
        "prior+premises",
        "premises+gate",
        "premises+gate-visual",
        "prior+premises+gate-visual",
    ):
        assert JudgeMode.parse(JudgeMode.parse(words).name) == JudgeMode.parse(words)
    for bad in ("prior,sgv", "prior,prior", "premises,gate-all", "premises+gate+gate-visual"):
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            JudgeMode.parse(bad)
    # The gate needs the fact sheet.
    with pytest.raises(ValueError, match="gate=True, premises=False"):
        JudgeMode(prior=True, gate=True)
    with pytest.raises(ValueError, match="gate_target='judges'"):
        JudgeMode(premises=True, gate=True, gate_target="judges")
    # The target needs the gate, or else the mode's name would hide it.
    with pytest.raises(ValueError, match="gate_target='visual' needs the gate"):
        JudgeMode(premises=True, gate_target="visual")


def test_plain_mode_sends_byte_identical_requests(loopback):
    srv = loopback(modes_handler())
    client = Client(srv.url, "m")
    state = verdict.State("Where is the ball?", (), ("The cube is red.",))
    for chain in (None, chain_of(client)):  # plain judges, then the same judges in the plain mode
        assert [j(state, "The ball is right.") for j in judges_in(chain, client)] == [0.8] * 3
    raw = [r.raw for r in srv.requests]
    text = user_text(srv.chats[0])
    assert raw[:3] == raw[3:] and text.index("Where is the ball?") < text.index(
        "Step 1: The cube is red."
    )


def test_prior_is_made_once_per_chain_and_reused_across_steps_and_candidates(loopback):
    srv = loopback(modes_handler())
    client = Client(srv.url, "m")
    cfg = verdict.Config(n=2, max_steps=2)
    g = chain_of(client, JudgeMode(prior=True), layout="shared")
    js = judges_in(g, layout="shared")
    # The 6 judge calls of a step run at once.
    loop.run(
        "Where is the ball?",
        Reasoner(client, layout=layouts.layout("shared")),
        js,
        cfg,
        map_fn=thread_map(6),
    )
    roles = [role(b) for b in srv.chats]
    assert (
        roles.count("prior") == 1
        and roles.count("reasoner") == 2
        and len(roles) == 1 + 2 + 2 * 2 * 3
    )
    (prior,) = [b for b in srv.chats if role(b) == "prior"]
    # The prior is asked for with no step shown.
    assert len(prior["messages"]) == 2 and not any(c in user_text(prior) for c in CANDIDATES)
    for body in srv.chats:
        if role(body) in verdict.JUDGES:
            # The prior follows the shared question and steps, and the judge's role; the candidate
            # follows the prior.
            text = user_text(body)
            assert (
                text.index("Where is the ball?")
                < text.index("Previous steps:")
                < text.index("You are the")
                < text.index(PRIOR)
                < text.index("Step to check:\n<step>")
            )
    expected = {"judge_mode": "prior", "prior": PRIOR, "extra_calls": 1, "extra_tokens": 50}
    assert g.record() == expected
    # A new question is a new chain: its own ModeChain and prior (this one refuses it: see below).
    other = chain_of(client, JudgeMode(prior=True), layout="shared")
    loop.run("Where is the cube?", Reasoner(client), judges_in(other, layout="shared"), cfg)
    assert [role(b) for b in srv.chats].count("prior") == 2
    assert other.record() == expected and g.record() == expected


def test_a_mode_chain_serves_one_chain_and_refuses_another_question(loopback, png):
    # A ModeChain's artefacts (the prior, the fact sheet, the checks and region requests) are one
    # chain's: a state of another question, or of the same question with other images, is a
    # ValueError, before any request, and the chain's record is left as it was. The chain's own
    # later steps are served as before.
    srv = loopback(modes_handler())
    client = Client(srv.url, "m")
    g = chain_of(client, JudgeMode(prior=True, premises=True, gate=True, zoom=True))
    state = verdict.State("Where is the ball?", (png,))
    assert g.prior(state) == PRIOR and g.fact_sheet(state) == SHEET
    # The same chain a step later has the same prior and sheet.
    later = state.extend("The cube is red.")
    assert g.note("visual", later) == g.note("visual", state) and PRIOR in g.note("logical", later)
    sent, before = len(srv.chats), g.record()
    refused = "a ModeChain serves one chain; got another question"
    for other in (
        verdict.State("Where is the cube?", (png,)),  # another question
        verdict.State("Where is the ball?"),  # the same question without its image
        verdict.State("Where is the cube?", (png,), ("The cube is red.",)),
    ):
        for call in (
            lambda s: g.prior(s),
            lambda s: g.fact_sheet(s),
            lambda s: g.note("logical", s),
            lambda s: g.gated("visual", s, "The ball is right of the cube.", 0.8),
            lambda s: g.look(s, "The ball is right of the cube."),
        ):
            with pytest.raises(ValueError, match=refused):
                call(other)
    # Refused before any request, with nothing recorded.
    assert len(srv.chats) == sent and g.record() == before
    # Through the judges: a run of another question on this chain's ModeJudges fails at its first
    # judge call.
    with pytest.raises(ValueError, match=refused):
        loop.run(
            "Where is the cube?", Reasoner(client), judges_in(g), verdict.Config(n=1, max_steps=1)
        )
    assert [role(b) for b in srv.chats[sent:]] == ["reasoner"] and g.record() == before


def test_a_mode_request_is_identical_across_runs_so_the_disk_cache_serves_it(loopback, tmp_path):
    srv = loopback(modes_handler())
    for _ in range(2):  # two runs, one cache file
        client = Client(srv.url, "m", cache=Cache(tmp_path / "c.sqlite"))
        # Each run's chain has its own ModeChain.
        g = chain_of(client, JudgeMode(prior=True, premises=True))
        assert g.prior(verdict.State("q")) == PRIOR and g.fact_sheet(verdict.State("q")) == SHEET
    assert [role(b) for b in srv.chats] == ["prior", "premises"]
    # A cached reply still costs.
    assert g.record()["extra_calls"] == 2 and g.record()["extra_tokens"] == 150


def test_fact_sheet_is_parsed_and_only_the_visual_judge_reads_it(loopback, png):
    srv = loopback(
        modes_handler(["Here it is:\n```json\n" + json.dumps(SHEET, indent=2) + "\n```"])
    )
    client = Client(srv.url, "m")
    g = chain_of(client, JudgeMode(premises=True))
    state = verdict.State("Where is the ball?", (png,))
    assert [j(state, "The ball is right.") for j in judges_in(g)] == [0.8] * 3
    by = {role(b): b for b in srv.chats}
    assert (
        len(srv.chats) == 4 and by["premises"]["messages"][1]["content"][0]["type"] == "image_url"
    )
    visual = user_text(by["visual"])
    assert (
        visual.index("Where is the ball?")
        < visual.index(SHEET_LINES)
        < visual.index("Step to check:\n<step>")
    )
    assert "Fact sheet" not in user_text(by["logical"]) + user_text(by["contextual"])
    assert g.record() == {
        "judge_mode": "premises",
        "fact_sheet": SHEET,
        "fact_sheet_status": "ok",
        "fact_sheet_errors": [],
        "extra_calls": 1,
        "extra_tokens": 100,
    }


def test_malformed_fact_sheet_is_asked_for_once_more(loopback):
    truncated = json.dumps(SHEET)[:-20]
    srv = loopback(modes_handler([truncated, json.dumps(SHEET)]))
    g = chain_of(Client(srv.url, "m"), JudgeMode(premises=True))
    assert g.fact_sheet(verdict.State("q")) == SHEET
    first, second = srv.chats
    assert second["messages"][:2] == first["messages"] and second["messages"][2] == {
        "role": "assistant",
        "content": truncated,
    }
    assert second["messages"][3]["content"].startswith(
        "Your reply was not a valid fact sheet (invalid JSON"
    )
    rec = g.record()
    assert (
        rec["fact_sheet_status"] == "retried"
        and len(rec["fact_sheet_errors"]) == 1
        and rec["extra_calls"] == 2
    )


def test_fact_sheet_malformed_twice_degrades_and_the_trace_records_it(loopback):
    # The run as the commands build it (verifier.build, verifier.run): meta["judge_mode"] is
    # ModeChain.record.
    srv = loopback(modes_handler(["I see a cube and a ball.", '{"objects": "a cube"}']))
    client = Client(srv.url, "m")
    settings = Settings(n=2, max_steps=1, judge_format="text", judge_mode="premises+gate")
    v = verifier.build(settings, client)
    assert v.chain is not None and all(
        isinstance(j, ModeJudge) and j.chain is v.chain for j in v.judges
    )
    trace = verifier.run(v, "Where is the ball?", map_fn=thread_map(3))
    roles = [role(b) for b in srv.chats]
    # With no sheet, there is nothing to check against.
    assert roles.count("premises") == 2 and "premise_check" not in roles
    assert not any("Fact sheet" in user_text(b) for b in srv.chats)
    assert (trace.steps[0].s_hat == 0.8).all()  # the visual judge as in plain VERDICT
    meta = json.loads(json.dumps(trace.to_dict(), allow_nan=False))["meta"]["judge_mode"]
    assert meta == v.chain.record() and meta["judge_mode"] == "premises+gate"
    assert (
        meta["fact_sheet"] is None
        and meta["fact_sheet_status"] == "degraded"
        and meta["extra_calls"] == 2
    )
    assert meta["fact_sheet_errors"] == [
        "no JSON object in the reply",
        "'objects' must be a list, got \"a cube\"",
    ]


@pytest.mark.parametrize(
    "reply, error",
    [
        ("no json here", "no JSON object"),
        ('{"objects": [}', "invalid JSON"),
        ('{"objects": [], "numbers": [], "relations": []}', "'structure' must be a list"),
        (
            '{"objects": ["a cube"], "numbers": [], "relations": [], "structure": []}',
            "objects entry",
        ),
        (
            '{"objects": [{"fact": " "}], "numbers": [], "relations": [], "structure": []}',
            "objects entry",
        ),
        (
            '{"objects": [{"fact": "cube", "uncertain": "no"}], '
            '"numbers": [], "relations": [], "structure": []}',
            "objects entry",
        ),
        ('{"objects": [], "numbers": [], "relations": [], "structure": []}', "no fact"),
    ],
)
def test_parse_fact_sheet_rejects_malformed_sheets(reply, error):
    with pytest.raises(ValueError, match=error):
        evpv.parse_fact_sheet(reply)


def test_parse_fact_sheet_keeps_facts_and_marks():
    sheet = evpv.parse_fact_sheet(
        'Sure! {"objects": [{"fact": " cube ", "x": 1}], "numbers": [{"fact": "3 legs", '
        '"uncertain": true}], "relations": [], "structure": [], "notes": "ignored"}'
    )
    assert sheet == {
        "objects": [{"fact": "cube", "uncertain": False}],
        "numbers": [{"fact": "3 legs", "uncertain": True}],
        "relations": [],
        "structure": [],
    }
    assert evpv.fact_lines(sheet) == "- objects: cube\n- numbers: 3 legs (uncertain)"


def test_reliability_is_the_geometric_mean_of_claim_agreement():
    assert evpv.reliability([1.0, 1.0]) == 1.0
    assert evpv.reliability([1.0, 0.5]) == pytest.approx(math.sqrt(0.5))  # (1 · 0.5)^(1/2)
    # (1 · 1 · 0.5)^(1/3) = 0.7937
    assert evpv.reliability([1.0, 1.0, 0.5]) == pytest.approx(0.5 ** (1 / 3))
    assert evpv.reliability([1.0, 1.0, 0.0]) == 0.0  # one hallucinated premise sinks r
    assert evpv.reliability([]) == 1.0  # no visual claim: nothing to doubt
    for bad in ([1.2], [nan], [[1.0]]):
        with pytest.raises(ValueError, match="agreements"):
            evpv.reliability(bad)


def test_gate_arithmetic_against_hand_computed_values():
    # α(r) = (σ(10(r − 0.5)) − σ(−5)) / (σ(5) − σ(−5)), σ(x) = 1 / (1 + e^−x);
    # σ(5) = 0.9933071491, σ(−5) = 0.0066928509, so the denominator is 0.9866142982.
    assert evpv.alpha(1.0) == 1.0 and evpv.alpha(0.0) == 0.0
    # r = 1: unchanged
    assert evpv.gate(0.9, 1.0) == 0.9 and evpv.gate(0.2, 1.0) == pytest.approx(0.2)
    assert evpv.gate(0.9, 0.0) == 0.5 and evpv.gate(0.2, 0.0) == 0.5  # r = 0: to neutral 0.5
    # r = 0.5: σ(0) = 0.5 and α = (0.5 − 0.0066928509) / 0.9866142982 = 0.5;
    # ŝ_V = 0.9 -> 0.5 + 0.5 · 0.4 = 0.7
    assert evpv.gate(0.9, 0.5) == pytest.approx(0.7)
    # r = 0.7: σ(2) = 0.8807970780, α = (0.8807970780 − 0.0066928509) / 0.9866142982 = 0.8859634699;
    # ŝ_V = 0.9 -> 0.5 + 0.8859634699 · 0.4 = 0.8543853880;
    # ŝ_V = 0.1 -> 0.5 − 0.3543853880 = 0.1456146120
    assert evpv.alpha(0.7) == pytest.approx(0.8859634699, abs=1e-10)
    assert evpv.gate(0.9, 0.7) == pytest.approx(0.8543853880, abs=1e-10)
    assert evpv.gate(0.1, 0.7) == pytest.approx(0.1456146120, abs=1e-10)
    assert math.isnan(evpv.gate(nan, 0.3))  # an abstention stays an abstention
    with pytest.raises(ValueError, match="r=1.5"):
        evpv.gate(0.9, 1.5)
    with pytest.raises(ValueError, match="s=1.2"):
        evpv.gate(1.2, 0.5)


def run_gated(loopback, png, mode: JudgeMode, scores=None) -> tuple:
    """One step over the five CANDIDATES with every judge called at once: (server, trace with
    meta.judge_mode, the chain's record, as JSON would hold it)."""
    srv = loopback(modes_handler(scores=scores))
    client = Client(srv.url, "m")
    g = chain_of(client, mode, layout="shared")  # as written for the shared layout
    trace = loop.run(
        "Where is the ball?",
        Reasoner(client, layout=layouts.layout("shared")),
        judges_in(g, layout="shared"),
        verdict.Config(n=5, max_steps=1),
        image=png,
        map_fn=thread_map(6),
    )
    trace = replace(trace, meta={"judge_mode": g.record()})
    return srv, json.loads(json.dumps(trace.to_dict(), allow_nan=False))


def test_visual_target_gates_the_visual_score_before_the_consensus_and_the_trace_records_both(
    loopback, png
):
    mode = JudgeMode(prior=True, premises=True, gate=True, gate_target="visual")
    srv, d = run_gated(loopback, png, mode)
    s_hat = np.array(d["steps"][0]["s_hat"], dtype=float)
    # ŝ_V = 0.8 per candidate: supported (r = 1) stays 0.8; contradicted (r = 0) goes to 0.5; one
    # uncertain claim (r = 0.5, α = 0.5) gives 0.5 + 0.5 · 0.3 = 0.65; an unreadable check leaves
    # 0.8; an abstention stays NaN
    assert s_hat[:, 0] == pytest.approx([0.8, 0.5, 0.65, 0.8, nan], nan_ok=True)
    assert (s_hat[:, 1:] == 0.8).all()  # only the visual judge is gated
    checks = [b for b in srv.chats if role(b) == "premise_check"]
    # 4 candidates checked ("hidden" is not, as its visual score is NaN), the unreadable
    # one asked twice; text only
    assert len(checks) == 5 and all(isinstance(b["messages"][1]["content"], str) for b in checks)
    text = user_text(checks[0])
    assert (
        text.index("Where is the ball?")
        < text.index("Fact sheet:\n" + SHEET_LINES)
        < text.index("Step to check:\n<step>")
    )
    meta = d["meta"]["judge_mode"]
    assert meta["judge_mode"] == "prior+premises+gate-visual" and meta["gate_target"] == "visual"
    assert meta["prior"] == PRIOR and meta["fact_sheet"] == SHEET
    gate = {e["candidate"]: e for e in meta["gate"]}
    assert [gate[c]["r"] for c in CANDIDATES[:4]] == [
        1.0,
        0.0,
        0.5,
        None,
    ] and "The ball is hidden." not in gate
    assert gate["The ball is left of the cube."]["claims"][0] == {
        "claim": "a ball",
        "label": "supported",
    }
    # [n][m]: each judge call's record, its gate's part with it.
    records = d["steps"][0]["calls"]
    # The visual judge's call on "left of":
    assert records[1][0]["gate"] == {"s_hat": 0.8, "gated": 0.5, "nu": 1, "r": 0.0, "alpha": 0.0}
    # the visual judge's calls alone, but "hidden", which it did not score
    assert [["gate" in c for c in row] for row in records] == [[True, False, False]] * 4 + [
        [False] * 3
    ]
    blue = gate["The ball is blue."]
    assert blue["error"] == "no JSON object in the reply"
    assert records[3][0]["gate"] == {
        "s_hat": 0.8,
        "gated": 0.8,
        "nu": None,
        "r": None,
        "alpha": None,
    }
    assert meta["extra_calls"] == 1 + 1 + 5 and meta["extra_tokens"] == 50 + 100 + 5 * 60


def test_step_target_gates_every_judges_score_with_one_check_per_candidate(loopback, png):
    mode = JudgeMode(premises=True, gate=True)  # the default target
    srv, d = run_gated(
        loopback, png, mode, scores={"visual": 0.8, "logical": 0.9, "contextual": 0.2}
    )
    s_hat = np.array(d["steps"][0]["s_hat"], dtype=float)
    # Each score ŝ -> 0.5 + α(r)(ŝ − 0.5), with the candidate's r:
    assert s_hat[:4] == pytest.approx(
        np.array(
            [
                [0.8, 0.9, 0.2],  # supported, r = 1, α = 1: unchanged
                [0.5, 0.5, 0.5],  # one contradicted claim, r = 0, α = 0: all neutral
                [0.65, 0.7, 0.35],  # uncertain, r = 0.5, α = 0.5: 0.5 ± half the distance to 0.5
                [0.8, 0.9, 0.2],  # unreadable check: unchanged
            ]
        )
    )
    # No claim (ν_t = 0): kept; V abstained: NaN.
    assert s_hat[4] == pytest.approx([nan, 0.9, 0.2], nan_ok=True)
    checks = [b for b in srv.chats if role(b) == "premise_check"]
    assert sorted(
        c for c in CANDIDATES if any(f"<step>\n{c}\n</step>" in user_text(b) for b in checks)
    ) == sorted(CANDIDATES)
    # One per candidate, not one per judge, the unreadable one twice; "hidden" for L and C alone.
    assert len(checks) == 6
    meta = d["meta"]["judge_mode"]
    assert meta["judge_mode"] == "premises+gate" and meta["gate_target"] == "step"
    gate, records = {e["candidate"]: e for e in meta["gate"]}, d["steps"][0]["calls"]
    assert [
        (c["gate"]["s_hat"], c["gate"]["gated"]) for c in records[2]
    ] == [  # "The cube is large."
        (0.8, pytest.approx(0.65)),
        (0.9, pytest.approx(0.7)),
        (0.2, pytest.approx(0.35)),
    ]
    hidden = gate["The ball is hidden."]
    assert (hidden["nu"], hidden["r"], hidden["alpha"]) == (0, 1.0, None)
    assert ["gate" in c for c in records[4]] == [False, True, True]
    assert [gate[c]["nu"] for c in CANDIDATES] == [1, 1, 1, None, 0]
    assert meta["extra_calls"] == 1 + 6 and meta["extra_tokens"] == 100 + 6 * 60


def test_nu_rule_a_step_with_no_visual_claim_is_never_gated(loopback, monkeypatch):
    # ν_t = 0 is decided from the claims, before r and α: even a gate that would flatten every score
    # (α patched to 0, so r = 1 no longer leaves a score alone) keeps a claim-free step's scores.
    srv = loopback(modes_handler())
    g = chain_of(Client(srv.url, "m"), JudgeMode(premises=True, gate=True))
    monkeypatch.setattr(evpv, "alpha", lambda r, *a: 0.0)
    state = verdict.State("Where is the ball?")
    assert g.gated("visual", state, "The ball is hidden.", 0.9)[0] == 0.9  # ν_t = 0: kept
    assert g.gated("logical", state, "The ball is hidden.", 0.3)[0] == 0.3
    # ν_t = 1: gated (α = 0)
    assert g.gated("visual", state, "The ball is right of the cube.", 0.9)[0] == 0.5
    assert g.gated("contextual", state, "The ball is right of the cube.", 0.3)[0] == 0.5
    # NaN stays NaN
    assert math.isnan(g.gated("logical", state, "The ball is right of the cube.", nan)[0])
    gate = {e["candidate"]: e for e in g.record()["gate"]}
    assert (gate["The ball is hidden."]["nu"], gate["The ball is hidden."]["alpha"]) == (0, None)
    assert (
        gate["The ball is right of the cube."]["nu"],
        gate["The ball is right of the cube."]["alpha"],
    ) == (1, 0.0)
    assert [role(b) for b in srv.chats].count("premise_check") == 2


def test_two_candidates_with_the_same_text_share_one_check_and_keep_their_own_gate_records(
    loopback,
):
    # One check per (question, steps, text): the same text makes the same request, so its candidates
    # share the reply, as the zoom mode's region requests do. Each call's gate record is its own:
    # the judges of the second candidate reply 0.2, not 0.8, and their records say so, in call order
    # (no counting per text).
    state = verdict.State("Where is the ball?", (), ("The cube is red.",))
    g = chain_of(Client(loopback(modes_handler()).url, "m"), JudgeMode(premises=True, gate=True))
    for s in (0.8, 0.2):
        assert [g.gated(j, state, "The cube is large.", s) for j in verdict.JUDGES] == [
            (
                pytest.approx(0.5 + 0.5 * (s - 0.5)),
                {
                    "s_hat": s,
                    "gated": pytest.approx(0.5 + 0.5 * (s - 0.5)),
                    "nu": 1,
                    "r": 0.5,
                    "alpha": pytest.approx(0.5),
                },
            )
        ] * 3
    rec = g.record()
    assert len(rec["gate"]) == 1 and "scores" not in rec["gate"][0] and rec["extra_calls"] == 1 + 1
    # The same through the judges: two identical candidates, judges that reply 0.8 to the first call
    # and 0.2 to the second, one check, and each call's record (its own score before and after the
    # gate) in place.
    handler, seen = modes_handler(), {}

    def per_call(body, path):
        if role(body) in verdict.JUDGES:
            k = seen[role(body)] = seen.get(role(body), -1) + 1
            return chat_response(f"Call {k}.\nScore: {(0.8, 0.2)[k]}")
        if role(body) == "reasoner":
            return chat_response(["The cube is large."] * body["n"])
        return handler(body, path)

    client = Client(loopback(per_call).url, "m")
    # A new chain has its own ModeChain.
    g = chain_of(client, JudgeMode(premises=True, gate=True), fmt="text")
    js = run_judges(g)  # the run's judges, in the chain's format (text)
    trace = loop.run("Where is the ball?", Reasoner(client), js, verdict.Config(n=2, max_steps=1))
    rec = trace.steps[0]
    assert rec.candidates == ("The cube is large.",) * 2
    assert rec.s_hat == pytest.approx(np.array([[0.65] * 3, [0.35] * 3]))
    seen_by_trace = [
        [(c["reason"], c["sampled"], c["gate"]["s_hat"], c["gate"]["gated"]) for c in row]
        for row in rec.calls
    ]
    assert seen_by_trace == [
        [("Call 0.", 0.8, 0.8, pytest.approx(0.65))] * 3,
        [("Call 1.", 0.2, 0.2, pytest.approx(0.35))] * 3,
    ]
    assert len(g.record()["gate"]) == 1


def test_judges_gating_one_candidate_at_once_share_one_check(loopback):
    # The check is held at the server until all three judges have entered gated(): the two that did
    # not make it must wait for it rather than make their own.
    entered, waited = threading.Event(), []
    handler = modes_handler()

    def slow_check(body, path):
        if role(body) == "premise_check":
            waited.append(entered.wait(30))
        return handler(body, path)

    srv = loopback(slow_check)
    g = chain_of(Client(srv.url, "m"), JudgeMode(premises=True, gate=True))
    g.fact_sheet(verdict.State("Where is the ball?"))
    calls, inner = [], g.gated

    def counting(*args):
        calls.append(args[0])
        if len(calls) == 3:
            entered.set()
        return inner(*args)

    g.gated = counting
    trace = loop.run(
        "Where is the ball?",
        Reasoner(Client(srv.url, "m")),
        judges_in(g, Client(srv.url, "m")),
        verdict.Config(n=1, max_steps=1),
        map_fn=thread_map(3),
    )
    assert waited == [True] and [role(b) for b in srv.chats].count("premise_check") == 1
    # "right of the cube": supported, r = 1
    assert trace.steps[0].s_hat.tolist() == [[0.8, 0.8, 0.8]]


# ----------------------------------------------------------------------------- structured output

# All enforced by llama-server's schema-to-grammar converter, vLLM and SGLang.
SCHEMA_KEYWORDS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "maxItems",
    "minLength",
    "maxLength",
    "enum",
}


def keywords(schema) -> set:
    """Every keyword a JSON schema uses, at any depth (property names are not keywords)."""
    if not isinstance(schema, dict):
        return set()
    found = set(schema)
    for k, v in schema.items():
        children = v.values() if k == "properties" else [v] if k == "items" else []
        found |= set().union(*map(keywords, children)) if children else set()
    return found


def test_schemas_bound_every_list_and_string_with_keywords_servers_enforce():
    sheet, claims = evpv.fact_sheet_schema(), evpv.claims_schema()
    assert keywords(sheet) <= SCHEMA_KEYWORDS and keywords(claims) <= SCHEMA_KEYWORDS
    assert sheet["required"] == list(evpv.FACT_KINDS) and sheet["additionalProperties"] is False
    for kind in evpv.FACT_KINDS:
        lst = sheet["properties"][kind]
        assert lst["maxItems"] == evpv.FACTS_PER_KIND == 3
        assert lst["items"]["properties"]["fact"] == {
            "type": "string",
            "minLength": 1,
            "maxLength": 80,
        }
        assert lst["items"]["properties"]["uncertain"] == {"type": "boolean"}
        assert lst["items"]["required"] == ["fact", "uncertain"]
    claim = claims["properties"]["claims"]
    assert claim["maxItems"] == evpv.CLAIMS_PER_STEP == 6 and claims["required"] == ["claims"]
    # p_j is defined for each label.
    assert claim["items"]["properties"]["label"]["enum"] == list(evpv.AGREEMENT)


@pytest.mark.parametrize("seed", range(5))
def test_every_reply_the_schemas_allow_is_read_back_unchanged(seed):
    # What a server applying the schema can send, however the model fills it, parses to the same
    # content (a sheet with no fact at all aside: the schema allows it, and the parser rejects it as
    # evidence of nothing).
    rng = np.random.default_rng(seed)
    text = lambda: "".join(
        rng.choice(list("ab cd{}\"'[],:xyz0189")) for _ in range(rng.integers(1, 81))
    )
    for _ in range(50):
        sheet = {
            k: [
                {"fact": text().strip() or "x", "uncertain": bool(rng.integers(2))}
                for _ in range(rng.integers(0, evpv.FACTS_PER_KIND + 1))
            ]
            for k in evpv.FACT_KINDS
        }
        if any(sheet.values()):
            assert evpv.parse_fact_sheet(json.dumps(sheet, indent=int(rng.integers(0, 3)))) == sheet
        claims = [
            {"claim": text().strip(), "label": str(rng.choice(list(evpv.AGREEMENT)))}
            for _ in range(rng.integers(0, evpv.CLAIMS_PER_STEP + 1))
        ]
        assert evpv.parse_claims(json.dumps({"claims": claims})) == claims


def schema_of(body):
    """(name, schema) of a request's response_format, or None when it has none."""
    rf = body.get("response_format")
    return (
        None
        if rf is None
        else (rf["json_schema"]["name"], rf["json_schema"]["schema"])
        if rf["type"] == "json_schema"
        else rf
    )


def test_the_fact_sheet_and_every_premise_check_send_their_schema(loopback):
    srv = loopback(modes_handler())
    # The format is json, the default.
    g = chain_of(Client(srv.url, "m"), JudgeMode(prior=True, premises=True, gate=True))
    state = verdict.State("Where is the ball?")
    # Contradicted: r = 0.
    assert g.gated("visual", state, "The ball is left of the cube.", 0.8)[0] == 0.5
    # Unreadable twice: not gated.
    assert g.gated("visual", state, "The ball is blue.", 0.8)[0] == 0.8
    assert g.prior(state) == PRIOR
    sent = [(role(b), schema_of(b)) for b in srv.chats]
    assert sent == [
        ("premises", ("fact_sheet", evpv.fact_sheet_schema())),
        ("premise_check", ("premise_check", evpv.claims_schema())),
        ("premise_check", ("premise_check", evpv.claims_schema())),  # the retry: the schema again
        ("premise_check", ("premise_check", evpv.claims_schema())),
        ("prior", None),  # free text: no schema
    ]
    retry = srv.chats[3]["messages"]
    assert retry[2] == {"role": "assistant", "content": CHECKS["The ball is blue."]}
    assert (
        retry[3]["content"]
        == "Your reply was not the JSON object asked for (no JSON object in the reply). "
        "Reply with that object only."
    )
    assert g.format.record() == {"format": "json", "format_used": "json", "fallback": None}


@pytest.mark.parametrize("fmt", ["text", "digit"])
def test_without_the_json_format_no_request_sends_a_schema(loopback, fmt):
    srv = loopback(modes_handler())
    g = chain_of(Client(srv.url, "m"), JudgeMode(premises=True, gate=True), fmt=fmt)
    assert g.gated("visual", verdict.State("Where is the ball?"), "The cube is large.", 0.8)[
        0
    ] == pytest.approx(0.65)
    assert [role(b) for b in srv.chats] == ["premises", "premise_check"] and not any(
        map(schema_of, srv.chats)
    )


def test_a_refused_schema_switches_the_judges_and_the_modes_to_prose_once(loopback, capsys):
    # The server refuses response_format (llama-server's 400 for a type it does not know). The first
    # request that sends it is the fact sheet (asked for inside the visual judge's first call): the
    # run falls back there, says so once, asks for the sheet again with the prompt alone, and no
    # later request sends a schema.
    handler = modes_handler()
    srv = loopback(lambda body, path: REFUSE if "response_format" in body else handler(body, path))
    client = Client(srv.url, "m", retries=0)
    g = chain_of(client, JudgeMode(premises=True, gate=True))  # json
    js = run_judges(g)  # json judges that fall back to text with the chain's format (FormatJudge)
    trace = loop.run("Where is the ball?", Reasoner(client), js, verdict.Config(n=3, max_steps=1))
    refused = [role(b) for b in srv.chats if "response_format" in b]
    # The sheet, then the judge call it was made in; never again.
    assert refused == ["premises", "visual"]
    err = capsys.readouterr().err
    assert (
        err.count("refused response_format") == 1
        and "but got: json_schema" in err
        and len(err.splitlines()) == 1
    )
    assert (
        g.format.record()["fallback"]["at_call"] == 2 and js[0].format.record() == g.format.record()
    )
    rec = g.record()
    assert (
        rec["fact_sheet"] == SHEET
        and rec["fact_sheet_status"] == "ok"
        and rec["fact_sheet_errors"] == []
    )
    # The gate's r, read from prose.
    assert {e["candidate"]: e["r"] for e in rec["gate"]} == dict(
        zip(CANDIDATES[:3], [1.0, 0.0, 0.5])
    )
    s_hat = trace.steps[0].s_hat  # the judges in text: 0.8, then the gate as in the tests above
    assert s_hat == pytest.approx(np.array([[0.8] * 3, [0.5] * 3, [0.65] * 3]))


def test_a_reply_the_schema_forbids_is_still_an_invalid_reply(loopback):
    # A server may skip keywords it does not support and answer 200: its reply is read, not trusted.
    bad_sheet = {**SHEET, "objects": [{"fact": "a red cube", "uncertain": "no"}]}  # not a boolean
    bad_check = (
        '{"claims": [{"claim": "ball right of cube", "label": "probably"}]}'  # not in the enum
    )
    handler = modes_handler(sheets=[json.dumps(bad_sheet), json.dumps(SHEET)])
    srv = loopback(
        lambda body, path: (
            chat_response(bad_check) if role(body) == "premise_check" else handler(body, path)
        )
    )
    g = chain_of(Client(srv.url, "m"), JudgeMode(premises=True, gate=True))
    state = verdict.State("Where is the ball?")
    # Unreadable check: not gated.
    assert g.gated("logical", state, "The ball is right of the cube.", 0.9)[0] == 0.9
    rec = g.record()
    assert rec["fact_sheet_status"] == "retried" and "objects entry" in rec["fact_sheet_errors"][0]
    (check,) = rec["gate"]
    assert check["nu"] is None and "label" in check["error"] and "probably" in check["error"]
    assert [role(b) for b in srv.chats] == [
        "premises",
        "premises",
        "premise_check",
        "premise_check",
    ]
    assert all(schema_of(b) is not None for b in srv.chats) and rec["extra_calls"] == 4


def test_a_mode_needs_the_note_placeholder_in_a_per_role_prompt(loopback, monkeypatch, tmp_path):
    # A judge mode's note goes before the task (shared) or the steps (role-first) in those layouts,
    # and in per-role only where the role's per-role context says {note}: a context without it
    # cannot show the note, a ValueError naming its file, before the judge's request is sent
    # (plain: nothing to show).
    for f in layouts.LAB_PROMPTS.glob("*.txt"):
        (tmp_path / f.name).write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
    contexts = (tmp_path / "per_role.txt").read_text(encoding="utf-8")
    terse = contexts.replace(
        "[visual]\nQuestion:\n{question}\n\n{note}", "[visual]\n{question}\n\n"
    )
    assert terse != contexts
    (tmp_path / "per_role.txt").write_text(terse, encoding="utf-8")
    monkeypatch.setattr(layouts, "LAB_PROMPTS", tmp_path)
    srv = loopback(
        lambda body, path: chat_response(
            PRIOR if role_of(body["messages"]) == "prior" else "Fine.\nScore: 0.8"
        )
    )
    client = Client(srv.url, "m")
    state = verdict.State("Where is the ball?", (), ("The cube is red.",))
    visual = lambda lay: Judge(client, "visual", reply=TEXT, layout=layouts.layout(lay))
    prior = lambda: chain_of(client, JudgeMode(prior=True))
    assert ModeJudge(visual("per-role"), chain_of(client))(state, "The ball is right.") == 0.8
    for lay in ("shared", "role-first"):
        assert ModeJudge(visual(lay), prior())(state, "The ball is right.") == 0.8
        text = user_text(srv.chats[-1])
        assert text.index(PRIOR) < text.index("<step>\nThe ball is right.")
    sent = len(srv.chats)
    with pytest.raises(ValueError, match=r"per_role\.txt has no \{note\} placeholder for visual"):
        ModeJudge(visual("per-role"), prior())(state, "The ball is right.")
    # No judge request was sent.
    assert [role_of(b["messages"]) for b in srv.chats[sent:]] == ["prior"]


# ----------------------------------------------------------------------------- live


# ----------------------------------------------------------------------------- --reasons


@pytest.mark.parametrize("flags, reasons", [([], False), (["--reasons"], True)])
def test_judges_reply_with_the_score_alone_unless_reasons(flags, reasons):
    # Settings.reasons (evaluate's --reasons) decides, and reaches every judge a run builds: the
    # json judges and their text fallback.
    from verdict_lab import evaluate

    eval_args = evaluate.parse_args(
        ["--data", "x.jsonl", "--base-url", "http://127.0.0.1:1/v1"] + flags
    )
    for settings in (evaluate.check_args(eval_args)[1],):
        assert settings.reasons is reasons
        # It builds, and makes no request.
        v = verifier.build(settings, Client("http://127.0.0.1:1/v1", "m"))
        built = [j for fj in v.judges for j in fj.judges.values()]
        assert len(built) == 6 and all(j.reasons is reasons for j in built)
        line = judges.JSON_EXPLAIN if reasons else judges.load_prompt("visual")["reply"]
        assert [fj.judges["json"].reply_line() for fj in v.judges] == [line] * 3


@pytest.mark.parametrize("flags", [["--score-only"], ["--reasons", "--score-only"]])
def test_the_hidden_score_only_flag_is_gone_and_refused(flags, capsys):
    # The score alone is the default (Settings.reasons=False); the hidden --score-only flag, and
    # with it the contradiction --reasons --score-only, are gone: evaluate refuses it as an unknown
    # flag (exit 2).
    from verdict_lab import evaluate

    for parse, argv in (
        (evaluate.parse_args, ["--data", "x.jsonl", "--base-url", "http://127.0.0.1:1/v1"] + flags),
    ):
        with pytest.raises(SystemExit) as e:
            parse(argv)
        assert (
            e.value.code == 2 and "unrecognized arguments: --score-only" in capsys.readouterr().err
        )
