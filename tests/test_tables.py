"""Tests for tables.py: the table's arithmetic by hand, VLMEvalKit's settings (circular groups,
3DSRBench's four, CV-Bench-2D's mean over sources, one column per split) worked out by hand, the
_acc.csv and prediction files, and the picture's bars against the numbers they show."""

import csv
import math
import os
from dataclasses import replace

from PIL import Image

from verdict_lab.harness import accuracy, tables, vlmeval_files
from verdict_lab.harness.rows import Method, Row

VANILLA = {"setting": "vanilla", "macro": None}


def fake_row(data, seed, method, correct, steps=1, fallbacks=0, abstentions=0, judge_calls=9, **kw):
    totals = {
        "steps": steps,
        "fallbacks": fallbacks,
        "abstentions": abstentions,
        "judge_calls": judge_calls,
    }
    return Row(
        data=data,
        id=kw.get("id", "x"),
        row=kw.get("row", 2),
        seed=seed,
        method=Method.parse(method),
        answer="A",
        pred=None,
        correct=correct,
        input=kw.get("input", {}),
        prediction=kw.get("prediction", "A"),
        extracted=kw.get("extracted", "letter"),
        stopped=kw.get("stopped", "final"),
        error=kw.get("error"),
        calls=kw.get("calls", 10),
        tokens=kw.get("tokens", 100),
        sent=kw.get("sent", 10),
        cached=0,
        replies=0,
        seconds=kw.get("seconds", 1.0),
        trace={"totals": totals},
        input_digest=kw.get("input_digest"),
    )


def context(files, methods, seeds, scoring=None, max_error_rate=1.0):
    scoring = scoring or {}
    reading = {
        f: {
            "file": f + ".tsv",
            "read": 3,
            "total": 2,
            "items": 2,
            "skipped": [],
            "dropped": 0,
            "warnings": [],
            "scoring": scoring.get(f, VANILLA),
            "limited": False,
        }
        for f in files
    }
    settings = {
        "model": "m",
        "judge_model": "m",
        "shard": None,
        "verifier": {
            "n": 3,
            "tau": 0.6,
            "eps": 0.1,
            "lam": [1.5, 1.0, 0.8],
            "max_steps": 8,
            "max_calls": None,
        },
    }
    return {
        "files": files,
        "methods": methods,
        "seeds": seeds,
        "settings": settings,
        "reading": reading,
        "max_error_rate": max_error_rate,
    }


