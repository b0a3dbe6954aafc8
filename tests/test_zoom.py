"""Tests for modes/zoom.py and the zoom judge mode (ReVISE's look again) against a scripted loopback
server that names boxes and looks at the crops it is sent."""

import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

import verdict
from verdict_lab import loop
from judges import MAX_PIXELS, load_prompt
from verdict_lab import layouts
from verdict_lab.client import Client
from verdict_lab.formats import JudgeFormat
from verdict_lab.layouts import DEFAULT_LAYOUT, role_of
from verdict_lab.loopback import chat_response
from verdict_lab.modes import JudgeMode, zoom
from verdict_lab.modes.judge import ModeChain
from verdict_lab.verifier import Settings, judges_of

RED = (220, 20, 20)
SQUARE = [600, 200, 800, 600]  # the red square in 0..1000 coordinates (see scene)
STEP = "The square at the top right is red."
ONE_MP = 1280 * 28 * 28  # a 1.0 Mpx pixel budget (1 003 520 pixels)


def scene(path, size=(200, 100)):
    """A white W×H image, a red square at x 0.6W..0.8W, y 0.2H..0.6H: SQUARE on a 0..1000 scale."""
    W, H = size
    img = Image.new("RGB", size, (255, 255, 255))
    img.paste(RED, (int(0.6 * W), int(0.2 * H), int(0.8 * W), int(0.6 * H)))
    img.save(path)
    return path


def pictures(body) -> list:
    """The images of a request's user message, decoded from their data URLs."""
    content = body["messages"][1]["content"]  # a plain string without images
    urls = (
        [
            p["image_url"]["url"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "image_url"
        ]
        if isinstance(content, list)
        else []
    )
    return [
        Image.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1]))).convert("RGB") for u in urls
    ]


def is_red(img) -> bool:
    """Every pixel of img is (close to) RED: the crop shows the square and nothing else."""
    a = np.asarray(img, dtype=float)  # [h, w, 3]
    return bool(np.abs(a - np.array(RED)).max() < 40)


def zoom_handler(regions, seen: list):
    """The zoom role replies regions (a string, or a list of strings in turn); the visual judge
    scores 9 when its second image (the close-up) is all red, 0 when there is a close-up of anything
    else, 5 without one; seen collects (number of images, is the close-up red) per visual
    request."""
    regions = [regions] if isinstance(regions, str) else list(regions)

    def handler(body, path):
        role = role_of(body["messages"])
        if role == "reasoner":
            return chat_response([STEP] * body["n"])
        if role == "zoom":
            return chat_response(
                regions.pop(0) if len(regions) > 1 else regions[0],
                prompt_tokens=100,
                completion_tokens=20,
            )
        if role == "visual":
            imgs = pictures(body)
            seen.append((len(imgs), len(imgs) > 1 and is_red(imgs[1])))
            score = 5 if len(imgs) <= 1 else 9 if is_red(imgs[1]) else 0
            return chat_response(json.dumps({"reason": "looked", "score": score}))
        return chat_response(json.dumps({"reason": "fine", "score": 7}))

    return handler


def run_zoom(loopback, image, regions, fmt="json", layout=DEFAULT_LAYOUT, max_pixels=MAX_PIXELS):
    """One step (n = 1) in the zoom mode, the judges built as a run builds them (verifier.judges_of,
    one ModeChain for the chain, the run's JudgeFormat shared): (trace, the chain's record, what the
    visual judge saw, server)."""
    seen = []
    srv = loopback(zoom_handler(regions, seen))
    client = Client(srv.url, "m")
    settings = Settings(judge_format=fmt, judge_mode="zoom", layout=layout, max_pixels=max_pixels)
    run_format, lay = JudgeFormat(fmt), layouts.layout(layout, max_pixels)
    chain = ModeChain(client, settings.mode, fmt=run_format, layout=lay, max_pixels=max_pixels)
    judges = judges_of(settings, client, run_format, chain)
    reasoner = lambda state, n: [STEP] * n
    trace = loop.run(
        "Which colour is the square?", reasoner, judges, verdict.Config(n=1, max_steps=1), image
    )
    rec = chain.record()
    assert rec["judge_mode"] == "zoom"
    return trace, rec, seen, srv


# ----------------------------------------------------------------------------- the pure parts


def test_mode_word_and_name():
    assert JudgeMode.parse("zoom") == JudgeMode(zoom=True) and JudgeMode(zoom=True).active
    mode = JudgeMode.parse("zoom,premises,prior")
    assert mode.name == "prior+premises+zoom" and JudgeMode.parse(mode.name) == mode


