"""Golden tests for tables.py's summary: summarize's numbers and render's whole summary.md for a
small hand-built run (three files, three methods, two seeds), every number worked out by hand beside
it."""

from dataclasses import replace

from verdict_lab.harness import tables
from test_tables import context, fake_row

FILES = ["MMStar", "3DSRBench", "CV-Bench-2D"]
METHODS = ["base", "verdict+prior", "mean"]
# The six items: MMStar's two (one per split; the test one's answer is "Z", decided by the z_answer
# quirk when its reply "I cannot tell" counts right), 3DSRBench's X and its flip, CV-Bench-2D's two
# sources.
ITEMS = [
    ("MMStar", "1", {"split": "dev", "category": "math", "l2-category": "coarse_perception"}),
    (
        "MMStar",
        "2",
        {"split": "test", "category": "ocr", "l2-category": "logic_reasoning", "answer": "Z"},
    ),
    ("3DSRBench", "X", {"qid": "X", "category": "height"}),
    ("3DSRBench", "X-flip", {"qid": "X-flip", "category": "height"}),
    ("CV-Bench-2D", "3", {"source": "ADE20K", "split": "2D"}),
    ("CV-Bench-2D", "4", {"source": "COCO", "split": "2D"}),
]
# Hits per (method, seed), one mark per item above; mean ran seed 0 only.
HITS = {("base", 0): "110110", ("base", 1): "011011", ("verdict+prior", 0): "111111"}
HITS |= {("verdict+prior", 1): "101100", ("mean", 0): "100001"}


def run_rows():
    rows = []
    for (m, seed), marks in HITS.items():
        for n, ((f, i, inp), mark) in enumerate(zip(ITEMS, marks)):
            mc = {"question": "q", "A": "red", "B": "blue", "answer": "A"} if f == "MMStar" else {}
            kw = dict(
                id=i, row=n + 2, input={"index": i, **mc, **inp}, calls=n + 1, tokens=10 * (n + 1)
            )
            kw |= dict(seconds=0.5 * (n + 1), sent=n)
            if f == "MMStar" and i == "2":
                kw["prediction"] = "I cannot tell"
                kw["extracted"] = "declined"
            if m == "base":
                r = fake_row(f, seed, m, mark == "1", judge_calls=0, **kw)
            elif m == "mean":  # every judge call abstained
                r = fake_row(f, seed, m, mark == "1", steps=2, abstentions=6, judge_calls=6, **kw)
            else:
                r = fake_row(
                    f, seed, m, mark == "1", steps=n + 1, fallbacks=n % 2, abstentions=1, **kw
                )
                r = replace(
                    r, extra_calls=n, extra_tokens=5 * n, gate_checks=n % 3, extract_calls=n % 2
                )
                r = replace(
                    r, fact_sheet_status=("ok", "retried", "degraded")[n % 3], revisions=n % 2
                )
                r = replace(
                    r, revised=int(n % 4 == 1), revise_calls=2 * (n % 2), revise_tokens=7 * (n % 2)
                )
            if (m, seed, i) == ("verdict+prior", 1, "2"):
                r = replace(
                    r, error="EndpointError: HTTP 500", extracted="unanswered", stopped=None
                )
            if (m, i) == ("verdict+prior", "X-flip"):
                r = replace(r, stopped="max_steps")
            rows.append(r)
    return rows


def run_context():
    scoring = {"3DSRBench": {"setting": "3dsr", "macro": None}}
    scoring["CV-Bench-2D"] = {"setting": "vanilla", "macro": "source"}
    ctx = context(FILES, METHODS, [0, 1], scoring, max_error_rate=0.02)
    rd = ctx["reading"]
    rd["MMStar"] |= {"changed": 1, "warnings": ["MMStar.tsv has no image column"]}
    rd["3DSRBench"] |= {
        "limited": True,
        "skipped": [{"row": 3 + k, "reason": f"bad {k}"} for k in range(22)],
    }
    rd["CV-Bench-2D"] |= {"skipped": [{"row": 9, "reason": "no answer"}], "dropped": 1}
    ctx["settings"] |= {"shard": "1/2", "extract_model": "x/extract"}
    ctx["settings"]["verifier"]["max_calls"] = 40
    return ctx


