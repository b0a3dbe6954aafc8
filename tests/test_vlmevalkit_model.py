"""VerdictVLM (verdict_lab/vlmevalkit.py), VERDICT with VLMEvalKit's model interface, against a
scripted loopback server, with messages in VLMEvalKit's format: text only, one image, several images
first (BLINK), images interleaved with text (MMMU after split_MMMU). Each test checks the requests
sent (roles, images and their order, the question) and the output returned (the chain's final
output)."""

import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import pytest
from PIL import Image

import verdict
from verdict_lab.images import encode as encode_image
from verdict_lab.loopback import chat_response
from verdict_lab.layouts import role_of
from verdict_lab import search
from verdict_lab.vlmevalkit import FAIL_MSG, VerdictVLM, entry, entry_name, question_and_images
from verdict_lab.harness.rundir import ADDED
from verdict_lab.verifier import Settings

# Step 2's candidates and their judges' digits (ŝ = d / 9). A: the raw mean's choice (0.741), judges
# that conflict (Δ* > ε: rejected); B: agreement at 6/9 = 0.667 > τ, Δ* = 0: accepted. VERDICT
# answers B.
DIGITS = {
    "Final answer: A": (9, 2, 9),
    "Final answer: B": (6, 6, 6),
    "Final answer: B, surely.": (3, 3, 3),
}
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
    """The reasoner writes one observation, then final answers; the judges reply in the json
    format."""
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
        ("image", p["image_url"]["url"]) if p["type"] == "image_url" else ("text", p["text"])
        for p in content
    ]


def model(srv, **kw):
    return VerdictVLM(base_url=srv.url, model="qwen-loopback", **kw)


def test_text_only_runs_the_chain_and_answers_with_verdicts_choice(loopback):
    srv = loopback(script)
    out = model(srv).generate([{"type": "text", "value": MCQ}], dataset="MMStar")
    assert out == "B"  # the raw mean would take A; the dual test rejects it and accepts B
    chats = srv.chats
    # 2 steps, each 1 reasoner request (n = 3 choices) and 3 candidates × 3 judges; step 1's three
    # candidates are the same step, judged once by each judge (search.Memo), with no cache: 1 + 3,
    # then 1 + 9
    assert len(chats) == (1 + 3) + (1 + 3 * 3)
    assert [role_of(c["messages"]) for c in chats].count("reasoner") == 2
    for c in chats:
        assert isinstance(c["messages"][1]["content"], str)  # no image: plain string content
        assert "Which shape is on the left?" in c["messages"][1]["content"]
        assert c["model"] == "qwen-loopback"
    reasoner = next(c for c in chats if role_of(c["messages"]) == "reasoner")
    assert (reasoner["n"], reasoner["temperature"], reasoner["top_p"], reasoner["top_k"]) == (
        3,
        0.8,
        0.6,
        -1,
    )


def test_one_image_goes_first_in_every_request(loopback, tmp_path):
    srv, path = loopback(script), image_file(tmp_path, "scene.png", (200, 30, 30))
    out = model(srv).generate(
        [{"type": "image", "value": path}, {"type": "text", "value": MCQ}], dataset="AI2D_TEST"
    )
    assert out == "B"
    assert len(srv.chats) == 14  # step 1's identical candidates judged once
    for c in srv.chats:
        p = parts(c)
        assert p[0] == ("image", encode_image(path)) and [k for k, _ in p].count("image") == 1
        assert "Which shape is on the left?" in p[1][1]


