"""VLMEvalKit's own files from VERDICT's harness, one directory per (model, method, seed), which
VLMEvalKit's dataset.evaluate() reads back unchanged.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, reports accuracy per benchmark (mean ± std over seeds),
the unweighted Avg and the gain over the base model. This module writes, from evaluate.py's rows
(rows.Row), in OUT/<model>/seed<k>/ (write_runs):
- <model>_<data>.tsv, the predictions (every input column but the image, then `prediction`, the text
  that was scored, which VLMEvalKit's evaluate() re-scores to the same numbers, and `verdict_chain`,
  the whole chain);
- <model>_<data>_acc.csv (split, Overall, then one column per l2-category and per category,
  fractions in [0, 1], every field quoted); 3DSRBench's <model>_3DSRBench_results.tsv and
  MathVista's <model>_<data>_<judge>.tsv and _score.csv in their place.
"""

from __future__ import annotations

import csv
import os
import re

from verdict_lab.harness.accuracy import SETTINGS, breakdown, mathvista_table
from verdict_lab.harness.answers import prefetched
from verdict_lab.harness.rows import Row
from verdict_lab.harness.tsv import kind


# VLMEvalKit's own failure message (inference.py), the one vlmevalkit/verdict_model.py uses too.
FAIL_MSG = "Failed to obtain answer via API."


def write_acc_csv(path: str, records: list, sep: str = ",") -> None:
    """A per-category table as VLMEvalKit's _acc.csv (dump: every field quoted): fractions, empty
    for none."""
    keys = list(dict.fromkeys(k for r in records for k in r))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, delimiter=sep, quoting=csv.QUOTE_ALL, lineterminator="\n")
        w.writerow(keys)
        w.writerows([["" if r.get(k) is None else r[k] for k in keys] for r in records])


def model_name(model: str, method: str) -> str:
    """VLMEvalKit's model name of a method's runs: --model's last path part, "-", the method; a
    character that is not a letter, digit or one of . _ + - becomes "-"
    ("Qwen/Qwen2.5-VL-7B-Instruct", "verdict+zoom" -> "Qwen2.5-VL-7B-Instruct-verdict+zoom")."""
    base = re.sub(r"[^A-Za-z0-9._+-]", "-", model.rstrip("/").rsplit("/", 1)[-1]) or "model"
    return f"{base}-{method}"


def dataset_name(data: str) -> str:
    """VLMEvalKit's dataset name of a file: its name, less the "_local" of a file LOCALIZE wrote."""
    return data[: -len("_local")] if data.endswith("_local") else data


CHAIN = (
    "verdict_chain"  # the predictions' column with the whole chain, beside VLMEvalKit's prediction
)


def output(r: Row) -> str:
    """VLMEvalKit's prediction: the text the row was scored on (answers.score's input: the text
    after "Final answer:", or the last chosen step of a chain cut short; "" without a step), which
    VLMEvalKit's own exact matching then reads to the same hit; an error row, VLMEvalKit's failure
    message and the error (VLMEvalKit asks such items again)."""
    if r.error:
        return f"{FAIL_MSG} ({r.error})"
    return r.prediction or ""


def chain(r: Row) -> str:
    """The whole chain: its chosen steps, one per line ("" for an error row or a chain with no
    step)."""
    return "\n".join((r.trace or {}).get("chain") or [])


def write_predictions(path: str, rows: list) -> None:
    """One run's predictions as VLMEvalKit's <model>_<data>.tsv (PRED_FORMAT=tsv): the file's
    columns but the image, then prediction (output: what was scored) and verdict_chain (chain),
    every field quoted, in the file's order."""
    rows = sorted(rows, key=lambda r: r.row)
    drop = ("image", "prediction", CHAIN)
    keys = [k for k in dict.fromkeys(k for r in rows for k in r.input) if k not in drop]
    write_acc_csv(
        path,
        [
            {**{k: r.input.get(k, "") for k in keys}, "prediction": output(r), CHAIN: chain(r)}
            for r in rows
        ],
        "\t",
    )


