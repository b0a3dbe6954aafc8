"""Tests for harness/benchmarks.py: loading VLMEvalKit TSVs and JSONL files (malformed rows, reused
and multi-image rows, rows without an image, image files, the prompt column), each dataset's
conventions (MMMU, MathVista, scoring), MMMU's image placement, paths kept inside the data
directory, and streaming."""

import base64
import csv
import io
import json

import os
import types

import numpy as np
import pytest
from PIL import Image

from verdict_lab.images import load as load_image
from verdict_lab.harness import answers, benchmarks, items
from verdict_lab.harness import tsv as tsv_mod


def png(color, size=(8, 6)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def tiny_tsv(tmp_path) -> tuple:
    """A VLMEvalKit-style TSV: a reused image, a multi-image row, two malformed rows, a row without
    an image. Returns (path, the image bytes red, blue, green)."""
    red, blue, green = png("red"), png("blue"), png("green")
    header = ["index", "image", "question", "hint", "A", "B", "C", "answer", "category"]
    rows = [
        [
            "10",
            b64(red),
            "What colour is the square?",
            "A plain square.",
            "red",
            "blue",
            "",
            "A",
            "colour",
        ],
        [
            "11",
            "10",
            "Is it the same square?",
            "",
            "yes",
            "no",
            "",
            "A",
            "reuse",
        ],  # reuses row 10's image
        [
            "12",
            repr([b64(blue), b64(green)]),
            "Which image is blue?",
            "",
            "first",
            "second",
            "",
            "A",
            "multi",
        ],
        ["13", b64(red), "Missing its answer", "", "x", "y", "", "", "bad"],  # malformed: no answer
        [
            "14",
            "bm90IGFuIGltYWdl" * 6,
            "Undecodable image",
            "",
            "x",
            "y",
            "",
            "B",
            "bad",
        ],  # base64 of text
        [
            "15",
            "",
            "A row without an image",
            "nan",
            "one",
            "two",
            "three",
            "C",
            "text",
        ],  # dropped, as VLMEvalKit does
    ]
    path = tmp_path / "Tiny.tsv"
    path.write_text("\n".join("\t".join(r) for r in [header] + rows) + "\n")
    return path, (red, blue, green)


# ----------------------------------------------------------------------------- loading


def test_tsv_reference_multi_image_and_malformed_rows(tmp_path):
    path, (red, blue, green) = tiny_tsv(tmp_path)
    f = benchmarks.load(str(path))
    items, skipped = f.items, f.skipped
    # Row 13 has no answer: VLMEvalKit scores it (its answer reads "nan", never right), so it is
    # an item.
    assert (
        f.name == "Tiny"
        and [it.id for it in items] == ["10", "11", "12", "13"]
        and items[3].answer == "nan"
    )
    assert (f.read, f.total, f.dropped, f.warnings, f.limited) == (6, 4, 1, [], False)
    assert (
        items[0].images == (red,) and items[1].images == (red,) and items[2].images == (blue, green)
    )
    assert items[1].images[0] is items[0].images[0] or items[1].images == (red,)
    assert dict(items[0].fields) == {
        "index": "10",
        "question": "What colour is the square?",
        "hint": "A plain square.",
        "A": "red",
        "B": "blue",
        "C": "",
        "answer": "A",
        "category": "colour",
    }
    assert items[0].question.splitlines() == [
        "Hint: A plain square.",
        "Question: What colour is the square?",
        "Options:",
        "A. red",
        "B. blue",
        # VLMEvalKit's line ends in a space, then "\n".
        "Please select the correct answer from the options above. ",
    ]
    assert items[0].question.endswith("above. \n")
    assert [(s.row, s.reason.split(" (")[0]) for s in skipped] == [
        (6, "undecodable image"),
    ]


def test_tsv_prompt_column_is_used_as_is(tmp_path):
    path = tmp_path / "CV-Bench-3D.tsv"  # by name: VLMEvalKit's CVBench reads the prompt column
    path.write_text(
        "index\tquestion\tA\tB\tanswer\tprompt\n"
        "1\tq?\tx\ty\tB\tThe whole text, as the dataset wants it.\n"
        "2\tq?\tx\ty\tA\t\n3\tq?\tx\ty\tA\t\textra cell\n"
    )
    f = benchmarks.load(str(path))
    items, skipped = f.items, f.skipped
    assert (
        items[0].question == "The whole text, as the dataset wants it." and items[0].answer == "B"
    )
    assert items[1].question.startswith("Question: q?\nOptions:\nA. x\nB. y")
    assert [(s.row, s.reason) for s in skipped] == [(4, "7 cells, the header has 6")]
    other = (
        tmp_path / "P.tsv"
    )  # any other name: the prompt column is not read (ImageMCQDataset.build_prompt)
    other.write_text(path.read_text())
    assert benchmarks.load(str(other)).items[0].question.startswith("Question: q?\nOptions:")


def test_a_jsonl_image_in_base64_jpeg_is_read_though_it_starts_with_a_slash(tmp_path):
    jpeg = encoded(Image.new("RGB", (8, 6), (200, 30, 30)), "JPEG")
    assert b64(jpeg).startswith("/9j/")  # every JPEG's base64 does: it is no absolute path
    row = {"id": 1, "question": "q", "options": {"A": "x", "B": "y"}, "answer": "A"}
    (tmp_path / "q.jsonl").write_text(json.dumps({**row, "image": b64(jpeg)}) + "\n")
    f = benchmarks.load(str(tmp_path / "q.jsonl"))
    assert not f.skipped and f.items[0].images == (jpeg,)
    (tmp_path / "p.jsonl").write_text(json.dumps({**row, "image": "/no/such/file"}) + "\n")
    (skipped,) = benchmarks.load(str(tmp_path / "p.jsonl")).skipped
    assert skipped.reason.startswith("image file not found: /no/such/file")


def test_jsonl_images_and_malformed_rows(tmp_path):
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "a.png").write_bytes(png("red"))
    lines = [
        {
            "id": 1,
            "question": "q",
            "options": {"A": "x", "B": "y"},
            "answer": "A",
            "image": "pics/a.png",
        },
        {
            "id": 2,
            "question": "q",
            "options": {"B": "y", "A": "x"},
            "answer": "B",
            "image": [b64(png("blue")), "pics/a.png"],
        },
        {"id": 3, "question": "q", "options": {"A": "x", "B": "y"}, "answer": "C"},
        {"id": 4, "question": "q", "options": ["x", "y"], "answer": "A"},
        {"id": 5, "question": "", "options": {"A": "x", "B": "y"}, "answer": "A"},
        {"id": 1, "question": "again", "options": {"A": "x", "B": "y"}, "answer": "A"},
        {
            "id": 7,
            "question": "q",
            "options": {"A": "x", "B": "y"},
            "answer": "A",
            "image": "missing.png",
        },
        {"id": 8, "question": "q", "options": {"A": "x", "B": "y"}, "answer": "A", "hint": "think"},
    ]
    text = (
        "\n".join(json.dumps(d) for d in lines[:3])
        + "\n{not json\n\n"
        + "\n".join(json.dumps(d) for d in lines[3:])
        + "\n"
    )
    (tmp_path / "set.jsonl").write_text(text)
    f = benchmarks.load(str(tmp_path / "set.jsonl"))
    items, skipped, a_png = f.items, f.skipped, str(tmp_path / "pics" / "a.png")
    assert f.name == "set" and [it.id for it in items] == ["1", "2", "8"]
    assert items[0].images == (a_png,) and items[1].images == (
        png("blue"),
        a_png,
    )  # files are sent from their path
    assert items[1].options == (("A", "x"), ("B", "y")) and items[2].question.startswith(
        "Hint: think\nQuestion: q"
    )
    reasons = {s.row: s.reason for s in skipped}
    assert sorted(reasons) == [3, 4, 6, 7, 8, 9]  # line 5 is blank
    assert (
        reasons[3] == "answer 'C' is not one of the options A, B" and reasons[4] == "not valid JSON"
    )
    assert reasons[6].startswith('"options" must be an object') and reasons[7] == "missing question"
    assert reasons[8] == "repeated id '1' (first at row 1)" and reasons[9].startswith(
        "image file not found: missing.png (looked for "
    )