def test_summary_arithmetic_by_hand():
    rows = [  # file f: 2 items, file g: 1 item; seeds 0 and 1
        fake_row("f", 0, "base", True, judge_calls=0),
        fake_row("f", 0, "base", False, judge_calls=0, extracted="unanswered"),
        fake_row("f", 1, "base", True, judge_calls=0),
        fake_row("f", 1, "base", True, judge_calls=0),
        fake_row("g", 0, "base", False, judge_calls=0),
        fake_row("g", 1, "base", True, judge_calls=0),
        fake_row(
            "f", 0, "verdict", True, steps=4, fallbacks=1, abstentions=3, judge_calls=36, calls=40
        ),
        fake_row(
            "f", 0, "verdict", True, steps=2, fallbacks=1, abstentions=0, judge_calls=18, calls=20
        ),
        fake_row("f", 1, "verdict", True, steps=2, fallbacks=0, judge_calls=18),
        fake_row(
            "f",
            1,
            "verdict",
            False,
            steps=2,
            fallbacks=0,
            judge_calls=18,
            error="EndpointError: x",
            stopped=None,
            extracted="unanswered",
            calls=0,
            tokens=0,
        ),
        fake_row(
            "g",
            0,
            "verdict",
            True,
            steps=2,
            fallbacks=0,
            judge_calls=18,
            stopped="budget",
            extract_calls=2,
        ),
        fake_row("g", 1, "verdict", True, steps=2, fallbacks=0, judge_calls=18),
    ]
    s = tables.summarize(rows, context(["f", "g"], ["base", "verdict"], [0, 1]))
    assert s["format"] == "verdict-eval/4" and s["columns"] == ["f", "g"]
    acc = s["accuracy"]
    # base: f = 50, 100 -> mean 75, sample std sqrt((25² + 25²) / 1) = 35.355;
    # g = 0, 100 -> 50 ± 70.711; Avg per seed = (50 + 0)/2 = 25 and (100 + 100)/2 = 100
    # -> 62.5 ± sqrt(2 · 37.5²) = 53.033.
    assert acc["base"]["f"]["per_seed"] == [50, 100] and acc["base"]["f"]["mean"] == 75
    assert math.isclose(acc["base"]["f"]["std"], 25 * math.sqrt(2))
    assert acc["base"]["g"]["mean"] == 50 and math.isclose(
        acc["base"]["g"]["std"], 50 * math.sqrt(2)
    )
    assert acc["base"]["Avg"]["per_seed"] == [25, 100] and math.isclose(
        acc["base"]["Avg"]["std"], 37.5 * math.sqrt(2)
    )
    # verdict: f = 100, 50 (the error row is wrong) -> 75; g = 100, 100 -> 100 ± 0;
    # Avg = 100, 75 -> 87.5.
    assert acc["verdict"]["f"]["per_seed"] == [100, 50] and acc["verdict"]["g"]["std"] == 0
    assert acc["verdict"]["Avg"]["mean"] == 87.5
    assert s["gain_over_base"] == {"verdict": {"f": 0.0, "g": 50.0, "Avg": 25.0}}
    v, b = s["stats"]["verdict"], s["stats"]["base"]
    assert v["chains"] == 6 and v["steps"] == 14
    assert (
        v["fallback_rate"] == 2 / 14 and v["abstention_rate"] == 3 / 126
    )  # 36 + 5·18 = 126 judge calls
    assert (
        v["error_rate"] == 1 / 6 and v["unanswered_rate"] == 0
    )  # the error row is not "unanswered"
    assert v["stopped"] == {"final": 4, "max_steps": 0, "budget": 1}
    assert (
        v["calls_per_item"] == (40 + 20 + 10 + 0 + 10 + 10) / 6 and v["tokens_per_item"] == 500 / 6
    )
    assert v["extract_calls_per_item"] == 0  # fake rows keep only known keys; a missing count is 0
    assert (
        b["fallback_rate"] is None
        and b["abstention_rate"] is None
        and b["unanswered_rate"] == 1 / 6
    )
    assert s["errors"] == {
        "rows": 1,
        "rate": 1 / 12,
        "over": False,
        "causes": [{"error": "EndpointError: x", "rows": 1}],
    }
    # One seed: no std, shown without "±".
    one = tables.summarize([r for r in rows if r.seed == 0], context(["f", "g"], ["base"], [0]))
    assert one["accuracy"]["base"]["f"] == {"mean": 50, "std": None, "per_seed": [50]}
    # The row order does not matter (a merge of shards concatenates their rows).
    assert tables.summarize(rows[::-1], context(["f", "g"], ["base", "verdict"], [0, 1])) == s


def test_error_rate_above_threshold_is_the_first_thing_said():
    rows = [fake_row("f", 0, "base", False, error="EndpointError: HTTP 500", id=i) for i in "ab"]
    rows.append(fake_row("f", 0, "base", True, id="c"))
    s = tables.summarize(rows, context(["f"], ["base"], [0], max_error_rate=0.5))
    causes = [{"error": "EndpointError: HTTP 500", "rows": 2}]  # why, said under the count
    assert s["errors"] == {"rows": 2, "rate": 2 / 3, "over": True, "causes": causes}
    lines = tables.render(s).splitlines()
    assert lines[2].startswith(
        "**2 of 3 chains (66.7%) ended in an error, above --max-error-rate 50.0%"
    )
    assert not tables.summarize(rows, context(["f"], ["base"], [0], max_error_rate=0.7))["errors"][
        "over"
    ]


def three_dsr_rows():
    """Two 2-option questions, each with its rotation (-1), its flip and the flip's rotation.
    X: X ✓, X-1 ✓, X-flip ✗, X-flip-1 ✓ (height); Y: Y ✓, Y-1 ✗, Y-flip ✓, Y-flip-1 ✓ (location)."""
    marks = {
        "X": 1,
        "X-1": 1,
        "X-flip": 0,
        "X-flip-1": 1,
        "Y": 1,
        "Y-1": 0,
        "Y-flip": 1,
        "Y-flip-1": 1,
    }
    return [
        fake_row(
            "3DSRBench",
            0,
            "base",
            bool(ok),
            id=str(i),
            row=i + 2,
            input={"index": str(i), "qid": q, "category": "height" if q[0] == "X" else "location"},
        )
        for i, (q, ok) in enumerate(marks.items())
    ]


