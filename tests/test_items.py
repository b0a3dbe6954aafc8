"""Tests for the reading of benchmark files into items, at their edges (harness/tsv.py, cells.py,
benchmarks.py, items.py): the boundaries of image references, the rows pandas fills with missing
values, the dtypes under --limit, ids by line, every reason and warning word for word. Each expected
value is derived in a comment from VLMEvalKit's rule the code follows (see the module
docstrings)."""

import base64
import csv
import io
import json
from collections import defaultdict

import pytest
from PIL import Image

from verdict_lab.harness import benchmarks, tsv
from verdict_lab.harness.answers import Value
from verdict_lab.harness.cells import mangle
from verdict_lab.harness.items import Inputs, build_question, decode_image, make_item


def png(color) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), color).save(buf, "PNG")
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write(path, header, rows) -> str:
    """A TSV as pandas writes one (rows may be short: pandas reads the missing cells as NaN)."""
    with open(path, "w", newline="") as fh:
        csv.writer(fh, delimiter="\t", lineterminator="\n").writerows([header] + rows)
    return str(path)


def reasons(f) -> list:
    return [(s.file, s.row, s.reason) for s in f.skipped]


def test_kind_by_name():
    # build_dataset's order: MathVista, then MMMU anywhere in the name, then a name starting
    # with CV-Bench.
    names = [
        "MathVista_MINI",
        "MMMU_DEV_VAL",
        "CV-Bench-2D",
        "MathVista_MMMU",
        "CV-Bench-MMMU",
        "X_CV-Bench",
    ]
    assert [tsv.kind(n) for n in names] == [
        "mathvista",
        "mmmu",
        "cvbench",
        "mathvista",
        "mmmu",
        "mcq",
    ]
    assert benchmarks.scoring("MMStar", ["index"]) == {
        "setting": "vanilla",
        "macro": None,
        "kind": "mcq",
    }


def test_ids_and_cells_of_short_rows_and_a_file_without_an_index_column(tmp_path):
    # "index" last: a short row (row 3 ends after n) has no index cell, so its id is its line,
    # as is an NA one's.
    path = write(
        tmp_path / "S.tsv",
        ["question", "A", "B", "answer", "n", "index"],
        [
            ["q1", "x", "y", "A", "1", "7"],
            ["q2", "x", "y", "B", ""],
            ["q3", "x", "y", "A", "2", "nan"],
        ],
    )
    f = benchmarks.load(path)
    assert [(it.id, it.row, it.answer) for it in f.items] == [
        ("7", 2, "A"),
        ("3", 3, "B"),
        ("4", 4, "A"),
    ]
    # The short row's n and index are missing: "" in the fields; n holds a NaN, so it is float64
    # ("1" -> "1.0").
    assert dict(f.items[1].fields) == {
        "question": "q2",
        "A": "x",
        "B": "y",
        "answer": "B",
        "n": "",
        "index": "",
    }
    assert f.scoring["dtypes"] == {
        "question": "object",
        "A": "object",
        "B": "object",
        "answer": "object",
    } | {
        "n": "float",
        "index": "float",
    }
    # no answer cell at all: pandas' NaN, printed "nan", which no reply matches
    short = write(
        tmp_path / "T.tsv", ["index", "question", "A", "B", "answer"], [["1", "", "x", "y"]]
    )
    it = benchmarks.load(short).items[0]
    assert (it.answer, it.question.splitlines()[0]) == ("nan", "Question: nan")
    # no index column at all (and no image column): every id is its line
    none = write(tmp_path / "N.tsv", ["question", "A", "B", "answer"], [["q", "x", "y", "A"]] * 2)
    assert [it.id for it in benchmarks.load(none).items] == ["2", "3"]


def test_image_references_at_64_and_65_characters(tmp_path):
    """VLMEvalKit: an image cell of 64 characters or fewer is the index of the row whose image it
    reuses."""
    red = b64(png("red"))
    i64 = "i" * 64  # 64 characters that are also valid base64 (of no image)
    path = write(
        tmp_path / "R.tsv",
        ["index", "image", "question", "A", "B", "answer"],
        [
            [i64, red, "holds the image", "x", "y", "A"],
            ["2", i64, "reuses it: a 64-character reference", "x", "y", "A"],
            ["3", "A" * 65, "65 characters: base64, which does not decode", "x", "y", "A"],
            ["4", "j" * 64, "a reference to no row", "x", "y", "A"],
            ["5", "4", "row 4's cell has 64 characters: a reference, no image", "x", "y", "A"],
            ["6", "3", "row 3's cell has 65: base64, decoded here", "x", "y", "A"],
        ],
    )
    f = benchmarks.load(path)
    assert [(it.id, it.images) for it in f.items] == [(i64, (png("red"),)), ("2", (png("red"),))]
    got = [(row, reason.split(":")[0]) for _, row, reason in reasons(f)]
    assert got == [
        (4, "undecodable image (65 chars"),
        (5, f"image refers to index {'j' * 64!r}, which no row has"),
        (6, "image refers to index '4', which holds no image"),
        (7, "undecodable image (65 chars"),
    ]