def test_several_images_before_the_text_keep_their_order(loopback, tmp_path):
    srv = loopback(script)
    paths = [
        image_file(tmp_path, f"{k}.png", c, (20 + k, 20))
        for k, c in enumerate(["red", "green", "blue"])
    ]
    msg = [{"type": "image", "value": p} for p in paths] + [{"type": "text", "value": MCQ}]
    assert model(srv).generate(msg, dataset="BLINK") == "B"
    for c in srv.chats:
        assert [v for k, v in parts(c) if k == "image"] == [encode_image(p) for p in paths]
        # the images first, each from the second after its label: no two images adjacent
        assert parts(c)[:5] == [
            ("image", encode_image(paths[0])),
            ("text", "Image 2:"),
            ("image", encode_image(paths[1])),
            ("text", "Image 3:"),
            ("image", encode_image(paths[2])),
        ]


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
    """supported_VLM's partial, called with use_vllm as infer_data does for a "Qwen2.5-VL" name;
    then generate(message=..., dataset=...) on 4 threads, as infer_data_api runs an is_api model."""
    srv = loopback(script)
    entry = partial(
        VerdictVLM, base_url=srv.url, model="qwen-loopback", cache=str(tmp_path / "c.sqlite")
    )
    vlm = entry(use_vllm=False)
    assert vlm.is_api and vlm.INTERLEAVE and not vlm.use_custom_prompt("MMStar")
    paths = [image_file(tmp_path, f"{k}.png", (20 * k, 0, 0)) for k in range(8)]
    msgs = [
        dict(
            message=[{"type": "image", "value": p}, {"type": "text", "value": MCQ}],
            dataset="MMStar",
        )
        for p in paths
    ]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda kw: vlm.generate(**kw), msgs))
    assert outs == ["B"] * 8
    # Step 1's three identical candidates cost each judge one call (search.Memo): 14 calls an
    # item, all sent.
    assert len(srv.chats) == 8 * 14 and vlm.totals["items"] == 8 and vlm.totals["calls"] == 8 * 14
    assert {encode_image(p) for p in paths} == {parts(c)[0][1] for c in srv.chats}
    before = len(srv.chats)  # the same items again: every call from the response cache
    assert vlm.generate(**msgs[0]) == "B" and len(srv.chats) == before
    assert threading.active_count() < 50


def test_the_verifiers_settings_are_keywords_and_an_unknown_one_is_refused(loopback):
    """VerdictVLM's other keywords are verifier.Settings' fields, the old ones among them (n, tau,
    max_tokens, judge_format, judge_max_tokens, judge_mode, revise, ...): they reach the requests. A
    keyword that names no setting (the old score_only, say) or a bad value is a ValueError naming
    it, before any call."""
    srv = loopback(script)
    kw = dict(
        n=2, tau=0.6, eps=0.1, max_steps=3, max_tokens=64, judge_format="json", judge_max_tokens=32
    )
    vlm = model(srv, **kw, judge_mode="plain", revise=False)
    assert vlm.settings == Settings(**kw)
    assert vlm.generate([{"type": "text", "value": MCQ}], dataset="MMStar") == "B"
    chats = srv.chats
    # 2 steps: 1 reasoner request (n = 2), 2 candidates × 3 judges (step 1's two are one step,
    # judged once).
    assert len(chats) == (1 + 3) + (1 + 2 * 3)
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


def test_base_runs_the_reasoner_alone(loopback):
    """rule="base": one sampled chain (n = 1), no judge call; its answer is the reasoner's own."""
    srv = loopback(script)
    out = model(srv, rule="base").generate([{"type": "text", "value": MCQ}], dataset="MMStar")
    assert out == "A"  # step 2's first candidate: the base reasoner has no judge to reject it
    assert [(role_of(c["messages"]), c["n"]) for c in srv.chats] == [("reasoner", 1)] * 2


@pytest.mark.parametrize("concurrency", [1, 3])
def test_identical_candidates_are_judged_once_without_a_cache(loopback, concurrency):
    """Step 1's three candidates are one step: each judge is asked once (search.Memo), on threads
    too; step 2's three distinct candidates are judged 3 × 3 times. Without the memo: 2 × (1 + 9) =
    20 requests."""
    srv = loopback(script)
    vlm = model(srv, concurrency=concurrency)
    assert vlm.generate([{"type": "text", "value": MCQ}], dataset="MMStar") == "B"
    roles = [role_of(c["messages"]) for c in srv.chats]
    assert len(srv.chats) == 14 and roles.count("reasoner") == 2
    assert vlm.totals == {
        "items": 1,
        "failed": 0,
        "steps": 2,
        "fallbacks": 0,
        "calls": 14,
        "requests": 14,
        "cache_hits": 0,
        "call_tokens": vlm.totals["call_tokens"],
    }


