"""Tests for quirks.py: the rows each VLMEvalKit quirk decided and the corrected reading, counted by
hand on small files (one row per quirk), and how the summary shows them beside VLMEvalKit's
accuracy."""

from dataclasses import replace

from verdict_lab.harness import answers, benchmarks, quirks, tables
from verdict_lab.harness.items import Inputs
from verdict_lab.harness.rows import Method, Row
from test_tables import context, fake_row


def rows_of(path, replies, seed=0, method="base", inputs=Inputs()):
    """Rows as evaluate.py writes them: each item's reply scored by answers.score."""
    f = benchmarks.load(str(path), inputs=inputs)
    out = []
    for item, reply in zip(f.items, replies):
        pred, how, correct = answers.score(item, reply)
        kw = dict(data=item.data, id=item.id, row=item.row, seed=seed, method=Method.parse(method))
        kw |= dict(answer=item.answer, pred=pred, extracted=how, correct=correct, prediction=reply)
        kw |= dict(
            stopped="final", error=None, calls=1, sent=1, cached=0, replies=1, tokens=1, seconds=0.0
        )
        totals = {"steps": 1, "fallbacks": 0, "abstentions": 0, "judge_calls": 0}
        out.append(Row(**kw, input=dict(item.fields), trace={"totals": totals}))
    return f, out


def summary_of(tmp_path, name, tsv, replies, inputs=Inputs()):
    path = tmp_path / f"{name}.tsv"
    path.write_text(tsv, encoding="utf-8")
    f, rows = rows_of(path, replies, inputs=inputs)
    ctx = context([name], ["base"], [0])
    ctx["reading"] = {name: f.reading()}
    return tables.summarize(rows, ctx)


# One row per option quirk, and one right without any. Column C holds "3" and empty cells: pandas
# reads it as float, so C is "3.0". Column A's "None" is a missing value. Row 3's answer " A" is not
# stripped.
MMSTAR = (
    "index\tquestion\tA\tB\tC\tanswer\tcategory\n"
    "1\tq\tred\tblue\t3\tC\tc\n"  # reply "3": "3.0" is not in it -> Z, wrong; as written, C: right
    "2\tq\tNone\tx\t\tA\tc\n"  # reply "None": only B = x -> Z, wrong; with A = "None": right
    # Reply "A": A is read, but the answer is " A" -> wrong; stripped: right.
    "3\tq\t a\tb\t\t A\tc\n"
    # Reply "I cannot tell": nothing read -> Z = the answer, right; else wrong.
    "4\tq\tred\tblue\t\tZ\tc\n"
    "5\tq\tred\tblue\t\tA\tc\n"  # reply "A": right either way
)
REPLIES = ["3", "None", "A", "I cannot tell", "A"]


def test_each_option_quirk_decides_its_row_by_hand(tmp_path):
    s = summary_of(tmp_path, "MMStar", MMSTAR, REPLIES)
    assert s["accuracy"]["base"]["MMStar"]["mean"] == 40.0  # VLMEvalKit: rows 4 and 5 of 5
    q = s["quirks"]["MMStar"]
    # Every prompt ended as build_prompt ends it (an input quirk: it touched all 5 rows and
    # decided none).
    want = {
        "float_options": 1,
        "na_options": 1,
        "unstripped": 1,
        "z_answer": 1,
        "prompt_whitespace": 5,
    }
    assert q["rows"]["base"] == want
    assert q["corrected"]["base"]["MMStar"]["mean"] == 80.0  # rows 1, 2, 3 and 5
    md = tables.render(s)
    quirk_cols = "| float_options | na_options | unstripped | z_answer | prompt_whitespace |"
    assert "| Method | MMStar VLMEvalKit | MMStar corrected " + quirk_cols in md
    assert "| base | 40.00 | 80.00 | 1 | 1 | 1 | 1 | 5 |" in md
    assert (
        "- z_answer: " in md and "float_exact" not in md
    )  # a quirk that decided no row is not shown