def test_3dsrbench_four_settings_by_hand():
    rows = three_dsr_rows()
    hits = lambda st: sorted((r.input["qid"], h) for r, h in accuracy.questions(rows, st))
    assert accuracy.accuracy(accuracy.questions(rows, "vanilla")) == 6 / 8
    # flip_eval: a question with its flip twin, kept at the non-flip row: X (✓·✗), X-1
    # (✓·✓), Y (✓·✓), Y-1 (✗·✓).
    assert hits("flip_eval") == [("X", False), ("X-1", True), ("Y", True), ("Y-1", False)]
    # circ_eval: with its rotations, kept at rotation 0: X (✓✓), X-flip (✗✓), Y (✓✗), Y-flip (✓✓).
    assert hits("circ_eval") == [("X", True), ("X-flip", False), ("Y", False), ("Y-flip", True)]
    # flip_circ_eval: all four of X (one ✗), all four of Y (one ✗).
    assert hits("flip_circ_eval") == [("X", False), ("Y", False)]
    s = tables.summarize(
        rows,
        context(["3DSRBench"], ["base"], [0], {"3DSRBench": {"setting": "3dsr", "macro": None}}),
    )
    assert s["accuracy"]["base"]["3DSRBench"]["mean"] == 75.0  # the table shows vanilla
    assert {k: v["mean"] for k, v in s["variants"]["3DSRBench"]["base"].items()} == {
        "vanilla": 75.0,
        "flip_eval": 50.0,
        "circ_eval": 50.0,
        "flip_circ_eval": 0.0,
    }
    flip = next(r for r in s["breakdown"]["3DSRBench"] if r["setting"] == "flip_eval")
    assert flip == {
        "method": "base",
        "setting": "flip_eval",
        "split": "none",
        "Overall": 0.5,
        "height": 0.5,
        "location": 0.5,
    }
    assert "| flip_circ_eval | 0.00 |" in tables.render(s)


def test_circular_groups_by_hand():
    """Rotations share a g_index (here computed as index mod 10^6): a question is right
    only if every rotation is."""
    marks = [
        (1, True, "a"),
        (1000001, True, "a"),
        (2000001, True, "a"),  # question 1: all right
        (2, True, "b"),
        (1000002, False, "b"),  # question 2: one rotation wrong
        (1000003, True, "c"),
    ]  # question 3: its main row is missing
    rows = [
        fake_row(
            "MMBench_DEV_EN",
            0,
            "base",
            ok,
            id=str(i),
            row=n + 2,
            input={"index": str(i), "category": c},
        )
        for n, (i, ok, c) in enumerate(marks)
    ]
    pairs = accuracy.questions(rows, "circular")
    assert [(r.id, h) for r, h in pairs] == [("1", True), ("2", False)]
    with_column = [
        replace(r, input={**r.input, "g_index": "7"}) for r in rows[:3]
    ]  # a g_index column wins
    assert (
        accuracy.questions(with_column, "circular") == []
    )  # no row has index 7: no main row, no question
    s = tables.summarize(
        rows,
        context(
            ["MMBench_DEV_EN"],
            ["base"],
            [0],
            {"MMBench_DEV_EN": {"setting": "circular", "macro": None}},
        ),
    )
    assert s["accuracy"]["base"]["MMBench_DEV_EN"]["mean"] == 50.0
    assert s["breakdown"]["MMBench_DEV_EN"] == [
        {
            "method": "base",
            "setting": "circular",
            "split": "none",
            "Overall": 0.5,
            "a": 1.0,
            "b": 0.0,
        }
    ]


def test_cv_bench_2d_overall_is_the_mean_over_sources():
    """ADE20K: 2 of 3 right, COCO: 0 of 1. VLMEvalKit's Overall is (2/3 + 0) / 2 = 1/3, not the
    pooled 2/4."""
    marks = [("ADE20K", True), ("ADE20K", True), ("ADE20K", False), ("COCO", False)]
    rows = [
        fake_row(
            "CV-Bench-2D",
            0,
            "base",
            ok,
            id=str(i),
            row=i + 2,
            input={"index": str(i), "source": src, "split": "2D", "category": "Count"},
        )
        for i, (src, ok) in enumerate(marks)
    ]
    s = tables.summarize(
        rows,
        context(
            ["CV-Bench-2D"],
            ["base"],
            [0],
            {"CV-Bench-2D": {"setting": "vanilla", "macro": "source"}},
        ),
    )
    assert math.isclose(s["accuracy"]["base"]["CV-Bench-2D"]["mean"], 100 / 3)
    rec = s["breakdown"]["CV-Bench-2D"][0]
    # CVBench.report_accuracy: split, one column per source, Overall last; no category columns
    assert list(rec) == ["method", "setting", "split", "ADE20K", "COCO", "Overall"]
    assert (
        math.isclose(rec["Overall"], 1 / 3)
        and math.isclose(rec["ADE20K"], 2 / 3)
        and rec["COCO"] == 0
    )