def test_entry_names_carry_the_settings_and_a_changed_setting_is_refused(loopback, tmp_path):
    """entry_name: the same name whatever the endpoint, timeout, retries, cache or threads; another
    for other settings or models. A model whose name ends in another digest than its settings' (a
    --config JSON changed them) is refused at construction, before any call."""
    same = entry_name("V", model="m", base_url="http://a/v1")
    assert same == entry_name(
        "V", model="m", base_url="http://b/v1", timeout=5, retry=2, cache="c", concurrency=4
    )
    assert re.fullmatch(r"V-s[0-9a-f]{8}", same)
    others = {
        entry_name("V", model="m", tau=0.7),
        entry_name("V", model="n"),
        entry_name("V", model="m", seed=1),
    }
    assert same not in others and len(others) == 3
    assert entry_name("V", model="m", n=3, rule="verdict") == same  # the defaults, given
    srv = loopback(script)
    name, vlm = entry("VERDICT-x", base_url=srv.url, model="qwen-loopback", work_dir=str(tmp_path))
    assert vlm.func is VerdictVLM and vlm.keywords["name"] == name == entry_name(
        "VERDICT-x", model="qwen-loopback"
    )
    with pytest.raises(ValueError, match=rf"{re.escape(name)}.*digest.*--reuse"):
        vlm(tau=0.7)  # build_model_from_config: supported_VLM[name](**config)
    assert (
        vlm(timeout=30).reasoner.endpoint.timeout == 30
    )  # no prediction changes: the name still holds
    with pytest.raises(ValueError, match="unknown setting 'tua'"):
        entry("VERDICT-x", base_url=srv.url, model="m", tua=0.7)
    assert srv.chats == []


def test_names_given_before_a_setting_was_added_still_hold():
    """rundir.ADDED: a setting added later leaves the digest as it was at its ADDED value, so an
    entry named before it (these two names were made at 0c2f583, before adaptive existed) keeps its
    name; another value of it gives another name."""
    assert entry_name("VERDICT", model="m") == "VERDICT-sb1b7cb89"
    assert entry_name("VERDICT", model="m", tau=0.7) == "VERDICT-s74b327be"
    assert entry_name("VERDICT", model="m", adaptive="off") == "VERDICT-sb1b7cb89"
    assert entry_name("VERDICT", model="m", adaptive="agree") != "VERDICT-sb1b7cb89"


def test_the_sidecar_holds_each_runs_settings_and_counts(loopback, tmp_path, capsys):
    """<work_dir>/<name>/<name>_<dataset>_verdict.json: one record per run (a new instance is a new
    run), its settings and counts; a run under the same name with other settings is warned about."""
    srv = loopback(script)
    name, vlm = entry("VERDICT-x", base_url=srv.url, model="qwen-loopback", work_dir=str(tmp_path))
    first = vlm()
    for _ in range(2):
        first.generate([{"type": "text", "value": MCQ}], dataset="MMStar")
    first.generate([{"type": "text", "value": MCQ}], dataset="BLINK")
    path = tmp_path / name / f"{name}_MMStar_verdict.json"
    body = json.loads(path.read_text())
    assert (body["format"], body["entry"], body["dataset"]) == (
        "verdict-vlmeval-run/1",
        name,
        "MMStar",
    )
    [run] = body["runs"]
    assert (
        run["settings"]
        == {"model": "qwen-loopback", "judge_model": "qwen-loopback", "seed": 0}
        | Settings().record()
    )
    assert run["digest"] == name[-8:] and run["pid"] > 0 and len(run["run"]) == 12
    assert {k: run["counts"][k] for k in ("items", "failed", "steps", "calls", "requests")} == {
        "items": 2,
        "failed": 0,
        "steps": 4,
        "calls": 28,
        "requests": 28,
    }
    assert (
        json.loads((tmp_path / name / f"{name}_BLINK_verdict.json").read_text())["runs"][0][
            "counts"
        ]["items"]
        == 1
    )
    second = vlm()
    second.generate([{"type": "text", "value": MCQ}], dataset="MMStar")
    runs = json.loads(path.read_text())["runs"]
    assert [r["counts"]["items"] for r in runs] == [2, 1]
    assert "other settings" not in capsys.readouterr().err
    renamed = VerdictVLM(
        base_url=srv.url, model="qwen-loopback", tau=0.7, name=name[:-10], work_dir=str(tmp_path)
    )
    renamed.sidecar.dir = str(tmp_path / name)  # a hand-made name shared with other settings
    renamed.sidecar.name = name
    renamed.generate([{"type": "text", "value": MCQ}], dataset="MMStar")
    assert "holds runs with other settings under the name" in capsys.readouterr().err
    assert len(json.loads(path.read_text())["runs"]) == 3