# summary.md for run_rows() under run_context(), section by section.
GOLDEN = [
    "# VERDICT evaluation (verdict-eval/4)",
    "",
    (
        "**1 of 30 chains (3.3%) ended in an error, above --max-error-rate 2.0%: the table counts "
        "them as wrong. Run the same command again to retry them.**"
    ),
    "**1 chain(s) ended in: EndpointError: HTTP 500**",
    (
        "**the judges never gave a score in mean (every judge call abstained); check the judge "
        "model and --judge-format: their rows equal the reasoner's alone.**"
    ),
    "**Warning: MMStar.tsv has no image column.**",
    "",
    (
        "Reasoner `m`, judges `m`; 2 seed(s); n = 3, τ = 0.6, ε = 0.1, λ = (1.5, 1.0, 0.8), max "
        "steps 8, max calls per chain 40, shard 1/2, answers the rules cannot read go to "
        "`x/extract`."
    ),
    "",
    (
        "Reading: rows read, items (valid rows), rows skipped as malformed, rows dropped for "
        "having no image (as VLMEvalKit drops them), items in this run, of which ran again for an "
        "input changed since their rows were written."
    ),
    "",
    "| File | rows read | items | skipped | no image | run |",
    "|---|---|---|---|---|---|",
    "| MMStar.tsv | 3 | 2 | 0 | 0 | 2 (1 changed) |",
    "| 3DSRBench.tsv (read up to --limit) | 3 | 2 | 22 | 0 | 2 |",
    "| CV-Bench-2D.tsv | 3 | 2 | 1 | 1 | 2 |",
    "",
    (
        "Accuracy (%), mean ± sample std over seeds. Avg: per seed, the unweighted mean over the "
        "columns. An error, an unanswered or a declined item counts as wrong."
    ),
    "",
    "| Method | MMStar (dev) | MMStar (test) | 3DSRBench | CV-Bench-2D | Avg |",
    "|---|---|---|---|---|---|",
    "| base | 50.00 ±70.71 | 100.00 ±0.00 | 50.00 ±0.00 | 75.00 ±35.36 | 68.75 ±8.84 |",
    "| verdict+prior | 100.00 ±0.00 | 50.00 ±70.71 | 100.00 ±0.00 | 50.00 ±70.71 | 75.00 ±35.36 |",
    "| mean | — | — | — | — | — |",
    "",
    "Gain over base (points)",
    "",
    "| Method | MMStar (dev) | MMStar (test) | 3DSRBench | CV-Bench-2D | Avg |",
    "|---|---|---|---|---|---|",
    "| verdict+prior | +50.00 | -50.00 | +50.00 | -25.00 | +6.25 |",
    "| mean | — | — | — | — | — |",
    "",
    (
        "MMStar: rows that VLMEvalKit's quirks decided (chains, all seeds; docs/parity.md). "
        "VLMEvalKit's accuracy, as in the table, is the one comparable with published tables; the "
        "corrected reading re-reads the same replies without the reading quirks; the quirks of "
        "VLMEvalKit's inputs (re-saved images, the prompt's trailing space) changed what was sent, "
        "not how it was read, so their rows keep their hits."
    ),
    "",
    (
        "| Method | MMStar (dev) VLMEvalKit | MMStar (dev) corrected | MMStar (test) VLMEvalKit | "
        "MMStar (test) corrected | z_answer |"
    ),
    "|---|---|---|---|---|---|",
    "| base | 50.00 ±70.71 | 50.00 ±70.71 | 100.00 ±0.00 | 0.00 ±0.00 | 2 |",
    "| verdict+prior | 100.00 ±0.00 | 100.00 ±0.00 | 50.00 ±70.71 | 0.00 ±0.00 | 1 |",
    "| mean | — | — | — | — | 0 |",
    "",
    '- z_answer: answer cell "Z" right on a reply nothing was read from',
    "",
    (
        "Per method; an item is one chain (one item, one seed). Rates: fallback per step, "
        "abstention per judge call, unanswered and errors per item. Calls and tokens count cached "
        "replies too (the cost of the method alone); sent counts the HTTP requests this run made, "
        "and s the wall time, both of which the first method of an item pays for the methods after "
        "it. Answers: read as a letter, an option's text, a value, by the extraction model, "
        "declined (Z), unanswered. Extra calls and tokens are a judge mode's own (prior, fact "
        "sheet, premise checks), within calls and tokens; gate checks are the premise checks; "
        "sheet ok/retried/degraded counts a mode's chains whose fact sheet was valid at once, "
        "valid when asked once more, or malformed twice (degraded, also as a share). Revise calls "
        "and tokens are the revisions' (the reviser's call and the revision's judgements), within "
        "calls and tokens; revisions taken is the share of the revisions written that passed."
    ),
    "",
    (
        "| Method | fallback | abstention | unanswered | errors | calls/item | tokens/item | "
        "sent/item | s/item | extra calls/item | extra tokens/item | gate checks/item | sheet "
        "degraded | revise calls/item | revise tokens/item | revisions taken | sheet "
        "ok/retried/degraded | answers | extract calls/item | final/max/budget |"
    ),
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    (
        "| base | — | — | 0.0% | 0.0% | 3.5 | 35 | 2.5 | 1.75 | 0.0 | 0 | 0.0 | — | 0.0 | 0 | — | "
        "0/0/0 | 10/0/0/0/2/0 | 0.00 | 12/0/0 |"
    ),
    (
        "| verdict+prior | 14.3% | 11.1% | 0.0% | 8.3% | 3.5 | 35 | 2.5 | 1.75 | 2.5 | 12 | 1.0 | "
        "33.3% | 1.0 | 4 | 66.7% | 4/4/4 | 10/0/0/0/1/0 | 0.50 | 9/2/0 |"
    ),
    (
        "| mean | 0.0% | 100.0% | 0.0% | 0.0% | 3.5 | 35 | 2.5 | 1.75 | 0.0 | 0 | 0.0 | — | 0.0 | "
        "0 | — | 0/0/0 | 5/0/0/0/1/0 | 0.00 | 6/0/0 |"
    ),
    "",
    "MMStar, split dev (%, all seeds):",
    "",
    "| Column | base | verdict+prior | mean |",
    "|---|---|---|---|",
    "| Overall | 50.00 | 100.00 | 100.00 |",
    "| CP | 50.00 | 100.00 | 100.00 |",
    "| LR | — | — | — |",
    "| math | 50.00 | 100.00 | 100.00 |",
    "| ocr | — | — | — |",
    "",
    "MMStar, split test (%, all seeds):",
    "",
    "| Column | base | verdict+prior | mean |",
    "|---|---|---|---|",
    "| Overall | 100.00 | 50.00 | 0.00 |",
    "| CP | — | — | — |",
    "| LR | 100.00 | 50.00 | 0.00 |",
    "| math | — | — | — |",
    "| ocr | 100.00 | 50.00 | 0.00 |",
    "",
    "3DSRBench: VLMEvalKit's four settings (%, mean ± std over seeds); the table shows vanilla.",
    "",
    "| Setting | base | verdict+prior | mean |",
    "|---|---|---|---|",
    "| vanilla | 50.00 ±0.00 | 100.00 ±0.00 | — |",
    "| flip_eval | 0.00 ±0.00 | 100.00 ±0.00 | — |",
    "| circ_eval | 50.00 ±0.00 | 100.00 ±0.00 | — |",
    "| flip_circ_eval | 0.00 ±0.00 | 100.00 ±0.00 | — |",
    "",
    "3DSRBench, setting vanilla (%, all seeds):",
    "",
    "| Column | base | verdict+prior | mean |",
    "|---|---|---|---|",
    "| Overall | 50.00 | 100.00 | 0.00 |",
    "| height | 50.00 | 100.00 | 0.00 |",
    "",
    "CV-Bench-2D, split 2D (%, all seeds; Overall is the unweighted mean over source):",
    "",
    "| Column | base | verdict+prior | mean |",
    "|---|---|---|---|",
    "| ADE20K | 100.00 | 50.00 | 0.00 |",
    "| COCO | 50.00 | 50.00 | 100.00 |",
    "| Overall | 75.00 | 50.00 | 50.00 |",
    "",
    "MMStar.tsv: no malformed row(s) skipped",
    "",
    "3DSRBench.tsv: 22 malformed row(s) skipped",
    "- line 3: bad 0",
    "- line 4: bad 1",
    "- line 5: bad 2",
    "- line 6: bad 3",
    "- line 7: bad 4",
    "- line 8: bad 5",
    "- line 9: bad 6",
    "- line 10: bad 7",
    "- line 11: bad 8",
    "- line 12: bad 9",
    "- line 13: bad 10",
    "- line 14: bad 11",
    "- line 15: bad 12",
    "- line 16: bad 13",
    "- line 17: bad 14",
    "- line 18: bad 15",
    "- line 19: bad 16",
    "- line 20: bad 17",
    "- line 21: bad 18",
    "- line 22: bad 19",
    "- ... and 2 more (summary.json lists them all)",
    "",
    "CV-Bench-2D.tsv: 1 malformed row(s) skipped",
    "- line 9: no answer",
]