# MathVista's rule path: one row per quirk, and one right.
MATHVISTA = (
    "index\tquestion\tanswer\tquestion_type\tanswer_type\tprecision\tunit\t"
    "choices\tanswer_option\ttask\tskills\n"
    # Reply "1.449": not 1.45 exactly; at 2 decimals, it is.
    "1\tq\t1.45\tfree_form\tfloat\t2\t\t\t\tt1\t['s']\n"
    "2\tq\t14\tfree_form\tinteger\t\t\t\t\tt1\t['s']\n"  # "14.0": int("14.0") fails; it is 14
    # Reply "cat": text answers are never right; it is cat.
    "3\tq\tcat\tfree_form\ttext\t\t\t\t\tt2\t['s']\n"
    "4\tq\t0\tfree_form\tinteger\t\t\t\t\tt2\t['s']\n"  # "0": right but falsy, not prefetched
    "5\tq\t3\tfree_form\tinteger\t\t\t\t\tt2\t['s']\n"  # "3": right either way
)


def test_each_mathvista_quirk_decides_its_row_by_hand(tmp_path):
    s = summary_of(tmp_path, "MathVista_MINI", MATHVISTA, ["1.449", "14.0", "cat", "0", "3"])
    assert s["accuracy"]["base"]["MathVista_MINI"]["mean"] == 20.0
    q = s["quirks"]["MathVista_MINI"]
    assert q["rows"]["base"] == {
        "float_exact": 1,
        "int_of_float": 1,
        "text_never": 1,
        "zero_dropped": 1,
    }
    assert q["corrected"]["base"]["MathVista_MINI"]["mean"] == 100.0


def test_no_quirk_no_section(tmp_path):
    tsv = "index\tquestion\tA\tB\tanswer\n1\tq\tred\tblue\tA\n2\tq\tred\tblue\tB\n"
    s = summary_of(tmp_path, "MMStar", tsv, ["A", "blue and red"], Inputs(stripped_prompt=True))
    assert s["quirks"] == {} and "corrected" not in tables.render(s)