def test_splits_are_columns_and_acc_csv_is_vlmevalkits(tmp_path):
    """MMMU: dev 1 of 2, validation 2 of 2; l2-category (subject) columns come before
    category (discipline)."""
    spec = [
        ("dev", True, "Art", "Art & Design"),
        ("dev", False, "Math", "Science"),
        ("validation", True, "Art", "Art & Design"),
        ("validation", True, "Math", "Science"),
    ]
    rows = [
        fake_row(
            "MMMU_DEV_VAL",
            0,
            "base",
            ok,
            id=str(i),
            row=i + 2,
            input={"index": str(i), "split": sp, "l2-category": l2, "category": cat},
        )
        for i, (sp, ok, l2, cat) in enumerate(spec)
    ]
    rows.append(
        fake_row("AI2D_TEST", 0, "base", False, input={"index": "1", "category": "volcano"})
    )
    s = tables.summarize(rows, context(["MMMU_DEV_VAL", "AI2D_TEST"], ["base"], [0]))
    assert s["columns"] == ["MMMU_DEV_VAL (dev)", "MMMU_DEV_VAL (validation)", "AI2D_TEST"]
    acc = s["accuracy"]["base"]
    assert (acc["MMMU_DEV_VAL (dev)"]["mean"], acc["MMMU_DEV_VAL (validation)"]["mean"]) == (
        50.0,
        100.0,
    )
    assert acc["Avg"]["mean"] == 50.0  # (50 + 100 + 0) / 3
    path = tmp_path / "acc.csv"
    vlmeval_files.write_acc_csv(str(path), s["breakdown"]["MMMU_DEV_VAL"])
    lines = path.read_text().splitlines()
    assert lines[0] == '"method","setting","split","Overall","Art","Math","Art & Design","Science"'
    assert lines[1:] == [
        '"base","vanilla","dev","0.5","1.0","0.0","1.0","0.0"',
        '"base","vanilla","validation","1.0","1.0","1.0","1.0","1.0"',
    ]


def test_predictions_tsv_is_vlmevalkits_with_the_scored_text_and_the_chain(tmp_path):
    """VLMEvalKit's <model>_<data>.tsv (PRED_FORMAT=tsv, dump: every field quoted): the file's
    columns but the image, then prediction, the text that was scored (an error row: VLMEvalKit's
    failure message), then verdict_chain, the chain's steps one per line."""
    totals = {"steps": 2, "fallbacks": 0, "abstentions": 0, "judge_calls": 18}
    chain = {"totals": totals, "chain": ["The cup is left.", "Final answer: A\tand more"]}
    rows = [
        replace(
            fake_row("MMStar", 0, "verdict", ok, id=i, row=r, error=err, input=inp(i)),
            trace=chain if err is None else None,
        )
        for i, r, ok, err in (("2", 3, False, "EndpointError: 500"), ("1", 2, True, None))
    ]
    path = tmp_path / "m_MMStar.tsv"
    vlmeval_files.write_predictions(str(path), rows)
    assert (
        path.read_text().splitlines()[0]
        == '"index"\t"question"\t"A"\t"B"\t"answer"\t"category"\t"prediction"\t"verdict_chain"'
    )
    with open(path, newline="") as fh:
        table = list(csv.reader(fh, delimiter="\t"))
    assert table[1:] == [  # the file's order
        ["1", "q1", "x", "y", "A", "math", "A", "The cup is left.\nFinal answer: A\tand more"],
        [
            "2",
            "q2",
            "x",
            "y",
            "A",
            "math",
            "Failed to obtain answer via API. (EndpointError: 500)",
            "",
        ],
    ]


