"""VerdictVLM (verdict_lab/vlmevalkit.py), VERDICT with VLMEvalKit's model interface, against a scripted
loopback server, with messages in VLMEvalKit's format: text only, one image, several images first (BLINK),
images interleaved with text (MMMU after split_MMMU). Each test checks the requests sent (roles, images and
their order, the question) and the output returned (the chain's final output)."""

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import pytest
from PIL import Image

import verdict
from judges import encode_image
from verdict_lab.loopback import chat_response
from verdict_lab.layouts import role_of
from verdict_lab.vlmevalkit import FAIL_MSG, VerdictVLM, question_and_images
from verdict_lab.verifier import Settings

# Step 2's candidates and their judges' digits (ŝ = d / 9). A: the raw mean's choice (0.741), judges that
# conflict (Δ* > ε: rejected); B: agreement at 6/9 = 0.667 > τ, Δ* = 0: accepted. VERDICT answers B.
DIGITS = {"Final answer: A": (9, 2, 9), "Final answer: B": (6, 6, 6), "Final answer: B, surely.": (3, 3, 3)}
MCQ = (
    "Question: Which shape is on the left?\nOptions:\nA. ball\nB. cube\n"
    "Please select the correct answer from the options above. \n"
)  # VLMEvalKit's ImageMCQDataset prompt


def texts(body) -> str:
    """Every text of a request's messages, joined."""
    return "\n".join(
        c if isinstance(c, str) else "".join(p.get("text", "") for p in c)
        for c in (m["content"] for m in body["messages"])
    )


def script(body, path):
    """The reasoner writes one observation, then final answers; the judges reply in the json format."""
    role, text = role_of(body["messages"]), texts(body)
    if role == "reasoner":
        first = "The cube is drawn on the left." not in text
        cands = ["The cube is drawn on the left."] * 3 if first else list(DIGITS)
        return chat_response(cands[: body.get("n", 1)], prompt_tokens=30)
    step = re.search(r"<step>\n(.*?)\n</step>", text, re.S).group(1)
    digit = DIGITS.get(step, (8, 8, 8))[verdict.JUDGES.index(role)]
    return chat_response(json.dumps({"reason": "checked", "score": digit}), prompt_tokens=30)


def image_file(tmp_path, name, colour, size=(32, 24)):
    path = tmp_path / name
    Image.new("RGB", size, colour).save(path)
    return str(path)


def parts(body) -> list:
    """The user message's content as ("text", text) and ("image", data URL) pairs, in order."""
    content = body["messages"][1]["content"]
    if isinstance(content, str):
        return [("text", content)]
    return [
        ("image", p["image_url"]["url"]) if p["type"] == "image_url" else ("text", p["text"]) for p in content
    ]


def model(srv, **kw):
    return VerdictVLM(base_url=srv.url, model="qwen-loopback", **kw)


def test_text_only_runs_the_chain_and_answers_with_verdicts_choice(loopback):
    srv = loopback(script)
    out = model(srv).generate([{"type": "text", "value": MCQ}], dataset="MMStar")
    assert out == "B"  # the raw mean would take A; the dual test rejects it and accepts B
    chats = srv.chats
    # 2 steps, each 1 reasoner request (n = 3 choices) and 3 candidates × 3 judges
    assert len(chats) == 2 * (1 + 3 * 3)
    assert [role_of(c["messages"]) for c in chats].count("reasoner") == 2
    for c in chats:
        assert isinstance(c["messages"][1]["content"], str)  # no image: plain string content
        assert "Which shape is on the left?" in c["messages"][1]["content"]
        assert c["model"] == "qwen-loopback"
    reasoner = next(c for c in chats if role_of(c["messages"]) == "reasoner")
    assert (reasoner["n"], reasoner["temperature"], reasoner["top_p"], reasoner["top_k"]) == (3, 0.8, 0.6, -1)


def test_one_image_goes_first_in_every_request(loopback, tmp_path):
    srv, path = loopback(script), image_file(tmp_path, "scene.png", (200, 30, 30))
    out = model(srv).generate(
        [{"type": "image", "value": path}, {"type": "text", "value": MCQ}], dataset="AI2D_TEST"
    )
    assert out == "B"
    assert len(srv.chats) == 20
    for c in srv.chats:
        p = parts(c)
        assert p[0] == ("image", encode_image(path)) and [k for k, _ in p].count("image") == 1
        assert "Which shape is on the left?" in p[1][1]


def test_several_images_before_the_text_keep_their_order(loopback, tmp_path):
    srv = loopback(script)
    paths = [
        image_file(tmp_path, f"{k}.png", c, (20 + k, 20)) for k, c in enumerate(["red", "green", "blue"])
    ]
    msg = [{"type": "image", "value": p} for p in paths] + [{"type": "text", "value": MCQ}]
    assert model(srv).generate(msg, dataset="BLINK") == "B"
    for c in srv.chats:
        assert [v for k, v in parts(c) if k == "image"] == [encode_image(p) for p in paths]
        assert [k for k, _ in parts(c)][:3] == ["image"] * 3


def test_interleaved_images_stay_in_place(loopback, tmp_path):
    srv = loopback(script)
    a, b = image_file(tmp_path, "a.png", "red"), image_file(tmp_path, "b.png", "blue", (40, 10))
    msg = [
        {"type": "text", "value": "Question: Is the shape in "},
        {"type": "image", "value": a},
        {"type": "text", "value": " the same as in "},
        {"type": "image", "value": b},
        {"type": "text", "value": "?\nOptions:\nA. yes\nB. no\n"},
    ]
    assert model(srv).generate(msg, dataset="MMMU_DEV_VAL") == "B"
    for c in srv.chats:
        p = parts(c)
        kinds = [k for k, _ in p]
        assert kinds.count("image") == 2 and kinds[0] == "text"
        i, j = kinds.index("image"), len(kinds) - 1 - kinds[::-1].index("image")
        assert (p[i][1], p[j][1]) == (encode_image(a), encode_image(b))
        assert p[i - 1][1].endswith("Is the shape in ") and p[i + 1][1] == " the same as in "
        assert p[j + 1][1].startswith("?\nOptions:\nA. yes")
        assert "<image" not in texts(c)


