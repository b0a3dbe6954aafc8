"""Questions and accuracy for VERDICT's harness, as VLMEvalKit scores each dataset: its settings,
and its per-split, per-category and per-l2-category tables.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, reports accuracy per benchmark (mean ± std over seeds),
the unweighted Avg and the gain over the base model. The accuracy of a benchmark here is
VLMEvalKit's on the same replies (docs/parity.md). Scoring follows VLMEvalKit per dataset
(benchmarks.scoring): one row one question ("vanilla"); circular files, where a question counts
right only if all its rotations (rows sharing a g_index; without the column, index mod 10^6) are,
kept at its main row (index = g_index); 3DSRBench's four settings from qid (vanilla; flip_eval, a
question with its -flip twin; circ_eval, with its rotations -1, -2, ...; flip_circ_eval, all of
them), of which the table shows vanilla; CV-Bench-2D, whose Overall is the unweighted mean over its
`source` values; MathVista's per task and skill. A file whose rows hold two or more `split` values
gets one column per split in the paper's table.
"""

from __future__ import annotations

import ast
import statistics

from verdict_lab.harness.cells import NA_VALUES, Column, shown, value
from verdict_lab.harness.items import LETTER
from verdict_lab.harness.rows import Row
from verdict_lab.harness.tsv import kind

SETTINGS = {
    "vanilla": ("vanilla",),
    "circular": ("circular",),
    "3dsr": ("vanilla", "flip_eval", "circ_eval", "flip_circ_eval"),
}


MMB_ABBRS = {  # VLMEvalKit's report_acc names these l2-categories (and categories) so
    "coarse_perception": "CP",
    "finegrained_perception (instance-level)": "FP-S",
    "finegrained_perception (cross-instance)": "FP-C",
    "logic_reasoning": "LR",
    "relation_reasoning": "RR",
    "attribute_reasoning": "AR",
}


def _group(r: Row, setting: str) -> tuple:
    """(the key of r's question under `setting`, r's own key): a question is kept at the row whose
    own key is the question's key."""
    inp = r.input
    if setting == "circular":
        own = str(inp.get("index") or r.id)
        g = inp.get("g_index") or (str(int(own) % 1_000_000) if own.lstrip("-").isdigit() else own)
        return str(g), own
    qid = inp.get("qid", "")
    base, flip = qid.split("-")[0], "-flip" in qid
    key = {
        "flip_eval": qid.replace("-flip", ""),
        "circ_eval": base + "-flip" * flip,
        "flip_circ_eval": base,
    }[setting]
    return key, qid


def questions(rows: list, setting: str) -> list:
    """[(row, hit)], one per question under `setting`: each row for "vanilla"; else a group of rows
    is one question, right only if every row in it is, kept at its main row (a group without one is
    left out)."""
    if setting == "vanilla":
        return [(r, r.correct) for r in rows]
    groups: dict = {}
    for r in rows:
        key, own = _group(r, setting)
        g = groups.setdefault(key, [None, True])
        g[0], g[1] = (r if own == key else g[0]), g[1] and r.correct
    return [(main, hit) for main, hit in groups.values() if main is not None]


def accuracy(pairs: list, macro: str | None = None) -> float | None:
    """The share of hits; with `macro`, the unweighted mean over that input column's values of each
    one's share."""
    if not pairs:
        return None
    if macro is None:
        return statistics.fmean(hit for _, hit in pairs)
    groups = _by(pairs, macro)
    return statistics.fmean(accuracy(g) for g in groups.values()) if groups else None


def split_of(r: Row) -> str:
    return r.input.get("split") or "none"


def columns(files: list, by: dict) -> dict:
    """{column name: (file, split or None)}: one column per file, or per split of a file with
    several."""
    out = {}
    for f in files:
        splits = sorted({split_of(r) for k, rs in by.items() if k[0] == f for r in rs})
        out.update({f: (f, None)} if len(splits) < 2 else {f"{f} ({s})": (f, s) for s in splits})
    return out


def cell(r: Row, col: str):
    """The cell of column `col` in a row's input, found as VLMEvalKit's evaluate() finds it after
    renaming every column but an option letter to lower case ("Category" is category, and wins over
    "category")."""
    found = [k for k in r.input if k.lower() == col and not LETTER.fullmatch(k)]
    return r.input[sorted(found, key=lambda k: k == col)[0]] if found else None