def inp(i, **more):
    return {
        "index": i,
        "image": "aGk=",
        "question": f"q{i}",
        "A": "x",
        "B": "y",
        "answer": "A",
        "category": "math",
    } | more


def test_runs_are_one_directory_per_model_method_and_seed_with_vlmevalkits_names(tmp_path):
    """OUT/<model>/seed<k>/ per (model, method, seed): <model>_<data>.tsv and _acc.csv; 3DSRBench's
    _results.tsv (setting, Overall, categories: 4 rows); MathVista's _<judge>.tsv (res, log) and
    _score.csv."""
    rows = [
        fake_row("MMStar", s, m, ok, id=str(i), row=i, input=inp(str(i), category=c))
        for m in ("base", "verdict")
        for s in (0, 1)
        for i, ok, c in ((1, True, "math"), (2, s == 1, "math"), (3, False, "ocr"))
    ]
    qids = ("a0000001", "a0000001-flip", "a0000002")
    rows += [
        fake_row("3DSRBench", 0, "base", ok, id=q, row=i, input=inp(q, qid=q, category="height"))
        for i, (q, ok) in enumerate(zip(qids, (True, False, True)))
    ]
    mv = {
        "task": "figure question answering",
        "skills": "['arithmetic reasoning', 'statistical reasoning']",
    }
    rows += [
        replace(
            fake_row(
                "MathVista_MINI",
                0,
                "base",
                ok,
                id=str(i),
                row=i,
                extracted=how,
                input=inp(str(i), **mv),
            ),
            pred=pred,
        )
        for i, ok, how, pred in ((1, True, "value", "14"), (2, False, "unanswered", None))
    ]
    reading = {
        "MMStar": {"scoring": {"setting": "vanilla", "macro": None}},
        "3DSRBench": {"scoring": {"setting": "3dsr", "macro": None}},
        "MathVista_MINI": {"scoring": {"setting": "vanilla", "macro": None}},
    }
    summary = {
        "settings": {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "extract_model": None},
        "reading": reading,
    }
    dirs = vlmeval_files.write_runs(str(tmp_path), summary, rows)
    m = "Qwen2.5-VL-7B-Instruct"
    assert [os.path.relpath(d, tmp_path) for d in dirs] == [
        f"{m}-base/seed0",
        f"{m}-base/seed1",
        f"{m}-verdict/seed0",
        f"{m}-verdict/seed1",
    ]
    here = tmp_path / f"{m}-verdict" / "seed1"
    assert sorted(os.listdir(here)) == [f"{m}-verdict_MMStar.tsv", f"{m}-verdict_MMStar_acc.csv"]
    # seed 1: hits 1, 1, 0 -> Overall 2/3, math 2/2, ocr 0/1
    assert (here / f"{m}-verdict_MMStar_acc.csv").read_text().splitlines() == [
        '"split","Overall","math","ocr"',
        f'"none","{2 / 3}","1.0","0.0"',
    ]
    base = tmp_path / f"{m}-base" / "seed0"
    assert sorted(os.listdir(base)) == sorted(
        f"{m}-base_{f}"
        for f in (
            "MMStar.tsv",
            "MMStar_acc.csv",
            "3DSRBench.tsv",
            "3DSRBench_results.tsv",
            "MathVista_MINI.tsv",
            "MathVista_MINI_exact_matching.tsv",
            "MathVista_MINI_exact_matching_score.csv",
        )
    )
    # 3DSRBench: a0000001 right, its flip wrong, a0000002 right: vanilla 2/3; flip_eval (a0000001
    # with its flip, a0000002 alone) 1/2; circ_eval groups by the first 8 characters (a0000001's
    # flip apart) 2/3; flip_circ_eval 1/2
    assert (base / f"{m}-base_3DSRBench_results.tsv").read_text().splitlines() == [
        '"setting"\t"Overall"\t"height"',
        f'"vanilla"\t"{2 / 3}"\t"{2 / 3}"',
        '"flip_eval"\t"0.5"\t"0.5"',
        f'"circ_eval"\t"{2 / 3}"\t"{2 / 3}"',
        '"flip_circ_eval"\t"0.5"\t"0.5"',
    ]
    with open(base / f"{m}-base_MathVista_MINI_exact_matching.tsv", newline="") as fh:
        table = list(csv.reader(fh, delimiter="\t"))
    assert table[0][-4:] == ["prediction", "verdict_chain", "res", "log"]
    assert [r[-2:] for r in table[1:]] == [["14", "Prefetch succeed"], ["", ""]]
    assert (
        base / f"{m}-base_MathVista_MINI_exact_matching_score.csv"
    ).read_text().splitlines() == [
        '"Task&Skill","tot","prefetch","hit","prefetch_rate","acc"',
        '"Overall","2","1","1","50.0","50.0"',
        '"arithmetic reasoning","2","1","1","50.0","50.0"',
        '"statistical reasoning","2","1","1","50.0","50.0"',
        '"figure question answering","2","1","1","50.0","50.0"',
    ]