def test_question_and_images_reads_every_form_vlmevalkit_passes():
    assert question_and_images("Why?") == ("Why?", [])
    assert question_and_images(["Hint: x", "Question: y"]) == ("Hint: x\nQuestion: y", [])
    msg = [
        {"type": "image", "value": "1.jpg"},
        {"type": "image", "value": "2.jpg"},
        {"type": "text", "value": "Q"},
    ]
    assert question_and_images(msg) == ("Q", ["1.jpg", "2.jpg"])
    msg = [
        {"type": "text", "value": "see "},
        {"type": "image", "value": "1.jpg"},
        {"type": "text", "value": " and"},
        {"type": "text", "value": "then"},
        {"type": "image", "value": "2.jpg"},
    ]
    assert question_and_images(msg) == ("see <image 1> and\nthen<image 2>", ["1.jpg", "2.jpg"])
    # VLMEvalKit's own markers are kept: layouts.placed places the images there
    msg = [{"type": "text", "value": "Q <image 1>"}, {"type": "image", "value": "1.jpg"}]
    assert question_and_images(msg) == ("Q <image 1>", ["1.jpg"])
    for bad in (
        [{"type": "video", "value": "v.mp4"}, {"type": "text", "value": "Q"}],
        [{"type": "image", "value": "1.jpg"}],
        [{"type": "text"}],
    ):
        with pytest.raises(ValueError):
            question_and_images(bad)


def test_a_failing_endpoint_answers_vlmevalkits_failure_message(loopback):
    srv = loopback(lambda body, path: (400, {"error": {"message": "image input is not supported"}}))
    out = model(srv).generate([{"type": "text", "value": MCQ}], dataset="MMStar")
    assert out.startswith(FAIL_MSG) and "image input is not supported" in out
    assert len(srv.chats) == 1  # a 4xx is not retried


def test_a_config_entry_built_like_vlmevalkits_runs_items_on_threads(loopback, tmp_path):
    """supported_VLM's partial, called with use_vllm as infer_data does for a "Qwen2.5-VL" name; then
    generate(message=..., dataset=...) on 4 threads, as infer_data_api runs an is_api model."""
    srv = loopback(script)
    entry = partial(VerdictVLM, base_url=srv.url, model="qwen-loopback", cache=str(tmp_path / "c.sqlite"))
    vlm = entry(use_vllm=False)
    assert vlm.is_api and vlm.INTERLEAVE and not vlm.use_custom_prompt("MMStar")
    paths = [image_file(tmp_path, f"{k}.png", (20 * k, 0, 0)) for k in range(8)]
    msgs = [
        dict(message=[{"type": "image", "value": p}, {"type": "text", "value": MCQ}], dataset="MMStar")
        for p in paths
    ]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda kw: vlm.generate(**kw), msgs))
    assert outs == ["B"] * 8
    # 20 calls an item; cached, step 1's three identical candidates cost each judge one request: 14 sent
    assert len(srv.chats) == 8 * 14 and vlm.totals["items"] == 8 and vlm.totals["calls"] == 8 * 20
    assert {encode_image(p) for p in paths} == {parts(c)[0][1] for c in srv.chats}
    before = len(srv.chats)  # the same items again: every call from the response cache
    assert vlm.generate(**msgs[0]) == "B" and len(srv.chats) == before
    assert threading.active_count() < 50


def test_the_verifiers_settings_are_keywords_and_an_unknown_one_is_refused(loopback):
    """VerdictVLM's other keywords are verifier.Settings' fields, the old ones among them (n, tau, max_tokens,
    judge_format, judge_max_tokens, judge_mode, revise, ...): they reach the requests. A keyword that names
    no setting (the old score_only, say) or a bad value is a ValueError naming it, before any call."""
    srv = loopback(script)
    kw = dict(n=2, tau=0.6, eps=0.1, max_steps=3, max_tokens=64, judge_format="json", judge_max_tokens=32)
    vlm = model(srv, **kw, judge_mode="plain", revise=False)
    assert vlm.settings == Settings(**kw)
    assert vlm.generate([{"type": "text", "value": MCQ}], dataset="MMStar") == "B"
    chats = srv.chats
    assert len(chats) == 2 * (1 + 2 * 3)  # 2 steps: 1 reasoner request (n = 2), 2 candidates × 3 judges
    reasoner = [c for c in chats if role_of(c["messages"]) == "reasoner"]
    assert [(c["n"], c["max_tokens"]) for c in reasoner] == [(2, 64)] * 2
    judged = [c for c in chats if role_of(c["messages"]) != "reasoner"]
    assert all(c["max_tokens"] == 32 and "response_format" in c for c in judged)
    for bad, says in (
        ({"score_only": True}, "unknown setting 'score_only'"),
        ({"grounding": "prior"}, "unknown setting 'grounding'"),
        ({"tau": 5}, "tau must be in [0, 1]"),
        ({"judge_mode": "sgv"}, "judge mode 'sgv'"),
    ):
        with pytest.raises(ValueError) as e:
            model(srv, **bad)
        assert says in str(e.value), str(e.value)
    assert len(srv.chats) == len(chats)  # refused before any call