def test_images_held_once_for_kept_rows_and_scanned_only_as_far_as_needed(tmp_path):
    red, blue = b64(png("red")), b64(png("blue"))
    rows = [[str(i), im, "q", "x", "y", "A"] for i, im in enumerate([red, "4", "1", blue, "1"], 1)]
    path = write(tmp_path / "H.tsv", ["index", "image", "question", "A", "B", "answer"], rows)
    images = tsv._TsvImages(path, ["index", "image"], "H", False, Inputs())
    with open(path, "rb") as fh:
        records = list(tsv._records(fh))[1:]
    for k in (0, 1):
        images.note(records[k][3][0], records[k][1], records[k][2])
    assert images.of_cell("4", True, "2") == (png("blue"),)
    assert sorted(images.at) == ["1", "2", "3", "4"]  # the scan ahead stopped at row 4
    assert images.held == {"4": ((png("blue"), None),)}  # a kept row's reference is held, as bytes
    assert images.of_cell("1", False, "3") == (png("red"),)
    assert images.of_cell(red, True, "1") == (png("red"),)
    assert list(images.held) == [
        "4"
    ]  # not for a row that is not kept, nor for an image given in full
    images.close()
    # through load: rows 3 and 5, both kept, share row 1's decoded image; row 1 holds its own
    f = benchmarks.load(path, keep=lambda id: id in ("3", "5"))
    three, five = f.items
    assert three.images == (png("red"),) and three.images[0] is five.images[0]


def test_image_path_beside_the_tsv_and_outside_it(tmp_path):
    (tmp_path / "images" / "AI2D_TEST").mkdir(parents=True)
    (tmp_path / "images" / "AI2D_TEST" / "a.png").write_bytes(png("red"))
    (tmp_path / "images" / "MMStar").mkdir(parents=True)
    (tmp_path / "images" / "MMStar" / "b.png").write_bytes(png("blue"))
    (tmp_path / "data").mkdir()
    (tmp_path / "out.png").write_bytes(png("green"))
    head = ["index", "image_path", "question", "A", "B", "answer"]
    # images/<name>/ with name the file's name less "_local" (AI2D_TEST_local[:6] would be "AI2D_T")
    local = write(tmp_path / "AI2D_TEST_local.tsv", head, [["1", "a.png", "q", "x", "y", "A"]])
    assert benchmarks.load(local).items[0].images == (
        str(tmp_path / "images" / "AI2D_TEST" / "a.png"),
    )
    plain = write(
        tmp_path / "MMStar.tsv", head, [["1", "b.png", "q", "x", "y", "A"]]
    )  # the name as is
    f = benchmarks.load(plain)
    assert f.items[0].images == (str(tmp_path / "images" / "MMStar" / "b.png"),)
    assert "image_path" not in f.scoring["dtypes"] and "index" in f.scoring["dtypes"]
    out = write(tmp_path / "data" / "O.tsv", head, [["1", "../out.png", "q", "x", "y", "A"]])
    assert benchmarks.load(out).skipped[0].reason.startswith("image path ../out.png resolves to ")
    assert benchmarks.load(out, allow_any_path=True).items[0].images == (str(tmp_path / "out.png"),)


def test_list_cells():
    # VLMEvalKit's toliststr: only a cell that starts with "[" and ends with "]" is a list literal
    assert (
        tsv._list_cell("a]") == ["a]"]
        and tsv._list_cell("[a") == ["[a"]
        and tsv._list_cell("[]") == []
    )
    assert tsv._list_cell("['a', 'b']") == ["a", "b"]
    for bad in ("[not a list]", "[1, 2]", "['a'], ['b']"):
        with pytest.raises(
            ValueError, match=r"^image starts with '\[' but is not a list of strings$"
        ):
            tsv._list_cell(bad)