def test_causes_are_the_three_most_common_errors_ties_in_the_order_first_seen():
    errors = ["E: d", "E: a", "E: b", "E: a", "E: c", "E: b", "E: a", "E: c"]  # a 3, b 2, c 2, d 1
    rows = [fake_row("f", 0, "base", False, id=str(i), error=e) for i, e in enumerate(errors)]
    assert tables.causes(rows) == [
        {"error": "E: a", "rows": 3},
        {"error": "E: b", "rows": 2},
        {"error": "E: c", "rows": 2},
    ]
    assert (
        tables.causes(rows, most=1) == [{"error": "E: a", "rows": 3}]
        and tables.causes(rows[:0]) == []
    )


def test_picture_bars_show_the_means(tmp_path):
    rows = [
        fake_row(f, seed, m, ok, id=str(i))
        for f in ("f", "g")
        for m in ("base", "verdict")
        for seed in (0, 1)
        for i, ok in enumerate((True, m == "verdict" or seed == 0))
    ]
    s = tables.summarize(rows, context(["f", "g"], ["base", "verdict"], [0, 1]))
    bars = tables.picture(s, str(tmp_path / "s.png"))
    # base: 100 % (seed 0) and 50 % (seed 1) -> 75; verdict 100: y = 320 − 280 · mean / 100.
    assert len(bars) == 3 * 2
    for m, c, (x0, y0, x1, y1) in bars:
        assert y1 == 320 and math.isclose(y0, 320 - 2.8 * s["accuracy"][m][c]["mean"]) and x1 > x0
    assert [(m, c) for m, c, _ in bars] == [
        (m, c) for c in ("f", "g", "Avg") for m in ("base", "verdict")
    ]
    assert all(
        a[2][2] < b[2][0] for a, b in zip(bars, bars[1:])
    )  # left to right, never overlapping
    width, height = Image.open(tmp_path / "s.png").size
    assert height == 380 and bars[-1][2][2] < width - 190  # the legend's 190 pixels stay clear


