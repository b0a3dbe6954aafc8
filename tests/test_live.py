"""Every live test: a real OpenAI-compatible server at $VERDICT_LIVE_URL (skipped when it is unset),
reached through the `live` fixture's recording proxy (conftest.py), every test sending real images.

They are written for the server verdict_lab/serve_tiny.sh starts by default: SmolLM2-135M-Instruct
on llama.cpp's llama-server with a hand-built vision projector (verdict_lab/mmproj.py) that turns
each image into real image tokens (IMAGE_TOKENS), each the embedding of its patch's colour word. The
model names the colour of a solid image and nothing more (docs/tiny_server.md): the tests at the end
give images of known colours and check that each request's answer follows its own image. The others
prove the plumbing, the request shapes and the cost of images; their answers and scores are not
checked against any truth (the judges do not see), and decisions are checked against verdict.select.
"""

import base64
import copy
import glob
import io
import json
import math
import threading

import numpy as np
import pytest
import requests
from PIL import Image

import demo
import verdict
from verdict_lab import loop
from judges import JSON, EndpointError, Judge, Reasoner, encode_image, make_judges
from verdict_lab import verifier
from verdict_lab.client import Client
from verdict_lab.formats import TEXT
from verdict_lab.harness import items
from verdict_lab.layouts import role_of
from verdict_lab.modes import JudgeMode
from verdict_lab.modes import zoom
from verdict_lab.vlmevalkit import FAIL_MSG, VerdictVLM
from conftest import LIVE_EXCHANGES, LiveProxy
from test_demo import check_trace, run_demo
from test_evaluate import argv, rows_of, run
from test_modes import chain_of, judges_in

pytestmark = pytest.mark.live

# The projector's input is 64×64 pixels in patches of 16: (64 / 16)² = 16 image tokens per image,
# whatever the image's size (llama-server resizes it).
IMAGE_TOKENS = 16
SLOTS = 4  # serve_tiny.sh's -np: the most choices (n) one request may ask of it
MCQ = "What colour is the shape in the image?\nA. red\nB. blue"


