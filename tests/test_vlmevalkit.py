"""The paper's six benchmarks (3DSRBench, CV-Bench-2D, CV-Bench-3D, BLINK, MMStar, AI2D_TEST), then
MMMU and MathVista, as small synthetic TSVs that follow VLMEvalKit's conventions for each dataset,
run end to end by verdict_lab.evaluate against the loopback server: every request carries the item's
images (in place, for MMMU), and the files a VLMEvalKit user expects are written."""

import csv
import io
import json
import re

from PIL import Image

from verdict_lab import evaluate
from verdict_lab.images import encode as encode_image
from verdict_lab.harness.items import vlmeval_resave
from verdict_lab.loopback import chat_response, user_text
from verdict_lab.layouts import role_of
from test_benchmarks import MATHVISTA, b64, png, tsv
from test_evaluate import argv, script

COLOURS = [
    "red",
    "blue",
    "green",
    "yellow",
    "purple",
    "orange",
    "cyan",
    "white",
    "black",
    "gray",
    "pink",
    "brown",
]


def image(k: int) -> bytes:
    return png(COLOURS[k % len(COLOURS)], size=(8 + k, 6))


def benchmarks_dir(tmp):
    """{file name: {tag: [image bytes, in the order the request must carry them]}}; each
    question holds its [tag]."""
    want, k = {}, iter(range(100))

    def img(tag, file, n=1):
        ims = [image(next(k)) for _ in range(n)]
        want.setdefault(file, {})[tag] = ims
        return b64(ims[0]) if n == 1 else repr([b64(i) for i in ims])

    # 3DSRBench: qid X, its rotation X-1, its flip X-flip and X-flip-1; full base64 on every row;
    # no split.
    head = [
        "index",
        "qid",
        "question",
        "A",
        "B",
        "C",
        "D",
        "answer",
        "category",
        "image",
        "image_source",
        "image_url",
    ]
    rows = [
        [
            str(i),
            q,
            f"[3D-{q}] Is the chair higher than the table?",
            "yes",
            "no",
            "",
            "",
            "AB"[i % 2],
            "height_higher",
            img(f"3D-{q}", "3DSRBench"),
            "MS-COCO",
            f"http://x/{i}.jpg",
        ]
        for i, q in enumerate(["X", "X-1", "X-flip", "X-flip-1"])
    ]
    files = [tsv(tmp / "3DSRBench.tsv", head, rows)]
    # CV-Bench: the prompt column is the whole text; 2D has a source per row, 3D a category.
    for dim, extra in (("2D", ["ADE20K", "COCO", "COCO"]), ("3D", ["Depth", "Distance", "Depth"])):
        head = [
            "index",
            "image",
            "question",
            "prompt",
            "A",
            "B",
            "answer",
            "split",
            "source" if dim == "2D" else "category",
        ]
        rows = [
            [
                str(i),
                img(f"CV{dim}-{i}", f"CV-Bench-{dim}"),
                f"How many? {i}",
                f"[CV{dim}-{i}] How many chairs? Select from the following choices.\n(A) 2\n(B) 3",
                "2",
                "3",
                "AB"[i % 2],
                dim,
                extra[i],
            ]
            for i in range(3)
        ]
        files.append(tsv(tmp / f"CV-Bench-{dim}.tsv", head, rows))
    # BLINK: a list literal of 2 to 4 images per row.
    head = ["index", "image", "question", "A", "B", "C", "D", "answer", "category"]
    rows = [
        [
            f"val_{i}",
            img(f"BL-{i}", "BLINK", n),
            f"[BL-{i}] Which point is closer?",
            "A",
            "B",
            "",
            "",
            "A",
            "Relative_Depth",
        ]
        for i, n in enumerate((2, 3, 4))
    ]
    files.append(tsv(tmp / "BLINK.tsv", head, rows))
    # MMStar: category and l2_category; a question may repeat its options.
    head = ["index", "question", "A", "B", "C", "D", "answer", "category", "l2_category", "image"]
    rows = [
        [
            str(i),
            f"[MS-{i}] Which is it? Options: A: a, B: b, C: c, D: d",
            "a",
            "b",
            "c",
            "d",
            "ABCD"[i],
            "coarse perception",
            "image scene and topic",
            img(f"MS-{i}", "MMStar"),
        ]
        for i in range(3)
    ]
    files.append(tsv(tmp / "MMStar.tsv", head, rows))
    # AI2D_TEST: a row that reuses another row's image by its index, and one without an image
    # (dropped).
    head = ["index", "image", "question", "A", "B", "C", "D", "answer", "category"]
    rows = [
        [
            "0",
            img("AI-0", "AI2D_TEST"),
            "[AI-0] Which stage is shown?",
            "egg",
            "larva",
            "pupa",
            "adult",
            "B",
            "lifeCycles",
        ],
        ["1", "0", "[AI-1] Which label is the leaf?", "A", "B", "C", "D", "C", "partsOfA"],
        ["2", "", "[AI-2] No image", "x", "y", "", "", "A", "partsOfA"],
    ]
    want["AI2D_TEST"]["AI-1"] = want["AI2D_TEST"]["AI-0"]
    files.append(tsv(tmp / "AI2D_TEST.tsv", head, rows))
    return files, want


