"""VLMEvalKit's files as verdict_lab.evaluate writes them score, under VLMEvalKit's own rules, to
the numbers of the summary: the benchmarks the README names (3DSRBench, CV-Bench-2D, CV-Bench-3D,
BLINK, MMStar, AI2D_TEST) and MathVista, end to end against the loopback server.

Each <model>_<data>.tsv is read back as VLMEvalKit's load() reads it (pandas' read_csv: the
prediction column typed as pandas types it, then str() of each cell, as its evaluate() does), each
prediction scored against the benchmark file's own row by the rules tests/parity.jsonl pins
(answers.score: can_infer, or MathVista's post_check with its prefetch, no judge), and each
dataset's accuracy computed as VLMEvalKit's evaluate() does (CV-Bench-2D: the mean over its
sources). The reasoner's first step names option letters ("Looking at options A and C first."), so a
prediction column holding the whole chain would score otherwise.

MathVista's _exact_matching_score.csv is pinned byte for byte: VLMEvalKit's MathVista.evaluate
(e8e78f05) wrote the same bytes from the predictions file alone (its judge answering nothing, so
only its prefetch decides) and from our _exact_matching.tsv (docs/parity.md says how)."""

import csv
import json
import re
import statistics

from verdict_lab import evaluate
from verdict_lab.harness import accuracy as accuracy_mod
from verdict_lab.harness import answers, benchmarks, vlmeval_files
from verdict_lab.harness.cells import Column, shown
from verdict_lab.harness.vlmeval_files import CHAIN
from verdict_lab.layouts import role_of
from verdict_lab.loopback import chat_response, user_text
from test_benchmarks import b64, png, tsv
from test_evaluate import argv
from test_tables import fake_row
from test_vlmevalkit import benchmarks_dir

FIRST = "Looking at options A and C first."  # a step whose letters a whole-chain reading would see


def final(text: str, seed: int) -> str:
    """The final answer for a question: by its tag, so that some are right and some wrong."""
    tag = re.search(r"\[([\w-]+)\]", text).group(1)
    if tag.startswith("MV-"):
        return MV_REPLIES[int(tag[3:])]
    if tag.startswith("CV"):
        return f"Final answer: ({'AB'[(len(tag) + seed) % 2]})"
    if seed == 0 and tag in RIGHT:
        return f"Final answer: {RIGHT[tag]}"
    return f"Final answer: {'ABBA'[(sum(map(ord, tag)) + seed) % 4]}"


RIGHT = {"MS-0": "A", "MS-2": "C", "AI-0": "B", "AI-1": "C"}  # seed 0 answers these right


def script(body, path):
    """The reasoner: FIRST, then the final answer (MS-1's chain never ends: max_steps, its last step
    scored); the judges: a digit 6 for everything (accepted: the rules take candidate 0)."""
    role, text = role_of(body["messages"]), user_text(body)
    n = body.get("n", 1)
    if role != "reasoner":
        return 200, chat_response(json.dumps({"reason": "ok", "score": 6}))
    if "[MS-1]" in text:
        return 200, chat_response(["Option B would be my guess, not A."] * n)
    step = final(text, body["seed"]) if FIRST in text else FIRST
    return 200, chat_response([step] * n)


def read_back(path) -> list:
    """A predictions or result TSV as VLMEvalKit's load() reads it: [{column: text}], the prediction
    and res columns typed as pandas types them over the file and printed by str() ("nan" for a
    missing cell)."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    for col in ("prediction", "res", CHAIN):
        if rows and col in rows[0]:
            typed = Column()
            for r in rows:
                typed.note(r[col])
            for r in rows:
                r[col] = shown(r[col], typed.dtype) or "nan"
    return rows


def rescored(tsv_path, data_file, column="prediction") -> list:
    """[(index, hit)]: each prediction of the file scored against the benchmark file's row, as
    VLMEvalKit's evaluate() scores it under exact matching."""
    items = {it.id: it for it in benchmarks.load(str(data_file)).items}
    return [
        (r["index"], answers.score(items[r["index"]], r[column])[2]) for r in read_back(tsv_path)
    ]