def picture(path, colour, size=(96, 64)):
    """A `size` image of one `colour` shape on white, saved at `path` (str)."""
    img = Image.new("RGB", size, (250, 250, 250))
    img.paste(colour, (size[0] // 4, size[1] // 4, 3 * size[0] // 4, 3 * size[1] // 4))
    img.save(path, format="PNG")
    return str(path)


def png_b64(colour) -> str:
    """picture's image, as a VLMEvalKit TSV holds it: base64 of its PNG bytes."""
    buf = io.BytesIO()
    picture(buf, colour)
    return base64.b64encode(buf.getvalue()).decode()


def image_urls(body) -> list:
    """The data URLs of a request's image parts, in order."""
    return [
        p["image_url"]["url"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for p in m["content"]
        if p["type"] == "image_url"
    ]


def image_tokens(live, body) -> tuple:
    """(prompt tokens the live server counts for `body` minus those of the same request with its
    images taken out, the text parts a removed image separated): the tokens the images cost, give or
    take one per text boundary they stood at (the texts' tokens merge there)."""
    bare = copy.deepcopy(body)
    joins = 0
    for m in bare["messages"]:
        if isinstance(m["content"], list):
            texts = [p for p in m["content"] if p["type"] == "text"]
            joins += max(len(texts) - 1, 0)
            m["content"] = texts
    count = lambda b: requests.post(
        live.target + "/chat/completions", json={**b, "max_tokens": 1}, timeout=900
    ).json()["usage"]["prompt_tokens"]
    return count(body) - count(bare), joins


def check_image_tokens(live, body) -> None:
    k = len(image_urls(body))
    got, joins = image_tokens(live, body)
    assert k >= 1 and abs(got - IMAGE_TOKENS * k) <= joins, (
        role_of(body["messages"]),
        got,
        k,
        joins,
    )


def live_demo(live, cwd, flags: str, *more, question=MCQ.split("\n")[0]):
    """demo.py against the live server (through the proxy) in `cwd`: `flags` split at spaces, then
    `more`; each request may take 600 s (2 shared CPU cores)."""
    args = ["--base-url", live.url, "--model", "tiny", "--question", question]
    args += [*flags.split(), *more]
    return run_demo(args, cwd, timeout=900)


def lab_trace(live, question: str, images, **settings) -> dict:
    """A chain of verdict_lab's verifier (verifier.build and run, as evaluate runs one) with these
    Settings against the live server, each request allowed 600 s: its trace as a dict, with the
    client's usage in meta["usage"]["reasoner"], checked by test_demo's check_trace."""
    client = Client(live.url, "tiny", timeout=600.0)
    v = verifier.build(verifier.Settings(**settings), client)
    trace = verifier.run(v, question, images, map_fn=verifier.thread_map(SLOTS))
    d = json.loads(json.dumps(trace.to_dict(), allow_nan=False))
    d["meta"]["usage"] = {"reasoner": client.usage}
    plain = json.loads(json.dumps(d))  # the lab's own keys set aside, the trace is demo.py's
    revised = [s["revision"] for s in plain["steps"] if "revision" in s]
    plain["totals"]["judge_calls"] -= sum(len(r["s_hat"]) for r in revised)
    plain["totals"]["abstentions"] -= sum(v is None for r in revised for v in r["s_hat"])
    for step in plain["steps"]:
        for key in ("usage", "revision", "calls", "adaptive"):
            step.pop(key, None)
    for key in ("revisions", "revised", "usage", "adaptive"):
        plain["totals"].pop(key, None)
    plain["format"] = demo.TRACE_FORMAT  # the lab's format number counts the lab's keys too
    check_trace(plain)
    return d


def demo_trace(live, cwd, flags: str, *more, **kw) -> tuple:
    """live_demo, which must succeed: (its output, the trace it wrote, checked by check_trace)."""
    out = live_demo(live, cwd, flags, *more, **kw)
    assert out.returncode == 0, out.stderr
    d = json.loads((cwd / "verdict_trace.json").read_text())
    check_trace(d)
    return out, d


def check_decisions(d) -> None:
    """Every step whose candidates all three judges scored was decided as verdict.select decides."""
    cfg = d["config"]
    for s in d["steps"]:
        if all(v is not None for r in s["s_hat"] for v in r):
            sel = verdict.select(
                np.array(s["s_hat"]), tuple(cfg["lam"]), cfg["tau"], cfg["eps"], cfg["rule"]
            )
            assert (s["index"], s["fallback"], s["accepted"]) == (
                sel.index,
                sel.fallback,
                sel.accepted.tolist(),
            )
            assert s["s_bar_star"] == pytest.approx(sel.s_bar_star.tolist())


# ---------------------------------------------------------------------------- the server and images


def test_each_image_costs_its_tokens_and_changes_what_the_model_computes(live):
    c = Client(live.url, "tiny", timeout=300.0, retries=1)
    urls = [
        encode_image(Image.new("RGB", (96, 64), rgb))
        for rgb in ((200, 30, 30), (30, 200, 30), (30, 30, 200))
    ]

    def content(k):  # "Image i:" before each image: llama-server fails adjacent images once cached
        parts = [
            p
            for i, u in enumerate(urls[:k], 1)
            for p in (
                {"type": "text", "text": f"Image {i}:"},
                {"type": "image_url", "image_url": {"url": u}},
            )
        ]
        return parts + [{"type": "text", "text": "What colour is the image?"}]

    for k in (1, 3):
        body = {"model": "tiny", "messages": [{"role": "user", "content": content(k)}]}
        got, joins = image_tokens(live, body)
        assert abs(got - IMAGE_TOKENS * k) <= joins, (k, got)

    def top(url):  # the five likeliest first tokens after the same text with one image
        msgs = [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": url}}, content(0)[0]],
            }
        ]
        r = c.chat(msgs, max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=5)
        return [
            (t["token"], round(t["logprob"], 4))
            for t in r["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        ]

    assert top(urls[0]) != top(urls[2])  # two images, two different computations


def test_what_the_server_refuses_is_one_line_naming_the_cause(live, tmp_path):
    c = Client(live.url, "tiny", timeout=300.0, retries=0)
    png_url, ask = (
        encode_image(Image.new("RGB", (96, 64), (200, 30, 30))),
        {"type": "text", "text": "What is it?"},
    )
    with pytest.raises(EndpointError) as e:
        c.chat(
            [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": png_url}}, ask],
                }
            ],
            n=SLOTS + 1,
            max_tokens=1,
        )
    said = str(e.value)
    assert e.value.status == 400 and "\n" not in said
    assert f"the server samples at most {SLOTS} choices at once" in said and "(--n)" in said
    bad = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\nno image here").decode()
    with pytest.raises(EndpointError) as e:
        c.chat(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": bad}},
                        {"type": "text", "text": "What is it?"},
                    ],
                }
            ],
            max_tokens=1,
        )
    said = str(e.value)
    assert (
        e.value.status == 400
        and "\n" not in said
        and "could not decode an image this request sent" in said
    )
    # the demo: a corrupt image file is refused before any request is sent
    sent = len(live.mine)
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    out = live_demo(live, tmp_path, "--image", str(tmp_path / "bad.png"))
    assert (
        out.returncode == 2
        and len(out.stderr.strip().splitlines()) == 1
        and "bad.png" in out.stderr
    ), out.stderr
    assert len(live.mine) == sent