def labels(pairs: list, col: str) -> list:
    """Column `col`'s value per pair's row, as pandas types the column over these rows and str()
    prints it ("01" -> "1"; "1" -> "1.0" beside a missing cell), with the key it sorts by; None when
    missing."""
    cells = [cell(r, col) for r, _ in pairs]
    c = Column()
    for x in cells:
        c.note("" if x is None else str(x))
    dtype = c.dtype
    return [
        None if x is None or x in NA_VALUES else (value(str(x), dtype), shown(str(x), dtype))
        for x in cells
    ]


def _by(pairs: list, col: str) -> dict:
    """{label: [(row, hit)]}, labels sorted as pandas' values sort (numbers as numbers)."""
    out: dict = {}
    for p, lab in sorted(
        ((p, lab) for p, lab in zip(pairs, labels(pairs, col)) if lab is not None),
        key=lambda x: x[1][0],
    ):
        out.setdefault(lab[1], []).append(p)  # the pair itself: breakdown finds it by id
    return out


def _skills(cell: str) -> list:
    """MathVista's skills cell, read as MathVista_acc reads it: a Python list literal, else the
    cell."""
    try:
        out = ast.literal_eval(cell)
    except (ValueError, SyntaxError):
        return [cell]
    return list(out) if isinstance(out, (list, tuple)) else [cell]


def mathvista_table(pairs: list, prefetched) -> list:
    """MathVista_acc's table: per key (Overall, then each row's skills and task, as first met) tot,
    prefetch (rows prefetched(row) accepts), hit, prefetch_rate and acc in %, computed as VLMEvalKit
    computes them (divided, then times 100: 11 of 20 is 55.00000000000001, where 100 * 11 / 20 is
    55.0)."""
    tot: dict = {}
    for r, hit in pairs:
        for k in ["Overall"] + _skills(r.input.get("skills", "")) + [r.input.get("task", "")]:
            t = tot.setdefault(k, [0, 0, 0])  # tot, prefetch, hit
            t[0], t[1], t[2] = t[0] + 1, t[1] + bool(prefetched(r)), t[2] + hit
    return [
        {
            "Task&Skill": k,
            "tot": n,
            "prefetch": f,
            "hit": h,
            "prefetch_rate": f / n * 100,
            "acc": h / n * 100,
        }
        for k, (n, f, h) in tot.items()
    ]


def breakdown(rows: list, setting: str, scoring: dict | None) -> list:
    """VLMEvalKit's table over `rows` (all seeds pooled), fractions, one record per split:
    - report_acc: split, Overall, then per l2-category and per category value (MMBench's
      l2-categories by their abbreviations), each sorted; values typed as pandas types them
      (labels), a value with no row in a split None there;
    - CV-Bench (macro "source", a file whose every split is 2D): split, the accuracy per source
      (sorted; VLMEvalKit's order is a set's), then Overall, their unweighted mean;
    - MathVista: one record, split "none", Overall, then per skill and per task as MathVista_acc."""
    scoring = scoring or {}
    pairs = questions(rows, setting)
    if (scoring.get("kind") or (rows and kind(rows[0].data))) == "mathvista":
        table = mathvista_table(pairs, bool)
        return [{"split": "none"} | {t["Task&Skill"]: t["hit"] / t["tot"] for t in table}]
    if scoring.get("macro"):
        out = []
        for split, here in _by(pairs, "split").items():
            rec = {
                "split": split,
                **{k: accuracy(v) for k, v in _by(here, scoring["macro"]).items()},
            }
            out.append(rec | {"Overall": accuracy(here, scoring["macro"])})
        return out
    has_split = any(k.lower() == "split" for r, _ in pairs for k in r.input)
    splits = _by(pairs, "split") if has_split else {"none": pairs}
    out = [{"split": sp, "Overall": accuracy(here)} for sp, here in splits.items()]
    where = {id(p): sp for sp, here in splits.items() for p in here}
    for col in ("l2-category", "category"):
        for v, group in _by(pairs, col).items():
            for rec in out:
                rec[MMB_ABBRS.get(v, v)] = accuracy(
                    [p for p in group if where.get(id(p)) == rec["split"]]
                )
    return out