def test_a_jsonl_file_is_not_re_read(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(
        '{"id": "1", "question": "q", "options": {"A": "None", "B": "x"}, "answer": "Z"}\n'
    )
    f, rows = rows_of(path, ["None"])
    ctx = context(["mine"], ["base"], [0])
    ctx["reading"] = {"mine": f.reading()}
    assert tables.summarize(rows, ctx)["quirks"] == {}


def mc_row(data, inp, reply, correct, **kw):
    """A row with input cells `inp` (question "q") and reply `reply`, as fake_row builds it."""
    return fake_row(
        data, 0, "base", correct, input={"question": "q", **inp}, prediction=reply, **kw
    )


MV = {"question_type": "free_form", "unit": "", "task": "t", "skills": "['s']"}


def test_hit_reads_a_reading_without_scoring_or_dtypes():
    """No "scoring": the kind comes from the file's name and every cell is object; no ".tsv" file or
    an error row: no hit. " A" read as the option letter A stripped only under the unstripped
    fix."""
    r = mc_row("MMStar", {"A": "red", "B": "blue", "answer": " A"}, "A", False)
    assert quirks.hit(r, {"file": "MMStar.tsv"}) is False
    assert quirks.hit(r, {"file": "MMStar.tsv", "scoring": {}}, {"unstripped"}) is True
    assert quirks.hit(r, {}) is None and quirks.hit(r, {"file": "MMStar.jsonl"}) is None
    assert quirks.hit(replace(r, error="EndpointError: x"), {"file": "MMStar.tsv"}) is None
    judged = replace(r, extracted="judge")  # a letter the extraction model chose: not re-read
    assert quirks.hit(judged, {"file": "MMStar.tsv"}) is None
    # applicable: the same reading; " A" in the answer cell is unstripped, while a spaced
    # question is no option.
    spaced = mc_row(
        "MMStar", {"A": "red", "B": "blue", "answer": " A", "question": " q "}, "A", False
    )
    assert quirks.applicable(spaced, {"file": "MMStar.tsv"}) == ["unstripped"]
    plain = mc_row("MMStar", {"A": "red", "B": "blue", "answer": "A"}, "A", True)
    assert quirks.applicable(plain, {"file": "MMStar.tsv"}) == []


def test_int_option_cells_and_the_z_option():
    """An int column: "03" is shown "3" (float_options; "03" as written when corrected); " 3" is
    shown "3", its stripped text (no quirk: only object cells count as unstripped). An option Z: the
    z_answer fix leaves an answer Z to the rule (nothing read -> Z)."""
    reading = {"file": "MMStar.tsv", "scoring": {"dtypes": {"A": "int", "B": "int"}}}
    r = mc_row("MMStar", {"A": "03", "B": "5", "answer": "A"}, "03", False)
    assert quirks.applicable(r, reading) == ["float_options"]
    assert quirks.hit(r, reading, {"float_options"}) is True
    spaced = mc_row("MMStar", {"A": " 3", "B": "5", "answer": "A"}, "3", True)
    assert quirks.applicable(spaced, reading) == []
    z = mc_row(
        "MMStar", {"A": "red", "B": "blue", "Z": "none", "answer": "Z"}, "I cannot tell", True
    )
    assert quirks.hit(z, {"file": "MMStar.tsv"}, {"z_answer"}) is True


def test_mmmu_open_question_reads_its_answer_as_option_a():
    """MMMU_preproc: no A column -> A = the answer, B = "Other Answers"; the answer is A."""
    r = mc_row("MMMU_DEV_VAL", {"answer": "5"}, "5", True)
    assert quirks.hit(r, {"file": "MMMU_DEV_VAL.tsv"}) is True


def test_mathvista_hits_by_hand():
    """MathVista's rule path from the scoring's kind (a file of any name) or the name; the judge's
    value (pred) of a judged row; the corrected float comparison at the precision, else at the
    answer's decimals; int_of_float only for a float that is an integer; text answers compared when
    corrected."""
    reading = {"file": "Mine.tsv", "scoring": {"kind": "mathvista"}}
    f = MV | {"answer": "2.54", "answer_type": "float", "precision": "1"}
    r = mc_row("Mine", f, "2.46", False)  # at 1 decimal both are 2.5; at 0 they differ (2, 3)
    assert quirks.hit(r, reading) is False and quirks.hit(r, reading, {"float_exact"}) is True
    assert quirks.applicable(r, reading) == [
        "float_exact",
        "int_of_float",
        "text_never",
        "zero_dropped",
    ]
    r = mc_row("MathVista_MINI", MV | {"answer": "2.54", "answer_type": "float"}, "2.9", False)
    assert quirks.hit(r, {"file": "m.tsv"}, {"float_exact"}) is False  # 2 decimals: 2.9 is not 2.54
    assert quirks.hit(replace(r, prediction="abc"), {"file": "m.tsv"}, {"float_exact"}) is False
    r = mc_row("MathVista_MINI", MV | {"answer": "14", "answer_type": "integer"}, "14.5", False)
    assert quirks.hit(r, {"file": "m.tsv"}, {"int_of_float"}) is False
    judged = replace(
        r, extracted="judge", pred="14"
    )  # the judge's value, not the reply, and no prefetch
    assert quirks.hit(judged, {"file": "m.tsv"}) is True
    text = mc_row("MathVista_MINI", MV | {"answer": "cat", "answer_type": "text"}, "dog", False)
    assert quirks.hit(text, {"file": "m.tsv"}, {"text_never"}) is False
    assert quirks.hit(replace(text, prediction="cat"), {"file": "m.tsv"}, {"text_never"}) is True
    spaced = mc_row("MathVista_MINI", MV | {"answer": " 3", "answer_type": "integer"}, "3", False)
    assert quirks.applicable(spaced, {"file": "m.tsv"})[0] == "unstripped"


def test_decided_and_tally_by_hand():
    """A row the rules do not give back as recorded keeps its hit; two rows of one quirk count 2."""
    reading = {"file": "MMStar.tsv"}
    z = {"A": "red", "B": "blue", "answer": "Z"}
    r = mc_row("MMStar", z, "A", True)  # the rules: A is read, not Z -> wrong; recorded right
    assert quirks.decided(r, reading, quirks.resaved_of(reading)) == ([], True)
    rows = [mc_row("MMStar", z, "no idea", True, id=i) for i in "ab"]
    counts, fixed = quirks.tally(rows, reading)
    assert counts == {"z_answer": 2} and [x.correct for x in fixed] == [False, False]


def test_cells_and_the_post_check_where_a_dtype_decides():
    # A float column's cell that is no option prints as pandas prints it ("2" as "2.0"); an int
    # option cell corrected under float_options is its text as written ("01"), where pandas shows
    # "1". A float answer column's "14.0" is the float 14.0, and int() of that is 14: the reply 14
    # is right, with no fix.
    assert quirks._cell("2", "float", "precision", frozenset()) == "2.0"
    assert quirks._cell("01", "int", "A", {"float_options"}) == "01"
    assert (
        quirks._post_check("14", "14.0", answers.Value("integer", dtype="float"), frozenset(), True)
        is True
    )


def test_no_reply_on_a_text_answer_reads_nothing_even_under_text_never():
    # A MathVista text row with no reply: nothing is read (not "None", not any stand-in text), so
    # even an answer "none" or "XXXX" is no hit.
    for answer in ("none", "XXXX"):
        r = mc_row("MathVista_MINI", {**MV, "answer_type": "text", "answer": answer}, None, False)
        assert quirks.hit(r, {"file": "MathVista_MINI.tsv"}, {"text_never"}) is False


def test_input_quirks_are_counted_from_the_reading_and_keep_the_hit():
    """resaved_images: the rows whose id the reading lists; prompt_whitespace: every row of a TSV
    whose prompt build_question wrote (not CV-Bench's prompt column, MathVista's question cell, or a
    JSONL file), unless --stripped-prompts. Neither changes a hit."""
    sent = {"images": "dump_image", "prompt": "build_prompt", "resaved": ["2"]}
    rows = [
        mc_row("BLINK", {"A": "x", "B": "y", "answer": "A"}, "A", True, id=i) for i in ("1", "2")
    ]
    reading = {"file": "BLINK.tsv", "scoring": {"kind": "mcq"}, "as_vlmevalkit": sent}
    counts, fixed = quirks.tally(rows, reading)
    assert counts == {"resaved_images": 1, "prompt_whitespace": 2} and [
        r.correct for r in fixed
    ] == [
        True,
        True,
    ]
    assert quirks.resaved_of(reading) == {"2"} and quirks.resaved_of({}) == set()
    assert quirks.inputs(rows[1], reading, {"2"}) == ["resaved_images", "prompt_whitespace"]
    assert quirks.inputs(rows[1], reading | {"scoring": {"kind": "mmmu"}}, set()) == [
        "prompt_whitespace"
    ]
    assert (
        quirks.inputs(rows[1], {"as_vlmevalkit": sent, "scoring": {"kind": "mcq"}}, set()) == []
    )  # no file
    stripped = reading | {"as_vlmevalkit": sent | {"prompt": "stripped"}}
    assert quirks.tally(rows, stripped)[0] == {"resaved_images": 1}
    for other in ({"file": "CV-Bench-2D.tsv", "scoring": {"kind": "cvbench"}}, {"file": "b.jsonl"}):
        assert quirks.inputs(rows[0], other | {"as_vlmevalkit": sent}, {"1"}) == ["resaved_images"]
    assert (
        quirks.tally(rows, {"file": "BLINK.tsv"})[0] == {}
    )  # a reading from before: nothing recorded