# ----------------------------------------------------------------------------- demo.py


def test_the_live_demo_on_its_scene_sends_the_image_and_every_judge_call_scores(live, tmp_path):
    demo.draw_scene(str(tmp_path / "scene.png"))
    question = demo.QUESTION.split("\n")[0]
    out, d = demo_trace(
        live,
        tmp_path,
        "--max-steps 2 --image scene.png --choices",
        "A. left|B. right",
        question=question,
    )
    check_decisions(d)
    # The paper's n = 3 candidates a step, each scored by the three judges, every score read.
    assert d["totals"]["abstentions"] == 0 and d["totals"]["judge_calls"] == 9 * len(d["steps"])
    scene = encode_image(str(tmp_path / "scene.png"))
    # The scene, in every request.
    assert live.ok() and all(image_urls(e.body) == [scene] for e in live.mine)
    for e in live.ok():
        check_image_tokens(live, e.body)  # each request's prompt tokens hold the image's


def test_the_verifier_reads_json_scores_and_their_logprobs_with_an_image(live, tmp_path):
    scene = picture(tmp_path / "scene.png", (200, 30, 30))
    d = lab_trace(live, MCQ, [scene], n=2, max_steps=2)
    check_decisions(d)
    judged = d["meta"]["judges"]
    assert (judged["format_used"], judged["fallback"]) == ("json", None)
    assert d["totals"]["abstentions"] == 0 and d["totals"]["judge_calls"] == 6 * len(d["steps"])
    assert all(len(image_urls(e.body)) == 1 for e in live.mine)
    pairs = [(c["sampled"], c["weighted"]) for s in d["steps"] for row in s["calls"] for c in row]
    # llama-server sends logprobs: every call has its weighted score.
    assert all(a is not None and b is not None and 0 <= b <= 1 for a, b in pairs)


def test_text_judges_count_honestly_with_an_image(live, tmp_path):
    scene = picture(tmp_path / "scene.png", (30, 30, 200))
    d = lab_trace(live, MCQ, [scene], n=2, max_steps=1, judge_format="text")
    assert d["meta"]["judges"]["format_used"] == "text"
    # Text replies carry no weighted score.
    assert all(c["weighted"] is None for row in d["steps"][0]["calls"] for c in row)
    judged = len(d["steps"][0]["candidates"]) * 3
    # 1+ reasoner calls, and each judge call is retried once at most.
    usage = d["meta"]["usage"]["reasoner"]
    assert 1 + judged <= usage["calls"] <= 3 + 2 * judged and usage["requests"] == len(live.mine)
    assert all(len(image_urls(e.body)) == 1 for e in live.mine)


def test_zoom_sends_the_visual_judges_close_ups_to_the_server(live, tmp_path):
    demo.draw_scene(str(tmp_path / "scene.png"))
    usable = []

    # The tiny model's boxes are rarely usable (the whole image, or no area).
    def boxes(body, reply):
        if role_of(body["messages"]) != "zoom":
            return reply
        try:
            named = zoom.parse_regions(reply["choices"][0]["message"]["content"])
        except ValueError:
            named = None
        usable.append(bool(named) and all(zoom.check_region(b) is None for b in named))
        # One region whatever the model named (it may name up to three, usable or not), so that
        # each visual request carries the scene and exactly one close-up: the red cube.
        reply = copy.deepcopy(reply)
        reply["choices"][0]["message"]["content"] = json.dumps({"boxes": [[150, 500, 375, 850]]})
        return reply

    live.rewrite = boxes
    scene = str(tmp_path / "scene.png")
    d = lab_trace(live, demo.QUESTION, [scene], n=2, max_steps=1, judge_mode="zoom")
    g = d["meta"]["judge_mode"]
    assert [e["path"] for e in g["zoom"]] == ["zoom"] * 2 and g["extra_calls"] == 2 == len(usable)
    visual = [e.body for e in live.ok() if role_of(e.body["messages"]) == "visual"]
    assert len(visual) >= 2
    for body in visual:  # the scene, then its close-up: two images, each its tokens
        assert len(image_urls(body)) == 2 and image_urls(body)[0] == encode_image(
            str(tmp_path / "scene.png")
        )
        check_image_tokens(live, body)
    assert all(
        len(image_urls(e.body)) == 1 for e in live.ok() if role_of(e.body["messages"]) != "visual"
    )