def accuracy(hits: list, sources: dict | None = None) -> float:
    """The share of hits in %; with sources ({index: source}), the mean over sources
    (CVBench.evaluate)."""
    if sources is None:
        return 100 * statistics.fmean(h for _, h in hits)
    by: dict = {}
    for i, h in hits:
        by.setdefault(sources[i], []).append(h)
    return 100 * statistics.fmean(statistics.fmean(v) for v in by.values())


def test_every_readme_benchmark_rescores_to_the_summary(tmp_path, loopback):
    files, _ = benchmarks_dir(tmp_path)
    srv, out = loopback(script), tmp_path / "out"
    flags = "--seeds 2 --rules base,verdict --max-steps 3"
    assert evaluate.main(argv(files, srv.url, out, flags)) == 0
    summary = json.loads((out / "summary.json").read_text())
    results = {
        (r["data"], r["id"], r["seed"], r["method"]): r["correct"]
        for r in map(json.loads, open(out / "results.jsonl"))
    }
    by_name = {f.rsplit("/", 1)[-1][: -len(".tsv")]: f for f in files}
    differs = set()
    for method in ("base", "verdict"):
        for data, path in by_name.items():
            sources = None
            if data == "CV-Bench-2D":
                sources = {it.id: dict(it.fields)["source"] for it in benchmarks.load(path).items}
            accs = []
            for seed in (0, 1):
                pred = out / f"default-{method}" / f"seed{seed}" / f"default-{method}_{data}.tsv"
                hits = rescored(pred, path)
                assert hits == [(i, results[data, i, seed, method]) for i, _ in hits], (
                    data,
                    method,
                    seed,
                )
                accs.append(accuracy(hits, sources))
                if rescored(pred, path, CHAIN) != hits:
                    differs.add(data)  # the whole chain would not score so
            assert statistics.fmean(accs) == summary["accuracy"][method][data]["mean"], (
                data,
                method,
            )
    assert differs == set(by_name)  # in every file, some row's whole chain scores otherwise


# MathVista: 20 rows whose table holds VLMEvalKit's float digits (hits 11 of 20 Overall, 2 of the 7
# rows of T1, 1 of the 6 rows of S1), and the rows its prefetch leaves to a judge: values read but
# wrong (rows 5, 6, 9, 10), a right 0 (rows 3, 7), a reply with nothing to read.
T1, T2 = "figure question answering", "math word problem"
S1, S2, S3 = "algebraic reasoning", "arithmetic reasoning", "statistical reasoning"
KIND = {
    0: ("multi_choice", "text", "8/11"),
    1: ("free_form", "integer", "14"),
    2: ("free_form", "float", "1.5"),
}
MV_REPLIES = {
    **{
        i: "Final answer: " + {0: "B", 1: "14", 2: "1.5", 3: "7"}[i % 4]
        for i in (1, 2, *range(11, 20))
    },
    3: "Final answer: 0",  # right, but 0: VLMEvalKit's prefetch drops it
    4: "Final answer: C",  # a wrong letter: prefetched
    5: "Final answer: 15",  # a value read but wrong: not prefetched
    6: "Final answer: 1.45",
    7: "Final answer: 0",
    8: "Final answer: Cannot determine the answer",  # can_infer's "Z": prefetched
    9: "Final answer: about fifteen",  # nothing read
    10: "Final answer: 1.45",
    20: "Final answer: none of them",  # no letter: not prefetched
}


def mathvista_file(tmp_path) -> str:
    head = ["index", "image", "question", "answer", "question_type", "answer_type", "choices"]
    head += ["answer_option", "precision", "unit", "task", "skills"]
    rows = []
    for i in range(1, 21):
        skills = [S1] if i in (1, 3, 4, 8, 9, 10) else [S2]
        skills += [S3] if i in (1, 11) else []
        qtype, atype, answer = KIND.get(
            i % 4, ("free_form", "integer", "0" if i in (3, 7) else "7")
        )
        choices, option = ("['3/11', '8/11', '6/11']", "B") if qtype == "multi_choice" else ("", "")
        im = b64(png("red"))
        rows.append(
            [
                str(i),
                im,
                f"[MV-{i}] Question {i}",
                answer,
                qtype,
                atype,
                choices,
                option,
                "",
                "",
                T1 if i <= 7 else T2,
            ]
            + [str(skills)]
        )
    return tsv(tmp_path / "MathVista_MINI.tsv", head, rows)