# ----------------------------------------------------------------------------- paths and streaming


def test_missing_image_file_is_reported_as_missing(tmp_path):
    (tmp_path / "set.jsonl").write_text(
        json.dumps(
            {
                "id": 1,
                "question": "q",
                "options": {"A": "x", "B": "y"},
                "answer": "A",
                "image": "pics/missing.png",
            }
        )
        + "\n"
    )
    f = benchmarks.load(str(tmp_path / "set.jsonl"))
    assert f.items == [] and f.skipped[0].reason.startswith(
        "image file not found: pics/missing.png (looked for "
    )


def test_paths_outside_the_data_directory_are_refused_unless_allowed(tmp_path):
    (tmp_path / "data").mkdir()
    outside = tmp_path / "secret.png"
    outside.write_bytes(png("red"))
    lines = [
        {
            "id": 1,
            "question": "q",
            "options": {"A": "x", "B": "y"},
            "answer": "A",
            "image": str(outside),
        },
        {
            "id": 2,
            "question": "q",
            "options": {"A": "x", "B": "y"},
            "answer": "A",
            "image": "../secret.png",
        },
    ]
    path = tmp_path / "data" / "set.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in lines))
    f = benchmarks.load(str(path))
    assert f.items == [] and [s.reason.split(";")[0] for s in f.skipped] == [
        f"image path {outside} resolves to {outside} (symlinks followed), "
        f"outside {tmp_path / 'data'}, the data file's directory tree",
        f"image path ../secret.png resolves to {outside} (symlinks followed), "
        f"outside {tmp_path / 'data'}, the data file's directory tree",
    ]
    assert "--allow-any-path" in f.skipped[0].reason
    f = benchmarks.load(str(path), allow_any_path=True)
    assert [it.images for it in f.items] == [(str(outside),), (str(outside),)] and f.skipped == []


def tsv(path, header, rows) -> str:
    """A TSV as pandas writes one: tab-separated, a cell with a newline or a quote quoted."""
    with open(path, "w", newline="") as fh:
        csv.writer(fh, delimiter="\t", lineterminator="\n").writerows([header] + rows)
    return str(path)