def test_speculate_and_revise_with_an_image(live, tmp_path):
    scene = picture(tmp_path / "scene.png", (200, 30, 30))
    d = lab_trace(live, MCQ, [scene], n=2, max_steps=2, speculate=True, revise=True, tau=1.0)
    assert d["meta"]["speculation"]["totals"]["made"] >= 1
    # τ = 1: nothing passes, and each step is revised.
    assert all(s["fallback"] and "revision" in s for s in d["steps"])
    roles = [role_of(e.body["messages"]) for e in live.ok()]
    assert roles.count("reviser") == len(d["steps"]) and "reasoner" in roles
    assert all(len(image_urls(e.body)) == 1 for e in live.mine)


# ---------------------------------------------------------------- evaluate and the VLMEvalKit model


def tsv(path, corrupt: bool = True) -> str:
    """A VLMEvalKit-style TSV: two one-image rows, a row with two images, and (corrupt) a row whose
    image does not decode."""
    red, blue, green, yellow = (
        png_b64(c) for c in ((200, 30, 30), (30, 30, 200), (30, 160, 30), (220, 200, 30))
    )
    rows = [
        ["index", "image", "question", "A", "B", "answer", "category"],
        ["1", red, "What colour is the shape?", "red", "blue", "A", "colour"],
        ["2", blue, "What colour is the shape?", "red", "blue", "B", "colour"],
        [
            "3",
            repr([green, yellow]),
            "Which image shows a green shape?",
            "the first",
            "the second",
            "A",
            "multi",
        ],
    ]
    if corrupt:
        rows.append(  # long enough not to read as another row's index
            [
                "4",
                base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"broken" * 30).decode(),
                "What is it?",
                "x",
                "y",
                "A",
                "bad",
            ]
        )
    path.write_text("\n".join("\t".join(r) for r in rows) + "\n")
    return str(path)


def test_evaluate_on_a_tsv_with_images_writes_rows_summary_and_vlmevalkits_files(live, tmp_path):
    data, out = tsv(tmp_path / "Tiny.tsv"), tmp_path / "o"
    flags = "--seeds 2 --rules base,mean,verdict --n 2 --max-steps 1 --max-tokens 24 --timeout 600"
    done = run(argv(data, live.url, out, flags + " --model tiny"), timeout=1800)
    assert done.returncode == 0, done.stderr
    rows = rows_of(out)
    assert len(rows) == 3 * 3 * 2 and {r["id"] for r in rows} == {"1", "2", "3"}
    assert all(r["error"] is None and r["trace"] is not None for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["accuracy"]) == {"base", "mean", "verdict"}
    # The corrupt row is skipped with its own clear reason, and the run is kept.
    (skipped,) = summary["reading"]["Tiny"]["skipped"]
    assert (
        "undecodable image" in skipped["reason"]
        and "Tiny.tsv: 1 malformed row(s) skipped" in done.stdout
    )
    # One per method and seed.
    assert len(glob.glob(str(out / "**" / "*_Tiny.tsv"), recursive=True)) == 3 * 2
    assert len(glob.glob(str(out / "**" / "*_Tiny_acc.csv"), recursive=True)) == 3 * 2
    counts = {len(image_urls(e.body)) for e in live.mine}
    two = [e.body for e in live.mine if "green shape" in json.dumps(e.body["messages"])]
    assert counts == {1, 2} and two and all(len(image_urls(b)) == 2 for b in two)
    check_image_tokens(live, two[0])