SCORE_CSV = (  # VLMEvalKit's MathVista.evaluate (e8e78f05) wrote these bytes from this run's files
    '"Task&Skill","tot","prefetch","hit","prefetch_rate","acc"\n'
    '"Overall","20","13","11","65.0","55.00000000000001"\n'
    '"algebraic reasoning","6","3","1","50.0","16.666666666666664"\n'
    '"statistical reasoning","2","2","2","100.0","100.0"\n'
    '"figure question answering","7","3","2","42.857142857142854","28.57142857142857"\n'
    '"arithmetic reasoning","14","10","10","71.42857142857143","71.42857142857143"\n'
    '"math word problem","13","10","9","76.92307692307693","69.23076923076923"\n'
)


def test_mathvista_score_csv_is_vlmevalkits_byte_for_byte(tmp_path, loopback):
    path, srv, out = mathvista_file(tmp_path), loopback(script), tmp_path / "out"
    assert evaluate.main(argv([path], srv.url, out, "--seeds 1 --rules base --max-steps 3")) == 0
    run = out / "default-base" / "seed0"
    assert (
        run / "default-base_MathVista_MINI_exact_matching_score.csv"
    ).read_bytes() == SCORE_CSV.encode()
    stored = read_back(run / "default-base_MathVista_MINI_exact_matching.tsv")
    logs = {r["index"]: (r["res"], r["log"]) for r in stored}
    assert (
        logs["5"] == logs["6"] == logs["9"] == logs["3"] == logs["20"] == ("nan", "")
    )  # to a judge: none
    assert logs["4"] == ("C", "Prefetch succeed") and logs["8"] == ("Z", "Prefetch succeed")
    assert logs["1"] == ("14", "Prefetch succeed") and logs["2"] == ("1.5", "Prefetch succeed")
    # the predictions alone, by post_check(prefetch=True): the same prefetch and hits
    items = {it.id: it for it in benchmarks.load(path).items}
    pred = read_back(run / "default-base_MathVista_MINI.tsv")
    scored = [answers.score(items[r["index"]], r["prediction"]) for r in pred]
    assert sum(answers.prefetched(how, ok) for _, how, ok in scored) == 13
    assert sum(ok for _, _, ok in scored) == 11
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accuracy"]["base"]["MathVista_MINI"]["mean"] == 55.00000000000001 or (
        abs(summary["accuracy"]["base"]["MathVista_MINI"]["mean"] - 55.0) < 1e-9
    )


def test_the_score_table_of_vlmevalkits_own_run_by_hand(tmp_path):
    """The 20-row table VLMEvalKit's MathVista.evaluate wrote with a judge (mathvista_arith.py
    --confirm: its prefetch took rows 1, 2, 4, 8, 12, 14, 16, 17, 18, 20; the judge gave the other
    hits), from the same rows' tasks, skills, prefetch and hits: the same bytes, floats divided then
    times 100."""
    fetched = {1, 2, 4, 8, 12, 14, 16, 17, 18, 20}
    rows = []
    for i in range(1, 21):
        skills = ([S1] if i in (1, 3, 4, 8, 9, 10) else [S2]) + ([S3] if i in (1, 11) else [])
        inp = {"task": T1 if i <= 7 else T2, "skills": str(skills)}
        rows.append(
            (
                fake_row(
                    "MathVista_MINI", 0, "base", i in (1, 2) or 11 <= i <= 19, id=str(i), input=inp
                ),
                i,
            )
        )
    table = accuracy_mod.mathvista_table(
        [(r, r.correct) for r, _ in rows], lambda r: int(r.id) in fetched
    )
    vlmeval_files.write_acc_csv(str(tmp_path / "score.csv"), table)
    assert (tmp_path / "score.csv").read_text() == (
        '"Task&Skill","tot","prefetch","hit","prefetch_rate","acc"\n'
        '"Overall","20","10","11","50.0","55.00000000000001"\n'
        '"algebraic reasoning","6","3","1","50.0","16.666666666666664"\n'
        '"statistical reasoning","2","1","2","50.0","100.0"\n'
        '"figure question answering","7","3","2","42.857142857142854","28.57142857142857"\n'
        '"arithmetic reasoning","14","7","10","50.0","71.42857142857143"\n'
        '"math word problem","13","7","9","53.84615384615385","69.23076923076923"\n'
    )