def test_compute_table_by_hand_and_only_with_a_search(tmp_path):
    # One file, one seed, two items; per row (reasoner calls, tokens, judge calls):
    #   base (1, 20, 0) and (1, 40, 0): Avg 50 (one right), tokens/item 30, judge calls/item 0
    #   bon4+last+key (4, 100, 12) and (4, 140, 24): Avg 100, reasoner tokens/item 120,
    #     judge calls/item 18
    cost = {"base": [(1, 20, 0), (1, 40, 0)], "bon4+last+key": [(4, 100, 12), (4, 140, 24)]}
    right = {"base": (True, False), "bon4+last+key": (True, True)}
    rows = [
        replace(
            fake_row("f", 0, m, ok, id=str(i)), reasoner_calls=c, reasoner_tokens=t, judge_calls=j
        )
        for m, per in cost.items()
        for i, ((c, t, j), ok) in enumerate(zip(per, right[m]))
    ]
    ctx = context(["f"], list(cost), [0])
    ctx["settings"] = {"model": "r", "judge_model": "j", "verifier": {"n": 3}}
    s = tables.summarize(rows, ctx)
    b, v = s["stats"]["base"], s["stats"]["bon4+last+key"]
    assert (
        b["reasoner_tokens_per_item"],
        b["judge_calls_per_item"],
        b["reasoner_calls_per_item"],
    ) == (
        30,
        0,
        1,
    )
    assert (
        v["reasoner_tokens_per_item"],
        v["judge_calls_per_item"],
        v["reasoner_calls_per_item"],
    ) == (
        120,
        18,
        4,
    )
    assert v["fallback_rate"] is None  # a search has no fallback
    assert tables._compute(s) == [
        "",
        "Accuracy against compute (compute.png). Avg accuracy (%, mean ± std over seeds) and, per "
        "item (one item, one seed), the reasoner's tokens, the judges' calls, the reasoner's "
        "calls, all calls (each counted whether the response cache answered it or not: the "
        "method's own cost) and the requests sent (a request shared with an earlier method of the "
        "item is sent once, by the first). Searches: bonN best-of-N, wbonN weighted best-of-N, "
        "majN majority vote, beamWxE beam search, then the chain score's aggregate and the step "
        "score, +filter the dual test (docs/search.md); VERDICT greedy, step by step, with n = 3.",
        "",
        "| Method | Avg | reasoner tokens/item | judge calls/item | reasoner calls/item | "
        "calls/item | sent/item |",
        "|---|---|---|---|---|---|---|",
        "| base | 50.00 | 30 | 0.0 | 1.0 | 10.0 | 10.0 |",
        "| bon4+last+key | 100.00 | 120 | 18.0 | 4.0 | 10.0 | 10.0 |",
    ]
    assert tables.compute_points(s) == [
        ("base", 30, 0, 50, None),
        ("bon4+last+key", 120, 18, 100, None),
    ]
    # the panels (290 pixels wide, from x = 70 and 420) span 0-120 tokens and 0-20 judge calls
    # (charts.nice).
    at = {(k, m): xy for k, m, xy in tables.compute_picture(s, str(tmp_path / "c.png"))}
    assert at[0, "base"][0] == 70 + 30 / 120 * 290 and at[0, "bon4+last+key"][0] == 70 + 290
    assert at[1, "base"][0] == 420 and at[1, "bon4+last+key"][0] == 420 + 18 / 20 * 290
    assert at[0, "base"][1] > at[0, "bon4+last+key"][1]  # 50 % below 100 %
    plain = tables.summarize(
        [r for r in rows if str(r.method) == "base"], context(["f"], ["base"], [0])
    )
    assert tables._compute(plain) == [] and not tables.searched(plain) and tables.searched(s)


def test_nice_axes_are_round_steps_that_hold_the_values():
    from verdict_lab import charts

    assert charts.nice(0, 120) == (0, 120, 20)
    assert charts.nice(0, 18) == (0, 20, 5)
    assert charts.nice(37.5, 80) == (30, 80, 10)
    assert charts.nice(0, 0) == (0, 1, 0.2)  # one value: one unit around it
    for lo, hi in ((0, 1234), (0.01, 0.02), (3, 97), (0, 61), (12, 12)):
        a, b, step = charts.nice(lo, hi)
        assert a <= lo and b >= hi and (b - a) / step <= 6 + 1e-9
        assert math.isclose(round(a / step), a / step) and math.isclose(round(b / step), b / step)


def test_breakdown_types_labels_as_pandas_and_abbreviates_as_report_acc():
    """Checked against VLMEvalKit e8e78f05's report_acc (docs/parity.md): category cells "10", "2",
    "2", "01" are int64, so "01" is 1 and they sort 1, 2, 10; MMBench's l2-category names are
    abbreviated; "Split" is split (column names are lower-cased); a category with no row in a split
    is empty there."""
    spec = [("10", "coarse_perception", "dev", True), ("2", "coarse_perception", "dev", False)]
    spec += [("2", "logic_reasoning", "dev", True), ("01", "logic_reasoning", "test", True)]
    rows = [
        fake_row(
            "MMStar",
            0,
            "base",
            ok,
            id=str(i),
            input={"category": c, "l2-category": l2, "Split": sp},
        )
        for i, (c, l2, sp, ok) in enumerate(spec)
    ]
    recs = accuracy.breakdown(rows, "vanilla", VANILLA)
    assert [list(r) for r in recs] == [["split", "Overall", "CP", "LR", "1", "2", "10"]] * 2
    assert recs[0] == {
        "split": "dev",
        "Overall": 2 / 3,
        "CP": 0.5,
        "LR": 1.0,
        "1": None,
        "2": 0.5,
        "10": 1.0,
    }
    assert recs[1] == {
        "split": "test",
        "Overall": 1.0,
        "CP": None,
        "LR": 1.0,
        "1": 1.0,
        "2": None,
        "10": None,
    }
    mv = [  # MathVista_acc: Overall, then each row's skills and task as first met
        fake_row("MathVista_MINI", 0, "base", ok, input={"task": t, "skills": sk})
        for t, sk, ok in [("t1", "['a', 'b']", True), ("t2", "['b']", False)]
    ]
    assert accuracy.breakdown(mv, "vanilla", None) == [
        {"split": "none", "Overall": 0.5, "a": 1.0, "b": 0.5, "t1": 1.0, "t2": 0.0}
    ]