def test_the_weighted_score_reaches_both_branches_of_the_dual_test(live, tmp_path):
    # The sampled score of the tiny model is 0 in almost every call; the probability-weighted one
    # spreads. Pass 1 (τ = 0, ε = 1) fills a response cache; τ is then set between the two items'
    # best s̄* at step 1, and pass 2 replays the same requests from the cache: one item's step is
    # accepted, the other's falls back.
    data, cache = tsv(tmp_path / "Tiny.tsv", corrupt=False), str(tmp_path / "cache.sqlite")
    flags = (
        "--seeds 1 --rules verdict --weighted --n 2 --max-steps 1 --max-tokens 24 --eps 1"
        f" --cache {cache} --timeout 600"
    )
    first = run(
        argv(data, live.url, tmp_path / "o1", flags + " --tau 0 --model tiny --limit 2"),
        timeout=1800,
    )
    assert first.returncode == 0, first.stderr
    best = {r["id"]: max(r["trace"]["steps"][0]["s_bar_star"]) for r in rows_of(tmp_path / "o1")}
    low, high = sorted(best.values())
    assert low < high, best
    sent = len(live.mine)
    tau = (low + high) / 2
    second = run(
        argv(data, live.url, tmp_path / "o2", flags + f" --tau {tau!r} --model tiny --limit 2"),
        timeout=1800,
    )
    assert second.returncode == 0, second.stderr
    assert len(live.mine) == sent  # every request served from the cache: the same replies
    steps = {r["id"]: r["trace"]["steps"][0] for r in rows_of(tmp_path / "o2")}
    assert sorted(s["fallback"] for s in steps.values()) == [False, True]
    for s in steps.values():
        calls = [c for row in s["calls"] for c in row]
        assert s["s_hat"] == [[c["weighted"] for c in row] for row in s["calls"]] and all(
            c["weighted"] is not None for c in calls
        )


def test_the_vlmevalkit_model_answers_messages_with_images(live, tmp_path):
    red, blue = (
        picture(tmp_path / "red.png", (200, 30, 30)),
        picture(tmp_path / "blue.png", (30, 30, 200)),
    )
    vlm = VerdictVLM(base_url=live.url, model="tiny", n=2, max_steps=1, max_tokens=24)
    one = vlm.generate(
        [{"type": "image", "value": red}, {"type": "text", "value": MCQ}], dataset="MMStar"
    )
    two = vlm.generate(
        [
            {"type": "text", "value": "Image 1:"},
            {"type": "image", "value": red},
            {"type": "text", "value": "Image 2:"},
            {"type": "image", "value": blue},
            {"type": "text", "value": "Which image shows a blue shape?\nA. 1\nB. 2"},
        ],
        dataset="MMMU_DEV_VAL",
    )
    assert isinstance(one, str) and isinstance(two, str) and not (one + two).startswith(FAIL_MSG)
    assert vlm.totals["items"] == 2 and vlm.totals["failed"] == 0
    urls = [image_urls(e.body) for e in live.mine]
    assert {tuple(u) for u in urls} == {
        (encode_image(red),),
        (encode_image(red), encode_image(blue)),
    }


# -------------------------------------------------------------------- judges.py and the judge modes


def test_the_reasoner_and_text_judges_on_an_image(live, tmp_path):
    scene = picture(tmp_path / "scene.png", (200, 30, 30))
    client = Client(live.url, "tiny", timeout=300.0, retries=1)
    js = make_judges(client, reply=TEXT, max_tokens=32)
    trace = loop.run(
        MCQ,
        Reasoner(client, max_tokens=32),
        js,
        verdict.Config(n=1, max_steps=1),
        image=scene,
        map_fn=verifier.thread_map(3),
    )
    (rec,) = trace.steps
    assert len(rec.candidates) == 1 and rec.s_hat.shape == (1, 3)
    assert all(math.isnan(s) or 0 <= s <= 1 for s in rec.s_hat.ravel())
    calls = [c for row in rec.calls for c in row]  # [n·m] each call's record
    assert sum(c["sampled"] is None for c in calls) == rec.abstentions
    assert (
        client.usage["calls"]
        == client.usage["requests"]
        == len(live.mine)
        >= 1 + sum(c["replies"] for c in calls)
    )
    assert all(image_urls(e.body) == [encode_image(scene)] for e in live.mine)
    json.dumps(trace.to_dict(), allow_nan=False)


