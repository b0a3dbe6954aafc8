"""The tables of VERDICT's harness: results rows -> the paper's table, VLMEvalKit's per-category
tables and prediction files, and a picture.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, reports accuracy per benchmark (mean ± std over seeds),
the unweighted Avg and the gain over the base model. This module writes, from evaluate.py's rows
(rows.Row):

- summary.json ("verdict-eval/4") and summary.md: that table, the per-method statistics, what
  reading each file found (and its sha256, the digest of every item run, how many items ran again
  for a changed input), the judged methods whose judges never gave a score, the rows VLMEvalKit's
  quirks decided, and accuracy per category, l2-category and split;
- VLMEvalKit's own files (vlmeval_files.write_runs), one directory per (model, method, seed);
- summary.png: accuracy per method and benchmark, bars ± the std over seeds;
- with a search among the methods (search.py), accuracy against compute: a table in summary.md (Avg
  accuracy beside reasoner tokens, judge calls, calls and requests per item) and compute.png, Avg
  accuracy against reasoner tokens and against judge calls per item, base and VERDICT on the same
  axes.

Accuracy is VLMEvalKit's on the same replies, per dataset (accuracy.py).
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import statistics

from verdict_lab import charts
from verdict_lab.harness import quirks, vlmeval_files
from verdict_lab.harness.accuracy import SETTINGS, accuracy, breakdown, columns, questions, split_of
from verdict_lab.harness.rows import EXTRACTED, SHEET_STATUSES, Method
from verdict_lab.charts import font

SUMMARY_FORMAT = "verdict-eval/4"
CONTEXT = (
    "files",
    "methods",
    "seeds",
    "settings",
    "reading",
    "max_error_rate",
)  # what a summary is made from


def _mean_std(xs: list) -> dict:
    """mean ± sample std (n − 1) over seeds; std is None for one seed, everything None for none."""
    if not xs or any(x is None for x in xs):
        return {"mean": None, "std": None, "per_seed": xs}
    return {
        "mean": statistics.fmean(xs),
        "std": statistics.stdev(xs) if len(xs) > 1 else None,
        "per_seed": xs,
    }


# ----------------------------------------------------------------------------- the summary


def _stats(rs: list, method: str) -> dict:
    tot = [r.trace["totals"] for r in rs if r.trace]
    steps, jcalls = sum(t["steps"] for t in tot), sum(t["judge_calls"] for t in tot)
    per = lambda xs: statistics.fmean(xs) if rs else None  # xs: one number per chain
    rate = lambda num, den: num / den if den else None
    m = Method.parse(method)
    stepwise = m.judged and not m.search  # base and the searches have no fallback
    return {
        "chains": len(rs),
        "steps": steps,
        "fallback_rate": rate(sum(t["fallbacks"] for t in tot), steps) if stepwise else None,
        "abstention_rate": rate(sum(t["abstentions"] for t in tot), jcalls),
        "unanswered_rate": rate(
            sum(r.extracted == "unanswered" and not r.error for r in rs), len(rs)
        ),
        "error_rate": rate(sum(bool(r.error) for r in rs), len(rs)),
        "extracted": {
            k: sum(r.extracted == k and not r.error for r in rs) for k in EXTRACTED
        },  # not errors
        "stopped": {k: sum(r.stopped == k for r in rs) for k in ("final", "max_steps", "budget")},
        "calls_per_item": per([r.calls for r in rs]),
        "tokens_per_item": per([r.tokens for r in rs]),
        "sent_per_item": per([r.sent for r in rs]),
        "seconds_per_item": per([r.seconds for r in rs]),
        "extra_calls_per_item": per([r.extra_calls for r in rs]),
        "extra_tokens_per_item": per([r.extra_tokens for r in rs]),
        "extract_calls_per_item": per([r.extract_calls for r in rs]),
        "reasoner_calls_per_item": per([r.reasoner_calls for r in rs]),
        "reasoner_tokens_per_item": per([r.reasoner_tokens for r in rs]),
        "judge_calls_per_item": per([r.judge_calls for r in rs]),
        "gate_checks_per_item": per([r.gate_checks for r in rs]),
        "fact_sheet": {k: sum(r.fact_sheet_status == k for r in rs) for k in SHEET_STATUSES},
        "revise_calls_per_item": per([r.revise_calls for r in rs]),
        "revise_tokens_per_item": per([r.revise_tokens for r in rs]),
        "revised_rate": rate(sum(r.revised for r in rs), sum(r.revisions for r in rs)),
        "degraded_rate": rate(
            sum(r.fact_sheet_status == "degraded" for r in rs),
            sum(bool(r.fact_sheet_status) for r in rs),
        ),
    }


def summarize(rows: list, ctx: dict) -> dict:
    """The summary of `rows` under ctx (CONTEXT: files, methods, seeds, settings, reading,
    max_error_rate): the table (accuracy % per method × column + Avg, mean ± std over seeds; gain
    over base), the variants of 3DSRBench files, the per-category breakdown, the per-method
    statistics and the error check. Avg is, per seed, the unweighted mean over the columns. Error
    rows count as wrong. The row order does not matter."""
    files, methods, seeds, reading = ctx["files"], ctx["methods"], ctx["seeds"], ctx["reading"]
    by: dict = {}
    for r in sorted(rows, key=lambda r: (r.row, r.id)):
        by.setdefault((r.data, str(r.method), r.seed), []).append(r)
    cols = columns(files, by)
    primary = lambda f: SETTINGS[reading[f]["scoring"]["setting"]][0]

    def acc(m, f, split, s, setting=None, rows_by=by):
        pairs = questions(rows_by.get((f, m, s), []), setting or primary(f))
        a = accuracy(
            [(r, h) for r, h in pairs if split is None or split_of(r) == split],
            reading[f]["scoring"]["macro"],
        )
        return None if a is None else 100 * a

    table = _accuracy_table(methods, seeds, cols, acc)
    gain = _gain(table, methods)
    variants = _variants(ctx, acc)
    detail = _breakdowns(ctx, by)
    quirk = _quirk_summary(ctx, by, cols, acc)
    kept = [r for rs in by.values() for r in rs]
    errors = sum(bool(r.error) for r in kept)
    stats = {m: _stats([r for r in kept if str(r.method) == m], m) for m in methods}
    return {
        "format": SUMMARY_FORMAT,
        **{k: ctx[k] for k in CONTEXT},
        "columns": list(cols),
        "accuracy": table,
        "gain_over_base": gain,
        "variants": variants,
        "breakdown": detail,
        "quirks": quirk,
        "stats": stats,
        # judged methods whose judges abstained on every call: their rows are the reasoner's alone
        "silent_judges": [m for m in methods if stats[m]["abstention_rate"] == 1],
        "rows": len(kept),
        "errors": {
            "rows": errors,
            "rate": errors / len(kept) if kept else 0.0,
            "over": bool(kept) and errors / len(kept) > ctx["max_error_rate"],
            "causes": causes(kept),
        },
    }


def causes(rows: list, most: int = 3) -> list:
    """The errors rows ended in, most common first (ties: the first seen), at most `most`:
    [{"error": the message, "rows": how many}]; [] when none did."""
    count = collections.Counter(r.error for r in rows if r.error)
    return [{"error": e, "rows": k} for e, k in count.most_common(most)]


def _accuracy_table(methods: list, seeds: list, cols: dict, acc) -> dict:
    """{method: {column: mean ± std over seeds, ...,
    "Avg": of each seed's mean over the columns}}."""
    table = {}
    for m in methods:
        per = {c: [acc(m, f, split, s) for s in seeds] for c, (f, split) in cols.items()}
        avg = [
            None
            if any(v[i] is None for v in per.values())
            else statistics.fmean(v[i] for v in per.values())
            for i in range(len(seeds))
        ]
        table[m] = {**{c: _mean_std(v) for c, v in per.items()}, "Avg": _mean_std(avg)}
    return table


def _gain(table: dict, methods: list) -> dict:
    """{method: {column: its mean minus base's, in points, or None}} of each method but base, if
    base ran."""
    gain = {}
    for m in methods:
        if m != "base" and "base" in table:
            gain[m] = {
                c: None
                if None in (v["mean"], table["base"][c]["mean"])
                else v["mean"] - table["base"][c]["mean"]
                for c, v in table[m].items()
            }
    return gain


def _variants(ctx: dict, acc) -> dict:
    """{file: {method: {setting: mean ± std}}} of the files scored in several settings
    (3DSRBench)."""
    files, methods, seeds, reading = ctx["files"], ctx["methods"], ctx["seeds"], ctx["reading"]
    variants = {}
    for f in files:
        sets = SETTINGS[reading[f]["scoring"]["setting"]]
        if len(sets) > 1:
            variants[f] = {
                m: {st: _mean_std([acc(m, f, None, s, st) for s in seeds]) for st in sets}
                for m in methods
            }
    return variants


def _breakdowns(ctx: dict, by: dict) -> dict:
    """{file: [{method, setting, and accuracy.breakdown's record}]} per method and setting, seeds
    pooled."""
    files, methods, seeds, reading = ctx["files"], ctx["methods"], ctx["seeds"], ctx["reading"]
    return {
        f: [
            {"method": m, "setting": st, **rec}
            for m in methods
            for st in SETTINGS[reading[f]["scoring"]["setting"]]
            for rec in breakdown(
                [r for s in seeds for r in by.get((f, m, s), [])], st, reading[f]["scoring"]
            )
        ]
        for f in files
    }


def _quirk_summary(ctx: dict, by: dict, cols: dict, acc) -> dict:
    """{file: {"rows": the rows each quirk decided,
    "corrected": the accuracy without the quirks}}."""
    files, methods, seeds, reading = ctx["files"], ctx["methods"], ctx["seeds"], ctx["reading"]
    decided, fixed = {}, {}  # VLMEvalKit's quirks: the rows each decided, and the corrected reading
    for f in files:
        for m in methods:
            for s in seeds:
                counts, fixed[(f, m, s)] = quirks.tally(by.get((f, m, s), []), reading[f])
                for q, n in counts.items():
                    decided.setdefault(f, {}).setdefault(m, {}).setdefault(q, 0)
                    decided[f][m][q] += n
    return {
        f: {
            "rows": {m: decided[f].get(m, {}) for m in methods},
            "corrected": {
                m: {
                    c: _mean_std([acc(m, f, sp, s, rows_by=fixed) for s in seeds])
                    for c, (g, sp) in cols.items()
                    if g == f
                }
                for m in methods
            },
        }
        for f in decided
    }


# ----------------------------------------------------------------------------- summary.md

STAT_COLUMNS = (
    ("fallback", "fallback_rate", ".1%"),
    ("abstention", "abstention_rate", ".1%"),
    ("unanswered", "unanswered_rate", ".1%"),
    ("errors", "error_rate", ".1%"),
    ("calls/item", "calls_per_item", ".1f"),
    ("tokens/item", "tokens_per_item", ".0f"),
    ("sent/item", "sent_per_item", ".1f"),
    ("s/item", "seconds_per_item", ".2f"),
)
MODE_COLUMNS = (
    ("extra calls/item", "extra_calls_per_item", ".1f"),
    ("extra tokens/item", "extra_tokens_per_item", ".0f"),
    ("gate checks/item", "gate_checks_per_item", ".1f"),
    (
        "sheet degraded",
        "degraded_rate",
        ".1%",
    ),  # shown when a mode ran, with "sheet ok/retried/degraded"
    ("revise calls/item", "revise_calls_per_item", ".1f"),
    ("revise tokens/item", "revise_tokens_per_item", ".0f"),
    ("revisions taken", "revised_rate", ".1%"),
)
MODE_NOTE = (
    " Extra calls and tokens are a judge mode's own (prior, fact sheet, premise checks), within "
    "calls and tokens; gate checks are the premise checks; sheet ok/retried/degraded counts a "
    "mode's chains whose fact sheet was valid at once, valid when asked once more, or malformed "
    "twice (degraded, also as a share). Revise calls and tokens are the revisions' (the reviser's "
    "call and the revision's judgements), within calls and tokens; revisions taken is the share of "
    "the revisions written that passed."
)
SHOWN_SKIPS = 20  # skipped rows listed per file; the rest are counted


def _pct(c: dict) -> str:
    if c["mean"] is None:
        return "—"
    return f"{c['mean']:.2f}" + (f" ±{c['std']:.2f}" if c["std"] is not None else "")


def _head(first: str, cs: list) -> list:
    return [f"| {first} | " + " | ".join(cs) + " |", "|---" * (len(cs) + 1) + "|"]


def _warnings(s: dict) -> list:
    """The lines above everything else: too many errors, judges that never scored, files read
    without images."""
    e, out = s["errors"], []
    if e["over"]:
        out.append(
            f"**{e['rows']} of {s['rows']} chains ({e['rate']:.1%}) ended in an error, above "
            f"--max-error-rate {s['max_error_rate']:.1%}: the table counts them as wrong. "
            "Run the same command again to retry them.**"
        )
    out += [f"**{c['rows']} chain(s) ended in: {c['error']}**" for c in e.get("causes", [])]
    if s["silent_judges"]:
        out.append(f"**{silent_judges(s)}: their rows equal the reasoner's alone.**")
    out += [f"**Warning: {w}.**" for f in s["files"] for w in s["reading"][f]["warnings"]]
    return out + [""] if out else []


def silent_judges(s: dict) -> str:
    """The sentence that says which judged methods never got a score from a judge."""
    return (
        f"the judges never gave a score in {', '.join(s['silent_judges'])} (every judge call "
        f"abstained); check the judge model and --judge-format"
    )


def _reading(s: dict) -> list:
    out = [
        "Reading: rows read, items (valid rows), rows skipped as malformed, rows dropped for "
        "having no image (as VLMEvalKit drops them), items in this run"
        + (
            ", of which ran again for an input changed since their rows were written"
            if any(s["reading"][f].get("changed") for f in s["files"])
            else ""
        )
        + ".",
        "",
    ]
    out += _head("File", ["rows read", "items", "skipped", "no image", "run"])
    for f in s["files"]:
        x = s["reading"][f]
        note = " (read up to --limit)" if x["limited"] else ""
        changed = f" ({x['changed']} changed)" if x.get("changed") else ""
        out.append(
            f"| {x['file']}{note} | {x['read']} | {x['total']} | {len(x['skipped'])} | "
            f"{x['dropped']} | {x['items']}{changed} |"
        )
    return out


def _quirks(s: dict) -> list:
    """Per file whose rows a VLMEvalKit quirk decided: VLMEvalKit's accuracy beside the corrected
    reading's, and the rows each quirk decided (a quirk that decided none is not shown)."""
    out = []
    for f, x in s["quirks"].items():
        shown = [q for q in quirks.QUIRKS if any(q in x["rows"][m] for m in s["methods"])]
        cols = list(next(iter(x["corrected"].values())))
        out += [
            "",
            f"{f}: rows that VLMEvalKit's quirks decided (chains, all seeds; docs/parity.md). "
            f"VLMEvalKit's accuracy, as in the table, is the one comparable with published tables; "
            "the corrected reading re-reads the same replies without the reading quirks; the "
            "quirks of VLMEvalKit's inputs (re-saved images, the prompt's trailing space) changed "
            "what was sent, not how it was read, so their rows keep their hits.",
            "",
        ]
        heads = [h for c in cols for h in (f"{c} VLMEvalKit", f"{c} corrected")]
        out += _head("Method", heads + shown)
        for m in s["methods"]:
            accs = [_pct(a) for c in cols for a in (s["accuracy"][m][c], x["corrected"][m][c])]
            out.append(
                f"| {m} | " + " | ".join(accs + [str(x["rows"][m].get(q, 0)) for q in shown]) + " |"
            )
        out += [""] + [f"- {q}: {quirks.QUIRKS[q]}" for q in shown]
    return out


def _details(s: dict, f: str) -> list:
    """One file's 3DSRBench variants and its accuracy per split, l2-category and category (% over
    all seeds)."""
    out, methods = [], s["methods"]
    if f in s["variants"]:
        out = [
            "",
            f"{f}: VLMEvalKit's four settings (%, mean ± std over seeds); the table shows vanilla.",
            "",
        ]
        out += _head("Setting", methods)
        for st in SETTINGS["3dsr"]:
            out.append(
                f"| {st} | " + " | ".join(_pct(s["variants"][f][m][st]) for m in methods) + " |"
            )
    scoring = s["reading"][f]["scoring"]
    recs = [
        r for r in s["breakdown"][f] if r["setting"] == SETTINGS[scoring["setting"]][0]
    ]  # the CSV has them all
    for st, split in dict.fromkeys((r["setting"], r["split"]) for r in recs):
        here = {r["method"]: r for r in recs if (r["setting"], r["split"]) == (st, split)}
        keys = [k for k in next(iter(here.values())) if k not in ("method", "setting", "split")]
        macro = (
            f"; Overall is the unweighted mean over {scoring['macro']}" if scoring["macro"] else ""
        )
        named = (
            [f]
            + [f"setting {st}"] * (len(SETTINGS[scoring["setting"]]) > 1)
            + [f"split {split}"] * (split != "none")
        )
        out += ["", f"{', '.join(named)} (%, all seeds{macro}):", ""] + _head("Column", methods)
        for k in keys:
            out.append(
                f"| {k} | "
                + " | ".join(
                    "—" if here.get(m, {}).get(k) is None else f"{100 * here[m][k]:.2f}"
                    for m in methods
                )
                + " |"
            )
    return out


def render(s: dict) -> str:
    """summary.md: warnings first, then what was read, the paper-style table, the gains, the
    per-method statistics, each file's breakdown and the skipped rows."""
    out = [f"# VERDICT evaluation ({SUMMARY_FORMAT})", ""] + _warnings(s) + _run_line(s)
    out += _reading(s) + _accuracy_tables(s) + _quirks(s) + _method_stats(s) + _compute(s)
    for f in s["files"]:
        out += _details(s, f)
    out += _skipped(s)
    return "\n".join(out) + "\n"


def _fmt(x, f: str) -> str:
    """x in format spec f, or "—" for None."""
    return "—" if x is None else format(x, f)


def _run_line(s: dict) -> list:
    """The sentence that says what ran: models, seeds, the verifier's settings, shard, extraction
    model."""
    st, cfg = (
        s["settings"],
        s["settings"]["verifier"],
    )  # evaluate.run_record: verifier.Settings.record()
    return [
        f"Reasoner `{st['model']}`, judges `{st['judge_model']}`; {len(s['seeds'])} seed(s); n = "
        f"{cfg['n']}, τ = {cfg['tau']}, ε = {cfg['eps']}, λ = {tuple(cfg['lam'])}, max steps "
        f"{cfg['max_steps']}, max calls per chain {cfg['max_calls'] or 'unlimited'}"
        + (f", shard {st['shard']}" if st.get("shard") else "")
        + (
            f", answers the rules cannot read go to `{st['extract_model']}`"
            if st.get("extract_model")
            else ""
        )
        + ".",
        "",
    ]


def _accuracy_tables(s: dict) -> list:
    """The paper-style table (accuracy % per method and column, and Avg) and the gains over base."""
    cols = s["columns"] + ["Avg"]
    out = [
        "",
        "Accuracy (%), mean ± sample std over seeds. Avg: per seed, the unweighted mean over "
        "the columns. An error, an unanswered or a declined item counts as wrong.",
        "",
    ]
    out += _head("Method", cols)
    out += [
        f"| {m} | " + " | ".join(_pct(s["accuracy"][m][c]) for c in cols) + " |"
        for m in s["methods"]
    ]
    if s["gain_over_base"]:
        out += ["", "Gain over base (points)", ""] + _head("Method", cols)
        out += [
            f"| {m} | " + " | ".join(_fmt(g[c], "+.2f") for c in cols) + " |"
            for m, g in s["gain_over_base"].items()
        ]
    return out


def _method_stats(s: dict) -> list:
    """The per-method statistics table, with the judge modes' columns when a mode or revise ran."""
    modes_ran = not all(
        Method.parse(m).plain for m in s["methods"]
    )  # a judge mode or revise on reject
    stat_cols = STAT_COLUMNS + (MODE_COLUMNS if modes_ran else ())
    out = [
        "",
        "Per method; an item is one chain (one item, one seed). Rates: fallback per step, "
        "abstention per judge call, unanswered and errors per item. Calls and tokens count cached "
        "replies too (the cost of the method alone); sent counts the HTTP requests this run made, "
        "and s the wall time, both of which the first method of an item pays for the methods after "
        "it. Answers: read as a letter, an option's text, a value, by the extraction model, "
        "declined (Z), unanswered." + (MODE_NOTE if modes_ran else ""),
        "",
    ]
    sheets = ["sheet ok/retried/degraded"] if modes_ran else []
    out += _head(
        "Method",
        [name for name, _, _ in stat_cols]
        + sheets
        + ["answers", "extract calls/item", "final/max/budget"],
    )
    for m in s["methods"]:
        x = s["stats"][m]
        cells = [_fmt(x[key], f) for _, key, f in stat_cols]
        cells += ["/".join(str(x["fact_sheet"][k]) for k in SHEET_STATUSES)] if modes_ran else []
        cells += [
            "/".join(map(str, x["extracted"].values())),
            _fmt(x["extract_calls_per_item"], ".2f"),
            "/".join(map(str, x["stopped"].values())),
        ]
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    return out


COMPUTE_COLUMNS = (
    ("reasoner tokens/item", "reasoner_tokens_per_item", ".0f"),
    ("judge calls/item", "judge_calls_per_item", ".1f"),
    ("reasoner calls/item", "reasoner_calls_per_item", ".1f"),
    ("calls/item", "calls_per_item", ".1f"),
    ("sent/item", "sent_per_item", ".1f"),
)


def searched(s: dict) -> bool:
    """A search (search.py) is among the summary's methods: its tables show accuracy against
    compute."""
    return any(Method.parse(m).search for m in s["methods"])


def _compute(s: dict) -> list:
    """Accuracy against compute, with a search among the methods: per method, its Avg accuracy and
    what an item cost it (compute.png draws the same numbers)."""
    if not searched(s):
        return []
    out = [
        "",
        "Accuracy against compute (compute.png). Avg accuracy (%, mean ± std over seeds) and, per "
        "item (one item, one seed), the reasoner's tokens, the judges' calls, the reasoner's "
        "calls, all calls (each counted whether the response cache answered it or not: the "
        "method's own cost) and the requests sent (a request shared with an earlier method of the "
        "item is sent once, by the first). Searches: bonN best-of-N, wbonN weighted best-of-N, "
        "majN majority vote, beamWxE beam search, then the chain score's aggregate and the step "
        f"score, +filter the dual test (docs/search.md); VERDICT greedy, step by step, with n = "
        f"{s['settings']['verifier']['n']}.",
        "",
    ]
    out += _head("Method", ["Avg"] + [name for name, _, _ in COMPUTE_COLUMNS])
    for m in s["methods"]:
        x = s["stats"][m]
        cells = [_pct(s["accuracy"][m]["Avg"])] + [_fmt(x[key], f) for _, key, f in COMPUTE_COLUMNS]
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    return out


def compute_points(s: dict) -> list:
    """[(method, reasoner tokens per item, judge calls per item, Avg mean, Avg std)] of the methods
    with an Avg accuracy, in the summary's order."""
    out = []
    for m in s["methods"]:
        acc, x = s["accuracy"][m]["Avg"], s["stats"][m]
        if acc["mean"] is not None and x["reasoner_tokens_per_item"] is not None:
            out.append(
                (
                    m,
                    x["reasoner_tokens_per_item"],
                    x["judge_calls_per_item"],
                    acc["mean"],
                    acc["std"],
                )
            )
    return out


def _families(s: dict) -> dict:
    """{label: (colour, [methods])}: base grey, VERDICT red (labelled with its n), each other rule
    alone, each search family (rows.Method.family: its methods differ in N or W alone) one colour,
    labelled with the family's name, or the method's when it is alone."""
    n = s["settings"]["verifier"]["n"]
    others = itertools.cycle([p for p in charts.PALETTE if p not in (charts.GREY, charts.RED)])
    out = {}
    for m in s["methods"]:
        method = Method.parse(m)
        label = {"base": "base (the reasoner alone)", "verdict": f"VERDICT (n = {n})"}.get(
            m, method.family
        )
        if label not in out:
            colour = {"base": charts.GREY, "verdict": charts.RED}.get(m) or next(others)
            out[label] = (colour, [])
        out[label][1].append(m)
    return {
        (ms[0] if len(ms) == 1 and Method.parse(ms[0]).search else k): (c, ms)
        for k, (c, ms) in out.items()
    }


def compute_picture(s: dict, path: str, note: str | None = None) -> list:
    """compute.png: Avg accuracy (%) against reasoner tokens per item (left) and judge calls per
    item (right), a point per method, ± its std over seeds, a search family's points joined in order
    of compute and labelled with their N (or W); base and VERDICT on the same axes. `note` (default:
    the models) goes under the panels. Returns the points drawn as (panel, method, (x, y))."""
    W, H, top, bottom, lefts, width = 980, 470, 60, 370, (70, 420), 290
    pts = {m: p for m, *p in compute_points(s)}
    families = _families(s)
    lo, hi, ystep = charts.nice(
        min([a - (d or 0) for *_, a, d in pts.values()] or [0]),
        max([a + (d or 0) for *_, a, d in pts.values()] or [100]),
    )
    c = charts.Canvas((W, H))
    c.text((10, 8), "Avg accuracy (%) against compute per item, ± std over seeds", 13, width=W - 20)
    drawn = []
    for k, (left, title) in enumerate(
        zip(lefts, ("reasoner tokens per item", "judge calls per item"))
    ):
        xs = [p[k] for p in pts.values()]
        x_lo, x_hi, xstep = charts.nice(0, max(xs or [1]))
        px = lambda v, left=left, a=x_lo, b=x_hi: left + (v - a) / ((b - a) or 1) * width
        py = lambda v: bottom - (min(max(v, lo), hi) - lo) / ((hi - lo) or 1) * (bottom - top)
        _axes(
            c,
            (left, top, left + width, bottom),
            (x_lo, x_hi, xstep),
            (lo, hi, ystep),
            (px, py),
            title,
        )
        drawn += _draw_families(c, families, pts, k, (px, py))
    st = s["settings"]
    c.text((lefts[0], H - 24), note or f"Reasoner {st['model']}, judges {st['judge_model']}", 11,
           width=W - lefts[0] - 10, lines=1)  # fmt: skip
    legend = [(label, colour) for label, (colour, _) in families.items()]
    charts.legend(
        c, (lefts[1] + width + 20, top), legend, width=W - lefts[1] - width - 30, line=True
    )
    c.save(path)
    return drawn


def _axes(c, box: tuple, xs: tuple, ys: tuple, scale: tuple, title: str) -> None:
    """A panel's frame, grid, tick labels and x title."""
    (x0, _, x1, y1), (px, py) = box, scale
    for j in range(int(round((ys[1] - ys[0]) / ys[2])) + 1):
        t = ys[0] + j * ys[2]
        c.draw.line((x0, py(t), x1, py(t)), fill=charts.GRID)
        c.text((x0 - 6, py(t)), f"{t:g}", 11, anchor="rm")
    c.draw.rectangle(box, outline=charts.INK)  # over the grid
    for j in range(int(round((xs[1] - xs[0]) / xs[2])) + 1):
        t = xs[0] + j * xs[2]
        c.draw.line((px(t), y1, px(t), y1 + 4), fill=charts.INK)
        c.text((px(t), y1 + 8), f"{t:g}", 11, anchor="mt")
    c.text(((x0 + x1) / 2, y1 + 26), title, 11, anchor="mt")


def _draw_families(c, families: dict, pts: dict, k: int, scale: tuple) -> list:
    """Each family's line (in order of compute), points, whiskers and N (or W) labels in panel k."""
    (px, py), drawn = scale, []
    last = lambda f: (f[1][1] == ["base"], f[1][1] == ["verdict"])  # base, then VERDICT, on top
    for label, (colour, methods) in sorted(families.items(), key=last):
        here = sorted((pts[m][k], m) for m in methods if m in pts)
        xy = [(px(v), py(pts[m][2])) for v, m in here]
        if len(xy) > 1:
            c.draw.line(xy, fill=colour, width=2)
        for (x, y), (_, m) in zip(xy, here):
            mean, std = pts[m][2], pts[m][3]
            if std:
                c.draw.line((x, py(mean + std), x, py(mean - std)), fill=colour)
            r = 5 if m in ("base", "verdict") else 3
            shape = (
                c.draw.rectangle if m == "base" else c.draw.ellipse
            )  # base: a square, seen under others
            shape(
                (x - r, y - r, x + r, y + r),
                fill=colour,
                outline=charts.INK if m == "base" else None,
            )
            size = Method.parse(m).size
            if size is not None and len(methods) > 1:
                c.text(
                    (x + 5, y - 4),
                    str(size),
                    9,
                    fill=colour,
                    anchor="lb",
                    moves=((0, 0), (0, 14), (-14, 0)),
                )
            drawn.append((k, m, (x, y)))
    return drawn


def _skipped(s: dict) -> list:
    """Per file, the malformed rows its reading skipped: the first SHOWN_SKIPS, then how many
    more."""
    out = []
    for f in s["files"]:
        sk = s["reading"][f]["skipped"]
        out += ["", f"{s['reading'][f]['file']}: {len(sk) or 'no'} malformed row(s) skipped"]
        out += [f"- line {k['row']}: {k['reason']}" for k in sk[:SHOWN_SKIPS]]
        out += (
            [f"- ... and {len(sk) - SHOWN_SKIPS} more (summary.json lists them all)"]
            if len(sk) > SHOWN_SKIPS
            else []
        )
    return out


def picture(s: dict, path: str) -> list:
    """summary.png: per column (benchmark, then Avg) a bar per method at its mean accuracy, a
    whisker of ±1 sample std over seeds. Returns the bars as (method, column, (x0, y0, x1, y1)), the
    y axis being 0-100 % from y = 320 (0) to y = 40 (100)."""
    cols, methods = s["columns"] + ["Avg"], s["methods"]
    bar, gap, left, top, bottom, small = 14, 24, 50, 40, 320, font(11)
    spans = [
        max(len(methods) * bar, small.getlength(c) + 4) + gap for c in cols
    ]  # a column fits its name
    width = int(left + sum(spans)) + 190
    c = charts.Canvas((width, 380))
    y = lambda pct: bottom - (bottom - top) * pct / 100
    c.text(
        (left, 4),
        "Accuracy (%) per method and benchmark, ± sample std over seeds",
        13,
        width=width - left - 8,
        lines=2,
    )
    items = [(m, charts.PALETTE[i % 10]) for i, m in enumerate(methods)]
    charts.legend(c, (width - 180, top), items, width=172)
    for pct in range(0, 101, 20):
        c.draw.line((left, y(pct), width - 190, y(pct)), fill=charts.GRID)
        c.text((left - 6, y(pct)), f"{pct}", anchor="rm")
    bars = []
    for j, col in enumerate(cols):
        x = left + gap / 2 + sum(spans[:j])
        c.text((x, bottom + 8), col, width=spans[j] - gap / 2)
        for i, m in enumerate(methods):
            cell = s["accuracy"][m][col]
            if cell["mean"] is None:
                continue
            box = (x + i * bar, y(cell["mean"]), x + (i + 1) * bar - 2, bottom)
            c.draw.rectangle(box, fill=charts.PALETTE[i % 10])
            bars.append((m, col, box))
            if cell["std"]:
                mid = (box[0] + box[2]) / 2
                hi, lo = min(100, cell["mean"] + cell["std"]), max(0, cell["mean"] - cell["std"])
                c.draw.line((mid, y(hi), mid, y(lo)), fill=charts.INK)
    c.save(path)
    return bars


def write(out: str, summary: dict, rows: list) -> str:
    """summary.json, summary.md, summary.png (with a search: compute.png too) and VLMEvalKit's files
    (write_runs) in `out`; returns the markdown."""
    md = render(summary)
    for name, text in (
        ("summary.json", json.dumps(summary, indent=1, allow_nan=False)),
        ("summary.md", md),
    ):
        with open(os.path.join(out, name), "w", encoding="utf-8") as fh:
            fh.write(text)
    vlmeval_files.write_runs(out, summary, rows)
    picture(summary, os.path.join(out, "summary.png"))
    if searched(summary):
        compute_picture(summary, os.path.join(out, "compute.png"))
    return md