def test_mmmu_prompts_in_full_and_placeholders_only_for_mmmu(tmp_path):
    two = repr([b64(png("red")), b64(png("blue"))])
    path = write(
        tmp_path / "MMMU_DEV_VAL.tsv",
        ["index", "image", "question", "hint", "A", "B", "answer"],
        [["1", two, "Which <image 1>?", "Look.", "p", "q", "B"]],
    )
    it = benchmarks.load(path).items[0]
    assert it.question == (
        "Hint: Look.\nQuestion: Which <image 1>?\nOptions:\nA. p\nB. q\n"
        "Please select the correct answer from the options above. \n"
    )
    # no option columns at all: an open question, A its answer, B "Other Answers"
    open_ = write(
        tmp_path / "MMMU_X.tsv", ["index", "question", "answer"], [["1", "How many?", "42"]]
    )
    it = benchmarks.load(open_).items[0]
    assert (it.question, it.options, it.answer) == (
        "Question: How many?\n",
        (("A", "42"), ("B", "Other Answers")),
        "A",
    )
    stripped = benchmarks.load(open_, inputs=Inputs(stripped_prompt=True)).items[0]
    assert stripped.question == "Question: How many?" and stripped.options == it.options
    row = defaultdict(lambda: None, {"question": "q", "A": "x", "B": "y", "answer": "A"})
    assert tsv.question(row, ["A", "B"], "mcq", {})["question"].endswith(
        "above. \n"
    )  # VLMEvalKit's, by default
    assert tsv.question(row, ["A", "B"], "mmmu", {}, True)["question"].endswith("above.")
    # another kind: the text's <image k> is not checked against the images
    other = write(
        tmp_path / "O.tsv",
        ["index", "image", "question", "A", "B", "answer"],
        [["1", b64(png("red")), "See <image 2>.", "x", "y", "A"]],
    )
    assert benchmarks.load(other).skipped == []


def test_mathvista_free_form_text_and_a_file_without_an_answer_column(tmp_path):
    head = ["index", "question", "question_type", "answer_type", "precision", "unit"]
    path = write(
        tmp_path / "MathVista_MINI.tsv", head, [["1", "How long?", "free_form", "float", "2", "cm"]]
    )
    it = benchmarks.load(path).items[0]
    # no answer column: the answer is pandas' NaN ("nan"), compared as text of an object column
    assert (it.question, it.answer, it.value) == (
        "How long?",
        "nan",
        Value("float", 2, "cm", "object"),
    )


def test_header_edges(tmp_path):
    (tmp_path / "B.tsv").write_text(
        "\ufeff\nq\n", encoding="utf-8"
    )  # a header of a BOM alone: no column
    with pytest.raises(ValueError, match=r"B.tsv: no question or prompt column \(columns: none\)$"):
        benchmarks.load(str(tmp_path / "B.tsv"))
    x = tmp_path / "X.tsv"  # only the BOM is stripped from the first name
    x.write_text("\ufeffXid\tquestion\tA\tB\tanswer\n1\tq\tx\ty\tA\n", encoding="utf-8")
    assert benchmarks.load(str(x)).items[0].fields[0] == ("Xid", "1")
    u = tmp_path / "U.tsv"  # the bad byte in a later column of the header
    u.write_bytes(b"index\tquestion\tA\tB\tans\xe9\n")
    with pytest.raises(ValueError, match="U.tsv line 1: the header is not valid UTF-8"):
        benchmarks.load(str(u))


def test_tsv_reasons_name_file_row_and_column(tmp_path):
    path = tmp_path / "Bad.tsv"
    path.write_bytes(
        b"index\tquestion\tA\tB\tanswer\n1\tq\xff\tx\ty\tA\n2\tq\tx\ty\tA\n2\tq\tx\ty\tB\n"
    )
    f = benchmarks.load(str(path))
    assert reasons(f) == [
        ("Bad.tsv", 2, "not valid UTF-8 (byte 0xff in column question)"),
        ("Bad.tsv", 4, "repeated id '2' (first at row 3)"),
    ]
    assert csv.field_size_limit() == 2**31 - 1  # a base64 image is one huge field


def test_dtypes_follow_the_limit_and_swallowed_rows_are_warned_word_for_word(tmp_path):
    # n is "1", then "2.5", then "x": int64 for the first row, float64 for two, object for three
    rows = [[str(i), "q", "x", "y", "A", n] for i, n in enumerate(["1", "2.5", "x"], 1)]
    path = write(tmp_path / "L.tsv", ["index", "question", "A", "B", "answer", "n"], rows)
    for limit, dtype in ((1, "int"), (2, "float"), (3, "object"), (None, "object")):
        assert benchmarks.load(path, limit=limit).scoring["dtypes"]["n"] == dtype, limit
    q = tmp_path / "Q.tsv"
    q.write_text('index\tquestion\tA\tB\tanswer\n1\t"q\n2\tq\n3\tq"\tx\ty\tA\n')
    assert benchmarks.load(str(q)).warnings[1] == (
        'Q.tsv line 4: a quoted cell holds 2 line(s) that look like rows (an unclosed "?); '
        "pandas, and so VLMEvalKit, reads them as part of that cell too"
    )