def test_a_json_judge_scores_and_weighs_its_score_digit_on_an_image(live, tmp_path):
    scene = picture(tmp_path / "scene.png", (30, 160, 30))
    j = Judge(Client(live.url, "tiny", timeout=300.0, retries=1), "visual", reply=JSON)
    judged = j(verdict.State(MCQ, (scene,)), "The shape is green.")
    call = judged.record
    assert (
        call["replies"] >= 1
        and float(judged) == call["sampled"]
        and 9 * judged == pytest.approx(round(9 * judged))
    )
    assert 0 <= call["weighted"] <= 1 and 0 < call["digit_share"] <= 1 + 1e-9
    assert all(image_urls(e.body) == [encode_image(scene)] for e in live.mine)


def test_the_judge_modes_make_their_calls_with_the_image(live, tmp_path):
    scene = picture(tmp_path / "scene.png", (220, 200, 30))
    client = Client(live.url, "tiny", timeout=300.0, retries=1)
    g = chain_of(client, JudgeMode(prior=True, premises=True, gate=True), max_tokens=48)
    trace = loop.run(
        MCQ,
        Reasoner(client, max_tokens=32),
        judges_in(g, max_tokens=32),
        verdict.Config(n=1, max_steps=1),
        image=scene,
    )
    rec = g.record()
    assert isinstance(rec["prior"], str) and rec["fact_sheet_status"] in (
        "ok",
        "retried",
        "degraded",
    )
    sheet_calls = {"ok": 1, "retried": 2, "degraded": 2}[rec["fact_sheet_status"]]
    assert (
        rec["extra_calls"] == 1 + sheet_calls + len(rec.get("gate", [])) and rec["extra_tokens"] > 0
    )
    roles = {role_of(e.body["messages"]): len(image_urls(e.body)) for e in live.mine}
    # premise_check reads the sheet alone.
    assert roles["prior"] == roles["premises"] == roles["reasoner"] == 1
    assert trace.to_dict()["format"] == loop.TRACE_FORMAT


def test_the_step_level_mode_judges_labelled_steps_with_their_images(live, tmp_path, capsys):
    from make_process_data import make
    from verdict_lab import process

    make(str(tmp_path / "data"))
    data, out = tmp_path / "data" / "visualprocessbench" / "test.jsonl", tmp_path / "out"
    argv = ["--data", str(data), "--limit", "1", "--base-url", live.url, "--model", "tiny"]
    argv += ["--out", str(out), "--timeout", "600", "--retries", "1"]
    assert process.main(argv) == 0, capsys.readouterr().err
    s = json.loads((out / "process_summary.json").read_text())
    # One sample of 3 steps: m = 3 judge calls a step, each with the sample's one image, and no
    # reasoner call.
    assert (s["samples"], s["steps"], s["judge_calls"]) == (1, 3, 9)
    assert len(live.ok()) == 9 and all(e.images == 1 for e in live.mine)
    assert {role_of(e.body["messages"]) for e in live.mine} == {"visual", "logical", "contextual"}
    assert set(s["report"]["overall"]["rules"]) == set(verdict.RULES) - {"no-rank"}
    assert process.main(argv) == 0 and len(live.mine) == 9  # the rerun sends nothing


# ------------------------------------------------------------------------ what the tiny model sees
# The projector makes each of an image's 16 patches SmolLM2's own embedding of a colour word
# (verdict_lab/mmproj.py). These tests give images of known colours and read the colour words'
# probabilities at the first answer token, so an image that reaches the wrong request, a close-up
# cut from the wrong place or a re-save that changes the colours shows in what the model says.
# Cyan is a corner of the projector's cube too, but the model does not name it; it is left out.

COLOURS = {
    "black": (0, 0, 0),
    "red": (255, 0, 0),
    "green": (0, 255, 0),
    "blue": (0, 0, 255),
    "yellow": (255, 255, 0),
    "purple": (255, 0, 255),
    "white": (255, 255, 255),
}
ASK = "What color is this image? Answer with one word."
TOP = 100  # top_logprobs: the colour words sit below the first 20 tokens at the first answer token


def image_bytes(rgb, size=(64, 64), fmt="PNG") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, rgb).save(buf, format=fmt)
    return buf.getvalue()


def data_url(data: bytes) -> str:
    kind = "jpeg" if data[:2] == b"\xff\xd8" else "png"
    return f"data:image/{kind};base64," + base64.b64encode(data).decode()


def colour_of(url: str, words=COLOURS) -> tuple:
    """(the colour word nearest an image data URL's mean pixel, the largest distance of a pixel
    from that mean)."""
    img = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB"))
    mean = img.reshape(-1, 3).mean(0)  # [3]
    name = min(words, key=lambda w: np.abs(np.array(words[w]) - mean).sum())
    return name, float(np.abs(img - mean).max())


