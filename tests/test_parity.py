"""Parity with VLMEvalKit (commit e8e78f05): tests/parity.jsonl holds (file, its TSV, row, reply,
the hit VLMEvalKit's own code gives), derived by reading each TSV with pandas' defaults and scoring
the reply with VLMEvalKit's can_infer / MMMU_preproc / MathVista post_check (docs/parity.md has the
command). The harness's reading (benchmarks.load) and scoring (answers.score) must give the same hit
on every line; the covered files are the paper's six, MMBench (circular by name), MMMU_DEV_VAL and
MathVista_MINI.

Lines may pin more, each derived by running VLMEvalKit's own build_dataset(name) and
build_prompt(row) (which calls dump_image) on the line's TSV:
- "prefetch" (MathVista): whether post_check(line, prefetch=True) accepts the reply
  (answers.prefetched);
- "prompt": the text message build_prompt gives, whitespace included (the Item's question);
- "images": per image message, the sha256 of what a request carries of the file dump_image wrote
  (its size and images.to_rgb's pixels, items.seen): the model sees the pixels VLMEvalKit's model
  would;
- "files" and "exts": the sha256 of each such file and its extension: items.vlmeval_resave writes
  it byte for byte from the TSV's own image."""

import hashlib
import json
import os

import pytest

from verdict_lab.images import load as load_image
from verdict_lab.harness import answers, benchmarks, items

HERE = os.path.dirname(__file__)
CASES = [json.loads(line) for line in open(os.path.join(HERE, "parity.jsonl"), encoding="utf-8")]
INPUTS = [c for c in CASES if "prompt" in c]


def seen(image) -> str:
    """sha256 of what a request carries of an image (its size, then to_rgb's RGB bytes), as
    derive.py hashes the file dump_image wrote."""
    (w, h), pixels = items.seen(load_image(image))
    return hashlib.sha256(f"{w}x{h}\n".encode() + pixels).hexdigest()


def loaded(case, tmp_path, inputs=items.Inputs()):
    path = tmp_path / f"{case['file']}.tsv"
    path.write_text(case["tsv"], encoding="utf-8")
    f = benchmarks.load(str(path), inputs=inputs)
    assert f.skipped == [], f.skipped
    return f


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c['file']}-{c['row']}-{c['reply']!r}" for c in CASES]
)
def test_the_hit_vlmevalkit_gives(case, tmp_path):
    item = loaded(case, tmp_path).items[case["row"]]
    pred, how, correct = answers.score(item, case["reply"])
    assert correct == bool(case["hit"])
    if (
        "prefetch" in case
    ):  # MathVista: the rows VLMEvalKit's prefetch takes, the rest go to its judge
        assert answers.prefetched(how, correct) == bool(case["prefetch"])


@pytest.mark.parametrize("case", INPUTS, ids=[f"{c['file']}-{c['row']}" for c in INPUTS])
def test_the_prompt_and_pixels_vlmevalkit_sends(case, tmp_path):
    f = loaded(case, tmp_path)
    item = f.items[case["row"]]
    assert item.question == case["prompt"]  # build_prompt's text, whitespace included
    assert [seen(im) for im in item.images] == case[
        "images"
    ]  # dump_image's pixels, as a request carries them
    own = loaded(case, tmp_path, items.Inputs(original_images=True)).items[case["row"]].images
    files = [
        hashlib.sha256(items.vlmeval_resave(im, ext)).hexdigest()
        for im, ext in zip(own, case["exts"])
    ]
    assert files == case["files"]  # dump_image's bytes, written again from the TSV's own image
    changed = [seen(a) != b for a, b in zip(own, case["images"])]
    assert (item.id in f.reading()["as_vlmevalkit"]["resaved"]) == any(changed)


def test_the_flags_send_the_files_own_pixels_and_the_stripped_prompt(tmp_path):
    """--original-images: every image as the TSV holds it (the pinned rows whose pixels dump_image
    changes differ); --stripped-prompts: build_question's lines with nothing after the last."""
    differ = 0
    for case in INPUTS:
        inputs = items.Inputs(original_images=True, stripped_prompt=True)
        f = loaded(case, tmp_path, inputs)
        item = f.items[case["row"]]
        differ += [seen(im) for im in item.images] != case["images"]
        if case["file"] in ("MMStar", "BLINK"):
            assert item.question == case["prompt"].rstrip(" \n")
        else:
            # CV-Bench's prompt column and MathVista's question cell are sent as they are
            # either way.
            assert item.question == case["prompt"]
        assert f.reading()["as_vlmevalkit"] == {
            "images": "original",
            "prompt": "stripped",
            "resaved": [],
        }
    # MMStar's 4 (RGBA, EXIF rotation, a row reusing the RGBA one, LA; a palette's transparency
    # survives the re-save as the RGB PNG's colour key), BLINK's 3 (JPEG), CV-Bench's and
    # MathVista's RGBA
    assert differ == 9


def test_every_benchmark_the_readme_names_is_covered():
    names = {
        "3DSRBench",
        "CV-Bench-3D",
        "CV-Bench-2D",
        "BLINK",
        "MMStar",
        "AI2D_TEST",
        "MathVista_MINI",
    }
    assert names | {"MMMU_DEV_VAL", "MMBench_DEV_EN"} <= {c["file"] for c in CASES}
    # the inputs are pinned for MMStar, BLINK and MathVista at least, and MathVista's prefetch tells
    # its two rules apart: a value read but wrong (not prefetched), a wrong letter (prefetched), "Z"
    # (prefetched)
    assert {"MMStar", "BLINK", "MathVista_MINI"} <= {c["file"] for c in INPUTS}
    mv = {(c["reply"], c["hit"], c["prefetch"]) for c in CASES if "prefetch" in c}
    assert {("15", 0, 0), ("C", 0, 1), ("Z", 0, 1), ("14", 1, 1), ("0", 0, 0)} <= mv