def images_sent(chat) -> list:
    content = chat["messages"][1]["content"]
    return (
        []
        if isinstance(content, str)
        else [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    )


def test_the_six_benchmarks_run_with_the_right_images_in_every_request(tmp_path, loopback):
    files, want = benchmarks_dir(tmp_path)
    srv, out = loopback(script), tmp_path / "out"
    assert (
        evaluate.main(
            argv(
                files,
                srv.url,
                out,
                "--seeds 1 --rules base,verdict --max-steps 2 --judge-format text",
            )
        )
        == 0
    )
    urls = {
        tag: [encode_image(im) for im in ims] for tags in want.values() for tag, ims in tags.items()
    }
    seen = set()
    for chat in srv.chats:
        tag = re.search(r"\[([\w-]+)\]", user_text(chat)).group(1)
        assert images_sent(chat) == urls[tag], tag
        seen.add(tag)
    assert seen == set(urls)  # every item ran; AI-2 (no image) never did
    summary = json.loads((out / "summary.json").read_text())
    assert summary["files"] == [
        "3DSRBench",
        "CV-Bench-2D",
        "CV-Bench-3D",
        "BLINK",
        "MMStar",
        "AI2D_TEST",
    ]
    assert {f: r["items"] for f, r in summary["reading"].items()} == {
        "3DSRBench": 4,
        "CV-Bench-2D": 3,
        "CV-Bench-3D": 3,
        "BLINK": 3,
        "MMStar": 3,
        "AI2D_TEST": 2,
    }
    assert summary["reading"]["AI2D_TEST"]["dropped"] == 1
    assert (
        set(summary["variants"]) == {"3DSRBench"}
        and summary["reading"]["CV-Bench-2D"]["scoring"]["macro"] == "source"
    )
    run = out / "default-verdict" / "seed0"  # VLMEvalKit's work_dir/<model>/<eval_id>/
    for f in summary["files"]:
        name = (
            f"default-verdict_{f}_results.tsv"
            if f == "3DSRBench"
            else f"default-verdict_{f}_acc.csv"
        )
        head = {
            "3DSRBench": '"setting"\t"Overall"',
            "CV-Bench-2D": '"split","ADE20K","COCO","Overall"\n',
        }
        head = head.get(f, '"split","Overall"')  # CVBench.report_accuracy: sources, then Overall
        assert (run / name).read_text().startswith(head), f
    with open(run / "default-verdict_BLINK.tsv", newline="") as fh:
        table = list(csv.reader(fh, delimiter="\t"))
    head = [
        "index",
        "question",
        "A",
        "B",
        "C",
        "D",
        "answer",
        "category",
        "prediction",
        "verdict_chain",
    ]
    assert table[0] == head
    assert [r[0] for r in table[1:]] == ["val_0", "val_1", "val_2"]
    rows = {(r["id"], r["method"]): r for r in map(json.loads, open(out / "results.jsonl"))}
    for r in table[
        1:
    ]:  # prediction: the text scored; verdict_chain: the chosen steps, one per line
        row = rows[r[0], "verdict"]
        assert r[-2] == row["prediction"] and "Final answer:" not in r[-2]
        assert r[-1] == "\n".join(row["trace"]["chain"]) and r[-1].endswith(
            "Final answer: " + r[-2]
        )
    assert "3DSRBench: VLMEvalKit's four settings" in (out / "summary.md").read_text()


def test_mmmu_images_in_place_and_mathvista_values(tmp_path, loopback):
    """MMMU: a two-image row whose text names <image 2> before <image 1>: every request carries the
    text up to each placeholder, then that image, with no image first. MathVista: a free-form row
    scored by its value."""
    red, blue = png("red"), png("blue")
    mmmu = tsv(
        tmp_path / "MMMU_DEV_VAL.tsv",
        ["index", "image", "question", "A", "B", "answer", "split"],
        [
            [
                "1",
                repr([b64(red), b64(blue)]),
                "Is <image 2> darker than <image 1>?",
                "yes",
                "no",
                "A",
                "dev",
            ]
        ],
    )
    math = tsv(
        tmp_path / "MathVista_MINI.tsv",
        [c for c in MATHVISTA if c != "answer_option"],
        [["7", b64(red), "What is 6 + 8?", "14", "free_form", "integer", "", "", ""]],
    )

    def answer_14(body, path):
        if role_of(body["messages"]) == "reasoner" and "6 + 8" in user_text(body):
            return 200, chat_response(["Final answer: 14.0"] * body.get("n", 1))
        content = body["messages"][1]["content"]
        if isinstance(content, list):  # the script reads one text part: join the placed pieces
            text = {
                "type": "text",
                "text": "".join(p["text"] for p in content if p["type"] == "text"),
            }
            body = {
                **body,
                "messages": [body["messages"][0], {**body["messages"][1], "content": [text]}],
            }
        return script(body, path)

    srv = loopback(answer_14)  # its judges reply in text
    flags = "--seeds 1 --rules base,verdict --max-steps 2 --judge-format text"
    assert evaluate.main(argv([mmmu, math], srv.url, tmp_path / "o", flags)) == 0
    r, b = encode_image(red), encode_image(blue)
    placed = [c for c in srv.chats if "darker" in json.dumps(c)]
    assert placed
    for c in placed:
        parts = c["messages"][1]["content"]
        kinds = [p["type"] if p["type"] == "text" else p["image_url"]["url"] for p in parts]
        assert kinds == ["text", b, "text", r, "text"]
        assert parts[0]["text"].endswith("Question: Is ") and parts[2]["text"] == " darker than "
    rows = [json.loads(line) for line in open(tmp_path / "o" / "results.jsonl")]
    math_rows = [row for row in rows if row["data"] == "MathVista_MINI"]
    assert {
        (row["method"], row["pred"], row["extracted"], row["correct"]) for row in math_rows
    } == {
        # VLMEvalKit's rule: int("14.0") fails, so the row is not prefetched (its judge would
        # be asked).
        ("base", None, "unanswered", False),
        ("verdict", None, "unanswered", False),
    }
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["columns"] == ["MMMU_DEV_VAL", "MathVista_MINI"]  # one split value: one column


def rgba(colour=(200, 30, 30, 0)) -> bytes:
    """An 8×6 RGBA PNG, fully transparent: VLMEvalKit's re-save drops the alpha (the colour shows),
    the project's own reading composites it on white."""
    buf = io.BytesIO()
    Image.new("RGBA", (8, 6), colour).save(buf, "PNG")
    return buf.getvalue()


def test_requests_carry_vlmevalkits_pixels_and_prompt_and_the_flags_the_files_own(
    tmp_path, loopback
):
    """By default an image reaches the model as dump_image leaves it (an RGBA PNG re-saved as RGB; a
    BLINK image named .jpg by image_path re-encoded as JPEG) and the text as build_prompt writes it
    ("above. \\n"); each is a quirk the summary counts. --original-images and --stripped-prompts
    send the TSV's own bytes and the stripped text, and run.json records which."""
    head = ["index", "image", "question", "A", "B", "answer", "category"]
    ms = tsv(
        tmp_path / "MMStar.tsv", head, [["1", b64(rgba()), "[MS-0] Clear?", "yes", "no", "A", "c"]]
    )
    bl_head = ["index", "image", "image_path", "question", "A", "B", "answer", "category"]
    bl = tsv(
        tmp_path / "BLINK.tsv",
        bl_head,
        [
            [
                "v1",
                repr([b64(image(1)), b64(image(2))]),
                "['v1_1.jpg', 'v1_2.jpg']",
                "[BL-0] Closer?",
                "A",
                "B",
                "A",
                "d",
            ]
        ],
    )
    want = {
        "MS-0": [encode_image(vlmeval_resave(rgba(), ".png"))],
        "BL-0": [encode_image(vlmeval_resave(image(k), ".jpg")) for k in (1, 2)],
    }
    own = {"MS-0": [encode_image(rgba())], "BL-0": [encode_image(image(k)) for k in (1, 2)]}
    assert all(want[k] != own[k] for k in want)
    flags = "--seeds 1 --rules base --max-steps 2 --judge-format text"
    for extra, images, ending in (
        ("", want, "above. \n"),
        (" --original-images --stripped-prompts", own, "above."),
    ):
        srv, out = loopback(script), tmp_path / f"out{len(extra)}"
        assert evaluate.main(argv([ms, bl], srv.url, out, flags + extra)) == 0
        for chat in srv.chats:
            text = user_text(chat)
            assert images_sent(chat) == images[re.search(r"\[([\w-]+)\]", text).group(1)]
            assert ("options above. \n\n" in text) == (ending == "above. \n")
        inputs = json.loads((out / "run.json").read_text())["settings"]["inputs"]
        assert inputs == (
            {"images": "dump_image", "prompt": "build_prompt"}
            if not extra
            else {"images": "original", "prompt": "stripped"}
        )
        summary = json.loads((out / "summary.json").read_text())
        quirk = {f: q["rows"]["base"] for f, q in summary["quirks"].items()}
        assert quirk == (
            {f: {"resaved_images": 1, "prompt_whitespace": 1} for f in ("MMStar", "BLINK")}
            if not extra
            else {}
        )