@pytest.mark.parametrize(
    "reply, error",
    [
        ("look at the square", "no JSON object"),
        ('{"boxes": "all"}', "no JSON object"),
        (
            '{"boxes": [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]]}',
            "at most 3 boxes, got 4",
        ),
        ('{"boxes": [[1, 2, 3]]}', "4 finite numbers"),
        ('{"boxes": [[1, 2, 3, true]]}', "4 finite numbers"),
        ('{"boxes": [{"x1": 1}]}', "4 finite numbers"),
        (
            '{"boxes": [[1, 2, 3, 1e309]]}',
            "4 finite numbers",
        ),  # JSON's 1e309 reads as inf: a box, never a traceback
    ],
)
def test_parse_regions_rejects_what_is_not_a_list_of_boxes(reply, error):
    with pytest.raises(ValueError, match=error):
        zoom.parse_regions(reply)


def test_parse_regions_reads_boxes_and_none():
    assert zoom.parse_regions('Here: {"boxes": [[600, 200, 800, 600.5]]}') == [
        [600.0, 200.0, 800.0, 600.5]
    ]
    assert zoom.parse_regions('{"boxes": []}') == []


def test_check_region_golden():
    assert zoom.check_region(SQUARE) is None
    assert "degenerate" in zoom.check_region([600, 200, 600, 600])
    assert "non-finite" in zoom.check_region([600, float("nan"), 800, 600])
    assert "not inside" in zoom.check_region([900, 0, 1100, 100])
    # IoU with the whole image is the box's share of it: 1000×950 / 1000² = 0.95 > 0.9, a copy;
    # 1000×900 / 1000² = 0.9 is not above the threshold, a region.
    assert "copy of the whole image (IoU 0.95" in zoom.check_region([0, 0, 1000, 950])
    assert zoom.check_region([0, 0, 1000, 900]) is None


def test_decide_paths():
    assert zoom.decide([SQUARE], True) == ("zoom", None, [None])
    assert zoom.decide([SQUARE], False) == ("full", "no image", [])
    assert zoom.decide(None, True) == ("full", "unreadable", [])
    assert zoom.decide([], True) == ("full", "none named", [])
    path, why, errors = zoom.decide([SQUARE, [0, 0, 1000, 1000]], True)
    assert (path, why, errors[0]) == ("full", "invalid", None) and "copy" in errors[1]


def test_regions_schema_bounds_count_and_coordinates():
    s = zoom.regions_schema(2)
    boxes = s["properties"]["boxes"]
    assert boxes["maxItems"] == 2 and boxes["items"]["minItems"] == boxes["items"]["maxItems"] == 4
    assert boxes["items"]["items"] == {"type": "integer", "minimum": 0, "maximum": 1000}


# ---------------------------------------------------------------------- against the scripted server


def test_a_valid_box_sends_the_crop_of_that_region_and_the_judge_scores_with_it(loopback, tmp_path):
    trace, rec, seen, srv = run_zoom(
        loopback, scene(tmp_path / "s.png"), '{"boxes": [[600, 200, 800, 600]]}'
    )
    # The decoded close-up is all red: the square, at x 120..160, y 20..60 of the 200×100 source.
    assert seen == [(2, True)]
    assert trace.steps[0].s_hat[0, 0] == 1.0  # the visual judge's 9/9, given for the red close-up
    (entry,) = rec["zoom"]
    assert entry["path"] == "zoom" and entry["why"] is None and entry["boxes"] == [SQUARE]
    assert entry["crops"] == [[120, 20, 160, 60]] and entry["box_errors"] == [None]
    # The region request costs 100 + 20 tokens.
    assert rec["extra_calls"] == 1 and rec["extra_tokens"] == 120
    # What the visual judge's own call saw is in its record.
    visual, logical = trace.steps[0].calls[0][:2]
    assert (
        visual["zoom"] == {"path": "zoom", "why": None, "boxes": [SQUARE]} and "zoom" not in logical
    )
    (zoom_req,) = [r.body for r in srv.requests if role_of(r.body["messages"]) == "zoom"]
    assert zoom_req["response_format"]["json_schema"]["schema"] == zoom.regions_schema()


def test_boxes_in_0_1000_map_to_the_source_when_the_image_is_sent_downscaled(loopback, tmp_path):
    # 2000×1000 is 2.0 Mpx, above a 1.0 Mpx budget: the model sees a 1416×708 image. The box is
    # relative, so it names the same region of the source: x 1200..1600, y 200..600, cut at full
    # resolution.
    trace, rec, seen, srv = run_zoom(
        loopback,
        scene(tmp_path / "big.png", (2000, 1000)),
        '{"boxes": [[600, 200, 800, 600]]}',
        max_pixels=ONE_MP,
    )
    assert seen == [(2, True)] and rec["zoom"][0]["crops"] == [[1200, 200, 1600, 600]]
    (visual,) = [r.body for r in srv.requests if role_of(r.body["messages"]) == "visual"]
    image, close_up = pictures(visual)
    # Both are within the budget.
    assert image.size == (1416, 708) and close_up.width * close_up.height <= ONE_MP


