"""Tests for perf/simserver.py: the latency model's arithmetic, its first-come-first-served
schedule, the pseudo-tokens and block hashes of a prompt, the prefix cache as the two prompt
layouts meet it, and the simulated replies. No timing is asserted."""

import json
import os

import pytest
from PIL import Image

import judges
from verdict_lab.perf import simserver
import verdict
from verdict_lab.client import Client
from verdict_lab import layouts
from verdict_lab.formats import REPLIES
from verdict_lab.layouts import LAYOUTS
from verdict_lab.loopback import LoopbackServer
from verdict_lab.perf.simserver import (
    BLOCK,
    LatencyModel,
    SimulatedServer,
    block_hashes,
    prompt_units,
)


def test_latency_model_seconds():
    # 2,000 prompt tokens at 1,000 tokens/s = 2 s; 100 reply tokens at 50 tokens/s = 2 s.
    lm = LatencyModel(prefill_tps=1000.0, decode_tps=50.0)
    assert lm.seconds(2000, 100) == pytest.approx(4.0)
    assert lm.seconds(0, 0) == 0.0
    # The defaults: a 48-token step decodes in 48 / 84.28 = 0.5695 s.
    assert LatencyModel().seconds(0, 48) == pytest.approx(0.5695, abs=1e-4)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(decode_tps=0.0),
        dict(prefill_tps=-1.0),
        dict(capacity=0),
        dict(capacity=2.5),
        dict(time_scale=-0.1),
    ],
)
def test_latency_model_guards(kwargs):
    with pytest.raises(ValueError):
        LatencyModel(**kwargs)


def test_requests_are_scheduled_first_come_first_served():
    # Four slots. (arrival, sequences, prefill seconds, decode seconds) -> (admitted, prefilled,
    # end), worked by hand:
    r = simserver._Replica()
    take = lambda now, n, prefill, decode: r.schedule(now, n, 4, prefill, decode)
    assert take(0.0, 3, 1.0, 5.0) == (0.0, 1.0, 6.0)  # free slots and an idle prefill engine
    assert take(0.5, 2, 1.0, 1.0) == (6.0, 7.0, 8.0)  # 3 + 2 > 4: it waits for the slots at 6
    # One slot is free at 0.6, but the request before it came first: admitted with it, at 6, and
    # prefilled after it, from 7 to 9.
    assert take(0.6, 1, 2.0, 1.0) == (6.0, 9.0, 10.0)
    assert take(20.0, 4, 0.0, 1.0) == (20.0, 20.0, 21.0)  # everything before it has ended
    assert r.held == [(21.0, 4)]


def test_prompt_units_count_image_tokens_where_the_message_puts_them():
    url = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    msgs = [
        {"role": "system", "content": "You judge."},
        {"role": "user", "content": [url, {"type": "text", "text": "Is it red?"}]},
    ]
    units = prompt_units(msgs, image_tokens=1280)
    # 2 role markers + "You", "judge", "." + 1280 image tokens + "Is", "it", "red", "?"
    assert len(units) == 2 + 3 + 1280 + 4 and units[:5] == [
        "<system>",
        "You",
        "judge",
        ".",
        "<user>",
    ]
    placed = prompt_units(
        [
            msgs[0],
            {
                "role": "user",
                "content": [{"type": "text", "text": "Is"}, url, {"type": "text", "text": "red?"}],
            },
        ],
        1280,
    )
    assert (
        placed[5] == "Is" and placed[6] == units[5] and placed[-2:] == ["red", "?"]
    )  # the image at its place


def test_block_hashes_are_prefix_stable():
    a = [f"t{i}" for i in range(100)]
    b = a[:40] + ["changed"] + a[41:]
    ha, hb = block_hashes(a), block_hashes(b)
    assert len(ha) == 100 // BLOCK
    assert ha[:2] == hb[:2]  # blocks 0 and 1 (units 0..31) are shared
    assert ha[2:] != hb[2:] and all(
        x != y for x, y in zip(ha[2:], hb[2:])
    )  # a chained hash differs from there on