def test_load_counts_and_says_why(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"^x\.csv: unknown format '\.csv'; expected \.tsv \(VLMEvalKit\) or \.jsonl$",
    ):
        benchmarks.load("x.csv")
    with pytest.raises(ValueError, match=r"/none\.jsonl: no such file$"):
        benchmarks.load(str(tmp_path / "none.jsonl"))
    path = write(
        tmp_path / "CV-Bench-2D.tsv",
        ["index", "image", "question", "A", "B", "answer", "source", "split"],
        [
            ["1", "", "dropped", "x", "y", "A", "ADE", "2D"],
            ["2", b64(png("red")), "q", "x", "y", "A", "ADE", "2D"],
            ["3", "nan", "dropped", "x", "y", "A", "COCO", "2D"],
        ],
    )
    f = benchmarks.load(path)
    # every valid row's split is 2D: CVBench.evaluate's per-source mean
    assert (f.read, f.dropped, f.total, f.scoring["macro"]) == (3, 2, 1, "source")
    j = tmp_path / "j.jsonl"
    row = {"id": 1, "question": "q", "options": {"A": "x", "B": "y"}, "answer": "B"}
    j.write_text(json.dumps(row) + "\nXX\n" + json.dumps(row) + "\n")
    f = benchmarks.load(str(j))
    assert [it.answer for it in f.items] == ["B"]
    assert reasons(f) == [
        ("j.jsonl", 2, "not valid JSON"),
        ("j.jsonl", 3, "repeated id '1' (first at row 1)"),
    ]
    assert f.reading() == {
        "file": "j.jsonl",
        "read": 3,
        "total": 1,
        "items": 1,
        "skipped": [
            {"file": "j.jsonl", "row": 2, "reason": "not valid JSON"},
            {"file": "j.jsonl", "row": 3, "reason": "repeated id '1' (first at row 1)"},
        ],
        "dropped": 0,
        "warnings": [],
        "scoring": {"setting": "vanilla", "macro": None, "kind": "mcq", "dtypes": {}},
        "limited": False,
        "as_vlmevalkit": {"images": "original", "prompt": "build_prompt", "resaved": []},
    }


def test_make_item_checks_a_jsonl_row():
    ok = dict(options=[("A", "x"), ("B", "y")], answer="A", images=(), hint="", fields=())
    for question, options, answer, why in [
        ("q", ok["options"], None, "missing answer"),
        ("q", ok["options"], " ", "missing answer"),
        ("q", [("A", "x")], "A", "needs at least two options, got 1"),
        (None, ok["options"], "A", "missing question"),
    ]:
        with pytest.raises(ValueError, match=f"^{why}$"):
            make_item("d", 1, 1, question, options, answer, (), "", ())
    it = make_item("d", 1, 2, " q ", ok["options"], " B ", (b"i",), "h", (("k", "v"),))
    assert (it.data, it.id, it.row, it.answer, it.images, it.fields, it.value) == (
        "d",
        "1",
        2,
        "B",
        (b"i",),
        (("k", "v"),),
        None,
    )
    assert it.question == build_question("q", ok["options"], "h")
    # VLMEvalKit's build_prompt, whitespace included; stripped: its lines joined, with nothing
    # after the last.
    assert build_question("q", [("A", "x")]) == (
        "Question: q\nOptions:\nA. x\nPlease select the correct answer from the options above. \n"
    )
    assert build_question("q", [("A", "x")], stripped=True) == (
        "Question: q\nOptions:\nA. x\nPlease select the correct answer from the options above."
    )
    assert build_question("q", [], "h") == "Hint: h\nQuestion: q\n"
    assert build_question("q", [], "h", stripped=True) == "Hint: h\nQuestion: q"


def test_decode_image_reads_a_comma_only_in_a_data_url():
    data = png("red")
    with pytest.raises(ValueError, match="undecodable image"):
        decode_image("x," + b64(data))


def test_mangle_takes_the_first_free_suffix():
    # pandas: each repeat gets the next free ".k"; a name already in the header is skipped
    assert mangle(["A", "A", "A", "A.2", "B", "A"]) == ["A", "A.1", "A.3", "A.2", "B", "A.4"]