def test_render_is_the_golden_summary():
    assert tables.render(tables.summarize(run_rows(), run_context())).splitlines() == GOLDEN


# A plain run: one file, base and verdict (no judge mode, no revise), no shard, no call limit, no
# warning, no changed item, exactly SHOWN_SKIPS skipped rows. Item 1 is right in both seeds; item 2
# only in seed 1. So each method scores 50% (seed 0) and 100% (seed 1): mean 75.00, sample std
# sqrt(((50−75)² + (100−75)²) / 1) = 35.36; the gain is +0.00. Every row is fake_row's: 10 calls,
# 100 tokens, 10 sent, 1 s, a letter, "final".
PLAIN = [
    "# VERDICT evaluation (verdict-eval/4)",
    "",
    "Reasoner `m`, judges `m`; 2 seed(s); n = 3, τ = 0.6, ε = 0.1, λ = (1.5, 1.0, 0.8), "
    "max steps 8, max calls per chain unlimited.",
    "",
    "Reading: rows read, items (valid rows), rows skipped as malformed, rows dropped for having no "
    "image (as VLMEvalKit drops them), items in this run.",
    "",
    "| File | rows read | items | skipped | no image | run |",
    "|---|---|---|---|---|---|",
    "| F.tsv | 3 | 2 | 20 | 0 | 2 |",
    "",
    "Accuracy (%), mean ± sample std over seeds. Avg: per seed, the unweighted mean over the "
    "columns. An error, an unanswered or a declined item counts as wrong.",
    "",
    "| Method | F | Avg |",
    "|---|---|---|",
    "| base | 75.00 ±35.36 | 75.00 ±35.36 |",
    "| verdict | 75.00 ±35.36 | 75.00 ±35.36 |",
    "",
    "Gain over base (points)",
    "",
    "| Method | F | Avg |",
    "|---|---|---|",
    "| verdict | +0.00 | +0.00 |",
    "",
]
PLAIN_STATS = [  # no judge mode ran: no mode columns, no mode note, no fact-sheet column
    "Per method; an item is one chain (one item, one seed). Rates: fallback per step, abstention "
    "per judge call, unanswered and errors per item. Calls and tokens count cached replies too "
    "(the cost of the method alone); sent counts the HTTP requests this run made, and s the wall "
    "time, both of which the first method of an item pays for the methods after it. Answers: read "
    "as a letter, an option's text, a value, by the extraction model, declined (Z), unanswered.",
    "",
    "| Method | fallback | abstention | unanswered | errors | calls/item | tokens/item | sent/item "
    "| s/item | answers | extract calls/item | final/max/budget |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
    "| base | — | 0.0% | 0.0% | 0.0% | 10.0 | 100 | 10.0 | 1.00 | 4/0/0/0/0/0 | 0.00 | 4/0/0 |",
    "| verdict | 0.0% | 0.0% | 0.0% | 0.0% | 10.0 | 100 | 10.0 | 1.00 | 4/0/0/0/0/0 | 0.00 | "
    "4/0/0 |",
    "",
    "F (%, all seeds):",
    "",
    "| Column | base | verdict |",
    "|---|---|---|",
    "| Overall | 75.00 | 75.00 |",
    "| c | 75.00 | 75.00 |",
    "",
    "F.tsv: 20 malformed row(s) skipped",
    *(
        f"- line {10 + k}: bad {k}" for k in range(20)
    ),  # exactly SHOWN_SKIPS: all shown, no "more" line
]