@pytest.mark.parametrize("layout", ["shared", "per-role"])
def test_the_prefix_cache_serves_what_the_layout_shares(layout):
    # The reasoner's request, then a judge's of the same step, on a cold simulated server: the
    # judge's cached tokens are the full blocks of the units both requests begin with. In the shared
    # layout that is the system message, the image's 1,280 tokens, the question and the steps; in
    # the per-role layout nothing (the system messages differ from their first word on).
    state = verdict.State(
        "Is the mug left of the laptop?", (Image.new("RGB", (32, 32), "red"),), ("A mug.",)
    )
    lay = layouts.layout(layout)
    reasoner = lay("reasoner", state)
    judge = lay("visual", state, step="The mug is left.", reply="Score: <a digit>")
    a, b = prompt_units(reasoner, 1280), prompt_units(judge, 1280)
    common = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    sim = SimulatedServer(LatencyModel(time_scale=0.0))
    first = sim({"messages": reasoner, "stop": ["\n\n"], "n": 3}, "/v1/chat/completions")
    second = sim({"messages": judge}, "/v1/chat/completions")
    assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0} and first["usage"][
        "prompt_tokens"
    ] == len(a)
    assert second["usage"]["prompt_tokens_details"] == {"cached_tokens": common // BLOCK * BLOCK}
    if (
        layout == "shared"
    ):  # through the last previous step, and the first word of both roles' instructions
        assert a[common - 4 : common] == ["A", "mug", ".", "You"] and common > 1280
    else:
        assert a[:common] == [
            "<system>",
            "You",
        ]  # then each role's own instructions: "You answer", "You are"
    again = sim({"messages": judge}, "/v1/chat/completions")[
        "usage"
    ]  # everything but a last partial block
    assert again["prompt_tokens_details"]["cached_tokens"] == len(b) // BLOCK * BLOCK
    sim.reset()
    assert (
        sim({"messages": judge}, "/v1/chat/completions")["usage"]["prompt_tokens_details"][
            "cached_tokens"
        ]
        == 0
    )


def test_simulated_replies_parse_in_every_format_and_agree_at_the_final_step():
    lm = LatencyModel(time_scale=0.0)
    with LoopbackServer(SimulatedServer(lm, final_at=1)) as srv:
        client = Client(srv.url, "sim")
        state = verdict.State("Which is it? A. x B. y")
        cands = judges.Reasoner(client)(state, 3)
        assert len(set(cands)) == 3
        assert (
            judges.Reasoner(client)(state.extend(cands[0]), 3) == ["Final answer: B"] * 3
        )  # the same string
        for fmt in ("json", "text", "digit"):
            for reasons in (True, False):
                for j in judges.make_judges(client, reasons=reasons, reply=REPLIES[fmt]):
                    judged = j(state, cands[0])
                    assert 0.5 <= judged <= 1 and judged.record["replies"] == 1
        schemas = [
            r.body["response_format"] for r in srv.requests if "response_format" in (r.body or {})
        ]
        assert (
            len(schemas) == 3 * 2
        )  # the json format's calls, each answered under its schema (no retry above)


def test_sim_reply_lengths():
    lm = LatencyModel()
    explain = {
        "messages": [{"role": "user", "content": "x"}],
        "response_format": {"json_schema": {"schema": {"properties": {"reason": {}, "score": {}}}}},
    }
    short = {
        "messages": [{"role": "user", "content": "x"}],
        "response_format": {"json_schema": {"schema": {"properties": {"score": {}}}}},
    }
    assert (
        simserver.sim_reply(explain, lm, 3)[1] == lm.rationale_tokens
        and simserver.sim_reply(short, lm, 3)[1] == 6
    )
    (text,), _ = simserver.sim_reply(short, lm, 3)
    assert set(json.loads(text)) == {"score"}


def lcp(a: list, b: list) -> int:
    """The length of the longest common prefix of two unit lists."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(
    "question", ["Is the mug left of the laptop?", "In <image 2>, is the mug left of <image 1>?"]
)
def test_the_prefix_cache_is_a_longest_common_prefix_in_whole_blocks(layout, question):
    # Oracle: vLLM's chained block hashes make block i cached exactly when an earlier prompt began
    # with the same (i + 1)·BLOCK units, so a request's cached tokens are BLOCK · max over earlier
    # prompts p of lcp(p, it) // BLOCK. The requests are those of three steps (the reasoner's, then
    # 3 judges × 3 candidates), laid out by verdict_lab/layouts.py with two images, first or at the
    # question's <image k>, as the server receives them in sequential mode.
    images = (Image.new("RGB", (32, 32), "red"), Image.new("RGB", (32, 32), "blue"))
    sim, seen, state = (
        SimulatedServer(LatencyModel(time_scale=0.0, image_tokens=64)),
        [],
        verdict.State(question, images),
    )
    for t in range(3):
        candidates = [f"Candidate {t}.{i}: the mug is left." for i in range(3)]
        lay = layouts.layout(
            layout
        )  # with MMMU's placement: each image at the question's <image k>
        requests = [lay("reasoner", state)] + [
            lay(judge, state, step=c, reply="Score: <a digit>")
            for c in candidates
            for judge in verdict.JUDGES
        ]
        for k, msgs in enumerate(requests):
            units = prompt_units(msgs, 64)
            expected = BLOCK * max((lcp(p, units) // BLOCK for p in seen), default=0)
            got = sim(
                {"messages": msgs, **({"stop": ["\n\n"]} if k == 0 else {})}, "/v1/chat/completions"
            )["usage"]
            assert got["prompt_tokens_details"]["cached_tokens"] == expected and got[
                "prompt_tokens"
            ] == len(units)
            if (
                layout != "per-role" and k > 0
            ):  # a judge finds cached all the blocks its prompt shares with the reasoner's
                assert (
                    expected >= lcp(seen[len(seen) - k], units) // BLOCK * BLOCK > 2 * 64 - BLOCK
                )  # both images
            seen.append(units)
        state = state.extend(candidates[0])


def test_the_reasoners_logprobs_vary_with_its_text_and_a_judges_stay_fixed():
    # step_logprob is ln(0.6 + 0.39·u), u a hash of the text: in [ln 0.6, ln 0.99), the same for the
    # same text; a reasoner's first token is p⁴, so its minimum is 4·lp.
    lp = simserver.step_logprob("Observation 0.0.1: detail")
    assert lp == simserver.step_logprob("Observation 0.0.1: detail")
    assert lp != simserver.step_logprob("Observation 0.0.2: detail")
    assert all(
        -0.5109 <= simserver.step_logprob(f"text {i}") < -0.01005 for i in range(200)
    )  # ln 0.6 = −0.5108, ln 0.99 = −0.01005
    with LoopbackServer(SimulatedServer(LatencyModel(time_scale=0.0))) as srv:
        out = judges.Reasoner(Client(srv.url, "sim"), logprobs=True)(verdict.State("q"), 3)
    for c in out:
        lp = simserver.step_logprob(str(c))
        assert c.logprobs["min"] == pytest.approx(4 * lp)
        assert c.logprobs["mean"] == pytest.approx(
            lp * (c.logprobs["tokens"] + 3) / c.logprobs["tokens"]
        )


def test_a_remote_simulated_server_answers_from_its_own_process_and_resets():
    with simserver.Remote(LatencyModel(time_scale=0.0), final_at=1) as srv:
        reasoner = judges.Reasoner(Client(srv.url, "sim"))
        assert reasoner(verdict.State("q"), 2)[0].startswith("Observation 0.")
        assert reasoner(verdict.State("q", (), ("one",)), 2) == ["Final answer: B"] * 2
        srv.reset()  # answered by the server's process, not a chat completion
        assert srv.url.startswith("http://127.0.0.1:") and srv._process.pid != os.getpid()
    assert not srv._process.is_alive()