def test_limit_keep_and_references_in_either_direction(tmp_path):
    """--limit counts valid items; keep (a shard) picks among them; an image reference
    may point to a later row."""
    red, blue = b64(png("red")), b64(png("blue"))
    path = tsv(
        tmp_path / "Refs.tsv",
        ["index", "image", "question", "A", "B", "answer"],
        [
            ["1", "3", "Uses row 3's image, further down", "x", "y", "A"],
            ["2", "1", "Refers to row 1, which holds only a reference", "x", "y", "A"],
            ["3", red, "Red", "x", "y", "B"],
            ["4", "99", "Refers to no row", "x", "y", "A"],
            ["5", blue, "Blue", "x", "y", "A"],
            ["6", "5", "Uses row 5's image", "x", "y", "A"],
        ],
    )
    f = benchmarks.load(path)
    assert [(it.id, it.images) for it in f.items] == [
        ("1", (png("red"),)),
        ("3", (png("red"),)),
        ("5", (png("blue"),)),
        ("6", (png("blue"),)),
    ]
    assert [(s.row, s.reason) for s in f.skipped] == [
        (3, "image refers to index '1', which holds no image"),
        (5, "image refers to index '99', which no row has"),
    ]
    f = benchmarks.load(path, limit=2)
    assert [it.id for it in f.items] == ["1", "3"] and (f.read, f.total, f.limited) == (3, 2, True)
    f = benchmarks.load(path, keep=lambda id: id in ("3", "6"))
    assert [it.id for it in f.items] == ["3", "6"] and f.total == 4 and len(f.skipped) == 2


def test_bom_crlf_and_quoted_cells(tmp_path):
    path = tmp_path / "Win.tsv"
    path.write_bytes('\ufeffindex\tquestion\tA\tB\tanswer\r\n1\t"Two\nlines"\tx\ty\tB\r\n'.encode())
    f = benchmarks.load(str(path))
    assert [(it.id, it.row, it.answer) for it in f.items] == [("1", 3, "B")]
    assert "Question: Two\nlines" in f.items[0].question


def test_image_path_files_are_resolved_against_the_tsv(tmp_path):
    """A *_local.tsv: paths relative to the TSV's directory, or to images/<name>/ beside it
    (VLMEvalKit's layout)."""
    (tmp_path / "pics").mkdir()
    (tmp_path / "images" / "MMStar").mkdir(parents=True)
    (tmp_path / "pics" / "a.png").write_bytes(png("red"))
    (tmp_path / "images" / "MMStar" / "b.png").write_bytes(png("blue"))
    (tmp_path / "pics" / "broken.png").write_bytes(png("red")[:40])
    path = tsv(
        tmp_path / "MMStar_local.tsv",
        ["index", "image_path", "question", "A", "B", "answer"],
        [
            ["1", "pics/a.png", "q1", "x", "y", "A"],
            ["2", "b.png", "q2", "x", "y", "A"],
            ["3", repr(["pics/a.png", "b.png"]), "q3", "x", "y", "A"],
            ["4", "pics/missing.png", "q4", "x", "y", "A"],
            ["5", "pics/broken.png", "q5", "x", "y", "A"],
            ["6", "", "q6", "x", "y", "A"],
        ],
    )
    f = benchmarks.load(path)
    a, b = str(tmp_path / "pics" / "a.png"), str(tmp_path / "images" / "MMStar" / "b.png")
    assert [(it.id, it.images) for it in f.items] == [("1", (a,)), ("2", (b,)), ("3", (a, b))]
    assert [s.reason.split(":")[0] for s in f.skipped] == [
        "image file not found",
        "cannot decode image " + str(tmp_path / "pics" / "broken.png"),
        "empty image_path",
    ]
    assert f.warnings == [] and dict(f.items[0].fields)["image_path"] == "pics/a.png"


def test_a_file_with_neither_image_column_runs_as_text_with_a_warning(tmp_path):
    f = benchmarks.load(
        tsv(
            tmp_path / "Text.tsv",
            ["index", "question", "A", "B", "answer"],
            [["1", "q", "x", "y", "A"]],
        )
    )
    assert [it.images for it in f.items] == [()]
    assert f.warnings == [
        "Text.tsv has neither an image nor an image_path column: its questions run without images"
    ]


def test_empty_and_headerless_files(tmp_path):
    (tmp_path / "E.tsv").write_text("")
    with pytest.raises(ValueError, match="E.tsv: empty file"):
        benchmarks.load(str(tmp_path / "E.tsv"))
    (tmp_path / "N.tsv").write_text("index\tA\tB\n")
    with pytest.raises(ValueError, match="no question or prompt column"):
        benchmarks.load(str(tmp_path / "N.tsv"))
    (tmp_path / "U.tsv").write_bytes(b"ind\xffex\tquestion\n")
    with pytest.raises(ValueError, match="U.tsv line 1: the header is not valid UTF-8"):
        benchmarks.load(str(tmp_path / "U.tsv"))