def test_render_of_a_plain_run_leaves_out_what_did_not_happen():
    rows = [
        fake_row("F", s, m, c, id=i, row=n + 2, input={"index": i, "category": "c"})
        for s in (0, 1)
        for m in ("base", "verdict")
        for n, (i, c) in enumerate((("1", True), ("2", s == 1)))
    ]
    ctx = context(["F"], ["base", "verdict"], [0, 1], max_error_rate=0.5)
    ctx["reading"]["F"]["skipped"] = [
        {"row": 10 + k, "reason": f"bad {k}"} for k in range(tables.SHOWN_SKIPS)
    ]
    lines = tables.render(tables.summarize(rows, ctx)).splitlines()
    assert (
        tables.SHOWN_SKIPS == 20
        and lines[: len(PLAIN)] == PLAIN
        and lines[-len(PLAIN_STATS) :] == PLAIN_STATS
    )
    assert len(lines) == len(PLAIN) + len(PLAIN_STATS)


def test_empty_cells_errors_at_the_bar_and_two_silent_methods():
    # No value: no mean, no std, the (empty) seeds kept. No row: no error, rate 0. One error in 6
    # rows with --max-error-rate 1/6 is at the bar, not over it. Two judged methods whose every call
    # abstained are named in the first warning, in the order of the methods.
    assert tables._mean_std([]) == {"mean": None, "std": None, "per_seed": []}
    assert tables.summarize([], context(["F"], ["base"], [0]))["errors"] == {
        "rows": 0,
        "rate": 0.0,
        "over": False,
        "causes": [],
    }
    rows = [
        fake_row("F", 0, "base", True, id="1"),
        replace(fake_row("F", 0, "base", False, id="2"), error="E: x"),
    ]
    rows += [
        fake_row("F", 0, m, True, id=i, abstentions=9) for m in ("verdict", "mean") for i in "12"
    ]
    s = tables.summarize(
        rows, context(["F"], ["base", "verdict", "mean"], [0], max_error_rate=1 / 6)
    )
    assert s["errors"] == {
        "rows": 1,
        "rate": 1 / 6,
        "over": False,
        "causes": [{"error": "E: x", "rows": 1}],
    }
    assert s["silent_judges"] == [
        "verdict",
        "mean",
    ]
    assert (
        tables.render(s)
        .splitlines()[3]
        .startswith("**the judges never gave a score in verdict, mean (every")
    )