def test_every_verifier_setting_is_a_checked_keyword(loopback):
    """Each field of verifier.Settings is a keyword of VerdictVLM (evaluate's --lam, --max-calls,
    --max-pixels, --reasons, --speculate, --mode-max-tokens among them), taken as given; a bad value
    of each is a ValueError naming it, at construction."""
    srv = loopback(script)
    given = dict(
        rule="mean",
        n=2,
        tau=0.5,
        eps=0.2,
        lam=(1.0, 1.0, 1.0),
        max_steps=3,
        max_tokens=64,
        judge_format="digit",
        judge_max_tokens=8,
        reasons=True,
        weighted=True,
        judge_mode="prior",
        mode_max_tokens=100,
        revise=True,
        speculate=True,
        max_calls=10,
        max_pixels=1000,
        layout="shared",
        adaptive="mean-prob",
        adaptive_threshold=0.5,
    )
    assert set(given) == {f.name for f in dataclasses.fields(Settings)}
    for k, v in given.items():
        signal = {"adaptive": "agree"} if k == "adaptive_threshold" else {}  # θ needs a signal
        assert getattr(model(srv, **{k: v}, **signal).settings, k) == v, k
        assert getattr(Settings(), k) != v, k  # not a default: the keyword did it
    bad = dict(
        rule="best", n=0, tau=2, eps=0, lam=(1, 1), max_steps=0, max_tokens=0, judge_format="xml"
    )
    bad |= dict(judge_max_tokens=0, reasons="yes", weighted=1, judge_mode="sgv", mode_max_tokens=0)
    bad |= dict(revise=None, speculate="no", max_calls=0, max_pixels=0, layout="diagonal")
    bad |= dict(adaptive="always", adaptive_threshold=2)
    assert set(bad) == set(given)
    for k, v in bad.items():
        with pytest.raises(ValueError) as e:
            model(srv, **{k: v})
        assert k in str(e.value) or k.replace("_", " ") in str(e.value), (k, str(e.value))
    assert srv.chats == []


def test_vlmevalkits_retry_and_timeout_reach_the_clients(loopback):
    """run.py's --retry sets `retry` when the entry has it (apply_supported_vlm_cli_overrides);
    `retries` it leaves alone; both at once is refused. timeout is the clients' own."""
    srv = loopback(script)
    entry_ = partial(VerdictVLM, base_url=srv.url, model="m", judge_model="j", retry=3, timeout=7)
    if "retry" in entry_.keywords:  # what run.py does with --retry 2
        entry_.keywords["retry"] = 2
    vlm = entry_()
    assert {(c.endpoint.retries, c.endpoint.timeout) for c in (vlm.reasoner, vlm.judge)} == {(2, 7)}
    assert (
        model(srv, retries=5).reasoner.endpoint.retries == 5
        and model(srv).reasoner.endpoint.retries == 4
    )
    with pytest.raises(ValueError, match="retry .* or retries, not both"):
        model(srv, retry=1, retries=1)
    assert model(srv, max_tokens=77).settings.max_tokens == 77


def test_interleaved_texts_keep_vlmevalkits_whitespace():
    msg = [
        {"type": "text", "value": "Question: Is "},
        {"type": "image", "value": "1.png"},
        {
            "type": "text",
            "value": " odd?\nOptions:\nA. yes\nB. no\n" + MCQ.splitlines(True)[-1],
        },
    ]
    text, images = question_and_images(msg)
    assert text.endswith("options above. \n") and text.startswith("Question: Is <image 1> odd?")
    assert search.Memo(lambda state, step: 0.5)(verdict.State("q"), "s") == 0.5


# ----------------------------------------------------------------------------- the sidecar's faults