def test_mmmu_open_questions_and_placeholders(tmp_path):
    """An open question (no options) is kept as VLMEvalKit scores it: A = the answer text, B =
    "Other Answers", answer A, and the prompt has no Options block. A text naming <image 3> of a row
    with two images is skipped."""
    two = repr([b64(png("red")), b64(png("blue"))])
    path = tsv(
        tmp_path / "MMMU_DEV_VAL.tsv",
        ["index", "image", "question", "A", "B", "answer", "split"],
        [
            ["1", two, "Compare <image 2> with <image 1>.", "same", "different", "B", "dev"],
            ["2", two, "What is the area of <image 1>?", "", "", "42", "validation"],
            ["3", two, "Look at <image 3>.", "x", "y", "A", "dev"],
        ],
    )
    f = benchmarks.load(path)
    mc, open_ = f.items
    assert mc.options == (("A", "same"), ("B", "different")) and mc.answer == "B"
    assert mc.question.startswith(
        "Question: Compare <image 2> with <image 1>."
    )  # images.messages places them
    assert open_.options == (("A", "42"), ("B", "Other Answers")) and open_.answer == "A"
    assert open_.question == "Question: What is the area of <image 1>?\n"
    assert f.skipped[0].reason == "the text names <image 3> but the row has 2 image(s)"
    plain = benchmarks.load(
        tsv(
            tmp_path / "Other.tsv",
            ["index", "question", "A", "B", "answer"],
            [["1", "q", "", "", "42"]],
        )
    )
    # another name: scored as VLMEvalKit scores it (no options, so never right), not skipped
    assert plain.skipped == [] and (plain.items[0].options, plain.items[0].answer) == ((), "42")


MATHVISTA = (
    "index image question answer question_type answer_type choices answer_option precision unit"
).split()


def test_mathvista_rows(tmp_path):
    red = b64(png("red"))
    path = tsv(
        tmp_path / "MathVista_MINI.tsv",
        MATHVISTA,
        [
            [
                "1",
                red,
                "Hint: ...\nQuestion: Which?\nChoices:\n(A) 3\n(B) 4",
                "4",
                "multi_choice",
                "text",
                "['3', '4']",
                "B",
                "",
                "",
            ],
            ["2", red, "How long is AB?", "7.1", "free_form", "float", "", "", "1.0", "cm"],
            ["3", red, "How many?", "14", "free_form", "integer", "", "", "", ""],
            ["4", red, "Which?", "5", "multi_choice", "text", "['3', '5']", "", "", ""],
            ["5", red, "Which?", "5", "multi_choice", "text", "not a list", "", "", ""],
        ],
    )
    f = benchmarks.load(path)
    mc, fl, integer, by_text = f.items
    assert mc.options == (("A", "3"), ("B", "4")) and mc.answer == "B" and mc.value is None
    assert (
        mc.question == "Hint: ...\nQuestion: Which?\nChoices:\n(A) 3\n(B) 4"
    )  # the question cell, as is
    assert (
        fl.value == answers.Value("float", 1, "cm", "float")
        and fl.answer == "7.1"
        and fl.options == ()
    )
    assert integer.value == answers.Value("integer", None, "", "float")
    assert (
        by_text.answer == "nan"
    )  # VLMEvalKit reads answer_option alone: a missing one is never right
    assert f.skipped[0].reason.startswith("choices must be a list literal")


def test_a_mathvista_precision_of_no_decimals_is_kept(tmp_path):
    row = ["1", b64(png("red")), "How long is AB?", "7", "free_form", "float", "", "", "0", "cm"]
    f = benchmarks.load(tsv(tmp_path / "MathVista_MINI.tsv", MATHVISTA, [row]))
    assert f.skipped == [] and f.items[0].value == answers.Value("float", 0, "cm", "int")


@pytest.mark.parametrize(
    "name, columns, splits, macro",
    [  # CVBench.evaluate: report_accuracy (per source, Overall their mean) when every split is "2D"
        ("CV-Bench-2D", ["index", "source", "split"], {"2D"}, "source"),
        (
            "CV-Bench-3D",
            ["index", "source", "split"],
            {"2D"},
            "source",
        ),  # by the test, not the name
        ("CV-Bench-2D", ["index", "source", "split"], {"2D", "3D"}, None),
        ("CV-Bench-2D", ["index", "split"], {"2D"}, None),  # no source column: report_acc
        ("MMStar", ["index", "source", "split"], {"2D"}, None),  # not CVBench
    ],
)
def test_cv_bench_is_averaged_over_sources_when_every_split_is_2d(name, columns, splits, macro):
    assert benchmarks.scoring(name, columns, splits)["macro"] == macro


@pytest.mark.parametrize(
    "name, columns, expected",
    [
        ("3DSRBench", ["index", "qid"], {"setting": "3dsr", "macro": None}),
        ("3DSRBench", ["index"], {"setting": "vanilla", "macro": None}),
        ("MMBench_DEV_EN", ["index"], {"setting": "circular", "macro": None}),
        ("BLINK_circular", ["index"], {"setting": "circular", "macro": None}),
        (
            "mine",
            ["index", "g_index"],
            {"setting": "vanilla", "macro": None},
        ),  # circular only by name
        ("BLINK", ["index", "category"], {"setting": "vanilla", "macro": None}),
        (
            "CV-Bench-2D",
            ["index", "source"],
            {"setting": "vanilla", "macro": None},
        ),  # no split: report_acc
        ("CV-Bench-3D", ["index", "source"], {"setting": "vanilla", "macro": None}),
    ],
)
def test_scoring_by_dataset(name, columns, expected):
    expected = {**expected, "kind": benchmarks.kind(name)}
    assert benchmarks.scoring(name, columns) == expected


