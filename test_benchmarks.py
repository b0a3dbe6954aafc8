"""Tests for benchmarks.py: loading VLMEvalKit TSVs and JSONL files (malformed rows, reused and
multi-image rows, the prompt column) and answer extraction."""
import base64
import io
import json

import pytest
from PIL import Image

import benchmarks


def png(color, size=(8, 6)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()



def tiny_tsv(tmp_path) -> tuple:
    """A VLMEvalKit-style TSV: a reused image, a multi-image row, two malformed rows, a text row.
    Returns (path, the image bytes red, blue, green)."""
    red, blue, green = png("red"), png("blue"), png("green")
    header = ["index", "image", "question", "hint", "A", "B", "C", "answer", "category"]
    rows = [
        ["10", b64(red), "What colour is the square?", "A plain square.", "red", "blue", "", "A", "colour"],
        ["11", "10", "Is it the same square?", "", "yes", "no", "", "A", "reuse"],          # reuses row 10's image
        ["12", repr([b64(blue), b64(green)]), "Which image is blue?", "", "first", "second", "", "A", "multi"],
        ["13", b64(red), "Missing its answer", "", "x", "y", "", "", "bad"],                 # malformed: no answer
        ["14", "bm90IGFuIGltYWdl" * 6, "Undecodable image", "", "x", "y", "", "B", "bad"],  # base64 of text
        ["15", "", "A text-only row", "nan", "one", "two", "three", "C", "text"],
    ]
    path = tmp_path / "Tiny.tsv"
    path.write_text("\n".join("\t".join(r) for r in [header] + rows) + "\n")
    return path, (red, blue, green)


# ----------------------------------------------------------------------------- loading

def test_tsv_reference_multi_image_and_malformed_rows(tmp_path):
    path, (red, blue, green) = tiny_tsv(tmp_path)
    name, items, skipped = benchmarks.load(str(path))
    assert name == "Tiny" and [it.id for it in items] == ["10", "11", "12", "15"]
    assert items[0].images == (red,) and items[1].images == (red,) and items[2].images == (blue, green)
    assert items[3].images == () and [k for k, _ in items[3].options] == ["A", "B", "C"]
    assert items[0].question.splitlines() == ["Hint: A plain square.", "Question: What colour is the square?", "Options:",
                                              "A. red", "B. blue", "Please select the correct answer from the options above."]
    assert [(s.row, s.reason.split(" (")[0]) for s in skipped] == [(5, "missing answer"), (6, "undecodable image")]


def test_tsv_prompt_column_is_used_as_is(tmp_path):
    path = tmp_path / "P.tsv"
    path.write_text("index\tquestion\tA\tB\tanswer\tprompt\n1\tq?\tx\ty\tB\tThe whole text, as the dataset wants it.\n"
                    "2\tq?\tx\ty\tA\t\n3\tq?\tx\ty\tA\t\textra cell\n")
    _, items, skipped = benchmarks.load(str(path))
    assert items[0].question == "The whole text, as the dataset wants it." and items[0].answer == "B"
    assert items[1].question.startswith("Question: q?\nOptions:\nA. x\nB. y")
    assert [(s.row, s.reason) for s in skipped] == [(4, "7 cells, the header has 6")]


def test_jsonl_images_and_malformed_rows(tmp_path):
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "a.png").write_bytes(png("red"))
    lines = [
        {"id": 1, "question": "q", "options": {"A": "x", "B": "y"}, "answer": "A", "image": "pics/a.png"},
        {"id": 2, "question": "q", "options": {"B": "y", "A": "x"}, "answer": "B", "image": [b64(png("blue")), "pics/a.png"]},
        {"id": 3, "question": "q", "options": {"A": "x", "B": "y"}, "answer": "C"},
        {"id": 4, "question": "q", "options": ["x", "y"], "answer": "A"},
        {"id": 5, "question": "", "options": {"A": "x", "B": "y"}, "answer": "A"},
        {"id": 1, "question": "again", "options": {"A": "x", "B": "y"}, "answer": "A"},
        {"id": 7, "question": "q", "options": {"A": "x", "B": "y"}, "answer": "A", "image": "missing.png"},
        {"id": 8, "question": "q", "options": {"A": "x", "B": "y"}, "answer": "A", "hint": "think"},
    ]
    text = "\n".join(json.dumps(d) for d in lines[:3]) + "\n{not json\n\n" + "\n".join(json.dumps(d) for d in lines[3:]) + "\n"
    (tmp_path / "set.jsonl").write_text(text)
    name, items, skipped = benchmarks.load(str(tmp_path / "set.jsonl"))
    assert name == "set" and [it.id for it in items] == ["1", "2", "8"]
    assert items[0].images == (png("red"),) and items[1].images == (png("blue"), png("red"))
    assert items[1].options == (("A", "x"), ("B", "y")) and items[2].question.startswith("Hint: think\nQuestion: q")
    reasons = {s.row: s.reason for s in skipped}
    assert sorted(reasons) == [3, 4, 6, 7, 8, 9]  # line 5 is blank
    assert reasons[3] == "answer 'C' is not one of the options A, B" and reasons[4] == "not valid JSON"
    assert reasons[6].startswith('"options" must be an object') and reasons[7] == "missing question"
    assert reasons[8] == "repeated id '1' (first at row 1)" and reasons[9].startswith("undecodable image")


# ----------------------------------------------------------------------------- answers

OPTIONS = (("A", "12"), ("B", "30"), ("C", "red apple"), ("D", "1"))


@pytest.mark.parametrize("text, expected", [
    ("B", ("B", "letter")),
    ("B. 30", ("B", "letter")),
    ("(C)", ("C", "letter")),
    ("The answer is D", ("D", "letter")),             # "D" is the 4th token from the end: near enough
    ("D is right, since one is less than twelve", (None, "unanswered")),  # a single letter, but far from the end
    ("A or B", (None, "unanswered")),                 # two letters, and no option text either
    ("30", ("B", "text")),
    ("a RED APPLE", ("C", "text")),                   # option text, case-insensitive
    ("12", (None, "unanswered")),                     # both "12" and "1" are substrings: not unique
    ("E", (None, "unanswered")),                      # not an option letter
    ("", (None, "unanswered")),
    (None, (None, "unanswered")),                     # the chain gave no final answer
])
def test_answer_extraction(text, expected):
    assert benchmarks.extract(text, OPTIONS) == expected