def test_two_files_quirk_sections_and_a_method_missing_from_a_split():
    # Each file a quirk decided gets its own section, in order; a method with no record in a
    # split shows "—".
    cell = {"mean": 0.5, "std": None, "per_seed": [0.5]}
    q = {
        f: {"rows": {"base": {"float_options": 1}}, "corrected": {"base": {f: cell}}}
        for f in ("F1", "F2")
    }
    s = {"methods": ["base"], "accuracy": {"base": {"F1": cell, "F2": cell}}, "quirks": q}
    heads = [line for line in tables._quirks(s) if "rows that VLMEvalKit's quirks decided" in line]
    assert [h.split(":")[0] for h in heads] == ["F1", "F2"]
    rec = {"method": "base", "setting": "vanilla", "split": "dev", "Overall": 0.5}
    s = {"methods": ["base", "verdict"], "variants": {}, "breakdown": {"F": [rec]}}
    s["reading"] = {"F": {"scoring": {"setting": "vanilla", "macro": None}}}
    assert tables._details(s, "F")[-1] == "| Overall | 50.00 | — |"


def test_a_summary_written_before_errors_had_causes_renders_without_them():
    # A summary.json of the same format from before "causes" was recorded: the count is said,
    # without causes.
    rows = [
        replace(fake_row("F", 0, "base", False, id="1"), error="E: x"),
        fake_row("F", 0, "base", True, id="2"),
    ]
    s = tables.summarize(rows, context(["F"], ["base"], [0], max_error_rate=0.1))
    del s["errors"]["causes"]
    lines = tables.render(s).splitlines()
    assert lines[2].startswith("**1 of 2 chains (50.0%) ended in an error") and lines[3] == ""
    assert not any("ended in:" in line for line in lines)