def test_pandas_cells_duplicate_columns_swallowed_rows_deep_json_and_symlinks(tmp_path):
    """Duplicate columns, swallowed rows, deep JSON, symlinks and pandas' cell rules (values checked
    with pandas 3.1.1)."""
    from verdict_lab.harness.cells import Column, mangle, shown

    def dtype(cells):
        c = Column()
        for x in cells:
            c.note(x)
        return c.dtype

    assert [
        dtype(x)
        for x in (["1", ""], ["01", " 2"], ["true", "False"], ["True", "None"], ["1 ", "x"])
    ] == [
        "float",
        "int",
        "bool",
        "object-bool",
        "object",
    ]
    assert (
        shown("1", "float"),
        shown("01", "int"),
        shown("true", "bool"),
        shown("NA", "object"),
    ) == (
        "1.0",
        "1",
        "True",
        None,
    )
    assert mangle(["A", "A", "B", "A.1"]) == ["A", "A.2", "B", "A.1"]  # pandas' names
    dup = tmp_path / "Dup.tsv"  # fault 19: the second A is "A.1", no option
    dup.write_text("index\tquestion\tA\tA\tB\tanswer\n1\tq\tx\ty\tz\tB\n")
    f = benchmarks.load(str(dup))
    assert f.items[0].options == (("A", "x"), ("B", "z")) and "read as 'A.1'" in f.warnings[0]
    quote = tmp_path / "Q.tsv"  # fault 10: an unclosed quote swallows rows: warned
    quote.write_text(
        'index\tquestion\tA\tB\tanswer\n1\t"q\tx\ty\tA\n2\tq\tx\ty\tA\n3\tq"\tx\ty\tA\n'
    )
    assert any("look like rows" in w for w in benchmarks.load(str(quote)).warnings)
    deep = tmp_path / "deep.jsonl"  # fault 17: one clear error for that line
    deep.write_text("[" * 100_000 + "\n")
    assert (
        benchmarks.load(str(deep)).skipped[0].reason
        == "not valid JSON here: nested too deep to read"
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "secret.png").write_bytes(png("red"))
    os.symlink(
        tmp_path / "secret.png", tmp_path / "data" / "in.png"
    )  # fault 18: a link that leaves
    with pytest.raises(ValueError, match="symlinks followed"):
        benchmarks.image_file(str(tmp_path / "data"), "in.png")
    (tmp_path / "data" / "images" / "X").mkdir(
        parents=True
    )  # LOCALIZE's absolute path inside the tree
    (tmp_path / "data" / "images" / "X" / "1.png").write_bytes(png("red"))
    inside = str(tmp_path / "data" / "images" / "X" / "1.png")
    assert benchmarks.image_file(str(tmp_path / "data"), inside) == inside


def test_cell_types_at_int64s_edges_and_pandas_bools():
    from verdict_lab.harness.cells import Column, shown

    def dtype(*cells):
        c = Column()
        for x in cells:
            c.note(x)
        return c.dtype

    # int64 holds -2**63 .. 2**63 - 1, and pandas reads up to 2**64 - 1 as uint64; 2**64 is text.
    assert dtype(str(-(2**63))) == "int" and dtype(str(2**64 - 1)) == "int"
    assert dtype(str(-(2**63) - 1)) == "object" and dtype(str(2**64)) == "object"
    assert dtype("1", "") == "float" and dtype("", "nan") == "float" and dtype() == "float"
    # a bool column with a missing cell holds Python bools as objects: "true" prints as "True"
    assert shown("true", "object-bool") == "True" and shown("FALSE", "bool") == "False"


def test_jsonl_rows_in_full(tmp_path):
    """Every part of a JSONL item: id (the line when absent), options (strip, drop empty and null),
    fields (scalars, then the options; null as ""), images (data URL, bytes of a file by name),
    hint."""
    (tmp_path / "pic").write_bytes(png("red"))  # a file name without a "."
    url = "data:image/png;base64," + b64(png("blue"))
    rows = [
        {
            "question": "q",
            "options": {"B": " y ", "A": "x", "C": " ", "D": None},
            "answer": "B",
            "image": url,
            "hint": " h ",
            "note": None,
            "n": 3,
            "meta": {"k": 1},
        },
        {
            "id": "b",
            "question": "q2",
            "options": {"A": "x", "B": "y"},
            "answer": "A",
            "image": "pic",
        },
        {"id": "c", "question": "q3", "options": {"A": "x", "B": "y"}, "answer": "A", "image": ""},
    ]
    (tmp_path / "set.jsonl").write_bytes(
        b"\xef\xbb\xbf" + "\n".join(json.dumps(d) for d in rows).encode() + b"\n"
    )
    f = benchmarks.load(str(tmp_path / "set.jsonl"))
    assert f.skipped == [] and [(it.id, it.row, it.data) for it in f.items] == [
        ("1", 1, "set"),
        ("b", 2, "set"),
        ("c", 3, "set"),
    ]
    a, b, c = f.items
    assert a.options == (("A", "x"), ("B", "y")) and a.images == (png("blue"),)
    assert a.question == "Hint: h\nQuestion: q\nOptions:\nA. x\nB. y\n" + (
        "Please select the correct answer from the options above. \n"
    )
    assert a.fields == (
        ("question", "q"),
        ("answer", "B"),
        ("hint", " h "),
        ("note", ""),
        ("n", "3"),
        ("A", "x"),
        ("B", "y"),
    )
    assert (
        b.images == (str(tmp_path / "pic"),)
        and c.images == ()
        and c.question.startswith("Question: q3")
    )