# A process that writes one Sidecar `writes` times, once the test says "go" on its stdin (so that
# both processes write at the same time), then prints its run's id.
WRITER = """
import sys
from verdict_lab.vlmevalkit import Sidecar

work_dir, writes = sys.argv[1], int(sys.argv[2])
sidecar = Sidecar(work_dir, "VERDICT-x-s00000000", {"model": "m"})
print("ready", flush=True)
sys.stdin.readline()
for i in range(1, writes + 1):
    sidecar.write("MMStar", {"items": i})
print(sidecar.run["run"], flush=True)
"""


def test_two_processes_writing_one_sidecar_keep_it_valid_json_with_both_runs(tmp_path):
    """Two VLMEvalKit processes of one entry write one sidecar at once, 200 times each: the file
    stays valid JSON, and it holds both runs, each with its last count (no write lost another's
    record), with no warning and no temporary file left behind."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    writes = 200
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(writes)],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for p in procs:
        assert p.stdout.readline() == "ready\n"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert [err for _, err in outs] == ["", ""]
    folder = tmp_path / "VERDICT-x-s00000000"
    body = json.loads((folder / "VERDICT-x-s00000000_MMStar_verdict.json").read_text())
    runs = {r["run"]: r["counts"]["items"] for r in body["runs"]}
    assert runs == {out.strip(): writes for out, _ in outs}
    assert not [f.name for f in folder.iterdir() if f.name.endswith(".tmp")]


DAMAGED = {
    "runs is a number": '{"format": "verdict-vlmeval-run/1", "runs": 5}',
    "runs is null": '{"format": "verdict-vlmeval-run/1", "runs": null}',
    "nested too deep": '{"format": "verdict-vlmeval-run/1", "runs": '
    + "[" * 100_000
    + "]" * 100_000
    + "}",
    "not JSON": '{"format": "verdict-vlmeval-run/1", "runs": [',
}


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_sidecar_is_one_warning_and_every_item_keeps_its_answer(
    loopback, tmp_path, capsys, damage
):
    """A sidecar that is not a list of runs ("runs": 5 or null), nested deeper than json reads, or
    torn: generate() still answers each item, on its success path and its failure path; stderr gets
    one warning naming the file, and the file is left as it was."""
    srv, failing = (
        loopback(script),
        loopback(lambda body, path: (400, {"error": {"message": "no"}})),
    )
    name, vlm = entry("VERDICT-x", base_url=srv.url, model="qwen-loopback", work_dir=str(tmp_path))
    path = tmp_path / name / f"{name}_MMStar_verdict.json"
    path.parent.mkdir()
    path.write_text(DAMAGED[damage])
    first = vlm()
    for _ in range(2):
        assert first.generate([{"type": "text", "value": MCQ}], dataset="MMStar") == "B"
    broken = vlm(base_url=failing.url)
    assert broken.generate([{"type": "text", "value": MCQ}], dataset="MMStar").startswith(FAIL_MSG)
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("VerdictVLM: warning")]
    assert len(warnings) == 2 and all(str(path) in w for w in warnings), err  # one per instance
    assert path.read_text() == DAMAGED[damage]
    assert first.totals["items"] == 2 and broken.totals["failed"] == 1


# ----------------------------------------------------------------------------- the constructor


@pytest.mark.parametrize(
    "keyword, value",
    [
        ("timeout", "60"),
        ("timeout", None),
        ("model", None),
        ("model", 7),
        ("model", ""),
        ("judge_model", 7),
        ("retry", "6"),
        ("retries", -1),
        ("concurrency", "2"),
        ("api_key_env", None),
        ("cache", 5),
        ("work_dir", 5),
        ("verbose", "yes"),
    ],
)
def test_a_bad_endpoint_keyword_is_one_valueerror_naming_it(loopback, keyword, value):
    """Each keyword that is not a setting is checked at construction: a wrong type or value is a
    ValueError whose one line names the keyword and the value, before any request."""
    srv = loopback(script)
    kw = {"base_url": srv.url, "model": "qwen-loopback", keyword: value}
    with pytest.raises(ValueError) as e:
        VerdictVLM(**kw)
    message = str(e.value)
    assert f"{keyword}={value!r}" in message and "\n" not in message, message
    assert srv.chats == []


def test_lam_as_a_numpy_array_is_lams_values(loopback, tmp_path):
    """λ given as a NumPy array is the same λ as the tuple: the same entry name, the same settings,
    a sidecar that is written, and an answer."""
    srv = loopback(script)
    lam = np.array([1.5, 1.0, 0.8])
    name, vlm = entry("V", base_url=srv.url, model="qwen-loopback", lam=lam, work_dir=str(tmp_path))
    assert name == entry_name("V", model="qwen-loopback")
    model_ = vlm()
    assert model_.settings == Settings()
    assert model_.generate([{"type": "text", "value": MCQ}], dataset="MMStar") == "B"
    body = json.loads((tmp_path / name / f"{name}_MMStar_verdict.json").read_text())
    assert body["runs"][0]["settings"]["lam"] == [1.5, 1.0, 0.8]


# ----------------------------------------------------------------------------- the entry's digest


@pytest.mark.parametrize(
    "spelled, canonical",
    [
        (dict(tau=1), dict(tau=1.0)),
        (dict(eps=1), dict(eps=1.0)),
        (dict(lam=(1.5, 1, 0.8)), dict(lam=(1.5, 1.0, 0.8))),
        (dict(lam=[2, 1, 1]), dict(lam=(2.0, 1.0, 1.0))),
        (dict(tau=np.float64(0.5), n=np.int64(2)), dict(tau=0.5, n=2)),
        (dict(max_steps=np.int32(4), seed=np.int64(3)), dict(max_steps=4, seed=3)),
    ],
)
def test_an_entrys_digest_does_not_depend_on_how_a_number_is_spelled(spelled, canonical):
    """Equal settings are one entry whatever their spelling: 1 and 1.0, a list and a tuple, a NumPy
    number and a Python one. (Other values stay other entries: see the test above.)"""
    assert entry_name("V", model="m", **spelled) == entry_name("V", model="m", **canonical)


def test_a_config_that_writes_1_0_keeps_an_entry_named_with_1(loopback, tmp_path):
    """An entry named with tau=1 and λ (2, 1, 1), built by VLMEvalKit with a --config JSON that
    writes 1.0 and [2.0, 1.0, 1.0]: the same settings, so the name holds."""
    srv = loopback(script)
    name, vlm = entry(
        "V", base_url=srv.url, model="qwen-loopback", tau=1, lam=(2, 1, 1), work_dir=str(tmp_path)
    )
    built = vlm(tau=1.0, lam=[2.0, 1.0, 1.0])  # build_model_from_config: supported_VLM[name](**cfg)
    assert built.sidecar.digest == name[-8:] and built.settings.tau == 1.0


def test_a_name_digested_before_numbers_were_normalised_still_holds(loopback, tmp_path, capsys):
    """A name written by hand from a digest of the settings as spelled (tau=1: "tau": 1 in the
    hashed JSON, before numbers were normalised) still names those settings; its sidecar's earlier
    runs, recorded with that digest and spelling, are the same settings, not others."""
    srv = loopback(script)
    spelled = {"model": "m", "judge_model": "m", "seed": 0} | Settings(tau=1).record()
    assert spelled["tau"] == 1 and isinstance(spelled["tau"], int)
    before = {k: v for k, v in spelled.items() if k not in ADDED}  # those came after this name
    old = hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:8]
    name = f"V-s{old}"
    assert name != entry_name("V", model="m", tau=1)  # the digest changed for this spelling
    path = tmp_path / name / f"{name}_MMStar_verdict.json"
    path.parent.mkdir()
    earlier = {"run": "0123456789ab", "digest": old, "settings": spelled, "counts": {"items": 1}}
    path.write_text(json.dumps({"format": "verdict-vlmeval-run/1", "runs": [earlier]}))
    vlm = VerdictVLM(base_url=srv.url, model="m", tau=1, name=name, work_dir=str(tmp_path))
    vlm._count("MMStar", None, dict.fromkeys(("calls", "requests", "cache_hits", "call_tokens"), 0))
    assert "other settings" not in capsys.readouterr().err
    assert [r["run"] for r in json.loads(path.read_text())["runs"]][0] == "0123456789ab"
    with pytest.raises(ValueError, match="digest"):
        VerdictVLM(base_url=srv.url, model="m", tau=0.9, name=name, work_dir=str(tmp_path))
