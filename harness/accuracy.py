"""Questions and accuracy for VERDICT's harness, as VLMEvalKit scores each dataset: its settings, and its
per-split, per-category and per-l2-category tables.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, reports accuracy per benchmark (mean ± std over seeds), the
unweighted Avg and the gain over the base model. The accuracy of a benchmark is
VLMEvalKit's on the same replies:
Scoring follows VLMEvalKit per dataset (benchmarks.scoring): one row one question ("vanilla"); circular
files, where a question counts right only if all its rotations (rows sharing a g_index; without the column,
index mod 10^6) are, kept at its main row (index = g_index); 3DSRBench's four settings from qid (vanilla;
flip_eval, a question with its -flip twin; circ_eval, with its rotations -1, -2, ...; flip_circ_eval, all
of them), of which the table shows vanilla; CV-Bench-2D, whose Overall is the unweighted mean over its
`source` values. A file whose rows hold two or more `split` values gets one column per split.
"""

from __future__ import annotations

import statistics

from harness.rows import Row

SETTINGS = {
    "vanilla": ("vanilla",),
    "circular": ("circular",),
    "3dsr": ("vanilla", "flip_eval", "circ_eval", "flip_circ_eval"),
}


def _group(r: Row, setting: str) -> tuple:
    """(the key of r's question under `setting`, r's own key): a question is kept at the row whose own key
    is the question's key."""
    inp = r.input
    if setting == "circular":
        own = str(inp.get("index") or r.id)
        g = inp.get("g_index") or (str(int(own) % 1_000_000) if own.lstrip("-").isdigit() else own)
        return str(g), own
    qid = inp.get("qid", "")
    base, flip = qid.split("-")[0], "-flip" in qid
    key = {"flip_eval": qid.replace("-flip", ""), "circ_eval": base + "-flip" * flip, "flip_circ_eval": base}[
        setting
    ]
    return key, qid


def questions(rows: list, setting: str) -> list:
    """[(row, hit)], one per question under `setting`: each row for "vanilla"; else a group of rows is one
    question, right only if every row in it is, kept at its main row (a group without one is left out)."""
    if setting == "vanilla":
        return [(r, r.correct) for r in rows]
    groups: dict = {}
    for r in rows:
        key, own = _group(r, setting)
        g = groups.setdefault(key, [None, True])
        g[0], g[1] = (r if own == key else g[0]), g[1] and r.correct
    return [(main, hit) for main, hit in groups.values() if main is not None]


def accuracy(pairs: list, macro: str | None = None) -> float | None:
    """The share of hits; with `macro`, the unweighted mean over that input column's values of each one's
    share."""
    if not pairs:
        return None
    if macro is None:
        return statistics.fmean(hit for _, hit in pairs)
    by: dict = {}
    for r, hit in pairs:
        by.setdefault(r.input.get(macro, ""), []).append(hit)
    return statistics.fmean(statistics.fmean(v) for v in by.values())


def split_of(r: Row) -> str:
    return r.input.get("split") or "none"


def columns(files: list, by: dict) -> dict:
    """{column name: (file, split or None)}: one column per file, or per split of a file with several."""
    out = {}
    for f in files:
        splits = sorted({split_of(r) for k, rs in by.items() if k[0] == f for r in rs})
        out.update({f: (f, None)} if len(splits) < 2 else {f"{f} ({s})": (f, s) for s in splits})
    return out


def breakdown(rows: list, setting: str, macro: str | None) -> list:
    """VLMEvalKit's report_acc over `rows` (all seeds pooled): one record per split with Overall, then the
    accuracy per `source` (macro), l2-category and category value, each column sorted."""
    pairs = questions(rows, setting)
    out = []
    for split in sorted({split_of(r) for r, _ in pairs}):
        here = [(r, h) for r, h in pairs if split_of(r) == split]
        rec = {"split": split, "Overall": accuracy(here, macro)}
        for col in ([macro] if macro else []) + ["l2-category", "category"]:
            for v in sorted({r.input[col] for r, _ in here if r.input.get(col)}):
                rec[v] = accuracy([(r, h) for r, h in here if r.input.get(col) == v])
        out.append(rec)
    return out