def test_jsonl_malformed_lines_and_images_say_why(tmp_path):
    (
        tmp_path / "XXXX"
    ).mkdir()  # `also` defaults to none: a file of the same name elsewhere is not taken
    (tmp_path / "XXXX" / "p.png").write_bytes(png("red"))
    ok = {"question": "q", "options": {"A": "x", "B": "y"}, "answer": "A"}
    lines = [b"[1]", json.dumps({**ok, "options": {"a": "x", "B": "y"}}).encode()]
    lines += [
        json.dumps({**ok, "image": 5}).encode(),
        json.dumps(ok).encode()[:-1] + b', "n": "\xff"}',
    ]
    lines += [json.dumps({**ok, "image": "p.png"}).encode()]
    (tmp_path / "bad.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    f = benchmarks.load(str(tmp_path / "bad.jsonl"))
    letters = '"options" must be an object with letter keys, like {"A": "..."}'
    assert [(s.row, s.reason) for s in f.skipped] == [
        (1, NO_OBJECT.format("array")),
        (2, letters),
        (3, "an image must be a path or base64 string, got 5"),
        (4, "not valid UTF-8 (byte 0xff)"),
        (5, f"image file not found: p.png (looked for {tmp_path / 'p.png'})"),
    ]


NO_OBJECT = (
    'a JSON {}, where each line must be one JSON object: {{"question": ..., "options": '
    '{{"A": ..., "B": ...}}, "answer": ...}}'
)


@pytest.mark.parametrize(
    "line, kind",
    [('["q", {"A": "x"}, "A"]', "array"), ("7", "number"), ('"q"', "string"), ("null", "null")],
)
def test_a_jsonl_line_that_is_no_object_is_named_as_such(tmp_path, line, kind):
    ok = {"id": "q1", "question": "q", "options": {"A": "x", "B": "y"}, "answer": "A"}
    (tmp_path / "bad.jsonl").write_text(f"{line}\n{json.dumps(ok)}\n")
    f = benchmarks.load(str(tmp_path / "bad.jsonl"))
    assert [it.id for it in f.items] == ["q1"]
    assert [(s.file, s.row, s.reason) for s in f.skipped] == [
        ("bad.jsonl", 1, NO_OBJECT.format(kind))
    ]


def test_a_jsonl_image_of_64_characters_is_a_missing_file_and_a_longer_one_is_bad_base64(tmp_path):
    ok = {"question": "q", "options": {"A": "x", "B": "y"}, "answer": "A"}
    (tmp_path / "q.jsonl").write_text(
        "".join(json.dumps({**ok, "image": "a" * n}) + "\n" for n in (64, 65))
    )
    name, undecodable = benchmarks.load(str(tmp_path / "q.jsonl")).skipped
    assert name.reason.startswith(
        f"image file not found: {'a' * 64} (looked for {tmp_path / ('a' * 64)}; nor is it base64: "
        "undecodable image (64 chars: "
    )
    assert undecodable.reason.startswith("undecodable image (65 chars: ")


def test_decode_image_and_image_file(tmp_path):
    from verdict_lab.harness.items import decode_image, image_file

    data = png("red")
    assert decode_image(data) == data and decode_image("data:image/png;base64," + b64(data)) == data
    for bad in ("*" + b64(data), "data:x,a," + b64(data), "data:abc"):  # validated; one comma
        with pytest.raises(ValueError, match="undecodable image"):
            decode_image(bad)
    with pytest.raises(ValueError, match=r"^undecodable image \(4 bytes: "):
        decode_image(b"\x00\x01\x02\x03")
    with pytest.raises(ValueError, match=r"^undecodable image \(4 chars: "):
        decode_image("AAAA")
    (tmp_path / "images" / "S").mkdir(parents=True)
    for p in (tmp_path / "p.png", tmp_path / "images" / "S" / "p.png"):
        p.write_bytes(data)
    # the TSV's directory first; images/<name>/ only for a file not found there
    assert image_file(str(tmp_path), "p.png", also="images/S") == str(tmp_path / "p.png")


def test_tsv_warnings_and_reasons_word_for_word(tmp_path):
    from verdict_lab.harness import tsv as tsv_module

    # Lines after the first of a quoted cell that hold a tab: "b\tc" and "d\te\tf", not "no tab".
    assert tsv_module.swallowed(["a\nb\tc\nno tab\nd\te\tf", "x"]) == 2
    t = tmp_path / "T.tsv"
    t.write_text(
        "\ufeffindex\tquestion\tA\tA\tB\tanswer\tn\tn\n1\tq\tx\ty\tz\tB\t1\t2\n", encoding="utf-8"
    )
    f = benchmarks.load(str(t))
    repeat = (
        "T.tsv: column {} repeats the name {!r}; as pandas does for VLMEvalKit, it is read as {!r}"
    )
    assert f.warnings == [
        repeat.format(4, "A", "A.1") + ", which is no option",
        repeat.format(8, "n", "n.1"),
        "T.tsv has neither an image nor an image_path column: its questions run without images",
    ]
    assert f.items[0].fields[0] == ("index", "1") and f.items[0].id == "1"
    with pytest.raises(
        ValueError, match=r"no question or prompt column \(columns: index, answer\)$"
    ):
        (tmp_path / "N.tsv").write_text("index\tanswer\n1\tA\n")
        benchmarks.load(str(tmp_path / "N.tsv"))
    p = tmp_path / "CV-Bench-3D.tsv"  # a prompt column alone is enough
    p.write_text("index\tprompt\tA\tB\tanswer\n1\tthe whole text\tx\ty\tA\n")
    assert benchmarks.load(str(p)).items[0].question == "the whole text"


def test_mathvista_missing_cells_and_bad_choices(tmp_path):
    head = (
        "index\tquestion\tanswer\tquestion_type\tanswer_type\tprecision\tunit\tchoices\t"
        "answer_option\n"
    )
    rows = [
        "1\t\t\tfree_form\t\t\t\t\t",  # question and answer missing: "nan", as str() of pandas' NaN
        "2\tq\t1\tfree_form\tfloat\tx\t\t\t",
        "3\tq\t\tmulti_choice\t\t\t\t\t",
        "4\tq\t\tmulti_choice\t\t\t\t" + repr([str(i) for i in range(27)]) + "\tA",
        "5\tq\t\tmulti_choice\t\t\t\t" + repr([str(i) for i in range(26)]) + "\tZ",
        "6\t\t\tmulti_choice\t\t\t\t['a', 'b']\t",
    ]
    path = tmp_path / "MathVista_MINI.tsv"
    path.write_text(head + "\n".join(rows) + "\n")
    f = benchmarks.load(str(path))
    one, five, six = f.items
    assert (one.question, one.answer, one.options) == ("nan", "nan", ())
    assert (one.value.answer_type, one.value.unit, one.value.dtype) == ("text", "", "float")
    assert five.options[-1] == ("Z", "25") and five.answer == "Z"
    assert (six.question, six.options, six.answer) == ("nan", (("A", "a"), ("B", "b")), "nan")
    many = repr([str(i) for i in range(27)])[:40]
    assert [(s.row, s.reason) for s in f.skipped] == [
        (3, "precision 'x' is not a number (of decimals, finite)"),
        (4, "choices must be a list literal of at most 26 options, got ''"),
        (5, f"choices must be a list literal of at most 26 options, got {many!r}"),
    ]


def encoded(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def test_an_image_path_pillow_reads_but_cannot_write_is_that_rows_error(tmp_path):
    # .psd, .fits, .xpm, .cur, .pcd: pillow reads them but cannot write them, as dump_image must.
    png = encoded(Image.new("RGB", (4, 3), (10, 20, 30)), "PNG")
    for ext in (".psd", ".xpm", ".cur"):
        with pytest.raises(ValueError) as info:
            items.vlmeval_resave(png, ext)
        fmt = Image.registered_extensions()[ext]
        assert f"as {ext} (pillow reads {fmt} files but cannot write them)" in str(info.value)
    head = ["index", "image", "image_path", "question", "A", "B", "answer"]
    rows = [
        ["1", b64(png), "1.psd", "q", "x", "y", "A"],
        ["2", b64(png), "2.png", "q", "x", "y", "A"],
    ]
    f = benchmarks.load(tsv(tmp_path / "BLINK.tsv", head, rows))
    assert [s.row for s in f.skipped] == [2] and [it.id for it in f.items] == ["2"]
    assert "cannot write them" in f.skipped[0].reason


def test_images_reach_the_model_as_vlmevalkits_dump_image_leaves_them(tmp_path):
    """dump_image's names decide the format (<index>.png; image_path's names, cut to them); a
    re-save that changes no pixel a request carries keeps the file's own bytes; one VLMEvalKit
    cannot write (CMYK as PNG, a name without an extension) is that row's error, as it fails
    VLMEvalKit's run; --original-images keeps every image as it is."""
    assert tsv_mod.dump_names(1, None) == [".png"] and tsv_mod.dump_names(2, None) == [".png"] * 2
    assert tsv_mod.dump_names(3, "['a.jpg', 'b.PNG']") == [
        ".jpg",
        ".PNG",
    ]  # the third image is dropped
    for n, cell, says in (
        (2, "a.jpg", "1 file"),
        (1, "['a.jpg', 'b.jpg']", "2 file"),
        (1, "", "empty"),
    ):
        with pytest.raises(ValueError, match=says):
            tsv_mod.dump_names(n, cell)
    noise = np.random.default_rng(0).integers(
        0, 256, (6, 8, 3), dtype=np.uint8
    )  # flat colours survive JPEG
    rgb = Image.fromarray(noise, "RGB")
    plain, jpeg = encoded(rgb, "PNG"), encoded(rgb, "JPEG", quality=95)
    assert items.dumped(jpeg, ".png") == (
        jpeg,
        False,
    )  # as PNG: the same pixels, so the file's own bytes
    clear = encoded(Image.new("RGBA", (8, 6), (200, 0, 0, 0)), "PNG")
    sent, changed = items.dumped(clear, ".png")
    assert (
        changed
        and sent == items.vlmeval_resave(clear, ".png")
        and Image.open(io.BytesIO(sent)).mode == "RGB"
    )
    assert items.dumped(jpeg, ".jpg") == (
        items.vlmeval_resave(jpeg, ".jpg"),
        True,
    )  # quality 75: new pixels
    cmyk = encoded(Image.new("CMYK", (8, 6), (0, 50, 100, 0)), "JPEG")
    head = ["index", "image", "image_path", "question", "A", "B", "answer"]
    three = repr([b64(plain), b64(jpeg), b64(clear)])
    rows = [
        ["1", b64(cmyk), "1.png", "q", "x", "y", "A"],
        ["2", three, "['2_1.jpg', '2_2.png']", "q", "x", "y", "A"],
    ]
    rows += [
        ["3", b64(plain), "", "q", "x", "y", "A"],
        ["4", b64(plain), "noext", "q", "x", "y", "A"],
    ]
    f = benchmarks.load(tsv(tmp_path / "BLINK.tsv", head, rows))
    tail = "so its run of this file fails; --original-images sends the file's own bytes"
    assert [(s.row, s.reason) for s in f.skipped] == [
        (
            2,
            "VLMEvalKit's dump_image cannot write this image as .png "
            "(cannot write mode CMYK as PNG), " + tail,
        ),
        (4, "image_path is empty, which VLMEvalKit's toliststr cannot read (its run fails)"),
        (
            5,
            "VLMEvalKit's dump_image cannot write this image as a name without extension "
            f"(unknown file extension ''), {tail}",
        ),
    ]
    [two] = f.items
    assert two.images == (
        items.vlmeval_resave(plain, ".jpg"),
        jpeg,
    )  # JPEG'd; PNG'd (unchanged); dropped
    assert f.reading()["as_vlmevalkit"] == {
        "images": "dump_image",
        "prompt": "build_prompt",
        "resaved": ["2"],
    }
    own = benchmarks.load(str(tmp_path / "BLINK.tsv"), inputs=items.Inputs(original_images=True))
    assert [it.images for it in own.items] == [(cmyk,), (plain, jpeg, clear), (plain,), (plain,)]
    assert not own.skipped


def test_an_image_known_to_survive_the_re_save_is_not_re_saved(monkeypatch):
    """A PNG of an RGB, L or 1 image, without transparency or an EXIF rotation, keeps its pixels
    through dump_image's PNG: dumped neither re-saves nor decodes it again (given its image). Any
    other is re-saved and compared."""
    calls = []
    resave = items.vlmeval_resave
    monkeypatch.setattr(items, "vlmeval_resave", lambda d, e: calls.append(e) or resave(d, e))
    noise = np.random.default_rng(1).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    kept = [encoded(Image.fromarray(noise, "RGB"), "PNG")]
    kept += [
        encoded(Image.fromarray(noise[..., 0], "L"), "PNG"),
        encoded(Image.fromarray(noise[..., 0]).convert("1"), "PNG"),
    ]
    for data in kept:
        image = load_image(data)
        monkeypatch.setattr(items, "load_image", lambda *a: pytest.fail("decoded again"))
        assert items.dumped(data, ".png", image) == (data, False) and calls == []
        monkeypatch.setattr(items, "load_image", load_image)
        assert (
            items.dumped(data, ".PNG") == (data, False) and calls == []
        )  # dump_image's save lowers it too
    ex = Image.Exif()
    ex[0x0112] = 1  # an orientation that rotates nothing: the cheap path still holds
    upright = encoded(Image.fromarray(noise, "RGB"), "JPEG", exif=ex.tobytes())
    assert items.dumped(upright, ".png") == (upright, False) and calls == []
    ex[0x0112] = 6  # rotated by the original's tag, not by the PNG's: other pixels
    turned = encoded(Image.fromarray(noise, "RGB"), "JPEG", exif=ex.tobytes())
    keyed = encoded(
        Image.fromarray(noise, "RGB"), "PNG", transparency=tuple(int(v) for v in noise[0, 0])
    )
    assert items.dumped(turned, ".png")[1] and calls == [".png"]
    assert (
        items.dumped(keyed, ".png") == (keyed, False) and calls == [".png"] * 2
    )  # the key survives
    assert items.Inputs.of_args(object()) == items.Inputs()
    for a, b in ((True, False), (False, True)):
        flags = types.SimpleNamespace(original_images=a, stripped_prompts=b)
        assert items.Inputs.of_args(flags) == items.Inputs(a, b)


def test_a_jsonl_prompt_is_vlmevalkits_unless_stripped(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(
        json.dumps({"question": " q ", "options": {"A": "x", "B": "y"}, "answer": "A"}) + "\n"
    )
    [it] = benchmarks.load(str(path)).items
    assert it.question.endswith("\nPlease select the correct answer from the options above. \n")
    [it] = benchmarks.load(str(path), inputs=items.Inputs(stripped_prompt=True)).items
    assert it.question == (
        "Question: q\nOptions:\nA. x\nB. y\n"
        "Please select the correct answer from the options above."
    )


def test_a_file_with_no_valid_row_loads_empty_whatever_its_name(tmp_path):
    # 3DSRBench's scoring looks for a "qid" column among the valid rows' fields: with no valid row
    # there are none, and the file loads empty rather than failing.
    path = tmp_path / "3DSRBench.tsv"
    path.write_text("index\timage\tquestion\tA\tB\tanswer\tcategory\n")
    loaded = benchmarks.load(str(path))
    assert (loaded.items, loaded.total, loaded.read) == ([], 0, 0)
    assert loaded.scoring["setting"] == "vanilla"