def mathvista_log(r: Row) -> tuple:
    """(res, log) of a row in MathVista's _<judge>.tsv, as MathVista_auxeval writes them: a row that
    post_check(prefetch=True) accepts (answers.prefetched) logs "Prefetch succeed" with the value or
    letter it read ("Z" for a declined reply); a row --extract-model read logs "Succeed" with its
    value; any other row went to no judge, so res and log are empty and VLMEvalKit's post_check
    finds no hit in it, as here."""
    if prefetched(r.extracted, r.correct):
        return ("Z" if r.extracted == "declined" else r.pred or ""), "Prefetch succeed"
    if r.extracted == "judge":
        return r.pred or "", "Succeed"
    return "", ""


def write_mathvista(path: str, rows: list, judge: str) -> None:
    """MathVista's result files: <model>_<data>_<judge>.tsv, the predictions with res and log
    (mathvista_log), which VLMEvalKit's evaluate() scores as is; and
    <model>_<data>_<judge>_score.csv, MathVista_acc's table (Task&Skill, tot, prefetch, hit,
    prefetch_rate, acc in %), Overall, then skills and tasks as met, its floats VLMEvalKit's to the
    last digit (accuracy.mathvista_table)."""
    rows = sorted(rows, key=lambda r: r.row)
    write_predictions(path, rows)
    with open(path, encoding="utf-8", newline="") as fh:
        table = list(csv.reader(fh, delimiter="\t"))
    table[0] += ["res", "log"]
    for line, r in zip(table[1:], rows):
        line += list(mathvista_log(r))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, delimiter="\t", quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(table)
    pre = lambda r: mathvista_log(r)[1] == "Prefetch succeed"
    write_acc_csv(
        path[: -len(".tsv")] + "_score.csv", mathvista_table([(r, r.correct) for r in rows], pre)
    )


def write_runs(out: str, summary: dict, rows: list) -> list:
    """VLMEvalKit's files, one directory per (model, method, seed): OUT/<model>/seed<k>/, <model>
    being model_name(--model, method), as VLMEvalKit's work_dir/<model>/<eval_id>/. In each, per
    file: <model>_<data>.tsv (predictions) and <model>_<data>_acc.csv (report_acc of that seed's
    rows); for 3DSRBench <model>_3DSRBench_results.tsv (setting, Overall, categories) in place of
    the _acc.csv; for MathVista write_mathvista's two files. Returns the directories written."""
    by: dict = {}
    for r in rows:
        by.setdefault((str(r.method), r.seed), {}).setdefault(r.data, []).append(r)
    judge = re.sub(
        r"[^A-Za-z0-9._+-]", "-", summary["settings"].get("extract_model") or "exact_matching"
    )
    dirs = []
    for (method, seed), files in sorted(by.items()):
        model = model_name(summary["settings"]["model"], method)
        dirs.append(os.path.join(out, model, f"seed{seed}"))
        os.makedirs(dirs[-1], exist_ok=True)
        for data, rs in files.items():
            stem = os.path.join(dirs[-1], f"{model}_{dataset_name(data)}")
            write_predictions(stem + ".tsv", rs)
            scoring = summary["reading"][data]["scoring"] if data in summary["reading"] else None
            if (scoring or {}).get("kind", kind(data)) == "mathvista":
                write_mathvista(f"{stem}_{judge}.tsv", rs, judge)
            elif scoring and scoring["setting"] == "3dsr":
                recs = [
                    {"setting": st, **{k: v for k, v in rec.items() if k != "split"}}
                    for st in SETTINGS["3dsr"]
                    for rec in breakdown(rs, st, scoring)
                ]
                write_acc_csv(stem + "_results.tsv", recs, "\t")
            else:
                write_acc_csv(
                    stem + "_acc.csv",
                    breakdown(rs, scoring["setting"] if scoring else "vanilla", scoring),
                )
    return dirs