def test_the_close_up_goes_after_the_shared_prefix_just_before_the_task(loopback, tmp_path):
    trace, rec, seen, srv = run_zoom(
        loopback, scene(tmp_path / "s.png"), '{"boxes": [[600, 200, 800, 600]]}', layout="shared"
    )
    bodies = {role_of(r.body["messages"]): r.body for r in srv.requests}
    visual, logical = (
        bodies["visual"]["messages"][1]["content"],
        bodies["logical"]["messages"][1]["content"],
    )
    assert [p["type"] for p in visual] == ["image_url", "text", "image_url", "text"]
    assert visual[0] == logical[0]  # the same image first
    shared = logical[1]["text"].split(load_prompt("logical")["instructions"])[0]
    # Question and steps: the prefix every role of the step shares.
    assert visual[1]["text"].startswith(shared)
    # The note ends the text, then come the close-up and the task.
    assert visual[1]["text"].endswith(zoom.looks_note([SQUARE]))
    assert visual[3]["text"].startswith("Step to check:\n<step>\n" + STEP)


def test_no_two_close_ups_are_adjacent_images(loopback, tmp_path):
    # llama-server caches [A][B][text] and then fails a later [A][text]
    # (HTTP 500 "Chunk not found"): a label stands between every two close-ups.
    reply = '{"boxes": [[600, 200, 800, 600], [0, 0, 500, 500]]}'
    trace, rec, seen, srv = run_zoom(loopback, scene(tmp_path / "s.png"), reply, layout="shared")
    (visual,) = [r.body for r in srv.requests if role_of(r.body["messages"]) == "visual"]
    content = visual["messages"][1]["content"]
    assert [p["type"] for p in content] == [
        "image_url",
        "text",
        "image_url",
        "text",
        "image_url",
        "text",
    ]
    assert content[3]["text"] == "Close-up 2:" and rec["zoom"][0]["path"] == "zoom"


@pytest.mark.parametrize(
    "reply, why, error",
    [
        ('{"boxes": [[600, 200, 600, 600]]}', "invalid", "degenerate"),
        ('{"boxes": [[0, 0, 1000, 1000]]}', "invalid", "copy of the whole image"),
        ('{"boxes": [[600, 200, 800, 600], [900, 0, 1100, 100]]}', "invalid", "not inside"),
        ('{"boxes": []}', "none named", None),
    ],
)
def test_an_invalid_box_or_none_scores_from_the_full_image(loopback, tmp_path, reply, why, error):
    trace, rec, seen, _ = run_zoom(loopback, scene(tmp_path / "s.png"), reply)
    assert seen == [(1, False)] and trace.steps[0].s_hat[0, 0] == 5 / 9  # the full image alone
    (entry,) = rec["zoom"]
    assert entry["path"] == "full" and entry["why"] == why and entry["crops"] == []
    assert entry["boxes"] == json.loads(reply)["boxes"]
    assert error is None or error in entry["box_errors"][-1]


def test_an_unreadable_reply_is_asked_once_more_then_the_full_image(loopback, tmp_path):
    trace, rec, seen, _ = run_zoom(loopback, scene(tmp_path / "s.png"), "the top right corner")
    (entry,) = rec["zoom"]
    assert (entry["path"], entry["why"], entry["boxes"]) == ("full", "unreadable", None)
    assert len(entry["errors"]) == 2 and rec["extra_calls"] == 2 and seen == [(1, False)]
    trace, rec, seen, _ = run_zoom(
        loopback, scene(tmp_path / "s.png"), ["corner", '{"boxes": [[600, 200, 800, 600]]}']
    )
    assert (
        rec["zoom"][0]["path"] == "zoom"
        and len(rec["zoom"][0]["errors"]) == 1
        and seen == [(2, True)]
    )


def test_without_an_image_no_region_is_asked_for(loopback):
    trace, rec, seen, srv = run_zoom(loopback, None, '{"boxes": [[600, 200, 800, 600]]}')
    # no region request is made, so the chain's record lists none; the call's record says why
    assert "zoom" not in rec and rec["extra_calls"] == 0 and seen == [(0, False)]
    assert trace.steps[0].calls[0][0]["zoom"] == {"path": "full", "why": "no image", "boxes": None}
    assert not any(role_of(r.body["messages"]) == "zoom" for r in srv.requests)


def test_text_format_sends_no_schema_and_still_validates(loopback, tmp_path):
    trace, rec, seen, srv = run_zoom(
        loopback, scene(tmp_path / "s.png"), '{"boxes": [[600, 200, 800, 600]]}', fmt="text"
    )
    (zoom_req,) = [r.body for r in srv.requests if role_of(r.body["messages"]) == "zoom"]
    assert "response_format" not in zoom_req and rec["zoom"][0]["path"] == "zoom"