def test_circular_keys_by_hand():
    """own key: the index cell, else the row's id; its question: g_index, else own mod 10^6 when own
    is an integer (sign included), else own. a (5) and b (1000005) are question 5, kept at a, wrong
    (b is); id 6 without an index is its own question; -1000006 is question 999994, which has no
    main row; "X5" is no integer, its own question."""
    spec = [("a", {"index": "5"}, True), ("b", {"index": "1000005"}, False), ("6", {}, True)]
    spec += [("d", {"index": "-1000006"}, True), ("e", {"index": "X5"}, True)]
    rows = [fake_row("MMBench", 0, "base", ok, id=i, input=inp) for i, inp, ok in spec]
    assert [(r.id, h) for r, h in accuracy.questions(rows, "circular")] == [
        ("a", False),
        ("6", True),
        ("e", True),
    ]
    no_qid = fake_row(
        "3DSRBench", 0, "base", True, input={}
    )  # no qid: its own question under every setting
    assert [h for _, h in accuracy.questions([no_qid], "flip_eval")] == [True]


def test_accuracy_cells_and_labels_edge_cases():
    """A macro over a column no row has: no accuracy. "Category" wins over "CATEGORY" (the first
    met) and over "category"; a category "1" beside a missing cell is float, "1.0"; a split missing
    in some rows is "none", a column of its own."""
    r = fake_row("f", 0, "base", True, input={"Category": "A1", "CATEGORY": "b", "category": "c"})
    assert accuracy.accuracy([(r, True)], "source") is None and accuracy.cell(r, "category") == "A1"
    pairs = [
        (fake_row("f", 0, "base", True, input={"category": "1"}), True),
        (fake_row("f", 0, "base", True), True),
    ]
    assert accuracy.labels(pairs, "category") == [(1.0, "1.0"), None]
    rows = [
        fake_row("f", 0, "base", ok, id=str(i), input=inp)
        for i, (ok, inp) in enumerate([(True, {"split": "dev"}), (False, {})])
    ]
    s = tables.summarize(rows, context(["f"], ["base"], [0]))
    assert (
        s["columns"] == ["f (dev)", "f (none)"] and s["accuracy"]["base"]["f (none)"]["mean"] == 0
    )


def test_mathvista_table_by_hand():
    """Keys as first met: Overall, each skill (a literal that is no list is one skill, the cell),
    the task; a row without skills or task counts twice under "" (its skills cell and its task).
    prefetched: extracted as a value. Overall: 4 rows, 3 prefetched, 2 hits -> 75 % and 50 %."""
    spec = [
        ("u", "'abc'", True, "letter"),
        ("t", "['s']", True, "value"),
        ("t", "['s']", False, "value"),
    ]
    rows = [
        fake_row("MathVista_MINI", 0, "base", ok, extracted=how, input={"task": t, "skills": sk})
        for t, sk, ok, how in spec
    ]
    rows.append(fake_row("MathVista_MINI", 0, "base", False, extracted="value"))
    table = accuracy.mathvista_table(
        [(r, r.correct) for r in rows], lambda r: r.extracted == "value"
    )
    got = [
        (t["Task&Skill"], t["tot"], t["prefetch"], t["hit"], t["prefetch_rate"], t["acc"])
        for t in table
    ]
    assert got == [
        ("Overall", 4, 3, 2, 75.0, 50.0),
        ("'abc'", 1, 0, 1, 0.0, 100.0),
        ("u", 1, 0, 1, 0.0, 100.0),
        ("s", 2, 2, 1, 100.0, 50.0),
        ("t", 2, 2, 1, 100.0, 50.0),
        ("", 2, 2, 0, 100.0, 0.0),
    ]
    # The scoring's kind makes any file MathVista's: one record, split none
    mine = [replace(r, data="Mine") for r in rows[:2]]
    assert accuracy.breakdown(mine, "vanilla", {"kind": "mathvista"}) == [
        {"split": "none", "Overall": 1.0, "'abc'": 1.0, "u": 1.0, "s": 1.0, "t": 1.0}
    ]