def word_probs(top_logprobs: list, words) -> dict:
    """The probability of each word at one token, summed over its spellings ("red", " Red", ...)."""
    p = dict.fromkeys(words, 0.0)
    for t in top_logprobs:
        w = t["token"].strip().lower()
        if w in p:
            p[w] += math.exp(t["logprob"])
    return p


def first_colours(live, content, words=COLOURS) -> dict:
    """The colour words' probabilities at the first token of the greedy answer to `content`."""
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": TOP,
    }
    r = requests.post(live.url + "/chat/completions", json=body, timeout=900)
    assert r.status_code == 200, r.text
    return word_probs(r.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"], words)


def rank(p: dict, word: str) -> int:
    """1 + the words more probable than `word`; last when its probability is 0 (not in the top)."""
    return 1 + sum(q > p[word] for q in p.values()) if p[word] > 0 else len(p)


def seen(url: str) -> list:
    return [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": ASK}]


def test_the_model_names_the_colour_of_a_solid_image_and_not_without_one(live):
    p = {c: first_colours(live, seen(data_url(image_bytes(rgb)))) for c, rgb in COLOURS.items()}
    blind = first_colours(live, [{"type": "text", "text": ASK}])
    table = {c: (rank(p[c], c), round(p[c][c], 4), round(blind[c], 4)) for c in COLOURS}
    print("\ncolour: (rank of its word, its probability, its probability with no image)", table)
    assert sum(r == 1 for r, _, _ in table.values()) >= 6, table
    # With no image one distribution serves every colour, so its order can name one colour at most;
    # the image is what raises each colour's own word.
    assert sum(p[c][c] > blind[c] for c in COLOURS) >= 6, table


def test_a_vlmevalkit_jpeg_re_save_keeps_each_colours_name(live):
    names = {}
    for c, rgb in COLOURS.items():
        png = image_bytes(rgb)
        jpg = items.vlmeval_resave(png, ".jpg")  # quality 75, 4:2:0, as dump_image writes BLINK's
        assert jpg[:2] == b"\xff\xd8"
        before, after = (
            first_colours(live, seen(data_url(png))),
            first_colours(live, seen(data_url(jpg))),
        )
        names[c] = (max(before, key=before.get), max(after, key=after.get))
    print("\ncolour: (named from the PNG, named from its JPEG re-save)", names)
    assert all(a == b for a, b in names.values()), names
    assert sum(c == b for c, (_, b) in names.items()) >= 6, names


def test_zoom_close_ups_of_each_half_are_named_by_their_own_colour(live, tmp_path):
    halves = Image.new("RGB", (128, 64), COLOURS["red"])
    halves.paste(COLOURS["blue"], (64, 0, 128, 64))
    halves.save(tmp_path / "halves.png")
    boxes, lock = [[80, 150, 420, 850], [580, 150, 920, 850]], threading.Lock()  # left, right

    def left_then_right(body, reply):  # each zoom request gets the next half, whatever was named
        if role_of(body["messages"]) != "zoom":
            return reply
        with lock:
            box = boxes[len(live.asked) % 2]
            live.asked.append(box)
        reply = copy.deepcopy(reply)
        reply["choices"][0]["message"]["content"] = json.dumps({"boxes": [box]})
        return reply

    live.asked, live.rewrite = [], left_then_right
    q = "What colour is the left half of the image?\nA. red\nB. blue"
    d = lab_trace(live, q, [str(tmp_path / "halves.png")], n=2, max_steps=1, judge_mode="zoom")
    assert d["meta"]["judge_mode"]["extra_calls"] == 2 == len(live.asked)
    close_ups = {
        image_urls(e.body)[1] for e in live.ok() if role_of(e.body["messages"]) == "visual"
    }
    found = {}
    for url in close_ups:
        colour, spread = colour_of(url, {"red": COLOURS["red"], "blue": COLOURS["blue"]})
        assert spread < 40, (colour, spread)  # a close-up of one half holds that half alone
        p = first_colours(live, seen(url))
        found[colour] = max(p, key=p.get)
    print("\nclose-up of the half: named", found)
    assert found == {"red": "red", "blue": "blue"}


# The routing TSV: each pair of colours twice, once with each colour's image, under the same text.
PAIRS = (("black", "red"), ("blue", "purple"), ("purple", "white"), ("green", "yellow"))


def colour_tsv(path, pairs=PAIRS) -> dict:
    """A VLMEvalKit TSV: for each pair (a, b), an item with a's solid image and one with b's, both
    asking "What color is this image?" with options A. a, B. b. Returns {id: (a, b, colour)}."""
    rows, truth = [["index", "image", "question", "A", "B", "answer", "category"]], {}
    for a, b in pairs:
        for colour in (a, b):
            i = str(len(rows))
            png = base64.b64encode(image_bytes(COLOURS[colour])).decode()
            rows.append([i, png, "What color is this image?", a, b, "AB"[colour == b], colour])
            truth[i] = (a, b, colour)
    path.write_text("\n".join("\t".join(r) for r in rows) + "\n")
    return truth


class LogprobProxy(LiveProxy):
    """The live fixture's recording proxy, which also asks the server for the top TOP logprobs of
    every request that does not ask for its own (the reasoner's), so that each reply recorded says
    how the model ranked the colour words at its first token."""

    def forward(self, body, path):
        if "logprobs" not in body:
            body = {**body, "logprobs": True, "top_logprobs": TOP}
        return super().forward(body, path)


@pytest.fixture
def logprob_live(live, request):
    proxy = LogprobProxy(live.target, request.config.stash[LIVE_EXCHANGES])
    yield proxy
    proxy.server.close()


def request_item(body, truth: dict) -> tuple:
    """(the options (a, b) a request's text asks about, the colour of its one image)."""
    text = "\n".join(
        p["text"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for p in m["content"]
        if p["type"] == "text"
    ) + "".join(m["content"] for m in body["messages"] if isinstance(m["content"], str))
    (pair,) = {(a, b) for a, b, _ in truth.values() if f"A. {a}\nB. {b}\n" in text}
    (url,) = image_urls(body)
    colour, spread = colour_of(url)
    assert spread < 8, spread  # a PNG re-save is lossless: still one solid colour
    return pair, colour, text


def test_evaluate_routes_each_items_own_image_to_its_reasoner_and_judges(logprob_live, tmp_path):
    live = logprob_live
    truth = colour_tsv(tmp_path / "Colours.tsv")
    flags = "--seeds 1 --rules verdict --n 1 --max-steps 1 --max-tokens 16 --timeout 600"
    done = run(
        argv(tmp_path / "Colours.tsv", live.url, tmp_path / "o", flags + " --model tiny"),
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr
    rows = {r["id"]: r for r in rows_of(tmp_path / "o")}
    assert set(rows) == set(truth) and all(r["error"] is None for r in rows.values())
    items_sent = {(a, b, c) for a, b, c in truth.values()}
    reasoner, judged, ranked = {}, {}, []
    for e in live.ok():
        role = role_of(e.body["messages"])
        (a, b), colour, text = request_item(e.body, truth)
        assert (a, b, colour) in items_sent, (role, a, b, colour)
        if role == "reasoner":
            # One reasoner request per item: twins share their text, never a reply.
            assert (a, b, colour) not in reasoner
            reasoner[(a, b, colour)] = [c["message"]["content"] for c in e.reply["choices"]]
            top = e.reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            p = word_probs(top, (a, b))
            ranked.append(
                (colour, p[colour] > p[b if colour == a else a], round(p[a], 4), round(p[b], 4))
            )
        else:
            judged.setdefault((a, b, colour), []).append((role, text))
    assert set(reasoner) == items_sent and set(judged) == items_sent
    for i, (a, b, colour) in truth.items():
        steps = rows[i]["trace"]["steps"][0]["candidates"]
        # The row's candidates came from its own image's reply, and its judges read them with it.
        assert all(any(s in sent for sent in reasoner[(a, b, colour)]) for s in steps), (i, steps)
        roles = {role for role, text in judged[(a, b, colour)] if any(s in text for s in steps)}
        assert roles == {"visual", "logical", "contextual"}, (i, roles)
    judge_requests = sum(len(v) for v in judged.values())
    print(f"\nrequests: {len(reasoner)} reasoner, {judge_requests} judge, each with its own image")
    print(f"reasoner: colour, ranked above the other option, p(A), p(B): {ranked}")
    assert sum(ok for _, ok, _, _ in ranked) >= 5, ranked  # 6 of 8 measured; chance is 4
